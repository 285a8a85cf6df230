"""The rows of ``ckpt_packs``: numbering, storing, reading and decoding packs, and finding
a write by its id (:mod:`objectspace.storage.sql.packs` is the layout of a pack's
entries).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from objectspace.errors import CorruptStateError
from objectspace.storage.sql.jobs import Jobs
from objectspace.storage.sql.packs import SPAN, Entry, Pack, decode_entries, encode_entries
from objectspace.storage.sql.tx import (
    _COMMITTED_ATTEMPT,
    _COMMITTED_CREATED,
    Tx,
    _chunks,
    _marks,
    _stamp,
)

__all__ = ["PackRows"]


class PackRows(Jobs):
    """Packs of writes in the catalog: one row per operator, version and transaction."""

    def _packs_follow(self, tx: Tx, top: int) -> None:
        """New pack ids must exceed ``top`` (the highest id the converted writes kept): a
        dialect that numbers packs from a sequence moves it on."""

    def _new_pack_id(self, tx: Tx) -> int:
        """The id of a new pack: the next multiple of :data:`~objectspace.storage.sql.packs.SPAN`
        above every pack's id (its writes then cannot meet another pack's)."""
        row = tx.one("SELECT MAX(id) FROM ckpt_packs")
        top = 0 if row is None or row[0] is None else int(row[0])
        return (top // SPAN + 1) * SPAN

    _PACK_COLUMNS = "p.id, p.op, p.version, p.committed, p.attempt, p.created, p.segment, p.entries"

    def _decode_pack(self, tx: Tx, row: Sequence[Any]) -> Pack:
        pid, op, version, committed, attempt, created, segment, entries = row
        try:
            decoded = decode_entries(entries, f"pack {pid}")
        except CorruptStateError as exc:
            raise CorruptStateError(
                f"{self._operator_names(tx, int(op))} checkpoint {version} in {self!r}: {exc}"
            ) from exc
        return Pack(
            int(pid),
            int(op),
            int(version),
            bool(committed),
            str(attempt),
            float(created),
            None if segment is None else int(segment),
            decoded,
        )

    def _packs(self, tx: Tx, where: str, params: Sequence[Any] = ()) -> list[Pack]:
        """The packs ``SELECT ... FROM ckpt_packs p {where}`` finds, decoded."""
        return [
            self._decode_pack(tx, row)
            for row in tx.all(f"SELECT {self._PACK_COLUMNS} FROM ckpt_packs p {where}", params)
        ]

    def _insert_pack(
        self,
        tx: Tx,
        op_id: int,
        version: int,
        attempt: str,
        entries: Sequence[Entry],
        *,
        committed: bool = False,
        segment: int | None = None,
    ) -> list[int]:
        """Store ``entries`` (their offsets are ignored: 0, 1, ...) as one pack; their write
        ids, in order."""
        pack_id = self._new_pack_id(tx)
        entries = [e._replace(offset=i) for i, e in enumerate(entries)]
        tx.execute(
            "INSERT INTO ckpt_packs (id, op, version, committed, attempt, created, segment, "
            "entries) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                pack_id,
                op_id,
                version,
                int(committed),
                attempt,
                _COMMITTED_CREATED if attempt == _COMMITTED_ATTEMPT else _stamp(),
                segment,
                encode_entries(entries, segment is not None),
            ),
        )
        return [pack_id + i for i in range(len(entries))]

    def _writes_by_id(self, tx: Tx, ids: Sequence[int]) -> dict[int, tuple[Pack, Entry]]:
        """The pack and entry of each of ``ids`` that exists: one query per 250 ids. A write
        lives in the pack whose id is its own (a write of an older store) or the multiple of
        :data:`~objectspace.storage.sql.packs.SPAN` below it."""
        found: dict[int, tuple[Pack, Entry]] = {}
        wanted = sorted(set(ids))
        for chunk in _chunks(wanted, 250):
            candidates = sorted({*chunk, *(w - w % SPAN for w in chunk)})
            packs = self._packs(tx, f"WHERE p.id IN ({_marks(len(candidates))})", candidates)
            offsets = {pack.id: (pack, {e.offset: e for e in pack.entries}) for pack in packs}
            for w in chunk:
                for base in (w, w - w % SPAN):
                    held = offsets.get(base)
                    if held is None:
                        continue
                    pack, entries = held
                    entry = entries.get(w - base)
                    if entry is not None:
                        found[w] = (pack, entry)
                        break
        return found

"""Reading state: the chains of key groups as of a checkpoint (each from its newest full
write), their blocks with the catalog's record of each, checked for gaps, and replayed
(:func:`objectspace.storage.blocks.replay` verifies every block: present, its checksum, the
catalog's digest and row count).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from objectspace.errors import CorruptStateError
from objectspace.storage.blocks import Block, replay, replay_changes
from objectspace.storage.contract import WriteInfo
from objectspace.storage.sql.dictionaries import Dictionaries
from objectspace.storage.sql.heads import Heads
from objectspace.storage.sql.tx import COMPACTION, Tx, _chunks, _marks
from objectspace.tables import TableChanges

__all__ = ["Loads"]


class Loads(Heads, Dictionaries):
    """Restore chains, blocks and the state they replay to."""

    def __init__(self) -> None:
        super().__init__()
        # Per job, ranges of checkpoints (after, upto] found to hold all their writes.
        self._complete: dict[str, list[tuple[int, int]]] = {}

    def _chains_tx(
        self, tx: Tx, job: str, operator: str, key_groups: range, as_of: int
    ) -> dict[int, list[WriteInfo]]:
        op_id = self._operator_id(tx, job, operator)
        packs = self._packs(
            tx,
            "WHERE p.op = ? AND p.committed = 1 AND p.version <= ? ORDER BY p.version, p.id",
            (op_id, as_of),
        )
        # the path of each segment the catalog still knows
        paths = self._column_by_id(
            tx, "ckpt_segments", "path", {p.segment for p in packs if p.segment is not None}
        )
        chains: dict[int, list[WriteInfo]] = {}
        low, high = key_groups.start, key_groups.stop
        # in (version, id) order: each chain starts at its newest full write
        for pack in packs:
            path = None if pack.segment is None else paths.get(pack.segment)
            for e in pack.entries:
                if not low <= e.key_group < high:
                    continue
                info = WriteInfo(
                    pack.id + e.offset,
                    e.key_group,
                    pack.version,
                    e.full,
                    e.bytes,
                    e.rows,
                    path,
                    e.seg_offset,
                    e.seg_length,
                )
                if e.full:
                    chains[e.key_group] = [info]
                else:
                    chains.setdefault(e.key_group, []).append(info)
        return {group: chains[group] for group in sorted(chains)}

    def chains(
        self, job: str, operator: str, key_groups: range, as_of: int
    ) -> dict[int, list[WriteInfo]]:
        return self._run(
            "reading restore chains",
            lambda tx: self._chains_tx(tx, job, operator, key_groups, as_of),
            write=False,
        )

    def _blocks_tx(self, tx: Tx, writes: Sequence[WriteInfo], where: str = "") -> list[Block]:
        """Each write's block with the catalog's record of it, in order: one query per 500
        writes. A write stored in a segment file comes without its bytes (``data`` is
        ``None``: segment storage reads them). ``where`` names the job and operator in
        errors; a write missing from the catalog raises :class:`CorruptStateError`."""
        found: dict[int, tuple[int, int | None, Any]] = {
            wid: (entry.rows, entry.digest, None)
            for wid, (_, entry) in self._writes_by_id(tx, [w.write_id for w in writes]).items()
        }
        in_catalog = sorted(w.write_id for w in writes if w.segment is None and w.write_id in found)
        for chunk in _chunks(in_catalog):
            for wid, data in tx.all(
                f"SELECT write, data FROM ckpt_blocks WHERE write IN ({_marks(len(chunk))})",
                list(chunk),
            ):
                count, digest, _ = found[int(wid)]
                found[int(wid)] = (count, digest, data)
        blocks = []
        here = repr(self)
        for w in writes:
            record = found.get(w.write_id)
            if record is None:
                raise CorruptStateError(
                    f"{where}key group {w.key_group} checkpoint {w.version} (write "
                    f"{w.write_id}) in {here}: the write is missing from the catalog"
                )
            count, digest, data = record
            if w.segment is None:
                blocks.append(Block(w, None if data is None else bytes(data), digest, count, here))
            else:
                blocks.append(Block(w, None, digest, count, f"segment {w.segment!r}"))
        return blocks

    def _check_complete(
        self, tx: Tx, job: str, operator: str, chains: Mapping[int, Sequence[WriteInfo]], as_of: int
    ) -> None:
        """Raise :class:`CorruptStateError` when a checkpoint a chain spans lost a write: each
        retained checkpoint after the oldest one (whose writes retention may have replaced
        by a compaction) still holds as many committed writes as it committed."""
        if not chains:
            return
        start = min(writes[0].version for writes in chains.values())
        # Committed checkpoints do not change (retention removes writes only at or before
        # the oldest retained one, which is not checked): a range checked once is skipped.
        checked = self._complete.setdefault(job, [])
        if any(lo <= start and as_of <= hi for lo, hi in checked):
            return
        counts = tx.all(
            "SELECT c.checkpoint, c.writes FROM ckpt_checkpoints c JOIN ckpt_jobs j ON "
            "j.id = c.job WHERE j.name = ? AND c.checkpoint > ? AND c.checkpoint <= ? AND "
            "c.checkpoint > (SELECT MIN(m.checkpoint) FROM ckpt_checkpoints m WHERE m.job = c.job)",
            (job, start, as_of),
        )
        if not counts:
            return
        found: Counter[int] = Counter()
        for pack in self._packs(
            tx,
            "JOIN ckpt_operators o ON o.id = p.op JOIN ckpt_jobs j ON j.id = o.job "
            "WHERE j.name = ? AND p.committed = 1 AND p.attempt <> ? AND p.version > ? "
            "AND p.version <= ?",
            (job, COMPACTION, start, as_of),
        ):
            found[pack.version] += len(pack.entries)
        for checkpoint, expected in counts:
            held = int(found.get(checkpoint, 0))
            if held != int(expected):
                groups = sorted(chains)
                raise CorruptStateError(
                    f"job {job!r} operator {operator!r} key groups {groups[0]}..{groups[-1]} "
                    f"checkpoint {checkpoint} in {self!r}: the checkpoint committed {expected} "
                    f"writes but the catalog holds {held} (a write is missing: restore chains "
                    "would have a gap)"
                )
        checked.append((start, as_of))
        del checked[:-64]

    def read_blocks(self, writes: Sequence[WriteInfo], where: str = "") -> list[Block]:
        """Each write's block and the catalog's record of it, in order (see
        :meth:`_blocks_tx`), from one snapshot."""
        return self._run(
            "reading state", lambda tx: self._blocks_tx(tx, writes, where), write=False
        )

    def read(
        self, job: str, operator: str, writes: Sequence[WriteInfo]
    ) -> dict[str, dict[bytes, bytes]]:
        where = f"job {job!r} operator {operator!r} "
        return replay(self.read_blocks(writes, where), where, self.table_names, self.dictionary)

    def read_changes(
        self, job: str, operator: str, writes: Sequence[WriteInfo]
    ) -> dict[str, TableChanges] | None:
        where = f"job {job!r} operator {operator!r} "
        return replay_changes(
            self.read_blocks(writes, where), where, self.table_names, self.dictionary
        )

    def load_blocks(
        self, job: str, operator: str, key_groups: range, as_of: int
    ) -> dict[int, tuple[list[WriteInfo], list[Block]]]:
        """Chains of ``key_groups`` as of ``as_of`` and their blocks, from one snapshot of
        the database, checked for gaps (module docstring)."""

        def work(tx: Tx) -> dict[int, tuple[list[WriteInfo], list[Block]]]:
            chains = self._chains_tx(tx, job, operator, key_groups, as_of)
            self._check_complete(tx, job, operator, chains, as_of)
            everything = [w for writes in chains.values() for w in writes]
            blocks = iter(self._blocks_tx(tx, everything, f"job {job!r} operator {operator!r} "))
            return {
                key_group: (writes, [next(blocks) for _ in writes])
                for key_group, writes in chains.items()
            }

        return self._run("restoring state", work, write=False)

    def load(
        self, job: str, operator: str, key_groups: range, as_of: int
    ) -> dict[int, tuple[list[WriteInfo], dict[str, dict[bytes, bytes]]]]:
        where = f"job {job!r} operator {operator!r} "
        return {
            key_group: (writes, replay(blocks, where, self.table_names, self.dictionary))
            for key_group, (writes, blocks) in self.load_blocks(
                job, operator, key_groups, as_of
            ).items()
        }

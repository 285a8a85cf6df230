"""Chain heads: per operator and key group, its newest committed write, kept in
``ckpt_head_chunks`` (the heads of 64 key groups a row) and advanced by each commit; heads
as of an older checkpoint are found from the packs, newest first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from objectspace.errors import CorruptStateError
from objectspace.storage.sql.packing import PackRows
from objectspace.storage.sql.packs import HEAD_CHUNK, Head, decode_heads, encode_heads
from objectspace.storage.sql.tx import COMPACTION, Tx, _chunks, _marks

__all__ = ["Heads"]

# Packs read per query when walking back from the newest (heads as of an older checkpoint).
_PACK_PAGE = 64


class Heads(PackRows):
    """Reading and advancing the heads of key groups."""

    def _store_head_rows(self, tx: Tx, rows: Sequence[Sequence[Any]]) -> None:
        """Store heads given as rows ``(op, key group, write, version, compaction,
        parent)``, in chunks."""
        heads: dict[int, dict[int, Head]] = {}
        for op, group, wid, version, compaction, parent in rows:
            heads.setdefault(int(op), {})[int(group)] = Head(
                int(wid), int(version), bool(compaction), None if parent is None else int(parent)
            )
        for op, found in sorted(heads.items()):
            self._store_heads(tx, op, found)

    @staticmethod
    def _store_heads(tx: Tx, op_id: int, heads: Mapping[int, Head]) -> None:
        """Write the chunks of ``heads`` (every head of each chunk named)."""
        chunks: dict[int, dict[int, Head]] = {}
        for group, head in heads.items():
            chunks.setdefault(group // HEAD_CHUNK, {})[group] = head
        tx.executemany(
            "INSERT INTO ckpt_head_chunks (op, chunk, heads) VALUES (?, ?, ?) "
            "ON CONFLICT (op, chunk) DO UPDATE SET heads = excluded.heads",
            [(op_id, chunk, encode_heads(found)) for chunk, found in sorted(chunks.items())],
        )

    def _read_heads(self, tx: Tx, op_id: int, key_groups: Sequence[int] | range) -> dict[int, Head]:
        """The heads of ``key_groups`` that have one (one query per 500 chunks)."""
        if isinstance(key_groups, range):
            rows = tx.all(
                "SELECT chunk, heads FROM ckpt_head_chunks WHERE op = ? AND chunk >= ? "
                "AND chunk <= ?",
                (op_id, key_groups.start // HEAD_CHUNK, (key_groups.stop - 1) // HEAD_CHUNK),
            )
        else:
            rows = []
            for chunk in _chunks(sorted({g // HEAD_CHUNK for g in key_groups})):
                rows += tx.all(
                    "SELECT chunk, heads FROM ckpt_head_chunks WHERE op = ? AND chunk IN "
                    f"({_marks(len(chunk))})",
                    [op_id, *chunk],
                )
        wanted = key_groups if isinstance(key_groups, range) else set(key_groups)
        found: dict[int, Head] = {}
        for chunk, data in rows:
            try:
                chunk_heads = decode_heads(data, f"key groups {int(chunk) * HEAD_CHUNK}..")
            except CorruptStateError as exc:
                raise CorruptStateError(
                    f"{self._operator_names(tx, op_id)} in {self!r}: {exc}"
                ) from exc
            for group, head in chunk_heads.items():
                if group in wanted:
                    found[group] = head
        return found

    def _advance_heads(
        self, tx: Tx, op_id: int, written: Sequence[tuple[int, int, int, bool, int | None]]
    ) -> None:
        """Make each just committed write ``(write, key_group, version, compaction,
        parent)`` its key group's head, unless the head is newer in (version, id) order (a
        compaction of an older checkpoint): the chunks of the written key groups, read and
        rewritten."""
        groups = [group for _, group, *_ in written]
        chunks = {g // HEAD_CHUNK for g in groups}
        heads = self._read_heads(
            tx, op_id, [c * HEAD_CHUNK + i for c in sorted(chunks) for i in range(HEAD_CHUNK)]
        )
        for wid, group, version, compaction, parent in written:
            old = heads.get(group)
            if old is None or (version, wid) > (old.version, old.write):
                heads[group] = Head(wid, version, compaction, parent)
        self._store_heads(tx, op_id, heads)

    def _newest_as_of(
        self, tx: Tx, op_id: int, key_groups: Sequence[int], as_of: int
    ) -> dict[int, tuple[int, int, str, int | None]]:
        """Per key group of ``key_groups`` with a committed write as of ``as_of``: the
        newest in (version, id) order, as (id, version, attempt, parent); read from the
        newest packs back (for heads newer than ``as_of``: restores of an older
        checkpoint)."""
        wanted = set(key_groups)
        found: dict[int, tuple[int, int, str, int | None]] = {}
        # newest first, a page of packs at a time: a key group written recently stops the
        # walk early (a pack's entries hold a key group once)
        after: tuple[int, int] | None = None
        while len(found) < len(wanted):
            where = "WHERE p.op = ? AND p.committed = 1 AND p.version <= ?"
            params: list[Any] = [op_id, as_of]
            if after is not None:
                where += " AND (p.version < ? OR (p.version = ? AND p.id < ?))"
                params += [after[0], after[0], after[1]]
            page = self._packs(
                tx, f"{where} ORDER BY p.version DESC, p.id DESC LIMIT {_PACK_PAGE}", params
            )
            for pack in page:
                for e in pack.entries:
                    if e.key_group in wanted and e.key_group not in found:
                        found[e.key_group] = (
                            pack.id + e.offset,
                            pack.version,
                            pack.attempt,
                            e.parent,
                        )
            if len(page) < _PACK_PAGE:
                break
            after = (page[-1].version, page[-1].id)
        return found

    def _heads_tx(
        self, tx: Tx, op_id: int, key_groups: Sequence[int], as_of: int
    ) -> dict[int, tuple[int, str, int | None]]:
        """Per key group with committed state as of ``as_of``: its head, the newest
        committed write (id, attempt, parent). From ``ckpt_head_chunks`` when the head is not
        newer than ``as_of``, as at every commit, which builds on the last committed
        checkpoint; otherwise from the packs, newest first (:meth:`_newest_as_of`)."""
        heads: dict[int, tuple[int, str, int | None]] = {}
        older = []
        for group, record in sorted(self._read_heads(tx, op_id, key_groups).items()):
            if record.version <= as_of:
                heads[group] = (
                    record.write,
                    COMPACTION if record.compaction else "",
                    record.parent,
                )
            else:
                older.append(group)
        for key_group, (wid, _, attempt, parent) in self._newest_as_of(
            tx, op_id, older, as_of
        ).items():
            heads[key_group] = (wid, attempt, parent)
        return heads

    def _heads_as_of(
        self, tx: Tx, op_id: int, key_groups: range, as_of: int
    ) -> dict[int, tuple[int, int]]:
        """:meth:`heads` in ``tx``."""
        heads: dict[int, tuple[int, int]] = {}
        older = []
        for group, record in sorted(self._read_heads(tx, op_id, key_groups).items()):
            if record.version <= as_of:
                heads[group] = (record.write, record.version)
            else:
                older.append(group)
        for group, (wid, version, _, _) in self._newest_as_of(tx, op_id, older, as_of).items():
            heads[group] = (wid, version)
        return heads

    def _compacted_origin(self, tx: Tx, op_id: int, key_group: int, version: int) -> int | None:
        """The write a compaction of ``key_group`` as of ``version`` stands for: the head it
        replaces, or that head's origin when the head is a compaction itself. A writer that
        built on the origin built on the same state, so its commit is not refused."""
        head = self._heads_tx(tx, op_id, [key_group], version).get(key_group)
        if head is None:
            return None
        wid, attempt, parent = head
        return parent if attempt == COMPACTION else wid

    def heads(
        self, job: str, operator: str, key_groups: range, as_of: int
    ) -> dict[int, tuple[int, int]]:
        """From ``ckpt_head_chunks`` (one query) where the newest committed write is not newer
        than ``as_of``; otherwise the key group's newest write as of ``as_of``, as the last
        write of :meth:`chains` is: the highest (version, id)."""

        def work(tx: Tx) -> dict[int, tuple[int, int]]:
            return self._heads_as_of(tx, self._operator_id(tx, job, operator), key_groups, as_of)

        return self._run("reading chain heads", work, write=False)

    def head_digests(
        self, job: str, operator: str, key_groups: range, as_of: int
    ) -> dict[int, tuple[int, int, int | None, int | None]]:
        def work(tx: Tx) -> dict[int, tuple[int, int, int | None, int | None]]:
            heads = self._heads_as_of(tx, self._operator_id(tx, job, operator), key_groups, as_of)
            found = {
                wid: (entry.digest, entry.parent)
                for wid, (_, entry) in self._writes_by_id(
                    tx, [wid for wid, _ in heads.values()]
                ).items()
            }
            return {g: (wid, v, *found.get(wid, (None, None))) for g, (wid, v) in heads.items()}

        return self._run("reading chain heads", work, write=False)

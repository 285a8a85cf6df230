"""Segment files in the SQL catalog: reserving a segment's path before its file is written,
recording its blocks as writes, which writes reference which files, and two-phase garbage
collection (stamping the unreferenced ones, and the trash a GC pass empties).

The part of :class:`~objectspace.storage.sql.SQLBackend` that only segment storage uses
(:class:`~objectspace.storage.sql.catalog.SegmentCatalog`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from objectspace.errors import StorageError
from objectspace.storage.contract import WriteInfo
from objectspace.storage.sql.catalog import SegmentEntry
from objectspace.storage.sql.heads import Heads
from objectspace.storage.sql.packs import Entry
from objectspace.storage.sql.tx import COMPACTION, Tx, _chunks, _marks

__all__ = ["SegmentRecords"]

# The segments no write references, by one pass over ckpt_packs (a pack's writes are in one
# segment; there is no index by segment, for queries only the GC makes). An anti-join with
# the referenced set, not ``NOT IN``, which PostgreSQL cannot turn into a hash or merge
# anti-join (NULL semantics) and may run as a scan per segment.
_UNREFERENCED = (
    "SELECT s.id FROM ckpt_segments s LEFT JOIN (SELECT DISTINCT segment FROM ckpt_packs "
    "WHERE segment IS NOT NULL) r ON r.segment = s.id WHERE r.segment IS NULL"
)


class SegmentRecords(Heads):
    """Segment file records and garbage collection in the SQL catalog (dialect-neutral SQL
    with ``?`` parameters, run through :meth:`_run`)."""

    def reserve_segment(self, path: str) -> int:
        """Record a segment path before its file is written, so no file escapes the GC;
        returns the segment's id."""

        def work(tx: Tx) -> int:
            row = tx.one(
                "INSERT INTO ckpt_segments (path, created, bytes) VALUES (?, ?, 0) RETURNING id",
                (path, time.time()),
            )
            assert row is not None
            return int(row[0])

        return self._run(f"reserving segment {path}", work)

    @staticmethod
    def _claim_segment(tx: Tx, segment_id: int, path: str, size: int) -> None:
        """Record the size of a published segment that :meth:`reserve_segment` reserved
        (and unstamp it); refused when the GC collected the reservation meanwhile."""
        updated = tx.execute(
            "UPDATE ckpt_segments SET bytes = ?, stamped = NULL WHERE id = ?",
            (size, segment_id),
        ).rowcount
        if updated != 1:
            raise StorageError(
                f"segment {path!r} is no longer reserved in the catalog (collected after "
                "its grace period?); the write must be retried"
            )

    def register_segment(
        self,
        job: str,
        operator: str,
        version: int,
        attempt: str,
        segment: tuple[int, str],
        size: int,
        entries: Sequence[SegmentEntry],
        *,
        committed: bool = False,
        parents: Sequence[int | None] | None = None,
    ) -> list[WriteInfo]:
        """Record a published segment's blocks as writes (pending unless ``committed``);
        ``segment`` is the (id, path) :meth:`reserve_segment` gave; ``parents``, per entry,
        the write its edits were made on top of (see :class:`PendingPart`)."""
        segment_id, path = segment

        def work(tx: Tx) -> list[WriteInfo]:
            self._fault("write:begin")
            op_id = self._operator_id(tx, job, operator)
            self._claim_segment(tx, segment_id, path, size)
            self._fault("write:rows")
            packed = [
                Entry(
                    0,
                    key_group,
                    full,
                    nbytes,
                    rows,
                    offset,
                    length,
                    digest,
                    None if parents is None else parents[i],
                )
                for i, (key_group, full, nbytes, rows, offset, length, digest) in enumerate(entries)
            ]
            if committed and attempt == COMPACTION:
                packed = [
                    e._replace(parent=self._compacted_origin(tx, op_id, e.key_group, version))
                    for e in packed
                ]
            write_ids = self._insert_pack(
                tx, op_id, version, attempt, packed, committed=committed, segment=segment_id
            )
            if committed:
                self._advance_heads(
                    tx,
                    op_id,
                    [
                        (wid, e.key_group, version, attempt == COMPACTION, e.parent)
                        for wid, e in zip(write_ids, packed, strict=True)
                    ],
                )
            self._fault("write:end")
            return [
                WriteInfo(
                    wid,
                    e.key_group,
                    version,
                    e.full,
                    e.bytes,
                    e.rows,
                    path,
                    e.seg_offset,
                    e.seg_length,
                )
                for wid, e in zip(write_ids, packed, strict=True)
            ]

        return self._run(f"registering segment {path}", work)

    def segments_of(self, write_ids: Sequence[int]) -> set[str]:
        """Paths of the segment files that hold the blocks of ``write_ids``."""
        ids = sorted(set(write_ids))

        def work(tx: Tx) -> set[str]:
            found = self._writes_by_id(tx, ids)
            segments = sorted({p.segment for p, _ in found.values() if p.segment is not None})
            paths: set[str] = set()
            for chunk in _chunks(segments, 250):
                rows = tx.all(
                    f"SELECT path FROM ckpt_segments WHERE id IN ({_marks(len(chunk))})", chunk
                )
                paths.update(str(path) for (path,) in rows)
            return paths

        return self._run("finding the segments of writes", work, write=False)

    def stamp_unreferenced(self, now: float | None = None) -> int:
        """GC phase one: stamp segment files that no write references any more."""
        when = time.time() if now is None else now
        return int(
            self._run(
                "stamping unreferenced segments",
                lambda tx: (
                    tx.execute(
                        "UPDATE ckpt_segments SET stamped = ? WHERE stamped IS NULL AND id IN "
                        f"({_UNREFERENCED})",
                        (when,),
                    ).rowcount
                ),
            )
        )

    def collectable_segments(self, grace_seconds: float, now: float | None = None) -> list[str]:
        """GC phase two: segments stamped more than ``grace_seconds`` ago and still
        unreferenced."""
        cutoff = (time.time() if now is None else now) - grace_seconds
        rows = self._run(
            "listing collectable segments",
            lambda tx: tx.all(
                "SELECT path FROM ckpt_segments WHERE stamped IS NOT NULL AND stamped <= ? "
                f"AND id IN ({_UNREFERENCED}) ORDER BY path",
                (cutoff,),
            ),
            write=False,
        )
        return [path for (path,) in rows]

    def forget_segments(self, paths: Sequence[str]) -> list[str]:
        """Move collectable segments from the catalog to the GC's trash, unless a write
        references one again (that file stays); returns the paths forgotten, in one
        transaction (one pass over the writes).

        The trash rows outlive a GC pass that dies before it deletes the files: the next
        pass deletes the files and only then empties the rows (:meth:`trashed_segments`,
        :meth:`segment_deleted`). The segment rows themselves are gone, so a writer that
        still held a reservation can no longer register it.
        """
        wanted = sorted(set(paths))
        if not wanted:
            return []

        def work(tx: Tx) -> list[str]:
            found = []
            for chunk in _chunks(wanted):
                found.extend(
                    tx.all(
                        "SELECT path, bytes FROM ckpt_segments WHERE stamped IS NOT NULL AND "
                        f"path IN ({_marks(len(chunk))}) AND id IN ({_UNREFERENCED})",
                        list(chunk),
                    )
                )
            now = time.time()
            for chunk in _chunks(found):
                tx.execute(
                    f"DELETE FROM ckpt_segments WHERE path IN ({_marks(len(chunk))})",
                    [path for path, _ in chunk],
                )
                tx.executemany(
                    "INSERT INTO ckpt_gc_trash (path, bytes, since) VALUES (?, ?, ?) "
                    "ON CONFLICT (path) DO NOTHING",
                    [(path, int(nbytes), now) for path, nbytes in chunk],
                )
            return sorted(str(path) for path, _ in found)

        return list(self._run(f"forgetting {len(wanted)} segments", work))

    def trashed_segments(self) -> list[tuple[str, int]]:
        """Segments forgotten by a GC pass whose file may not be deleted yet: (path, bytes)."""
        rows = self._run(
            "listing forgotten segments",
            lambda tx: tx.all("SELECT path, bytes FROM ckpt_gc_trash ORDER BY path"),
            write=False,
        )
        return [(path, int(nbytes)) for path, nbytes in rows]

    def segment_deleted(self, path: str) -> None:
        """The GC deleted the file of a forgotten segment: drop it from the trash."""
        self._run(
            f"emptying segment {path} from the trash",
            lambda tx: tx.execute("DELETE FROM ckpt_gc_trash WHERE path = ?", (path,)),
        )

    def relative_segment_paths(self, relative: Callable[[str], str]) -> int:
        """Rewrite segment paths stored by older versions (absolute) with ``relative``, once
        per catalog (marked in ``ckpt_meta``); returns how many paths changed."""

        def done(tx: Tx) -> bool:
            return tx.one("SELECT 1 FROM ckpt_meta WHERE name = 'segment_paths'") is not None

        if self._run("reading segment path style", done, write=False):
            return 0

        def work(tx: Tx) -> int:
            if done(tx):
                return 0
            changed = 0
            for segment_id, path in tx.all("SELECT id, path FROM ckpt_segments ORDER BY id"):
                new = relative(path)
                if new != path:
                    tx.execute("UPDATE ckpt_segments SET path = ? WHERE id = ?", (new, segment_id))
                    changed += 1
            tx.execute(
                "INSERT INTO ckpt_meta VALUES ('segment_paths', 'relative') "
                "ON CONFLICT (name) DO NOTHING"
            )
            return changed

        return int(self._run("making segment paths relative to the storage root", work))

    def referenced_segments(self) -> set[str]:
        """Paths of segments that at least one write references."""
        rows = self._run(
            "listing referenced segments",
            lambda tx: tx.all(
                "SELECT DISTINCT s.path FROM ckpt_packs p JOIN ckpt_segments s ON s.id = p.segment"
            ),
            write=False,
        )
        return {path for (path,) in rows}

    def segments(self) -> list[tuple[str, int, float | None]]:
        """Every known segment file: (path, bytes, stamped time or None)."""
        return [
            (p, int(b), s)
            for p, b, s in self._run(
                "listing segments",
                lambda tx: tx.all("SELECT path, bytes, stamped FROM ckpt_segments ORDER BY path"),
                write=False,
            )
        ]

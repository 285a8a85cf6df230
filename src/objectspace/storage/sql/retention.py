"""Retention (dropping the checkpoints and writes no restore can need any more) and the
summaries of what the catalog holds.
"""

from __future__ import annotations

from objectspace.errors import CheckpointError
from objectspace.storage.contract import RetentionStats, WriteSummary
from objectspace.storage.sql.packing import PackRows
from objectspace.storage.sql.packs import Pack, encode_entries
from objectspace.storage.sql.tx import Tx, _chunks, _marks

__all__ = ["Retention"]


class Retention(PackRows):
    """Retention of a job's checkpoints, and what its writes weigh."""

    def retain(self, job: str, keep_last: int) -> RetentionStats:
        if keep_last < 1:
            raise ValueError(f"keep_last must be at least 1, not {keep_last}")

        def work(tx: Tx) -> RetentionStats:
            stats = RetentionStats()
            job_id = self._job_id(tx, job)
            if job_id is None:
                raise CheckpointError(f"job {job!r} does not exist")
            kept = [
                c
                for (c,) in tx.all(
                    "SELECT checkpoint FROM ckpt_checkpoints WHERE job = ? "
                    "ORDER BY checkpoint DESC LIMIT ?",
                    (job_id, keep_last),
                )
            ]
            stats.kept = sorted(kept)
            if not kept:
                return stats
            oldest, last = min(kept), max(kept)
            stats.checkpoints_dropped = tx.execute(
                "DELETE FROM ckpt_checkpoints WHERE job = ? AND checkpoint < ?",
                (job_id, oldest),
            ).rowcount
            # Per key group, the chain of the oldest retained checkpoint starts at its newest
            # full write at or before it; every write before that one, in (version, id)
            # order, is unreachable (a compacted write follows the write of its version).
            packs = self._packs(
                tx,
                "JOIN ckpt_operators o ON o.id = p.op WHERE o.job = ? AND p.version <= ? "
                "ORDER BY p.version, p.id",
                (job_id, last),
            )
            starts: dict[tuple[int, int], tuple[int, int]] = {}  # (op, group) → (version, id)
            for pack in packs:
                if pack.committed and pack.version <= oldest:
                    for e in pack.entries:
                        if e.full:
                            starts[(pack.op, e.key_group)] = (pack.version, pack.id + e.offset)
            doomed: dict[int, set[int]] = {}  # pack id → offsets of its unreachable writes
            pending: list[Pack] = []
            for pack in packs:
                if not pack.committed:
                    pending.append(pack)
                    continue
                for e in pack.entries:
                    start = starts.get((pack.op, e.key_group))
                    if start is not None and (pack.version, pack.id + e.offset) < start:
                        doomed.setdefault(pack.id, set()).add(e.offset)
            stats.writes_removed = sum(map(len, doomed.values()))
            stats.pending_removed = sum(len(p.entries) for p in pending)
            by_id = {pack.id: pack for pack in packs}
            gone: list[int] = []  # write ids whose blocks go
            dropped: list[int] = [p.id for p in pending]  # packs that go whole
            for pack in pending:
                gone.extend(pack.id + e.offset for e in pack.entries)
                if pack.segment is None:
                    stats.rows_removed += sum(e.rows for e in pack.entries)
            for pack_id, offsets in sorted(doomed.items()):
                pack = by_id[pack_id]
                gone.extend(pack_id + offset for offset in sorted(offsets))
                if pack.segment is None:
                    stats.rows_removed += sum(e.rows for e in pack.entries if e.offset in offsets)
                kept_entries = [e for e in pack.entries if e.offset not in offsets]
                if kept_entries:
                    tx.execute(
                        "UPDATE ckpt_packs SET entries = ? WHERE id = ?",
                        (encode_entries(kept_entries, pack.segment is not None), pack_id),
                    )
                else:
                    dropped.append(pack_id)
            for chunk in _chunks(sorted(gone)):
                tx.execute(
                    f"DELETE FROM ckpt_blocks WHERE write IN ({_marks(len(chunk))})", list(chunk)
                )
            for chunk in _chunks(sorted(dropped)):
                tx.execute(
                    f"DELETE FROM ckpt_packs WHERE id IN ({_marks(len(chunk))})", list(chunk)
                )
            return stats

        return self._run(f"retention of job {job!r}", work)

    def storage_bytes(self) -> int:
        """Bytes of the blocks stored in the database, all jobs."""
        row = self._run(
            "measuring storage",
            lambda tx: tx.one("SELECT COALESCE(SUM(LENGTH(data)), 0) FROM ckpt_blocks"),
            write=False,
        )
        assert row is not None
        return int(row[0])

    def write_summary(self, job: str) -> list[WriteSummary]:
        def work(tx: Tx) -> list[WriteSummary]:
            names = dict(
                tx.all(
                    "SELECT o.id, o.name FROM ckpt_operators o JOIN ckpt_jobs j "
                    "ON j.id = o.job WHERE j.name = ?",
                    (job,),
                )
            )
            groups: dict[tuple[int, str, bool, bool], list[int]] = {}
            for pack in self._packs(
                tx,
                "JOIN ckpt_operators o ON o.id = p.op JOIN ckpt_jobs j ON j.id = o.job "
                "WHERE j.name = ?",
                (job,),
            ):
                for e in pack.entries:
                    key = (pack.version, str(names[pack.op]), pack.committed, e.full)
                    total = groups.setdefault(key, [0, 0, 0])
                    total[0] += 1
                    total[1] += e.bytes
                    total[2] += e.rows
            return [
                WriteSummary(name, version, committed, full, n, nbytes, rows)
                for (version, name, committed, full), (n, nbytes, rows) in sorted(groups.items())
            ]

        return self._run("summarising writes", work, write=False)

"""Writing and committing: pending writes and the blocks they carry, staged writes a commit
stores itself, compactions, the commit (one transaction that checks every write and its
parent against its key group's head and advances the heads), its conflicts, and fencing
a job's older drivers by epoch.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from objectspace.errors import CheckpointConflictError, CheckpointError
from objectspace.storage.blocks import block_digest, block_intact, encode_block
from objectspace.storage.contract import PendingPart, StagedWrite, WriteInfo
from objectspace.storage.sql.catalog import SegmentPlacement, stage_parts
from objectspace.storage.sql.dictionaries import Dictionaries
from objectspace.storage.sql.packs import Entry, Pack
from objectspace.storage.sql.segments import SegmentRecords
from objectspace.storage.sql.tx import _COMMITTED_ATTEMPT, COMPACTION, Tx, _chunks, _marks
from objectspace.tables import TableChanges

__all__ = ["Commits"]


class Commits(SegmentRecords, Dictionaries):
    """Pending, staged and compacted writes; commits, their checks and fencing."""

    supports_staging = True

    def _insert_write(
        self,
        tx: Tx,
        op_id: int,
        key_group: int,
        version: int,
        full: bool,
        attempt: str,
        nbytes: int,
        rows: int,
        *,
        committed: bool = False,
        digest: int | None = None,
        parent: int | None = None,
    ) -> int:
        """Store one write as a pack of its own (a compaction's)."""
        if committed and attempt == COMPACTION:
            parent = self._compacted_origin(tx, op_id, key_group, version)
        [write_id] = self._insert_pack(
            tx,
            op_id,
            version,
            attempt,
            [Entry(0, key_group, full, nbytes, rows, 0, 0, digest, parent)],
            committed=committed,
        )
        if committed:
            self._advance_heads(
                tx, op_id, [(write_id, key_group, version, attempt == COMPACTION, parent)]
            )
        return write_id

    def stage_pending(
        self,
        job: str,
        operator: str,
        version: int,
        attempt: str,
        parts: Sequence[PendingPart],
    ) -> list[StagedWrite]:
        return stage_parts(self, job, operator, version, attempt, parts)

    def write_staged(
        self, job: str, operator: str, version: int, attempt: str, staged: Sequence[StagedWrite]
    ) -> list[WriteInfo]:
        if not staged:
            return []

        def work(tx: Tx) -> list[WriteInfo]:
            self._fault("write:begin")
            op_id = self._operator_id(tx, job, operator)
            for w in staged:
                if w.version != version or w.operator != operator:
                    raise CheckpointError(
                        f"staged write of key group {w.key_group} is version {w.version} of "
                        f"operator {w.operator!r}, not version {version} of {operator!r}"
                    )
            write_ids = self._insert_staged(tx, op_id, version, attempt, staged)
            self._fault("write:end")
            return [
                WriteInfo(wid, w.key_group, w.version, w.full, len(w.block), w.rows)
                for wid, w in zip(write_ids, staged, strict=True)
            ]

        return self._run(f"writing checkpoint {version} of {job}/{operator}", work)

    def _insert_staged(
        self, tx: Tx, op_id: int, version: int, attempt: str, staged: Sequence[StagedWrite]
    ) -> list[int]:
        """Insert staged writes of one operator as one pending pack of ``version`` and
        ``attempt`` with their blocks (the commit stores them with attempt
        :data:`_COMMITTED_ATTEMPT`, and their time is not kept)."""
        write_ids = self._insert_pack(
            tx,
            op_id,
            version,
            attempt,
            [
                Entry(0, w.key_group, w.full, len(w.block), w.rows, 0, 0, w.digest, w.parent)
                for w in staged
            ],
        )
        self._fault("write:rows")
        self._insert_blocks(tx, [(wid, w.block) for wid, w in zip(write_ids, staged, strict=True)])
        return write_ids

    def write_compacted(
        self,
        job: str,
        operator: str,
        key_group: int,
        version: int,
        tables: Mapping[str, Mapping[bytes, bytes]],
    ) -> WriteInfo:
        """Store a key group's state as of ``version`` as a committed full write.

        Restores as of ``version`` or later start from it (it sorts after the writes it
        replaces); the writes it replaces stay until retention drops them.
        """
        changes = {name: TableChanges(rows=dict(rows)) for name, rows in tables.items()}

        def work(tx: Tx) -> WriteInfo:
            op_id = self._operator_id(tx, job, operator)
            dictionary = self._operator_dictionary_tx(tx, op_id)
            block, count = encode_block(changes, True, dictionary=dictionary, compact=True)
            write_id = self._insert_write(
                tx,
                op_id,
                key_group,
                version,
                True,
                COMPACTION,
                len(block),
                count,
                committed=True,
                digest=block_digest(block),
            )
            self._insert_blocks(tx, [(write_id, block)])
            return WriteInfo(write_id, key_group, version, True, len(block), count)

        return self._run(f"compacting key group {key_group} of {job}/{operator}", work)

    def commit(
        self,
        job: str,
        checkpoint_id: int,
        base: int | None,
        write_ids: Sequence[int],
        parallelism: Mapping[str, int],
        epoch: int = 0,
        staged: Sequence[StagedWrite] = (),
        *,
        segments: Mapping[str, SegmentPlacement] | None = None,
    ) -> bool:
        """See :meth:`Backend.commit`. ``segments`` (segment storage): per operator, where
        its staged writes' blocks were published, as a reserved segment file: they are
        recorded there instead of in ``ckpt_blocks``."""
        ids = sorted(set(write_ids))
        if len(ids) != len(write_ids):
            raise CheckpointError(f"checkpoint {checkpoint_id}: a write is named twice")
        by_operator: dict[str, list[StagedWrite]] = {}
        for write in staged:
            by_operator.setdefault(write.operator, []).append(write)

        def work(tx: Tx) -> bool:
            self._fault("commit:begin")
            row = tx.one("SELECT id, last_checkpoint, epoch FROM ckpt_jobs WHERE name = ?", (job,))
            if row is None:
                raise CheckpointError(f"job {job!r} does not exist")
            job_id, last, current = row
            if int(current) != epoch:
                raise CheckpointConflictError(
                    f"cannot commit checkpoint {checkpoint_id} of job {job!r}: this writer "
                    f"holds epoch {epoch}, but the job was fenced by a newer driver at epoch "
                    f"{current} (last committed checkpoint: {last})"
                )
            done = tx.one(
                "SELECT epoch, writes FROM ckpt_checkpoints WHERE job = ? AND checkpoint = ?",
                (job_id, checkpoint_id),
            )
            if done is not None:
                self._check_recommit(tx, job, job_id, checkpoint_id, ids, epoch, done, staged)
                return False
            if last is not None and checkpoint_id <= last:
                raise CheckpointError(
                    f"cannot commit checkpoint {checkpoint_id} of job {job!r}: checkpoint "
                    f"{last} is already committed and checkpoints commit in increasing order"
                )
            if base != last:
                raise CheckpointError(
                    f"cannot commit checkpoint {checkpoint_id} of job {job!r}: its writes were "
                    f"made on top of checkpoint {base}, but the last committed one is {last}"
                )
            every = sorted(
                {*ids, *self._store_staged(tx, job, checkpoint_id, by_operator, segments)}
            )
            total_bytes = full_writes = 0
            parents: dict[int, list[tuple[int, int, int]]] = {}  # op → (write, group, parent)
            # op → (write, group, version, compaction, parent): the new heads
            groups: dict[int, list[tuple[int, int, int, bool, int | None]]] = {}
            found = self._writes_by_id(tx, every)
            if len(found) != len(every):
                missing = sorted(set(every) - set(found))
                raise CheckpointError(
                    f"checkpoint {checkpoint_id} of job {job!r} names writes that do not "
                    f"exist (collected, or never written): {missing[:5]}"
                )
            owners = self._column_by_id(
                tx, "ckpt_operators", "job", {pack.op for pack, _ in found.values()}
            )
            packs: dict[int, Pack] = {}
            for write_id in every:
                pack, entry = found[write_id]
                version, committed, owner = pack.version, pack.committed, owners.get(pack.op)
                if owner != job_id or version != checkpoint_id or committed:
                    raise CheckpointError(
                        f"write {write_id} cannot be part of checkpoint {checkpoint_id} of "
                        f"job {job!r}: it is version {version}"
                        + (" and already committed" if committed else "")
                        + ("" if owner == job_id else " of another job")
                    )
                packs[pack.id] = pack
                total_bytes += entry.bytes
                full_writes += entry.full
                groups.setdefault(pack.op, []).append(
                    (write_id, entry.key_group, version, False, entry.parent)
                )
                if entry.parent is not None:
                    parents.setdefault(pack.op, []).append(
                        (write_id, entry.key_group, entry.parent)
                    )
            named = set(every)
            for pack in packs.values():
                left = [pack.id + e.offset for e in pack.entries if pack.id + e.offset not in named]
                if left:
                    raise CheckpointError(
                        f"checkpoint {checkpoint_id} of job {job!r} names some of the writes "
                        f"stored together with write {pack.id + pack.entries[0].offset} but not "
                        f"{left[:5]}: a save's writes commit together"
                    )
            for op, written in groups.items():
                counts = Counter(group for _, group, *_ in written)
                if len(counts) != len(written):
                    twice = min(g for g, n in counts.items() if n > 1)
                    raise CheckpointError(
                        f"checkpoint {checkpoint_id} of job {job!r} writes key group {twice} "
                        f"of operator id {op} twice"
                    )
            self._check_parents(tx, job, checkpoint_id, base, parents)
            self._fault("commit:mark")
            for chunk in _chunks(sorted(packs)):
                tx.execute(
                    f"UPDATE ckpt_packs SET committed = 1 WHERE id IN ({_marks(len(chunk))})",
                    list(chunk),
                )
            for op, written in sorted(groups.items()):
                self._advance_heads(tx, op, written)
            tx.execute(
                "UPDATE ckpt_jobs SET last_checkpoint = ? WHERE id = ?", (checkpoint_id, job_id)
            )
            tx.execute(
                "INSERT INTO ckpt_checkpoints (job, checkpoint, committed_at, writes, bytes, "
                "full_writes, base, epoch) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    job_id,
                    checkpoint_id,
                    time.time(),
                    len(every),
                    total_bytes,
                    full_writes,
                    base,
                    epoch,
                ),
            )
            for name, p in sorted(parallelism.items()):
                tx.execute(
                    "UPDATE ckpt_operators SET parallelism = ? WHERE job = ? AND name = ?",
                    (p, job_id, name),
                )
            self._fault("commit:end")
            return True

        return self._run(f"committing checkpoint {checkpoint_id} of {job}", work)

    def _store_staged(
        self,
        tx: Tx,
        job: str,
        checkpoint_id: int,
        by_operator: Mapping[str, Sequence[StagedWrite]],
        segments: Mapping[str, SegmentPlacement] | None = None,
    ) -> list[int]:
        """Check the staged writes of a commit and store them as pending writes (the
        commit then marks them, with the others, in the same transaction); their ids."""
        stored: list[int] = []
        for operator, writes in sorted(by_operator.items()):
            row = self._operator_row(tx, job, operator)
            if row is None:
                raise CheckpointError(f"operator {operator!r} of job {job!r} does not exist")
            op_id, max_key_groups = int(row[0]), int(row[1])
            seen: set[int] = set()
            for w in writes:
                where = f"staged write of key group {w.key_group} of operator {operator!r}"
                if w.version != checkpoint_id:
                    raise CheckpointError(
                        f"{where} is version {w.version}, not checkpoint {checkpoint_id}"
                    )
                if not 0 <= w.key_group < max_key_groups:
                    raise CheckpointError(
                        f"{where}: the operator has key groups 0..{max_key_groups - 1}"
                    )
                if w.key_group in seen:
                    raise CheckpointError(f"{where} is named twice")
                seen.add(w.key_group)
                if not block_intact(w.block) or block_digest(w.block) != w.digest:
                    raise CheckpointError(f"{where}: its block fails its checksum")
            placement = None if segments is None else segments.get(operator)
            if placement is None:
                stored.extend(
                    self._insert_staged(tx, op_id, checkpoint_id, _COMMITTED_ATTEMPT, writes)
                )
                continue
            (segment_id, path), size, offsets = placement
            self._claim_segment(tx, segment_id, path, size)
            stored.extend(
                self._insert_pack(
                    tx,
                    op_id,
                    checkpoint_id,
                    _COMMITTED_ATTEMPT,
                    [
                        Entry(
                            0,
                            w.key_group,
                            w.full,
                            len(w.block),
                            w.rows,
                            offset,
                            length,
                            w.digest,
                            w.parent,
                        )
                        for w, (offset, length) in zip(writes, offsets, strict=True)
                    ],
                    segment=segment_id,
                )
            )
        return stored

    def _check_recommit(
        self,
        tx: Tx,
        job: str,
        job_id: int,
        checkpoint_id: int,
        ids: Sequence[int],
        epoch: int,
        done: tuple[Any, ...],
        staged: Sequence[StagedWrite] = (),
    ) -> None:
        """Accept committing a committed checkpoint again only with the very writes (and
        epoch) that committed it, staged writes matched by key group and digest; anything
        else lost the race to another writer."""
        won_epoch, won_writes = int(done[0]), int(done[1])
        # the checkpoint's committed writes (not compactions): (operator, key group) → write
        names = dict(tx.all("SELECT id, name FROM ckpt_operators WHERE job = ?", (job_id,)))
        committed_here: dict[tuple[str, int], tuple[int, int | None]] = {}
        for pack in self._packs(
            tx,
            "JOIN ckpt_operators o ON o.id = p.op WHERE o.job = ? AND p.version = ? "
            "AND p.committed = 1 AND p.attempt != ? ORDER BY p.id",
            (job_id, checkpoint_id, COMPACTION),
        ):
            for e in pack.entries:
                committed_here[(str(names[pack.op]), e.key_group)] = (pack.id + e.offset, e.digest)
        staged_same = True
        for w in staged:
            record = committed_here.get((w.operator, w.key_group))
            if record is None or record[1] is None or record[1] != w.digest:
                staged_same = False
                break
        mine: dict[int, tuple[int, int]] = {
            wid: (pack.version, int(pack.committed))
            for wid, (pack, _) in self._writes_by_id(tx, ids).items()
            if pack.op in names
        }
        same = (
            staged_same
            and won_epoch == epoch
            and won_writes == len(ids) + len(staged)
            and len(mine) == len(ids)
            and all(v == (checkpoint_id, 1) for v in mine.values())
        )
        if same:
            return
        won = sorted(wid for wid, _ in committed_here.values())[:5]
        lost = sorted(w for w, (_, c) in mine.items() if not c)[:5]
        raise CheckpointConflictError(
            f"checkpoint {checkpoint_id} of job {job!r} was already committed by another "
            f"writer (epoch {won_epoch}, {won_writes} writes, first ids "
            f"{won}); this commit (epoch {epoch}, "
            f"{len(ids) + len(staged)} writes"
            + (f", uncommitted ids {lost}" if lost else "")
            + ") lost: restore from the committed checkpoint instead of building on it"
        )

    def _check_parents(
        self,
        tx: Tx,
        job: str,
        checkpoint_id: int,
        base: int | None,
        parents: Mapping[int, Sequence[tuple[int, int, int]]],
    ) -> None:
        """Refuse writes made on top of a state their key group does not hold as of
        ``base``: each write's parent must be the key group's committed head (``0``: no
        committed write), or the write a compaction head stands for."""
        for op_id, written in parents.items():
            heads: dict[int, tuple[int, str, int | None]] = {}  # key group → its head
            if base is not None:
                # Each written key group's head as of the base, the last committed
                # checkpoint: from ``ckpt_head_chunks``.
                heads = self._heads_tx(tx, op_id, [g for _, g, _ in written], base)
            doubtful = [w for w in written if w[2] != heads.get(w[1], (0,))[0]]
            if not doubtful:
                continue
            wanted = sorted({p for _, g, p in doubtful if p and p != heads.get(g, (0,))[0]})
            compacted: dict[int, int | None] = {
                wid: entry.parent
                for wid, (pack, entry) in self._writes_by_id(tx, wanted).items()
                if pack.attempt == COMPACTION
            }
            for write_id, group, parent in doubtful:
                head = heads.get(group)
                if head is None:
                    if parent == 0:
                        continue
                    expected = "no state"
                else:
                    head_id, attempt, origin = head
                    if parent == head_id:
                        continue
                    root = origin if attempt == COMPACTION else head_id
                    if root is not None and compacted.get(parent, parent) == root:
                        continue  # built on what the (newer) compaction head stands for
                    expected = f"write {head_id}"
                name = tx.one("SELECT name FROM ckpt_operators WHERE id = ?", (op_id,))
                raise CheckpointConflictError(
                    f"cannot commit checkpoint {checkpoint_id} of job {job!r}: write "
                    f"{write_id} of key group {group} of operator "
                    f"{name[0] if name else op_id!r} was made on top of "
                    + (f"write {parent}" if parent else "no state")
                    + f", but as of checkpoint {base} the committed state of that key group is "
                    f"{expected} (its writer lost a commit to another driver and built on it)"
                )

    def fence(self, job: str) -> int:
        def work(tx: Tx) -> int:
            tx.execute(
                "INSERT INTO ckpt_jobs (name) VALUES (?) ON CONFLICT (name) DO NOTHING", (job,)
            )
            row = tx.one(
                "UPDATE ckpt_jobs SET epoch = epoch + 1 WHERE name = ? RETURNING epoch", (job,)
            )
            assert row is not None
            return int(row[0])

        return self._run(f"fencing job {job!r}", work)

    def epoch(self, job: str) -> int:
        row = self._run(
            "reading the writer epoch",
            lambda tx: tx.one("SELECT epoch FROM ckpt_jobs WHERE name = ?", (job,)),
            write=False,
        )
        return 0 if row is None else int(row[0])

    def writes_committed(self, write_ids: Sequence[int]) -> bool:
        """Whether every one of ``write_ids`` exists and is committed."""
        ids = sorted(set(write_ids))

        def work(tx: Tx) -> bool:
            found = self._writes_by_id(tx, ids)
            return len(found) == len(ids) and all(pack.committed for pack, _ in found.values())

        return self._run("checking writes", work, write=False)

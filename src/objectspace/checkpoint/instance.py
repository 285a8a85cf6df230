"""An instance: the key groups of one index at one parallelism, restored lazily, saved as
pending writes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple

from objectspace.checkpoint._checks import EMPTY, _check_checkpoint_id
from objectspace.checkpoint.compaction import _Chain
from objectspace.checkpoint.local import LocalHead, LocalStore, Pending
from objectspace.checkpoint.receipts import Receipt, SaveStats
from objectspace.collector import gc_paused
from objectspace.errors import CheckpointError, StorageError
from objectspace.residents import COMPACT_BYTES
from objectspace.space import ObjectSpace
from objectspace.storage.contract import PendingPart, StagedWrite, WriteInfo
from objectspace.tables import CheckpointKind, DictReader, StateWriter, TableChanges, WriteStats

if TYPE_CHECKING:
    from objectspace.checkpoint.operator import Operator

_REBUILT_AT_ONCE = 4  # key groups rebuilt into a local store per read (in memory together)

__all__ = ["Instance", "PendingSave"]


class PendingSave(NamedTuple):
    """A save that :meth:`Instance.on_saved` has not acknowledged yet: the checkpoint it
    saved and the pending writes it made (one per key group it wrote)."""

    checkpoint_id: int
    writes: list[WriteInfo]

    def write_ids(self) -> list[int]:
        """The ids of the save's pending writes (none for a staged save, whose writes the
        commit stores)."""
        return [w.write_id for w in self.writes if w.write_id]


class _Collector(StateWriter):
    """A writer that only collects a space's edits; the backend persists them later."""

    def _apply(self) -> WriteStats:  # pragma: no cover - never committed
        raise StorageError("a collecting writer is not committed")


class Instance:
    """Owns the key groups of one index at one parallelism and their object spaces.

    Spaces are restored on first use (``space``/``space_for_key``), so an instance that
    touches few key groups reads little; :meth:`load_all` restores the whole range at once.

    With a ``local`` store (:class:`~objectspace.checkpoint.local.LocalStore`), a key
    group's space holds only the objects in use as Python objects and loads the others
    from the local store on first use; the local store is brought to the committed state
    of each key group as it is loaded (rebuilt from storage when it holds another one),
    updated by each acknowledged save, and :meth:`evict` drops objects from memory.
    """

    def __init__(
        self,
        operator: Operator,
        index: int,
        parallelism: int,
        checkpoint: int | None = None,
        *,
        local: LocalStore | None = None,
    ) -> None:
        self.operator = operator
        self.index = index
        self.parallelism = parallelism
        self.key_groups: range = operator.key_groups.range_of(index, parallelism)
        job = operator.job
        if checkpoint is None:
            self.base = job.last_checkpoint()
        elif checkpoint == EMPTY:
            self.base = None
        else:
            _check_checkpoint_id(checkpoint)
            if checkpoint not in job.checkpoints():
                raise CheckpointError(
                    f"checkpoint {checkpoint} of job {job.name!r} is not restorable "
                    f"(restorable: {_summary(job.checkpoints())})"
                )
            self.base = checkpoint
        self.attempt = uuid.uuid4().hex[:12]
        self._spaces: dict[int, ObjectSpace] = {}
        self._chains: dict[int, _Chain] = {}
        # Per loaded key group: (write id, version) of the newest write its state includes
        # (None: no write), which identifies that state in the store.
        self._heads: dict[int, tuple[int, int] | None] = {}
        self._saved: PendingSave | None = None
        self.rows_read = 0
        self.bytes_read = 0
        self.last_save = SaveStats()
        self.local = local
        self.objects_evicted = 0

    def __repr__(self) -> str:
        return (
            f"Instance({self.operator.job.name!r}/{self.operator.name!r} {self.index} of "
            f"{self.parallelism}, key groups {self.key_groups.start}..{self.key_groups.stop - 1})"
        )

    def _check(self, key_group: int) -> None:
        if not isinstance(key_group, int) or isinstance(key_group, bool):
            raise TypeError(
                f"a key group is an int, not {type(key_group).__name__} "
                f"({key_group!r}); use space_for_key(key) for keys"
            )
        if key_group not in self.key_groups:
            raise CheckpointError(
                f"key group {key_group} is not owned by instance {self.index} of "
                f"{self.parallelism} of operator {self.operator.name!r} (it owns "
                f"{self.key_groups.start}..{self.key_groups.stop - 1}; key group {key_group} "
                f"belongs to instance "
                f"{self.operator.key_groups.instance_of(key_group, self.parallelism)})"
                if 0 <= key_group < self.operator.max_key_groups
                else f"key group {key_group} is outside 0..{self.operator.max_key_groups - 1}"
            )

    def key_group(self, key: Any) -> int:
        """The key group of ``key``."""
        return self.operator.key_groups.key_group(key)

    def space_for_key(self, key: Any) -> ObjectSpace:
        """The object space of the key group of ``key`` (which this instance must own)."""
        return self.space(self.operator.key_groups.key_group(key))

    def space(self, key_group: int) -> ObjectSpace:
        """The object space of ``key_group``, restored on first use."""
        space = self._spaces.get(key_group)
        if space is None:
            self._check(key_group)
            self._load(range(key_group, key_group + 1))
            space = self._spaces[key_group]
        return space

    def preload(self, key_groups: Iterable[int]) -> None:
        """Restore the given key groups (of this instance) not loaded yet, reading them in one
        pass over the range that covers them, rather than one read per key group."""
        wanted = sorted({g for g in key_groups if g not in self._spaces})
        if not wanted:
            return
        for key_group in (wanted[0], wanted[-1]):
            self._check(key_group)
        if self.local is not None:
            with gc_paused():
                self._load_local(wanted)
            return
        with gc_paused():  # one read of every run's blocks, never the key groups between
            self._load_paused(wanted)

    def load_all(self) -> None:
        """Restore every key group of the range that is not loaded yet."""
        missing = [g for g in self.key_groups if g not in self._spaces]
        if missing:
            self._load(range(missing[0], missing[-1] + 1))

    def loaded(self) -> dict[int, ObjectSpace]:
        """The key groups restored so far and their spaces."""
        return dict(self._spaces)

    def _load(self, key_groups: range) -> None:
        with gc_paused():  # a restore allocates per stored entry (see gc_paused)
            if self.local is not None:
                self._load_local([g for g in key_groups if g not in self._spaces])
            else:
                self._load_paused(key_groups)

    def _load_local(self, wanted: list[int]) -> None:
        """Spaces for ``wanted`` backed by the local store, after bringing each key group
        there to its committed state as of :attr:`base`: as it is, with the pending save
        it holds applied if that save is the committed write, or rebuilt from storage."""
        if not wanted:
            return
        op = self.operator
        job = op.job
        local = self.local
        assert local is not None
        base = self.base
        committed = (
            {}
            if base is None
            else job.backend.head_digests(job.name, op.name, range(wanted[0], wanted[-1] + 1), base)
        )
        kept = local.heads(wanted)
        if local.source is not None and base is not None:  # from copies, if they hold them
            lack = [
                g for g in wanted if g in committed and g not in kept and local.pending(g) is None
            ]
            if lack and local.source(lack, base + 1):
                kept = local.heads(wanted)
        rebuild: list[int] = []
        behind: dict[int, LocalHead] = {}
        ready: dict[int, LocalHead | None] = {}
        for key_group in wanted:
            head = committed.get(key_group)
            mine = kept.get(key_group)
            if head is None:
                if mine is not None:
                    local.forget([key_group])
                ready[key_group] = None
            elif mine is not None and _same_write(mine, head):
                ready[key_group] = mine
            else:
                applied = self._apply_pending(key_group, mine, head)
                if applied is not None:
                    ready[key_group] = applied
                elif mine is not None:
                    behind[key_group] = mine
                else:
                    rebuild.append(key_group)
        if behind:  # the writes after the state kept, where they follow it
            ready.update(self._catch_up(behind, committed))
            rebuild = sorted([*rebuild, *(g for g in behind if g not in ready)])
        for at in range(0, len(rebuild), _REBUILT_AT_ONCE):  # never the key groups between
            ready.update(self._rebuild(rebuild[at : at + _REBUILT_AT_ONCE], committed))
        if base is not None and base not in job.checkpoints():
            raise CheckpointError(
                f"checkpoint {base} of job {job.name!r} was dropped by retention before "
                f"instance {self.index} of {self.parallelism} restored key groups "
                f"{wanted[0]}..{wanted[-1]}; restore from a retained checkpoint"
            )
        for key_group, mine in ready.items():
            self._spaces[key_group] = ObjectSpace(
                op.serializer, local.view(key_group, self._repair)
            )
            if mine is None:
                self._chains[key_group] = _Chain()
                self._heads[key_group] = None
            else:
                self._chains[key_group] = _Chain(mine.full_bytes, mine.diff_bytes, mine.length)
                self._heads[key_group] = (mine.write_id, mine.version)

    def _repair(self, key_group: int) -> None:
        """Rebuild ``key_group`` in the local store from storage as of :attr:`base` (a
        read found a damaged row; the local store holds that until the next save)."""
        self._rebuild([key_group], {})

    def _rebuild(
        self,
        key_groups: Sequence[int],
        committed: Mapping[int, tuple[int, int, int | None, int | None]],
    ) -> dict[int, LocalHead | None]:
        """Write ``key_groups`` as storage holds them as of :attr:`base` into the local
        store (one read); their local heads (``None``: no state), with the digest of
        ``committed`` where it names the same write."""
        local, op, base = self.local, self.operator, self.base
        assert local is not None
        job = op.job
        stored = (
            {} if base is None else job.backend.load_groups(job.name, op.name, key_groups, base)
        )
        heads: dict[int, LocalHead | None] = {}
        for key_group in key_groups:
            writes, tables = stored.get(key_group, ([], {}))
            self.rows_read += sum(w.rows for w in writes)
            self.bytes_read += sum(w.bytes for w in writes)
            if not writes:
                local.forget([key_group])
                heads[key_group] = None
                continue
            last = writes[-1]
            head = committed.get(key_group)
            digest = head[2] if head is not None and head[0] == last.write_id else None
            mine = _local_head(last.write_id, last.version, digest, _Chain.of(writes))
            local.replace(key_group, tables, mine)
            heads[key_group] = mine
        return heads

    def _catch_up(
        self,
        behind: Mapping[int, LocalHead],
        committed: Mapping[int, tuple[int, int, int | None, int | None]],
    ) -> dict[int, LocalHead]:
        """Bring each key group of ``behind`` (its local head an older write of its chain
        as of :attr:`base`: a copy of the local store) to the committed state with the
        differential writes after that head; their new heads. One whose chain no longer
        holds its head, or has a full write after it, is left out (to be rebuilt)."""
        local = self.local
        assert local is not None
        job = self.operator.job
        groups = sorted(behind)
        assert self.base is not None  # (a key group is behind a committed head)
        chains = job.backend.chains(
            job.name, self.operator.name, range(groups[0], groups[-1] + 1), self.base
        )
        caught: dict[int, LocalHead] = {}
        for key_group in groups:
            mine = behind[key_group]
            chain = chains.get(key_group, [])
            at = next((i for i, w in enumerate(chain) if w.write_id == mine.write_id), None)
            tail = [] if at is None else chain[at + 1 :]
            if not tail or chain[at].version != mine.version or any(w.full for w in tail):  # type: ignore[index]
                continue
            changes = job.backend.read_changes(job.name, self.operator.name, tail)
            if changes is None:
                continue
            self.rows_read += sum(w.rows for w in tail)
            self.bytes_read += sum(w.bytes for w in tail)
            cost = _Chain(mine.full_bytes, mine.diff_bytes, mine.length)
            for write in tail:
                cost = cost.after(write)
            last, head = tail[-1], committed.get(key_group)
            digest = head[2] if head is not None and head[0] == last.write_id else None
            caught[key_group] = _local_head(last.write_id, last.version, digest, cost)
            local.catch_up(key_group, changes, caught[key_group])
        return caught

    def _apply_pending(
        self,
        key_group: int,
        mine: LocalHead | None,
        head: tuple[int, int, int | None, int | None],
    ) -> LocalHead | None:
        """The local head once the pending save the local store holds for ``key_group`` is
        applied, if that save is the committed ``head`` made on top of the local state;
        ``None`` otherwise (the key group is rebuilt)."""
        local = self.local
        assert local is not None
        pending = local.pending(key_group)
        if pending is None:
            return None
        parent = 0 if mine is None else mine.write_id
        if pending.write_id:
            ok = pending.write_id == head[0] and pending.version == head[1]
        else:
            ok = (pending.version, pending.digest, pending.parent) == (head[1], head[2], head[3])
        if not ok or pending.parent != parent:
            local.drop_pending([key_group])
            return None
        chain = _Chain() if mine is None else _Chain(mine.full_bytes, mine.diff_bytes, mine.length)
        chain = chain.after(
            WriteInfo(head[0], key_group, head[1], pending.full, pending.bytes, pending.rows)
        )
        new = _local_head(head[0], head[1], head[2], chain)
        local.apply_pending(key_group, new)
        return new

    def resident(self) -> tuple[int, int]:
        """How many objects the loaded spaces hold in memory, and an estimate of their
        bytes (:meth:`~objectspace.residents.Residents.nbytes`; without a local store: 0)."""
        residents = [s.residents for s in self._spaces.values() if s.residents is not None]
        return sum(r.count() for r in residents), sum(r.nbytes() for r in residents)

    def objects_loaded(self) -> int:
        """How many objects the spaces loaded from the local store so far."""
        return sum(s.residents.loaded for s in self._spaces.values() if s.residents is not None)

    def evict(self, budget: int) -> int:
        """Drop objects from memory until the estimate of what the spaces hold is at most
        ``budget`` bytes (each key group keeps the same share of its objects, its most
        recently used ones): only with a local store, only objects whose edits are
        acknowledged. Returns how many were dropped."""
        residents = [s.residents for s in self._spaces.values() if s.residents is not None]
        total = sum(r.nbytes() for r in residents)
        if total <= budget:
            return 0
        keep = max(budget, 0) / total
        objects = total - sum(COMPACT_BYTES * len(r.compact) for r in residents)
        dropped = 0
        for r in residents:
            count = r.count()
            dropped += r.evict(count - int(count * keep))
        # The values kept between uses (those just evicted among them) get what the
        # objects left leave of the budget, the oldest dropped first (the objects left
        # estimated from the share kept, not counted again).
        values = sum(COMPACT_BYTES * len(r.compact) for r in residents)
        room = max(budget, 0) - objects * keep
        if values > max(room, 0):
            share = max(room, 0) / values
            for r in residents:
                r.drop_compact(len(r.compact) - int(len(r.compact) * share))
        self.objects_evicted += dropped
        return dropped

    def _load_paused(self, key_groups: Sequence[int]) -> None:
        """Restore ``key_groups`` (ascending; a range, or runs with gaps, whose blocks are
        read together: :meth:`Backend.load_groups`)."""
        op = self.operator
        backend = op.job.backend
        base = self.base
        stored = {} if base is None else backend.load_groups(op.job.name, op.name, key_groups, base)
        loaded: dict[int, tuple[ObjectSpace, _Chain, tuple[int, int] | None]] = {}
        for key_group in key_groups:
            if key_group in self._spaces:
                continue
            writes, tables = stored.get(key_group, ([], {}))
            if writes:
                self.rows_read += sum(w.rows for w in writes)
                space = ObjectSpace.load(DictReader(tables), op.serializer)
                head: tuple[int, int] | None = (writes[-1].write_id, writes[-1].version)
            else:
                space = ObjectSpace(op.serializer)
                head = None
            loaded[key_group] = (space, _Chain.of(writes), head)
        # Chains and rows come from one snapshot; a base dropped by retention meanwhile
        # (never re-added) means the caller asked for state that is no longer kept.
        if base is not None and base not in op.job.checkpoints():
            raise CheckpointError(
                f"checkpoint {base} of job {op.job.name!r} was dropped by retention before "
                f"instance {self.index} of {self.parallelism} restored key groups "
                f"{key_groups[0]}..{key_groups[-1]}; restore from a retained checkpoint"
            )
        for key_group, (space, chain, head) in loaded.items():
            self._spaces[key_group] = space
            self._chains[key_group] = chain
            self._heads[key_group] = head

    @gc_paused()  # the blocks' encoding allocates per row, in no cycle (see gc_paused)
    def save(self, checkpoint_id: int, *, stage_bytes: int = 0) -> Receipt:
        """Write the edits of every loaded key group as pending version ``checkpoint_id``.

        A key group whose chain is too long (see :class:`CompactionPolicy`) is written as a
        full version. Nothing is visible until :meth:`Job.commit`; call :meth:`on_saved`
        after the commit succeeded.

        ``stage_bytes``: when the storage stages writes and the save's blocks are at most
        this many bytes, nothing is stored now: the blocks travel in the receipt and
        :meth:`Job.commit` stores them in the commit's own transaction (one transaction per
        checkpoint instead of one per instance, and nothing left behind by an attempt that
        is never committed).
        """
        _check_checkpoint_id(checkpoint_id)
        if self.base is not None and checkpoint_id <= self.base:
            raise CheckpointError(
                f"cannot save checkpoint {checkpoint_id}: instance restored as of "
                f"{self.base}, so the next checkpoint must be greater"
            )
        op = self.operator
        backend = op.job.backend
        local = self.local
        parts: list[PendingPart] = []
        # With a local store: each key group's edits (what the local store applies), and
        # the full writes, stored one key group at a time as they are made.
        diffs: dict[int, dict[str, TableChanges]] = {}
        written: list[WriteInfo] = []
        with gc_paused():  # see gc_paused: the save allocates per dirty object
            for key_group, space in self._spaces.items():
                if not space.is_dirty:
                    continue  # an unchanged key group needs no new version, nor compaction
                chain = self._chains[key_group]
                full = op.compaction.needs_full(chain) or op.compaction.full_instead(chain, space)
                head = self._heads.get(key_group)
                parent = 0 if head is None else head[0]
                if local is not None:
                    writer = _Collector(CheckpointKind.DIFFERENTIAL)
                    space.save(writer)
                    diffs[key_group] = writer.changes
                    if full:  # the kept rows with the edits on top, never the objects
                        whole = local.full_changes(key_group, writer.changes)
                        part = PendingPart(key_group, True, whole, parent)
                        written += backend.write_pending(
                            op.job.name, op.name, checkpoint_id, self.attempt, [part]
                        )
                        del whole, part
                        continue
                    parts.append(PendingPart(key_group, False, writer.changes, parent))
                    continue
                writer = _Collector(CheckpointKind.FULL if full else CheckpointKind.DIFFERENTIAL)
                space.save(writer)
                parts.append(PendingPart(key_group, full, writer.changes, parent))
            staged: tuple[StagedWrite, ...] = ()
            if stage_bytes > 0 and backend.supports_staging:
                encoded = backend.stage_pending(
                    op.job.name, op.name, checkpoint_id, self.attempt, parts
                )
                if sum(len(w.block) for w in encoded) <= stage_bytes:
                    staged = tuple(encoded)
                    writes = [
                        WriteInfo(
                            0, w.key_group, w.version, w.full, len(w.block), w.rows, digest=w.digest
                        )
                        for w in staged
                    ]
                else:
                    writes = backend.write_staged(
                        op.job.name, op.name, checkpoint_id, self.attempt, encoded
                    )
            elif parts or not written:
                writes = backend.write_pending(
                    op.job.name, op.name, checkpoint_id, self.attempt, parts
                )
            else:
                writes = []
            writes = written + writes
            if local is not None:
                self._keep_pending(checkpoint_id, writes, diffs)
            parts.clear()  # freed now: the collection after the pause does not scan them
        self._saved = PendingSave(checkpoint_id, writes)
        stats = SaveStats(
            key_groups=len(writes),
            full=sum(w.full for w in writes),
            bytes_written=sum(w.bytes for w in writes),
            rows_written=sum(w.rows for w in writes),
        )
        self.last_save = stats
        return Receipt(
            job=op.job.name,
            operator=op.name,
            index=self.index,
            parallelism=self.parallelism,
            checkpoint_id=checkpoint_id,
            base=self.base,
            attempt=self.attempt,
            writes=tuple((w.key_group, w.write_id) for w in writes if w.write_id),
            bytes_written=stats.bytes_written,
            rows_written=stats.rows_written,
            staged=staged,
        )

    def _keep_pending(
        self,
        checkpoint_id: int,
        writes: list[WriteInfo],
        diffs: dict[int, dict[str, TableChanges]],
    ) -> None:
        """Record the save's edits in the local store, for whichever process finds the save
        committed first (this one in :meth:`on_saved`, or another that loads the key
        group)."""
        local = self.local
        assert local is not None
        for w in writes:
            head = self._heads.get(w.key_group)
            pending = Pending(
                checkpoint_id,
                w.write_id,
                w.version,
                w.digest,
                0 if head is None else head[0],
                w.full,
                w.bytes,
                w.rows,
            )
            local.set_pending(w.key_group, pending, diffs[w.key_group])

    def on_saved(self, staged_ids: Mapping[int, int] | None = None) -> None:
        """Acknowledge the last save after its checkpoint was committed.

        The writes of a staged save got their ids in the commit: ``staged_ids`` gives them
        per key group, as :meth:`staged_heads` found them; without it they are read from
        the store, and a key group whose committed head is not the block this save staged
        raises :class:`~objectspace.CheckpointError` (the save was not the one committed)
        and leaves the instance as it was."""
        if self._saved is None:
            return
        checkpoint_id, writes = self._saved
        if any(not w.write_id for w in writes):
            ids = self.staged_heads() if staged_ids is None else staged_ids
            if ids is None or any(not w.write_id and w.key_group not in ids for w in writes):
                raise CheckpointError(
                    f"instance {self.index} of {self.parallelism}: the writes it staged for "
                    f"checkpoint {checkpoint_id} are not the committed ones"
                )
            writes = [w if w.write_id else replace(w, write_id=ids[w.key_group]) for w in writes]
        saved = {w.key_group: w for w in writes}
        local = self.local
        lost: list[int] = []
        for key_group, space in self._spaces.items():
            write = saved.get(key_group)
            if write is not None:
                chain = self._chains[key_group].after(write)
                if local is not None:
                    head = _local_head(write.write_id, write.version, write.digest, chain)
                    if not local.apply_pending(key_group, head) and not _same_write(
                        local.heads([key_group]).get(key_group, _NO_HEAD), (*head[:3], None)
                    ):
                        lost.append(key_group)
                space.on_saved()
                self._chains[key_group] = chain
                self._heads[key_group] = (write.write_id, write.version)
        self.base = checkpoint_id
        self._saved = None
        for key_group in lost:  # its pending edits are gone from the local store
            self._repair(key_group)

    @property
    def pending_save(self) -> PendingSave | None:
        """The last save that :meth:`on_saved` has not acknowledged yet (``None``: none):
        its checkpoint id and its writes."""
        return self._saved

    def staged_heads(self) -> dict[int, int] | None:
        """For a pending staged save: the ids its writes got in the commit, per key group,
        read from the store (``{}``: no staged writes), or ``None`` when a key group's
        committed head as of the saved checkpoint is not the block the save staged, made
        on top of the write this instance built on (its version, digest or parent
        differ), so the save was not the one committed."""
        if self._saved is None:
            return {}
        checkpoint_id, writes = self._saved
        staged = {w.key_group: w for w in writes if not w.write_id}
        if not staged:
            return {}
        op = self.operator
        stored = op.job.backend.head_digests(
            op.job.name, op.name, range(min(staged), max(staged) + 1), checkpoint_id
        )
        ids = {}
        for key_group, write in staged.items():
            head = stored.get(key_group)
            if head is None or not self.is_staged_head(key_group, write, head):
                return None
            ids[key_group] = head[0]
        return ids

    def is_staged_head(
        self, key_group: int, write: WriteInfo, head: tuple[int, int, int | None, int | None]
    ) -> bool:
        """Whether ``head`` (:meth:`Backend.head_digests`) is the write this instance staged
        for ``key_group``: the same version and block digest, made on top of the same
        write (the key group's head before the save; ``0``: none)."""
        before = self._heads.get(key_group)
        parent = 0 if before is None else before[0]
        return head[1] == write.version and head[2] == write.digest and head[3] == parent

    def heads(self) -> dict[int, tuple[int, int] | None]:
        """Per loaded key group, the (write id, version) of the newest write its state
        includes once the last save is acknowledged (``None``: no write): the store holds
        exactly this state where the key group's restore chain ends with that write."""
        heads = dict(self._heads)
        if self._saved is not None:
            for write in self._saved[1]:
                heads[write.key_group] = (write.write_id, write.version)
        return heads

    def to_snapshot(self) -> dict[str, Any]:
        """The instance's in-memory state as plain picklable data (spaces with their
        unacknowledged edit pages, chain costs, heads, the last save), for
        :meth:`from_snapshot` in another process. Not for an instance with a local store
        (which is what another process continues from)."""
        if self.local is not None:
            raise CheckpointError("an instance with a local store has no snapshot")
        return {
            "index": self.index,
            "parallelism": self.parallelism,
            "key_groups": (self.key_groups.start, self.key_groups.stop),
            "base": self.base,
            "spaces": self._spaces,
            "chains": self._chains,
            "heads": self._heads,
            "saved": None if self._saved is None else tuple(self._saved),
        }

    @classmethod
    def from_snapshot(cls, operator: Operator, snapshot: dict[str, Any]) -> Instance:
        """The instance :meth:`to_snapshot` described, of ``operator``, with a new attempt
        id. Nothing is checked against the store: the caller decides whether the state is
        the one it wants (see :meth:`heads`) before acknowledging its save."""
        instance = cls(operator, snapshot["index"], snapshot["parallelism"], EMPTY)
        if (instance.key_groups.start, instance.key_groups.stop) != snapshot["key_groups"]:
            raise CheckpointError(
                f"snapshot of instance {instance.index} of {instance.parallelism} holds key "
                f"groups {snapshot['key_groups']}, not {instance.key_groups}"
            )
        instance.base = snapshot["base"]
        instance._spaces = snapshot["spaces"]
        instance._chains = snapshot["chains"]
        instance._heads = snapshot["heads"]
        saved = snapshot["saved"]
        instance._saved = None if saved is None else PendingSave(*saved)
        return instance

    def spaces(self) -> Iterator[tuple[int, ObjectSpace]]:
        """Every key group of the range with its space (restoring the missing ones)."""
        self.load_all()
        for key_group in self.key_groups:
            yield key_group, self._spaces[key_group]


_NO_HEAD = LocalHead(0, -1, None, None, 0, 0)


def _local_head(write_id: int, version: int, digest: int | None, chain: _Chain) -> LocalHead:
    return LocalHead(write_id, version, digest, chain.full_bytes, chain.diff_bytes, chain.length)


def _same_write(mine: LocalHead, head: tuple[int, int, int | None, int | None]) -> bool:
    """Whether the local head is the committed ``head`` (digests compared when both are
    known)."""
    if (mine.write_id, mine.version) != head[:2]:
        return False
    return mine.digest is None or head[2] is None or mine.digest == head[2]


def _summary(ids: Sequence[int]) -> str:
    if not ids:
        return "none"
    if len(ids) <= 6:
        return ", ".join(map(str, ids))
    return f"{ids[0]}..{ids[-1]} ({len(ids)} checkpoints)"

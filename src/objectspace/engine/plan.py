"""What a batch runs: the :class:`TaskPlan` the driver fixes and pickles to the tasks, and the
checkpoint it runs on (:func:`plan_base`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from objectspace.checkpoint import CompactionPolicy, Instance, Job, Operator, Storage
from objectspace.checkpoint.local import LocalStore
from objectspace.engine.time_driver import TimePlan
from objectspace.errors import CheckpointError
from objectspace.keyed import KeyState
from objectspace.keygroups import KeyGroups
from objectspace.storage.contract import OperatorInfo

__all__ = ["INLINE_STATE_BYTES", "StatefulFunction", "TaskPlan", "plan_base"]

StatefulFunction = Callable[[Any, list[dict[str, Any]], KeyState], Iterable[Mapping[str, Any]]]
"""``fn(key, rows, state)``: a function or an operator of :mod:`objectspace.operators`."""


INLINE_STATE_BYTES = 16 * 1024 * 1024
"""How many bytes of saved state a batch's tasks send with their receipts by default, split
among them (``StatefulRunner(inline_state_bytes=...)``; :func:`objectspace.testing.simulate`
stages the same way)."""


@dataclass(frozen=True, slots=True)
class TaskPlan:
    """Everything the tasks of one batch need, fixed by the driver and pickled to them.

    ``output_columns``: the columns an output row may have (``None``: any). ``use_cache``,
    ``use_snapshots``, ``owner`` and ``snapshot_key`` concern the Spark workers' instance
    cache and snapshot files only (see :mod:`objectspace.spark`); ``snapshot_key`` (at
    least 32 random bytes, the runner's secret) authenticates the snapshots: without one,
    none is written or read. ``stage_bytes``: a save that encodes to at most this many
    bytes sends its blocks with the receipt for the commit to store (see
    :meth:`Instance.save`; 0: every save stores its writes). ``memory_budget``: the bytes
    the resident objects of a process's instances may hold (``None``: no bound and no
    local store; see :class:`~objectspace.engine.residency.Residency`); ``local_dir``: the
    folder of their local stores (``None``: the default); ``copy_every``: every how many
    checkpoints an instance puts a copy of its local store in storage's file area
    (``None``: never; see :mod:`objectspace.checkpoint.copies`).
    """

    storage: Storage
    info: OperatorInfo
    compaction: CompactionPolicy
    fn: StatefulFunction
    checkpoint_id: int
    base: int | None
    parallelism: int
    replay: bool
    key_columns: tuple[str, ...]
    order_columns: tuple[str, ...]
    output_columns: tuple[str, ...] | None = None
    use_cache: bool = False
    use_snapshots: bool = False
    owner: str = ""
    snapshot_key: bytes = b""
    time: TimePlan | None = None
    stage_bytes: int = 0
    memory_budget: int | None = None
    local_dir: str | None = None
    copy_every: int | None = None

    def restore(self, index: int, local: LocalStore | None = None) -> Instance:
        """Instance ``index`` of this batch, restored from storage as of :attr:`base`
        (with ``local``: its key groups on first use, over that local store)."""
        return Instance(
            self.operator(),
            index,
            self.parallelism,
            checkpoint=-1 if self.base is None else self.base,
            local=local,
        )

    def operator(self) -> Operator:
        """The operator this plan runs."""
        return Operator(self.storage.job(self.info.job), self.info, self.compaction, None)

    def due_instances(self) -> frozenset[int]:
        """The instances owning a key group with timers or TTL'd entries due: they run
        even without rows. O(key groups due)."""
        if self.time is None or not self.time.due:
            return frozenset()
        groups = KeyGroups(self.info.max_key_groups)
        return frozenset(groups.instance_of(g, self.parallelism) for g in self.time.due)


def plan_base(job: Job, checkpoint_id: int) -> tuple[int | None, bool]:
    """The checkpoint batch ``checkpoint_id`` of ``job`` runs on top of, and whether it is
    a replay (a checkpoint already committed: it runs on the one it was made on and
    commits nothing)."""
    infos = {c.checkpoint_id: c for c in job.checkpoint_info()}
    last = job.last_checkpoint()
    if last is None or checkpoint_id > last:
        return last, False
    info = infos.get(checkpoint_id)
    if info is None:
        raise CheckpointError(
            f"cannot run checkpoint {checkpoint_id} of job {job.name!r}: checkpoint "
            f"{last} is already committed and {checkpoint_id} is not a retained one"
        )
    if info.base is not None and info.base not in infos:
        raise CheckpointError(
            f"cannot replay checkpoint {checkpoint_id} of job {job.name!r}: it was "
            f"made on top of checkpoint {info.base}, which is no longer retained"
        )
    return info.base, True

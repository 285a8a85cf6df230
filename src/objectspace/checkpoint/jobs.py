"""Storage and jobs: opening checkpoint storage by URL, committing and retaining checkpoints."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from objectspace.checkpoint._checks import _check_checkpoint_id, _check_count, _check_name
from objectspace.checkpoint.compaction import CompactionPolicy
from objectspace.checkpoint.operator import Operator
from objectspace.checkpoint.receipts import CompactionStats, Receipt
from objectspace.errors import CheckpointConflictError, CheckpointError
from objectspace.keygroups import KeyGroups
from objectspace.serialization import Serializer
from objectspace.storage import open_backend
from objectspace.storage.contract import (
    Backend,
    CheckpointInfo,
    OperatorInfo,
    RetentionStats,
    StagedWrite,
)
from objectspace.storage.urls import redact_url

logger = logging.getLogger(__name__)

__all__ = ["Job", "Storage", "open_storage"]


class Storage:
    """Versioned checkpoint storage: the entry point to jobs."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    @property
    def url(self) -> str:
        return self.backend.url

    def job(self, name: str) -> Job:
        """The job ``name`` (created with its first operator)."""
        return Job(self, name)

    def jobs(self) -> list[str]:
        return self.backend.jobs()

    def close(self) -> None:
        self.backend.close()

    def __repr__(self) -> str:
        return f"Storage({redact_url(self.url)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Storage, (self.backend,))


class Job:
    """A job: its operators, and the checkpoints that commit all of them at once.

    ``epoch`` is the writer epoch this object commits with: ``0`` (a job never fenced)
    until :meth:`fence` takes the job over with a new one.
    """

    def __init__(self, storage: Storage, name: str) -> None:
        self.storage = storage
        self.name = _check_name("a job name", name)
        self.epoch = 0
        # Instance attempts whose receipts lost a commit to another writer: their state is
        # not the committed one, so nothing they save may be committed any more.
        self._lost: dict[str, int] = {}

    @property
    def backend(self) -> Backend:
        return self.storage.backend

    def operator(
        self,
        name: str,
        max_key_groups: int | None = None,
        *,
        schema_version: int | None = None,
        compaction: CompactionPolicy | None = None,
        serializer: Serializer | None = None,
    ) -> Operator:
        """Create or reopen an operator.

        ``max_key_groups`` is required to create it and fixed afterwards: reopening with
        another value raises :class:`~objectspace.CheckpointError` naming both.
        """
        _check_name("an operator name", name)
        if max_key_groups is not None:
            KeyGroups(max_key_groups)  # validates
        info = self.backend.ensure_operator(self.name, name, max_key_groups, schema_version)
        return Operator(self, info, compaction or CompactionPolicy(), serializer)

    def operators(self) -> list[OperatorInfo]:
        return self.backend.operators(self.name)

    def last_checkpoint(self) -> int | None:
        """The newest committed checkpoint, or ``None`` before the first commit."""
        return self.backend.last_checkpoint(self.name)

    def read_mark(self, name: str) -> str | None:
        """The job's mark ``name``: a small durable value outside checkpoints (``None``:
        never written). See :meth:`~objectspace.storage.contract.Backend.read_mark`."""
        return self.backend.read_mark(self.name, name)

    def write_mark(self, name: str, value: str) -> None:
        """Set the job's mark ``name``, durably."""
        self.backend.write_mark(self.name, name, value)

    def checkpoints(self) -> list[int]:
        """The restorable (committed, retained) checkpoint ids, oldest first."""
        return [c.checkpoint_id for c in self.backend.checkpoints(self.name)]

    def checkpoint_info(self) -> list[CheckpointInfo]:
        """The restorable checkpoints with their commit time, writes and bytes."""
        return self.backend.checkpoints(self.name)

    def fence(self) -> int:
        """Take the job over as its only committing driver: increment the job's writer
        epoch in the store and commit with it from now on. Any other :class:`Job` object
        (another driver, a zombie of an earlier run) holding an older epoch can no longer
        commit: it gets :class:`~objectspace.CheckpointConflictError` naming both epochs.
        Returns the new epoch."""
        self.epoch = self.backend.fence(self.name)
        return self.epoch

    def current_epoch(self) -> int:
        """The job's writer epoch in the store (``0``: never fenced)."""
        return self.backend.epoch(self.name)

    def commit(self, checkpoint_id: int, receipts: Iterable[Receipt]) -> bool:
        """Make ``checkpoint_id`` visible for every operator, with exactly ``receipts``' writes.

        Returns ``False`` when the checkpoint was already committed with exactly these
        writes (an idempotent re-commit; nothing changes). Raises
        :class:`~objectspace.CheckpointConflictError` when another writer committed it with
        other writes, when the job was fenced by a newer epoch than :attr:`epoch`, or when a
        write was made on top of state that is not the committed one (say, by an instance
        whose earlier commit was lost and that acknowledged its save anyway). Refused with
        :class:`~objectspace.CheckpointError`: a receipt of another job or checkpoint, a key
        group or instance reported twice, receipts made on top of different checkpoints, or
        a checkpoint not after the last committed one.
        """
        receipts = list(receipts)
        _check_checkpoint_id(checkpoint_id)
        owners: dict[tuple[str, int], Receipt] = {}
        instances: dict[tuple[str, int], Receipt] = {}
        parallelism: dict[str, int] = {}
        bases = set()
        write_ids: list[int] = []
        staged: list[StagedWrite] = []
        for receipt in receipts:
            if not isinstance(receipt, Receipt):
                raise TypeError(f"commit takes Receipts, not {type(receipt).__name__}")
            lost = self._lost.get(receipt.attempt)
            if lost is not None and lost != checkpoint_id:
                raise CheckpointConflictError(
                    f"cannot commit checkpoint {checkpoint_id} of job {self.name!r}: instance "
                    f"{receipt.index} of operator {receipt.operator!r} (attempt "
                    f"{receipt.attempt}) lost checkpoint {lost} to another writer, so its "
                    "state is not the committed one; restore a new instance instead"
                )
            where = f"receipt of {receipt.operator!r} instance {receipt.index}"
            if receipt.job != self.name:
                raise CheckpointError(f"{where} belongs to job {receipt.job!r}, not {self.name!r}")
            if receipt.checkpoint_id != checkpoint_id:
                raise CheckpointError(
                    f"{where} is for checkpoint {receipt.checkpoint_id}, not {checkpoint_id}"
                )
            other = instances.get((receipt.operator, receipt.index))
            if other is not None:
                raise CheckpointError(
                    f"{where} is reported twice (attempts {other.attempt} and {receipt.attempt})"
                )
            instances[(receipt.operator, receipt.index)] = receipt
            p = parallelism.setdefault(receipt.operator, receipt.parallelism)
            if p != receipt.parallelism:
                raise CheckpointError(
                    f"{where} ran at parallelism {receipt.parallelism}, another at {p}"
                )
            bases.add(receipt.base)
            for write in receipt.staged:
                if write.operator != receipt.operator or write.attempt != receipt.attempt:
                    raise CheckpointError(
                        f"{where} carries a staged write of operator {write.operator!r} "
                        f"(attempt {write.attempt})"
                    )
            written = [g for g, _ in receipt.writes] + [w.key_group for w in receipt.staged]
            for key_group in written:
                first = owners.setdefault((receipt.operator, key_group), receipt)
                if first is not receipt:
                    raise CheckpointError(
                        f"key group {key_group} of operator {receipt.operator!r} is reported "
                        f"by two receipts (instances {first.index} and {receipt.index})"
                    )
            write_ids.extend(write_id for _, write_id in receipt.writes)
            staged.extend(receipt.staged)
        if len(bases) > 1:
            raise CheckpointError(
                f"checkpoint {checkpoint_id}: receipts were made on top of different "
                f"checkpoints {sorted(bases, key=lambda b: -1 if b is None else b)}"
            )
        base = bases.pop() if bases else self.last_checkpoint()
        try:
            # staged writes only when there are some: a backend that does not stage need
            # not take the argument
            committed = self.backend.commit(
                self.name,
                checkpoint_id,
                base,
                write_ids,
                parallelism,
                self.epoch,
                *((staged,) if staged else ()),
            )
        except CheckpointConflictError:
            for receipt in receipts:
                self._lost.setdefault(receipt.attempt, checkpoint_id)
            raise
        logger.info(
            "job %r: checkpoint %s %s (%s writes, %s bytes written)",
            self.name,
            checkpoint_id,
            "committed" if committed else "was already committed with these writes",
            len(write_ids) + len(staged),
            sum(receipt.bytes_written for receipt in receipts),
        )
        return committed

    def compact(self, min_chain_length: int = 1) -> CompactionStats:
        """Rewrite, for every operator, each key group whose restore chain has at least
        ``min_chain_length`` differential writes as one full write (see
        :meth:`Operator.compact`)."""
        _check_count("min_chain_length", min_chain_length, 0)
        stats = CompactionStats()
        for info in self.operators():
            stats += self.operator(info.name).compact(min_chain_length)
        return stats

    def retain(self, keep_last: int = 2) -> RetentionStats:
        """Remove every version that no restore of the last ``keep_last`` checkpoints needs,
        and pending writes that can never be committed."""
        _check_count("keep_last", keep_last, 1)
        stats = self.backend.retain(self.name, keep_last)
        logger.info(
            "job %r: retention kept checkpoints %s, dropped %s checkpoints, %s writes "
            "(%s rows) and %s pending writes",
            self.name,
            stats.kept,
            stats.checkpoints_dropped,
            stats.writes_removed,
            stats.rows_removed,
            stats.pending_removed,
        )
        return stats

    def __repr__(self) -> str:
        return f"Job({self.name!r} in {redact_url(self.storage.url)!r})"


def open_storage(url: str) -> Storage:
    """Open the versioned checkpoint storage at ``url`` (see :func:`open_backend`).

    The result pickles (it travels to Spark executors) and reconnects lazily.
    """
    return Storage(open_backend(url))

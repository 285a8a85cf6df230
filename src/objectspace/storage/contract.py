"""The contract of versioned, repartitionable checkpoint storage.

State is stored by job, operator, **key group** and version (checkpoint id), never by
instance, so a job can restart at any parallelism. An instance writes the edits of its key
groups as *pending* writes, invisible to every reader; one catalog transaction commits a
checkpoint by marking the writes its receipts name, after checking that the checkpoint
follows the last committed one. Writes of a failed or duplicate attempt are never marked
and are removed by retention. A backend that ``supports_staging`` also takes *staged*
writes: encoded by the instance (:meth:`Backend.stage_pending`), carried in its receipt and
stored by the commit itself, in its one transaction, so a checkpoint costs one catalog
transaction however many instances wrote it.

Each committed write of a key group is FULL (restore starts from it) or DIFFERENTIAL (its
edits apply on top of the previous version). Restoring key group ``g`` as of checkpoint
``N`` applies, in version order, the newest FULL write of ``g`` at or before ``N`` and every
later write up to ``N``.

:class:`Backend` is what a storage implements; the job/operator/instance API built on it
lives in :mod:`objectspace.checkpoint`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from objectspace.tables import TableChanges

if TYPE_CHECKING:
    from objectspace.storage.areas import FileArea

__all__ = [
    "Backend",
    "CheckpointInfo",
    "OperatorInfo",
    "PendingPart",
    "RetentionStats",
    "StagedWrite",
    "WriteInfo",
    "WriteSummary",
    "materialize",
]


@dataclass(frozen=True)
class OperatorInfo:
    """An operator's stored metadata."""

    job: str
    name: str
    max_key_groups: int
    parallelism: int | None
    schema_version: int


@dataclass(frozen=True)
class WriteInfo:
    """One write of one key group at one version (pending until committed)."""

    write_id: int
    key_group: int
    version: int
    full: bool
    bytes: int
    rows: int
    segment: str | None = None  # the segment file holding the data, if not in the catalog
    offset: int = 0
    length: int = 0
    # a staged write (write_id 0, see StagedWrite): its block's digest
    digest: int | None = None


@dataclass(frozen=True)
class CheckpointInfo:
    """A committed checkpoint of a job."""

    checkpoint_id: int
    committed_at: float
    writes: int
    bytes: int
    full_writes: int
    base: int | None = None  # the checkpoint it was made on top of


@dataclass(frozen=True)
class PendingPart:
    """The edits of one key group that an instance writes as one pending write.

    ``parent`` is the write the edits were made on top of: the id of the newest write the
    key group's state included, ``0`` for no state at all, ``None`` for unknown (then the
    commit does not check it).
    """

    key_group: int
    full: bool
    changes: Mapping[str, TableChanges]
    parent: int | None = None


@dataclass(frozen=True)
class StagedWrite:
    """A key group's write encoded but not stored (:meth:`Backend.stage_pending`): its
    block travels to the committer, which stores it in the commit's own transaction
    (``Backend.commit(..., staged=...)``), or to :meth:`Backend.write_staged`. ``parent``
    as in :class:`PendingPart`; ``digest`` is the block's (checked again where it is
    stored)."""

    operator: str
    key_group: int
    version: int
    attempt: str
    full: bool
    block: bytes
    rows: int
    parent: int | None
    digest: int


@dataclass(frozen=True)
class WriteSummary:
    """Writes of one operator at one version, grouped by committed and full."""

    operator: str
    version: int
    committed: bool
    full: bool
    writes: int
    bytes: int
    rows: int


@dataclass
class RetentionStats:
    """What :meth:`Backend.retain` removed."""

    checkpoints_dropped: int = 0
    writes_removed: int = 0
    pending_removed: int = 0
    rows_removed: int = 0
    kept: list[int] = field(default_factory=list)


class Backend(ABC):
    """Versioned key/value storage of key-group state, with its catalog.

    Every method is one unit of work (one transaction where the backend has them) and may
    be called from any process: backends pickle, and reconnect lazily.
    """

    url: str

    # -- catalog ----------------------------------------------------------------------------

    @abstractmethod
    def ensure_operator(
        self, job: str, operator: str, max_key_groups: int | None, schema_version: int | None
    ) -> OperatorInfo:
        """Create the job and operator if missing, else check and return their metadata.

        ``max_key_groups`` is fixed at creation; a different value raises
        :class:`~objectspace.CheckpointError` naming both. ``None`` accepts the stored one
        (and is refused when the operator does not exist yet).
        """

    @abstractmethod
    def operator_info(self, job: str, operator: str) -> OperatorInfo | None:
        """The operator's metadata, or ``None`` when it does not exist."""

    @abstractmethod
    def jobs(self) -> list[str]:
        """Names of every job."""

    @abstractmethod
    def operators(self, job: str) -> list[OperatorInfo]:
        """Every operator of ``job``."""

    # -- writing ----------------------------------------------------------------------------

    def write_pending(
        self,
        job: str,
        operator: str,
        version: int,
        attempt: str,
        parts: Sequence[PendingPart],
    ) -> list[WriteInfo]:
        """Store each part as a pending write at ``version``; return them in order. This
        default stages the parts and writes them (:meth:`stage_pending`,
        :meth:`write_staged`); a backend that does not stage overrides it."""
        staged = self.stage_pending(job, operator, version, attempt, parts)
        return self.write_staged(job, operator, version, attempt, staged)

    supports_staging = False
    """Whether :meth:`stage_pending`, :meth:`write_staged` and ``commit(staged=...)`` work."""

    def stage_pending(
        self,
        job: str,
        operator: str,
        version: int,
        attempt: str,
        parts: Sequence[PendingPart],
    ) -> list[StagedWrite]:
        """Encode each part as :meth:`write_pending` would, without storing the writes (new
        table names and a newly trained dictionary, which blocks refer to, are stored)."""
        raise NotImplementedError(f"{type(self).__name__} does not stage writes")

    def write_staged(
        self, job: str, operator: str, version: int, attempt: str, staged: Sequence[StagedWrite]
    ) -> list[WriteInfo]:
        """Store staged writes as pending writes (what :meth:`write_pending` does after
        encoding); return them in order."""
        raise NotImplementedError(f"{type(self).__name__} does not stage writes")

    def head_digests(
        self, job: str, operator: str, key_groups: range, as_of: int
    ) -> dict[int, tuple[int, int, int | None, int | None]]:
        """As :meth:`heads`, with each head's block digest and parent: ``(write id,
        version, digest, parent)`` (``None``: a write stored before digests, or parents)."""
        raise NotImplementedError(f"{type(self).__name__} does not stage writes")

    @abstractmethod
    def commit(
        self,
        job: str,
        checkpoint_id: int,
        base: int | None,
        write_ids: Sequence[int],
        parallelism: Mapping[str, int],
        epoch: int = 0,
        staged: Sequence[StagedWrite] = (),
    ) -> bool:
        """Make checkpoint ``checkpoint_id`` visible with exactly ``write_ids`` and the
        ``staged`` writes (stored by this same transaction), atomically.

        Returns ``False`` (and changes nothing) when the checkpoint is already committed
        with exactly these writes by this ``epoch`` (an idempotent re-commit). Raises
        :class:`~objectspace.CheckpointConflictError` when it was committed with other
        writes or by another epoch, when ``epoch`` is not the job's current writer epoch
        (see :meth:`fence`), or when a write was made on top of a write (its parent) that
        is not its key group's committed head as of ``base``. Raises
        :class:`~objectspace.CheckpointError` when ``checkpoint_id`` is not after the
        last committed checkpoint, when ``base`` (the checkpoint the writes were made on top
        of) is not the last committed one, or when a write does not exist, is committed,
        belongs to another job or has another version, or a staged write is of another
        version, outside its operator's key groups, named twice or not its digest's block.
        A re-commit matches staged writes by key group and digest. ``parallelism`` records,
        per operator, the parallelism the checkpoint ran with.
        """

    def fence(self, job: str) -> int:
        """Take over ``job`` as its writer: create the job if missing, increment its writer
        epoch and return the new one; commits with an older epoch are refused from then
        on. The check and the commit are one catalog transaction."""
        raise NotImplementedError(f"{type(self).__name__} does not support fencing")

    def epoch(self, job: str) -> int:
        """The current writer epoch of ``job`` (``0``: never fenced)."""
        raise NotImplementedError(f"{type(self).__name__} does not support fencing")

    def read_mark(self, job: str, name: str) -> str | None:
        """The mark ``name`` of ``job`` (``None``: never written). Marks are small durable
        values outside checkpoints, e.g. the processing time chosen for a batch before it
        runs, so that a driver restarted before that batch committed runs it again with
        the same time."""
        raise NotImplementedError(f"{type(self).__name__} does not keep marks")

    def write_mark(self, job: str, name: str, value: str) -> None:
        """Set the mark ``name`` of ``job`` (creating the job if missing), durably, in one
        catalog transaction."""
        raise NotImplementedError(f"{type(self).__name__} does not keep marks")

    @abstractmethod
    def write_summary(self, job: str) -> list[WriteSummary]:
        """Every stored write of ``job`` (pending ones too), grouped by operator, version,
        committed and full; ordered by version then operator."""

    @abstractmethod
    def writes_committed(self, write_ids: Sequence[int]) -> bool:
        """Whether every one of ``write_ids`` exists and is committed."""

    # -- reading ----------------------------------------------------------------------------

    @abstractmethod
    def last_checkpoint(self, job: str) -> int | None:
        """The newest committed checkpoint of ``job``, or ``None``."""

    @abstractmethod
    def checkpoints(self, job: str) -> list[CheckpointInfo]:
        """The committed, retained checkpoints of ``job``, oldest first."""

    @abstractmethod
    def chains(
        self, job: str, operator: str, key_groups: range, as_of: int
    ) -> dict[int, list[WriteInfo]]:
        """Per key group in ``key_groups``: the committed writes to apply, in version order."""

    def heads(
        self, job: str, operator: str, key_groups: range, as_of: int
    ) -> dict[int, tuple[int, int]]:
        """Per key group in ``key_groups`` with committed state as of ``as_of``: the
        ``(write id, version)`` of the last write of its restore chain (:meth:`chains`).
        This default reads the chains; a backend that keeps each key group's newest write
        answers without them."""
        return {
            group: (chain[-1].write_id, chain[-1].version)
            for group, chain in self.chains(job, operator, key_groups, as_of).items()
            if chain
        }

    @abstractmethod
    def read(
        self, job: str, operator: str, writes: Sequence[WriteInfo]
    ) -> dict[str, dict[bytes, bytes]]:
        """The tables of one key group after applying ``writes`` in order."""

    def read_changes(
        self, job: str, operator: str, writes: Sequence[WriteInfo]
    ) -> dict[str, TableChanges] | None:
        """The edits of ``writes`` (consecutive differential writes of one key group's
        chain), merged in order as one write's changes, deleted rows and tables kept: what
        brings the key group from its state after the write before them to its state after
        the last. Each block is verified as :meth:`read` verifies it. ``None``: this
        backend cannot say (the caller reads the key group's whole chain instead)."""
        return None

    def load(
        self, job: str, operator: str, key_groups: range, as_of: int
    ) -> dict[int, tuple[list[WriteInfo], dict[str, dict[bytes, bytes]]]]:
        """Per key group with state: its chain as of ``as_of`` and its tables.

        Backends read chains and rows from one snapshot, so a concurrent compaction and
        retention cannot remove a write between listing and reading it. This default reads
        them in two steps; every backend here overrides it.
        """
        chains = self.chains(job, operator, key_groups, as_of)
        return {g: (ws, self.read(job, operator, ws)) for g, ws in chains.items()}

    def load_groups(
        self, job: str, operator: str, key_groups: Iterable[int], as_of: int
    ) -> dict[int, tuple[list[WriteInfo], dict[str, dict[bytes, bytes]]]]:
        """:meth:`load` of any key groups, not only a range: those between them are not
        read. This default loads each run of consecutive key groups; segment storage reads
        the blocks of all of them together (one read per segment file span)."""
        wanted = sorted(set(key_groups))
        out: dict[int, tuple[list[WriteInfo], dict[str, dict[bytes, bytes]]]] = {}
        first = 0
        for i in range(1, len(wanted) + 1):
            if i == len(wanted) or wanted[i] != wanted[i - 1] + 1:
                run = range(wanted[first], wanted[i - 1] + 1)
                out.update(self.load(job, operator, run, as_of))
                first = i
        return out

    # -- maintenance ------------------------------------------------------------------------

    @abstractmethod
    def write_compacted(
        self,
        job: str,
        operator: str,
        key_group: int,
        version: int,
        tables: Mapping[str, Mapping[bytes, bytes]],
    ) -> WriteInfo:
        """Store a key group's whole state as of ``version`` as a committed full write that
        later restores start from (in one catalog transaction)."""

    @abstractmethod
    def retain(self, job: str, keep_last: int) -> RetentionStats:
        """Drop what no restore of the last ``keep_last`` checkpoints needs.

        Removes older checkpoints, the writes no retained checkpoint's chains use, and
        pending writes at or before the last committed checkpoint (they can never commit).
        """

    def file_area(self) -> FileArea | None:
        """Where this storage keeps files beside its checkpoints
        (:mod:`objectspace.storage.areas`); ``None``: nowhere."""
        return None

    def close(self) -> None:  # noqa: B027 - optional for backends without connections
        """Release connections; the next use reopens them."""


def materialize(
    writes: Sequence[tuple[Mapping[str, bool], Sequence[tuple[str, bytes, bytes | None]]]],
) -> dict[str, dict[bytes, bytes]]:
    """Apply writes in order: each is (tables it deleted, rows with ``None`` for a delete)."""
    tables: dict[str, dict[bytes, bytes]] = {}
    for truncated, rows in writes:
        for name in truncated:
            tables.pop(name, None)
        for name, key, value in rows:
            table = tables.get(name)
            if value is None:
                if table is not None:
                    table.pop(key, None)
            else:
                if table is None:
                    table = tables[name] = {}
                table[key] = value
    return {name: rows for name, rows in tables.items() if rows}

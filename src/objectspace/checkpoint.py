"""Versioned checkpoints of many object spaces: jobs, operators, key groups, instances.

A job has operators; each operator's state is split into ``max_key_groups`` key groups,
one :class:`~objectspace.ObjectSpace` each. An :class:`Instance` owns the contiguous range
of key groups that its index gets at a given parallelism, restores them lazily as of a
checkpoint, and saves their edits as pending writes; :meth:`Job.commit` makes a checkpoint
visible for every operator of the job at once::

    storage = objectspace.open_storage("sqlite:///state.db")
    job = storage.job("clicks")
    op = job.operator("sessions", max_key_groups=128)
    instance = op.instance(index=0, parallelism=4)
    instance.space_for_key("user-42").create_list("buffer").append(1.5)
    receipt = instance.save(checkpoint_id=1)      # pending: invisible to readers
    job.commit(1, [receipt])                      # visible, atomically
    instance.on_saved()

Because state is stored by key group, not by instance, the job can restart at any
parallelism: each new instance restores exactly the key groups of its new range.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlparse

from objectspace.errors import CheckpointConflictError, CheckpointError, StorageError
from objectspace.keygroups import KeyGroups
from objectspace.serialization import Serializer
from objectspace.space import ObjectSpace
from objectspace.storage.urls import redact_url
from objectspace.storage.versioned import (
    Backend,
    CheckpointInfo,
    OperatorInfo,
    PendingPart,
    RetentionStats,
    WriteInfo,
)
from objectspace.tables import CheckpointKind, DictReader, StateWriter, WriteStats

__all__ = [
    "EMPTY",
    "CompactionPolicy",
    "CompactionStats",
    "Instance",
    "Job",
    "Operator",
    "Receipt",
    "SaveStats",
    "Storage",
    "open_backend",
    "open_storage",
]


EMPTY = -1
"""As a checkpoint to restore from: before the first checkpoint (no state)."""


def open_backend(url: str) -> Backend:
    """The checkpoint storage backend for ``url``.

    ``memory://[name]`` (in-process), ``sqlite:///relative/path`` or
    ``sqlite:////absolute/path``.
    """
    if not isinstance(url, str):
        raise TypeError(f"a storage URL is a str, not {type(url).__name__}")
    if "\x00" in url:
        raise StorageError(f"cannot open storage {redact_url(url)!r}: the URL holds a NUL byte")
    try:
        url.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise StorageError(
            f"cannot open storage {redact_url(url)!r}: the URL is not valid UTF-8 text "
            f"(a lone surrogate at {exc.start})"
        ) from exc
    try:
        parsed = urlparse(url)
        parsed.port  # noqa: B018 - validates host and port
    except ValueError as exc:
        raise StorageError(
            f"cannot open storage {redact_url(url)!r}: malformed URL ({exc})"
        ) from exc
    scheme = parsed.scheme.lower()
    if scheme == "memory":
        from objectspace.storage.sqlite_backend import SQLiteBackend

        return SQLiteBackend(None, memory_name=(parsed.netloc + parsed.path) or "default")
    if scheme == "sqlite":
        from objectspace.storage.sqlite_backend import SQLiteBackend

        if parsed.netloc:
            raise StorageError(
                f"cannot open {redact_url(url)!r}: a SQLite URL has no host; use sqlite:///relative/path "
                "or sqlite:////absolute/path"
            )
        path = parsed.path[1:] if parsed.path.startswith("/") else parsed.path
        if not path:
            raise StorageError(f"cannot open {redact_url(url)!r}: the URL names no file")
        if parse_qs(parsed.query):
            raise StorageError(f"cannot open {redact_url(url)!r}: sqlite URLs take no options")
        return SQLiteBackend(path)
    if scheme in ("postgresql", "postgres"):
        from objectspace.storage.postgres_backend import PostgresBackend

        return PostgresBackend(url)
    if "catalog=" in parsed.query or scheme in ("file", "s3", "s3a", "hdfs", "gs", "memfs"):
        from objectspace.storage.segments import SegmentBackend

        return SegmentBackend.from_url(url, open_backend)
    raise StorageError(
        f"cannot open storage {redact_url(url)!r}: unknown scheme {parsed.scheme!r} (expected memory://, "
        "sqlite:///, postgresql://, or a filesystem URL such as file:// or s3:// with "
        "?catalog=<sqlite or postgresql URL>)"
    )


def open_storage(url: str) -> Storage:
    """Open the versioned checkpoint storage at ``url`` (see :func:`open_backend`).

    The result pickles (it travels to Spark executors) and reconnects lazily.
    """
    return Storage(open_backend(url))


@dataclass(frozen=True)
class CompactionPolicy:
    """When a key group's differential chain is rewritten as a full version.

    A key group is compacted when the bytes of its differential writes since its last full
    version exceed both ``max_chain_ratio`` times the bytes of that full version (its live
    state when it was last measured) and ``min_chain_bytes``, or when the chain reaches
    ``max_chain_length`` writes. So a restore reads at most ``1 + max_chain_ratio`` times
    the state as last measured (or ``min_chain_bytes`` more, a cheap read), and compaction
    adds at most about ``1 / max_chain_ratio`` to the bytes written — where a rewrite every
    K checkpoints would rewrite large, slowly changing state again and again. The floor
    keeps a small key group from being rewritten at every few checkpoints while it grows.
    """

    max_chain_ratio: float = 3.0
    max_chain_length: int = 64
    min_chain_bytes: int = 64 * 1024

    def __post_init__(self) -> None:
        if not self.max_chain_ratio > 0:
            raise ValueError(f"max_chain_ratio must be > 0, not {self.max_chain_ratio!r}")
        if self.max_chain_length < 1:
            raise ValueError(f"max_chain_length must be >= 1, not {self.max_chain_length!r}")
        if self.min_chain_bytes < 0:
            raise ValueError(f"min_chain_bytes must be >= 0, not {self.min_chain_bytes!r}")

    def needs_full(self, chain: _Chain) -> bool:
        if chain.full_bytes is None:
            return True
        return chain.length + 1 > self.max_chain_length or (
            chain.diff_bytes > self.max_chain_ratio * max(chain.full_bytes, 1)
            and chain.diff_bytes > self.min_chain_bytes
        )


@dataclass
class _Chain:
    """What a key group's restore chain costs: its full version and the writes after it."""

    full_bytes: int | None = None
    diff_bytes: int = 0
    length: int = 0

    @classmethod
    def of(cls, writes: Sequence[WriteInfo]) -> _Chain:
        if not writes:
            return cls()
        return cls(writes[0].bytes, sum(w.bytes for w in writes[1:]), len(writes) - 1)

    def after(self, write: WriteInfo) -> _Chain:
        if write.full:
            return _Chain(write.bytes, 0, 0)
        return _Chain(self.full_bytes, self.diff_bytes + write.bytes, self.length + 1)


@dataclass(frozen=True)
class Receipt:
    """What an instance wrote for a checkpoint: small, picklable, handed to :meth:`Job.commit`."""

    job: str
    operator: str
    index: int
    parallelism: int
    checkpoint_id: int
    base: int | None
    attempt: str
    writes: tuple[tuple[int, int], ...]  # (key group, write id)
    bytes_written: int
    rows_written: int


@dataclass
class CompactionStats:
    """What an offline compaction rewrote."""

    key_groups: int = 0
    bytes_read: int = 0
    bytes_written: int = 0

    def __iadd__(self, other: CompactionStats) -> CompactionStats:
        self.key_groups += other.key_groups
        self.bytes_read += other.bytes_read
        self.bytes_written += other.bytes_written
        return self


@dataclass
class SaveStats:
    """What an instance's last save wrote."""

    key_groups: int = 0
    full: int = 0
    bytes_written: int = 0
    rows_written: int = 0


class _Collector(StateWriter):
    """A writer that only collects a space's edits; the backend persists them later."""

    def _apply(self) -> WriteStats:  # pragma: no cover - never committed
        raise StorageError("a collecting writer is not committed")


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
            for key_group, write_id in receipt.writes:
                first = owners.setdefault((receipt.operator, key_group), receipt)
                if first is not receipt:
                    raise CheckpointError(
                        f"key group {key_group} of operator {receipt.operator!r} is reported "
                        f"by two receipts (instances {first.index} and {receipt.index})"
                    )
                write_ids.append(write_id)
        if len(bases) > 1:
            raise CheckpointError(
                f"checkpoint {checkpoint_id}: receipts were made on top of different "
                f"checkpoints {sorted(bases, key=lambda b: -1 if b is None else b)}"
            )
        base = bases.pop() if bases else self.last_checkpoint()
        try:
            return self.backend.commit(
                self.name, checkpoint_id, base, write_ids, parallelism, self.epoch
            )
        except CheckpointConflictError:
            for receipt in receipts:
                self._lost.setdefault(receipt.attempt, checkpoint_id)
            raise

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
        return self.backend.retain(self.name, keep_last)

    def __repr__(self) -> str:
        return f"Job({self.name!r} in {redact_url(self.storage.url)!r})"


_I64_MAX = (1 << 63) - 1
# Job and operator names are catalog text (PostgreSQL text holds no NUL) and file names.
_MAX_NAME = 1024


def _check_name(what: str, name: object) -> str:
    """``name`` if it is a job or operator name: non-empty UTF-8 text, no NUL, at most
    1024 characters; else ValueError naming it."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"{what} is a non-empty str, not {name!r}")
    if "\x00" in name or len(name) > _MAX_NAME:
        raise ValueError(
            f"{what} holds no NUL byte and at most {_MAX_NAME} characters, not {name[:80]!r}"
        )
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{what} must be valid UTF-8 text, not {name[:80]!r} (a lone surrogate at {exc.start})"
        ) from exc
    return name


def _check_count(what: str, value: object, least: int) -> int:
    if type(value) is not int or not least <= value <= _I64_MAX:
        raise ValueError(f"{what} must be an int in {least}..{_I64_MAX}, not {value!r}")
    return value


def _check_checkpoint_id(checkpoint_id: object) -> int:
    if (
        not isinstance(checkpoint_id, int)
        or isinstance(checkpoint_id, bool)
        or not 0 <= checkpoint_id <= _I64_MAX
    ):
        raise ValueError(
            f"a checkpoint id is an int in 0..{_I64_MAX} (a signed 64-bit id), "
            f"not {checkpoint_id!r}"
        )
    return checkpoint_id


class Operator:
    """One stateful operator of a job: its metadata and its instances."""

    def __init__(
        self,
        job: Job,
        info: OperatorInfo,
        compaction: CompactionPolicy,
        serializer: Serializer | None,
    ) -> None:
        self.job = job
        self.name = info.name
        self.info = info
        self.key_groups = KeyGroups(info.max_key_groups)
        self.compaction = compaction
        self.serializer = serializer

    @property
    def max_key_groups(self) -> int:
        return self.info.max_key_groups

    @property
    def schema_version(self) -> int:
        return self.info.schema_version

    @property
    def parallelism(self) -> int | None:
        """The parallelism of the last committed checkpoint (``None`` before the first)."""
        info = self.job.backend.operator_info(self.job.name, self.name)
        return None if info is None else info.parallelism

    def compact(self, min_chain_length: int = 1) -> CompactionStats:
        """Rewrite each key group whose chain as of the last checkpoint has at least
        ``min_chain_length`` differential writes as one full write, committed in one catalog
        transaction per key group. Older writes stay until :meth:`Job.retain` drops them."""
        _check_count("min_chain_length", min_chain_length, 0)
        job = self.job
        stats = CompactionStats()
        last = job.last_checkpoint()
        if last is None:
            return stats
        backend = job.backend
        chains = backend.chains(job.name, self.name, range(self.max_key_groups), last)
        for key_group, writes in sorted(chains.items()):
            if len(writes) - 1 < min_chain_length:
                continue
            # Chain and rows from one snapshot: a concurrent retention cannot hand us a
            # chain whose writes it has just removed.
            loaded = backend.load(job.name, self.name, range(key_group, key_group + 1), last)
            if key_group not in loaded:
                continue
            writes, tables = loaded[key_group]
            info = backend.write_compacted(job.name, self.name, key_group, last, tables)
            stats.key_groups += 1
            stats.bytes_read += sum(w.bytes for w in writes)
            stats.bytes_written += info.bytes
        return stats

    def instance(self, index: int, parallelism: int, checkpoint: int | None = None) -> Instance:
        """Instance ``index`` of ``parallelism``, restoring lazily as of ``checkpoint``
        (default: the last committed one; :data:`EMPTY`: no state at all)."""
        return Instance(self, index, parallelism, checkpoint)

    def __repr__(self) -> str:
        return f"Operator({self.job.name!r}/{self.name!r}, max_key_groups={self.max_key_groups})"


class Instance:
    """Owns the key groups of one index at one parallelism and their object spaces.

    Spaces are restored on first use (``space``/``space_for_key``), so an instance that
    touches few key groups reads little; :meth:`load_all` restores the whole range at once.
    """

    def __init__(
        self, operator: Operator, index: int, parallelism: int, checkpoint: int | None = None
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
        self._saved: tuple[int, list[WriteInfo]] | None = None
        self.rows_read = 0
        self.last_save = SaveStats()

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
        self._load(range(wanted[0], wanted[-1] + 1))

    def load_all(self) -> None:
        """Restore every key group of the range that is not loaded yet."""
        missing = [g for g in self.key_groups if g not in self._spaces]
        if missing:
            self._load(range(missing[0], missing[-1] + 1))

    def loaded(self) -> dict[int, ObjectSpace]:
        """The key groups restored so far and their spaces."""
        return dict(self._spaces)

    def _load(self, key_groups: range) -> None:
        op = self.operator
        backend = op.job.backend
        base = self.base
        stored = {} if base is None else backend.load(op.job.name, op.name, key_groups, base)
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
                f"{key_groups.start}..{key_groups.stop - 1}; restore from a retained checkpoint"
            )
        for key_group, (space, chain, head) in loaded.items():
            self._spaces[key_group] = space
            self._chains[key_group] = chain
            self._heads[key_group] = head

    def save(self, checkpoint_id: int) -> Receipt:
        """Write the edits of every loaded key group as pending version ``checkpoint_id``.

        A key group whose chain is too long (see :class:`CompactionPolicy`) is written as a
        full version. Nothing is visible until :meth:`Job.commit`; call :meth:`on_saved`
        after the commit succeeded.
        """
        _check_checkpoint_id(checkpoint_id)
        if self.base is not None and checkpoint_id <= self.base:
            raise CheckpointError(
                f"cannot save checkpoint {checkpoint_id}: instance restored as of "
                f"{self.base}, so the next checkpoint must be greater"
            )
        op = self.operator
        parts: list[PendingPart] = []
        for key_group, space in self._spaces.items():
            if not space.is_dirty:
                continue  # an unchanged key group needs no new version, nor compaction
            full = op.compaction.needs_full(self._chains[key_group])
            writer = _Collector(CheckpointKind.FULL if full else CheckpointKind.DIFFERENTIAL)
            space.save(writer)
            head = self._heads.get(key_group)
            parts.append(
                PendingPart(key_group, full, writer.changes, 0 if head is None else head[0])
            )
        writes = op.job.backend.write_pending(
            op.job.name, op.name, checkpoint_id, self.attempt, parts
        )
        self._saved = (checkpoint_id, writes)
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
            writes=tuple((w.key_group, w.write_id) for w in writes),
            bytes_written=stats.bytes_written,
            rows_written=stats.rows_written,
        )

    def on_saved(self) -> None:
        """Acknowledge the last save after its checkpoint was committed."""
        if self._saved is None:
            return
        checkpoint_id, writes = self._saved
        saved = {w.key_group: w for w in writes}
        for key_group, space in self._spaces.items():
            write = saved.get(key_group)
            if write is not None:
                space.on_saved()
                self._chains[key_group] = self._chains[key_group].after(write)
                self._heads[key_group] = (write.write_id, write.version)
        self.base = checkpoint_id
        self._saved = None

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
        :meth:`from_snapshot` in another process."""
        return {
            "index": self.index,
            "parallelism": self.parallelism,
            "key_groups": (self.key_groups.start, self.key_groups.stop),
            "base": self.base,
            "spaces": self._spaces,
            "chains": self._chains,
            "heads": self._heads,
            "saved": self._saved,
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
        instance._saved = snapshot["saved"]
        return instance

    def spaces(self) -> Iterator[tuple[int, ObjectSpace]]:
        """Every key group of the range with its space (restoring the missing ones)."""
        self.load_all()
        for key_group in self.key_groups:
            yield key_group, self._spaces[key_group]


def _summary(ids: Sequence[int]) -> str:
    if not ids:
        return "none"
    if len(ids) <= 6:
        return ", ".join(map(str, ids))
    return f"{ids[0]}..{ids[-1]} ({len(ids)} checkpoints)"

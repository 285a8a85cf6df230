"""Immutable segment files on any fsspec filesystem, referenced from a SQL catalog.

``file:///dir?catalog=<url>``, ``s3://bucket/prefix?catalog=<url>``, ``hdfs://...``: an
instance's save for one checkpoint becomes **one segment file** holding the edits of all
its key groups, one compressed, checksummed block per key group, so a rescaled instance
reads only the blocks of its own range. The catalog (SQLite or PostgreSQL, given as
``catalog=``, percent-encoded) holds the file references: which segment, offset and length
hold which key group at which version.

A segment's life:

1. its path is recorded in the catalog (so no file can exist that the catalog does not
   know of); the path is new (a random part), and a file already there is never replaced;
2. it is written at that path; on a local filesystem it is synced to the disk, file and
   folder (``fsync``), before the catalog makes its blocks visible, unless the URL says
   ``fsync=0``: a commit's own segment (staged writes) as it is written, the segments of
   instances' saves (pending writes) together by the commit that makes them visible.
   Readers find a segment only through the catalog, so none sees a partial file: one
   that a crash cuts short stays reserved and unreferenced, and the GC deletes it;
3. one catalog transaction records its blocks as pending writes; the checkpoint commit
   makes them visible.

Durability on a local filesystem: a process crash loses nothing committed. A power failure
or operating-system crash can lose the newest checkpoints (those whose catalog commit had
not reached the disk: see the SQLite catalog's ``synchronous``), never leave a committed
checkpoint whose blocks did not: each segment file is on the disk before the catalog
records it, whatever order the operating system writes its cache back in. That sync costs
a file-system journal commit per checkpoint (BENCHMARKS.md); ``fsync=0`` saves it, and then a power failure can leave the newest committed checkpoint
naming a segment that never reached the disk (restoring it raises
:class:`~objectspace.CorruptStateError`). Object stores (S3) keep a file once its upload
returns; HDFS as its own settings say.

The catalog records a segment's path **relative to the storage root**, so a copy of a
storage (its folder and its catalog) reads and collects its own files, never the
original's. Catalogs written by older versions (absolute paths) are migrated once, on
first use.

Garbage collection has two phases (:mod:`objectspace.storage.segments.gc`). The GC never
deletes a path outside the storage root, whatever the catalog says (``..``, an absolute
path, a symlink that leads out): it logs a warning and leaves it.

The block format is :mod:`objectspace.storage.blocks` (the same for every backend); the
file format is in :mod:`objectspace.storage.segments.format`, the writing and syncing of
local files in :mod:`objectspace.storage.segments.files`, and the catalog operations
segment storage passes on as they are in :mod:`objectspace.storage.segments.delegate`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlparse, urlunparse

from objectspace.errors import CorruptStateError, StorageError
from objectspace.storage.areas import FileArea, FsspecArea
from objectspace.storage.blocks import (
    Block,
    block_digest,
    encode_block,
    path_component,
    replay,
    replay_changes,
)
from objectspace.storage.contract import PendingPart, StagedWrite, WriteInfo
from objectspace.storage.segments.delegate import CatalogDelegate
from objectspace.storage.segments.files import (
    fsync_path,
    plain,
    start_write_back,
    write_new_file,
)
from objectspace.storage.segments.format import segment_file
from objectspace.storage.segments.gc import GCStats, collect
from objectspace.storage.segments.reads import ReadPolicy, fetch_reads, plan_reads
from objectspace.storage.sql.catalog import SegmentCatalog, SegmentPlacement, stage_parts
from objectspace.storage.urls import redact_text, redact_url
from objectspace.tables import TableChanges

try:
    import fsspec
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "segment storage needs fsspec and zstandard: pip install 'objectspace[segments]'"
    ) from exc

__all__ = ["GCStats", "ReadPolicy", "SegmentBackend"]

logger = logging.getLogger(__name__)


LEVEL = 11
"""The default zstd level of segment storage's differential blocks: they are small (a key
group's changes in one checkpoint), so a higher level writes fewer bytes for little CPU, up
to this level (higher ones write no fewer)."""
FULL_LEVEL = 3
"""The default zstd level of full blocks (first writes, compactions): large, where a higher
level costs CPU for few bytes. ``level=`` sets both."""


class SegmentBackend(CatalogDelegate):
    """Segment files on an fsspec filesystem with a SQL catalog (see the module docstring).

    ``storage_options`` go to fsspec (e.g. ``endpoint_url`` for S3); in the URL, every
    query option other than ``catalog``, ``level`` (zstd level of every block; default
    :data:`LEVEL` for differential blocks, :data:`FULL_LEVEL` for full ones) and ``fsync``
    (``1``, the default, or ``0``: whether a segment file on a local filesystem is synced
    to the disk before the catalog records it; see the module docstring) is one.

    ``reads`` says how a restore reads blocks (:class:`ReadPolicy`: neighbouring blocks of
    a file coalesced into one ranged read, reads fetched in parallel; see
    :mod:`objectspace.storage.segments.reads`). :attr:`reads_issued` and
    :attr:`bytes_fetched` count the reads of segment files and the bytes they asked for.
    """

    def __init__(
        self,
        root: str,
        catalog: SegmentCatalog,
        *,
        storage_options: Mapping[str, Any] | None = None,
        level: int | None = None,
        fsync: bool = True,
        reads: ReadPolicy | None = None,
    ) -> None:
        self.root = root.rstrip("/")
        self.catalog = catalog
        self.storage_options = dict(storage_options or {})
        self._level_option = level
        # zstd levels of differential and of full blocks (compactions, first writes)
        self.level = LEVEL if level is None else level
        self.full_level = FULL_LEVEL if level is None else level
        self.fsync = fsync
        options = dict(self.storage_options)
        options["catalog"] = catalog.url
        if level is not None:
            options["level"] = str(level)
        if not fsync:
            options["fsync"] = "0"
        parsed = urlparse(self.root)
        self.url = urlunparse(parsed._replace(query=urlencode(options)))
        self._fs: Any = None
        self._base = ""
        self._paths_ready = False
        self.bytes_written = 0
        self.files_written = 0
        self.reads = ReadPolicy() if reads is None else reads
        self.reads_issued = 0
        self.bytes_fetched = 0

    @classmethod
    def from_url(cls, url: str, open_catalog: Any) -> SegmentBackend:
        parsed = urlparse(url)
        options = dict(parse_qsl(parsed.query))
        catalog_url = options.pop("catalog", None)
        if not catalog_url:
            raise StorageError(
                f"segment storage {redact_url(url)!r} needs a catalog: add ?catalog=<sqlite or postgresql "
                "URL, percent-encoded>"
            )
        catalog = open_catalog(catalog_url)
        if not isinstance(catalog, SegmentCatalog):
            raise StorageError(
                f"the catalog of {redact_url(url)!r} must be a SQLite or PostgreSQL URL"
            )
        try:
            given = options.pop("level", None)
            level = None if given is None else int(given)
        except ValueError as exc:
            raise StorageError(
                f"segment storage {redact_url(url)!r}: level must be an int (zstd level)"
            ) from exc
        given = options.pop("fsync", "1")
        if given not in _FLAGS:
            raise StorageError(
                f"segment storage {redact_url(url)!r}: fsync must be 1 or 0, not {given!r}"
            )
        root = urlunparse(parsed._replace(query=""))
        return cls(root, catalog, storage_options=options, level=level, fsync=_FLAGS[given])

    def __getstate__(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "catalog": self.catalog,
            "storage_options": self.storage_options,
            "level": self._level_option,
            "fsync": self.fsync,
            "reads": self.reads,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["root"],
            state["catalog"],
            storage_options=state["storage_options"],
            level=state["level"],
            fsync=state.get("fsync", True),
            reads=state.get("reads"),
        )

    def __repr__(self) -> str:
        return f"SegmentBackend({redact_url(self.root)!r}, catalog={self.catalog!r})"

    @property
    def fs(self) -> Any:
        """The fsspec filesystem, opened on first use."""
        if self._fs is None:
            try:
                fs, base = fsspec.url_to_fs(self.root, **self.storage_options)
            except (ImportError, ValueError) as exc:
                raise StorageError(
                    f"cannot open filesystem {redact_url(self.root)!r}: "
                    f"{redact_text(exc, [self.url])}"
                ) from exc
            self._fs, self._base = fs, base.rstrip("/")
        return self._fs

    @property
    def fault_hook(self) -> Any:
        return self.catalog.fault_hook

    @fault_hook.setter
    def fault_hook(self, hook: Any) -> None:
        self.catalog.fault_hook = hook

    # -- catalog operations that need the segment files -------------------------------------

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
        """:meth:`Backend.commit`: the segment files of ``write_ids`` (instances' saves,
        written without a sync) are synced, together: one file-system journal commit for
        all of them, where a sync per save paid one each. Then the staged writes are
        published, every operator's in one segment file (in the folder of the first
        operator by name; reserved in the catalog before it is written, so the GC collects
        it should the commit fail: a file per operator cost a file and its syncs each), and
        recorded and committed in one catalog transaction."""
        if write_ids and self.fsync and self.local:
            self._sync_segments(self.catalog.segments_of(write_ids), checkpoint_id)
        if not staged:
            return self.catalog.commit(job, checkpoint_id, base, write_ids, parallelism, epoch)
        by_operator: dict[str, list[StagedWrite]] = {}
        for write in staged:
            by_operator.setdefault(write.operator, []).append(write)
        order = sorted(by_operator.items())
        path = self._path(job, order[0][0], checkpoint_id, f"commit{epoch}")
        segment_id = self.catalog.reserve_segment(path)
        size, offsets = self._publish(
            self._full(path), [w.block for _, writes in order for w in writes]
        )
        placements: dict[str, SegmentPlacement] = {}
        first = 0
        for operator, writes in order:
            placements[operator] = ((segment_id, path), size, offsets[first : first + len(writes)])
            first += len(writes)
        return self.catalog.commit(
            job, checkpoint_id, base, write_ids, parallelism, epoch, staged, segments=placements
        )

    def head_digests(
        self, job: str, operator: str, key_groups: range, as_of: int
    ) -> dict[int, tuple[int, int, int | None, int | None]]:
        self._ready()
        return self.catalog.head_digests(job, operator, key_groups, as_of)

    def chains(
        self, job: str, operator: str, key_groups: range, as_of: int
    ) -> dict[int, list[WriteInfo]]:
        self._ready()
        chains = self.catalog.chains(job, operator, key_groups, as_of)
        return {g: [self._located(w) for w in ws] for g, ws in chains.items()}

    def heads(
        self, job: str, operator: str, key_groups: range, as_of: int
    ) -> dict[int, tuple[int, int]]:
        self._ready()
        return self.catalog.heads(job, operator, key_groups, as_of)

    # -- paths: relative in the catalog, inside the root on the filesystem -------------------

    def _ready(self) -> None:
        """Open the filesystem and migrate a catalog with absolute paths (once)."""
        if not self._paths_ready:
            self.fs  # noqa: B018 - opens the filesystem, which sets self._base
            changed = self.catalog.relative_segment_paths(self._legacy_relative)
            if changed:
                logger.info("made %d segment paths of %s relative to its root", changed, self)
            self._paths_ready = True

    def _legacy_relative(self, path: str) -> str:
        """A segment path an older version stored (absolute, as fsspec names it) made
        relative: under this root, the rest of it; under another root (the storage was
        copied or moved), its last three components when they have the layout's shape
        (``job/operator/….seg``); anything else stays absolute, which the GC refuses."""
        prefix = self._base + "/"
        if path.startswith(prefix):
            return path[len(prefix) :]
        parts = path.split("/")
        if len(parts) > 3 and parts[-1].endswith(".seg") and plain(parts[-3:]):
            return "/".join(parts[-3:])
        return path if path.startswith("/") else "/" + path

    def _full(self, path: str) -> str:
        """The filesystem path of a catalog path; :class:`CorruptStateError` when it is
        not a plain relative path (absolute, empty or ``.``/``..`` components)."""
        if path.startswith("/") or not plain(path.split("/")):
            raise CorruptStateError(
                f"segment path {path!r} in the catalog of {self.root} is not inside the storage "
                "root; objectspace neither reads nor deletes it"
            )
        return f"{self._base}/{path}"

    def _located(self, info: WriteInfo) -> WriteInfo:
        if info.segment is None:
            return info
        return dataclasses.replace(info, segment=self._full(info.segment))

    def _shown(self, path: str) -> str:
        try:
            return self._full(path)
        except CorruptStateError:
            return path

    def _deletable(self, path: str) -> str | None:
        """The filesystem path the GC may delete for catalog ``path``, or ``None`` (logged)
        when it would leave the root, through ``..``, an absolute path or a symlink."""
        try:
            full = self._full(path)
            if self.local:
                root = os.path.realpath(self._base)
                real = os.path.realpath(full)
                if real == root or os.path.commonpath((root, real)) != root:
                    raise CorruptStateError(
                        f"segment path {path!r} in the catalog of {self.root} leads out of the "
                        f"storage root through a symlink (to {real!r})"
                    )
        except CorruptStateError as exc:
            logger.warning("garbage collection refuses to delete: %s", exc)
            return None
        return full

    def segments(self) -> list[tuple[str, int, float | None]]:
        """Every segment file the catalog knows: (filesystem path, bytes, stamped time)."""
        self._ready()
        return [(self._shown(p), b, s) for p, b, s in self.catalog.segments()]

    def referenced_segments(self) -> set[str]:
        """Filesystem paths of the segments at least one write references."""
        self._ready()
        return {self._shown(p) for p in self.catalog.referenced_segments()}

    # -- segments ---------------------------------------------------------------------------

    def _path(self, job: str, operator: str, version: int, attempt: str) -> str:
        """A new segment's path relative to the root. User names become one path
        component each, percent-encoded: never a traversal."""
        self._ready()
        return "/".join(
            (
                path_component(job),
                path_component(operator),
                f"{version:012d}-{attempt}-{uuid.uuid4().hex[:8]}.seg",
            )
        )

    supports_staging = True

    def stage_pending(
        self,
        job: str,
        operator: str,
        version: int,
        attempt: str,
        parts: Sequence[PendingPart],
    ) -> list[StagedWrite]:
        return stage_parts(
            self.catalog, job, operator, version, attempt, parts, (self.level, self.full_level)
        )

    def write_staged(
        self, job: str, operator: str, version: int, attempt: str, staged: Sequence[StagedWrite]
    ) -> list[WriteInfo]:
        if not staged:
            return []
        path = self._path(job, operator, version, attempt)
        segment_id = self.catalog.reserve_segment(path)
        full = self._full(path)
        # pending writes, visible once committed: the commit syncs their file
        size, offsets = self._publish(full, [w.block for w in staged], sync=False)
        entries = [
            (w.key_group, w.full, length, w.rows, offset, length, w.digest)
            for w, (offset, length) in zip(staged, offsets, strict=True)
        ]
        try:
            infos = self.catalog.register_segment(
                job,
                operator,
                version,
                attempt,
                (segment_id, path),
                size,
                entries,
                parents=[w.parent for w in staged],
            )
        except BaseException:
            self._discard(full)
            raise
        return [self._located(info) for info in infos]

    def _discard(self, path: str) -> None:
        """Best effort: delete a published file whose registration failed. If it was still
        reserved, the GC would collect it anyway; if its reservation was collected (a write
        slower than the grace period), nothing else would."""
        with contextlib.suppress(Exception):
            self.fs.rm_file(path)

    def _sync_segments(self, paths: set[str], checkpoint_id: int) -> None:
        """Sync the files ``paths`` (catalog paths) and their folders to the disk. Every
        file's write-back is started first, so that their blocks are allocated in one
        file-system transaction, which the first sync commits (rather than one transaction
        per file)."""
        fulls = [self._full(path) for path in sorted(paths)]
        for full in fulls:
            with contextlib.suppress(OSError):
                start_write_back(full)
        folders = sorted({os.path.dirname(full) for full in fulls})
        for what, path in [*(("segment", f) for f in fulls), *(("folder", f) for f in folders)]:
            try:
                fsync_path(path)
            except OSError as exc:
                raise StorageError(
                    f"cannot sync {what} {path!r} before committing checkpoint "
                    f"{checkpoint_id}: {exc}"
                ) from exc

    @property
    def local(self) -> bool:
        """Whether the segments are on a local filesystem (written and synced by the OS)."""
        protocol = self.fs.protocol
        return bool(
            {"file", "local"} & set(protocol if isinstance(protocol, tuple) else (protocol,))
        )

    def _publish(
        self, path: str, blocks: Sequence[bytes], *, sync: bool = True
    ) -> tuple[int, list[tuple[int, int]]]:
        """Write ``blocks`` as the new segment ``path`` (on a local filesystem: synced to
        the disk, unless ``fsync=0`` or not ``sync``: the file of pending writes, which the
        commit syncs); return its size and each block's (offset, length). A folder it
        creates is synced into its parent unless ``fsync=0``."""
        data, offsets = segment_file(blocks)
        try:
            if self.local:
                write_new_file(path, data, sync and self.fsync, self.fsync)
            else:
                fs = self.fs
                fs.makedirs(os.path.dirname(path), exist_ok=True)
                fs.pipe_file(path, data)
        except Exception as exc:
            raise StorageError(f"cannot write segment {path!r}: {exc}") from exc
        self.bytes_written += len(data)
        self.files_written += 1
        return len(data), offsets

    def write_compacted(
        self,
        job: str,
        operator: str,
        key_group: int,
        version: int,
        tables: Mapping[str, Mapping[bytes, bytes]],
    ) -> WriteInfo:
        changes = {name: TableChanges(rows=dict(rows)) for name, rows in tables.items()}
        path = self._path(job, operator, version, "compaction")
        segment_id = self.catalog.reserve_segment(path)
        dictionary = self.catalog.operator_dictionary(job, operator)
        block, rows = encode_block(changes, True, self.full_level, None, dictionary, compact=True)
        size, [(offset, length)] = self._publish(self._full(path), [block])
        [info] = self.catalog.register_segment(
            job,
            operator,
            version,
            "compaction",
            (segment_id, path),
            size,
            [(key_group, True, length, rows, offset, length, block_digest(block))],
            committed=True,
        )
        return self._located(info)

    def load(
        self, job: str, operator: str, key_groups: range, as_of: int
    ) -> dict[int, tuple[list[WriteInfo], dict[str, dict[bytes, bytes]]]]:
        # The catalog snapshot fixes which files to read; a file that lost its last
        # reference since is deleted only after the GC's grace period.
        self._ready()
        return self._load(job, operator, key_groups, None, as_of)

    def load_groups(
        self, job: str, operator: str, key_groups: Iterable[int], as_of: int
    ) -> dict[int, tuple[list[WriteInfo], dict[str, dict[bytes, bytes]]]]:
        """:meth:`load` of any key groups, not only a range: the key groups between them
        are not read, and the blocks of all of them are fetched together, so a restore of
        scattered key groups costs about one read per segment file their chains span (where
        a :meth:`load` per run of consecutive key groups costs one per file and run)."""
        wanted = sorted(set(key_groups))
        if not wanted:
            return {}
        self._ready()
        return self._load(job, operator, range(wanted[0], wanted[-1] + 1), set(wanted), as_of)

    def _load(
        self, job: str, operator: str, covering: range, wanted: set[int] | None, as_of: int
    ) -> dict[int, tuple[list[WriteInfo], dict[str, dict[bytes, bytes]]]]:
        """The chains and tables of the key groups of ``covering`` (only those in
        ``wanted``, unless ``None``): one catalog snapshot, one coalesced fetch of every
        block in segment files, each key group's chain verified and replayed."""
        where = f"job {job!r} operator {operator!r} "
        loaded = self.catalog.load_blocks(job, operator, covering, as_of)
        chains = {
            key_group: ([self._located(w) for w in writes], blocks)
            for key_group, (writes, blocks) in loaded.items()
            if wanted is None or key_group in wanted
        }
        fetched = self._fetch_all(
            [w for writes, _ in chains.values() for w in writes if w.segment is not None]
        )
        fetched.reverse()  # popped in order below, so each block's bytes go once replayed
        out = {}
        for key_group, (writes, blocks) in chains.items():
            out[key_group] = (writes, self._replay(writes, blocks, fetched, where))
        return out

    def read(
        self, job: str, operator: str, writes: Sequence[WriteInfo]
    ) -> dict[str, dict[bytes, bytes]]:
        # A reader may read a chain it planned after retention dropped its writes from the
        # catalog: the files stay for the GC's grace period, and each block carries its
        # checksum. Only writes the catalog holds the bytes of are read from the catalog.
        where = f"job {job!r} operator {operator!r} "
        chain = self._blocks(writes, where)
        return replay(chain, where, self.catalog.table_names, self.catalog.dictionary)

    def file_area(self) -> FileArea | None:
        """``files/`` under the storage root, on its filesystem."""
        self.fs  # noqa: B018 - opens the filesystem, which sets self._base
        return FsspecArea(self.fs, self._base + "/files")

    def read_changes(
        self, job: str, operator: str, writes: Sequence[WriteInfo]
    ) -> dict[str, TableChanges] | None:
        where = f"job {job!r} operator {operator!r} "
        chain = self._blocks(writes, where)
        return replay_changes(chain, where, self.catalog.table_names, self.catalog.dictionary)

    def _blocks(self, writes: Sequence[WriteInfo], where: str) -> list[Block]:
        """The blocks of ``writes``, in order: those the catalog holds from it, the others
        fetched from their segment files."""
        in_catalog = iter(self.catalog.read_blocks([w for w in writes if w.segment is None], where))
        blocks = [
            next(in_catalog) if w.segment is None else Block(w, None, None, w.rows, "")
            for w in writes
        ]
        fetched = self._fetch_all([w for w in writes if w.segment is not None])
        fetched.reverse()
        return self._chain(writes, blocks, fetched)

    def _replay(
        self,
        writes: Sequence[WriteInfo],
        blocks: Sequence[Block],
        fetched: list[bytes],
        where: str,
    ) -> dict[str, dict[bytes, bytes]]:
        """Replay a key group's chain (verified), the bytes of its blocks in segment files
        popped from the end of ``fetched``."""
        chain = self._chain(writes, blocks, fetched)
        return replay(chain, where, self.catalog.table_names, self.catalog.dictionary)

    @staticmethod
    def _chain(
        writes: Sequence[WriteInfo], blocks: Sequence[Block], fetched: list[bytes]
    ) -> list[Block]:
        """``blocks`` with the bytes of those in segment files popped from ``fetched``."""
        return [
            block
            if info.segment is None
            else dataclasses.replace(
                block, write=info, data=fetched.pop(), where=f"segment {info.segment!r}"
            )
            for info, block in zip(writes, blocks, strict=True)
        ]

    def _fetch_all(self, infos: Sequence[WriteInfo]) -> list[bytes]:
        """The bytes of blocks in segment files (filesystem paths, see :meth:`_located`), in
        order: coalesced into few ranged reads, fetched in parallel (:attr:`reads`).
        :class:`CorruptStateError` for the first block (in order) that is outside the root,
        missing, unreadable or cut short."""
        for info in infos:
            assert info.segment is not None
            inside = info.segment.startswith(self._base + "/")
            if not inside or not plain(info.segment[len(self._base) + 1 :].split("/")):
                raise CorruptStateError(
                    f"segment {info.segment!r} is not inside the storage root {self.root}"
                )
        wanted = [(str(i.segment), i.offset, i.length) for i in infos]
        reads = plan_reads(wanted, self.reads)
        results = fetch_reads(self.fs, reads, self.reads.workers)
        self.reads_issued += len(reads)
        self.bytes_fetched += sum(r.size for r in reads)
        out: list[bytes | None] = [None] * len(infos)
        errors: dict[int, Exception] = {}
        for read, result in zip(reads, results, strict=True):
            for i in read.blocks:
                if isinstance(result, Exception):
                    errors[i] = result
                    continue
                low = infos[i].offset - read.start
                out[i] = result[low : low + infos[i].length]
        for i, data in enumerate(out):
            error = errors.get(i)
            if error is not None and not isinstance(error, OSError):
                raise error
            if error is not None or data is None or len(data) != infos[i].length:
                raise _unreadable(infos[i], data, error) from error
        return out  # type: ignore[return-value]

    def gc(
        self, grace_seconds: float = 600.0, *, dry_run: bool = False, now: float | None = None
    ) -> GCStats:
        """One garbage-collection pass: stamp newly unreferenced segments, then delete those
        stamped more than ``grace_seconds`` ago, and the files of segments an interrupted
        pass forgot without deleting. ``dry_run`` changes nothing. Paths that would leave
        the storage root are never deleted: they are logged and listed in ``refused``."""
        when = time.time() if now is None else now
        self._ready()
        stats = collect(self.catalog, self.fs, self._deletable, grace_seconds, dry_run, when)
        logger.info(
            "gc of %s%s: %s files deleted (%s bytes), %s refused, %s newly unreferenced, "
            "%s referenced",
            redact_url(self.url),
            " (dry run)" if dry_run else "",
            len(stats.deleted),
            stats.bytes_deleted,
            len(stats.refused),
            stats.stamped,
            stats.referenced,
        )
        return stats


def _unreadable(info: WriteInfo, data: bytes | None, error: OSError | None) -> CorruptStateError:
    """The error for a block of a segment file that could not be read whole, naming the
    file, key group and version: the read failed (``error``), or it returned fewer bytes
    than the block has (a truncated file)."""
    what = f"(key group {info.key_group}, version {info.version})"
    if isinstance(error, FileNotFoundError):
        return CorruptStateError(f"segment {info.segment!r} is missing {what}")
    if error is not None:  # e.g. S3 refusing a range past a truncated file's end
        return CorruptStateError(
            f"segment {info.segment!r} cannot be read at bytes {info.offset}.."
            f"{info.offset + info.length} (truncated?) {what}: {error}"
        )
    got = 0 if data is None else len(data)
    return CorruptStateError(
        f"segment {info.segment!r} is truncated: {got} of {info.length} bytes at "
        f"{info.offset} {what}"
    )


_FLAGS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}

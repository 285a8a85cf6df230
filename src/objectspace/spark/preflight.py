"""Checks that fail early, with the cause named, where a cluster would fail late or silently.

Two things a single machine hides and a cluster does not:

- **The store must be the same for every process.** ``sqlite:///`` and ``file://`` name a
  path, and each executor resolves it on its own disk: an executor that does not see the
  driver's file gets a store of its own (empty, created on the spot) and fails much later
  with an error about checkpoints that do not exist. :func:`check_storage`, called when a
  query starts, writes a token file next to the store on the driver and has a probe job on
  the executors read it back; it refuses ``memory://`` outright on a cluster master.
- **The C extension must be what runs.** Imported from a zip (``--py-files``), or installed
  without a compiler, ``objectspace.collections`` falls back to its pure-Python twin without
  a word, several times slower. :func:`require_c_check`, called at the start of each task,
  turns that into an error naming the cause when the driver asked for C
  (:func:`resolve_require_c`: by default, whenever the driver itself has it).

Nothing here needs ``sparkContext``: the probe is a DataFrame job
(``spark.range(n).repartition(n).mapInArrow(...)``), so it runs under Spark Connect too.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import os
import secrets
import socket
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlparse

from objectspace.collections import PersistedValue
from objectspace.errors import DeploymentError, StorageError, StorageNotSharedError
from objectspace.spark.session import is_connect, job_description
from objectspace.storage.urls import redact_text, redact_url

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "CORE_MODULE",
    "DeploymentError",
    "ProbeResult",
    "StorageNotSharedError",
    "c_extension_in_use",
    "check_storage",
    "is_local_master",
    "local_paths",
    "require_c_check",
    "resolve_require_c",
]

logger = logging.getLogger(__name__)

CORE_MODULE = "objectspace.collections._core"
"""The C extension's module name."""

_PURE_PYTHON_ENV = "OBJECTSPACE_PURE_PYTHON"
# The token file's name starts with this; the rest is random, so probes never collide.
_TOKEN_PREFIX = ".objectspace-probe-"
# Probe rounds, each with twice the tasks of the one before, until every executor answered.
_PROBE_ROUNDS = 3
_INSTEAD = (
    "use storage every executor reaches: a PostgreSQL catalog with segment files on "
    "S3, HDFS or GCS (e.g. 's3://bucket/state?catalog=postgresql://host/db'), or a "
    "shared file system mounted at the same path on the driver and every executor"
)

# Said of a relative folder an executor cannot see.
_RELATIVE = (
    "; the path is relative, and each executor resolves it against its own working "
    "directory, not the driver's"
)


# -- the C extension ---------------------------------------------------------------------------


def c_extension_in_use() -> bool:
    """Whether this process's persisted collections are built on the C extension (rather
    than on the pure-Python twin ``_pycore``). O(1)."""
    return any(cls.__module__ == CORE_MODULE for cls in PersistedValue.__mro__)


def resolve_require_c(option: bool | None) -> bool:
    """The ``require_c`` a runner passes to its tasks: ``option`` when given, else whether the
    driver itself runs on the C extension (a driver without it asks nothing of the
    executors; one with it expects the same speed of them)."""
    if option is None:
        return c_extension_in_use()
    if not isinstance(option, bool):
        raise TypeError(f"require_c is True, False or None, not {option!r}")
    return option


def require_c_check(require_c: bool) -> None:
    """Raise :class:`DeploymentError` when ``require_c`` and this process runs on the
    pure-Python twin; the message names why the extension is not in use. O(1) once the
    extension is in use."""
    if not require_c or c_extension_in_use():
        return
    raise DeploymentError(
        "the driver requires objectspace's C extension, but this executor's Python "
        f"runs the pure-Python collections: {_why_no_c()}. Ship objectspace as an "
        "installed package (a packed environment with the wheel, see docs/deploy.md), or "
        "pass require_c=False to accept the slower pure-Python code"
    )


def _archive_of(path: str) -> str | None:
    """The zip archive ``path`` lies inside (``/x/deps.zip/objectspace/...``), if any."""
    current = path
    while current and current != os.path.dirname(current):
        if os.path.isfile(current):
            return current if zipfile.is_zipfile(current) else None
        current = os.path.dirname(current)
    return None


def _why_no_c() -> str:
    """Why :data:`CORE_MODULE` is not the implementation in use, as a phrase."""
    if os.environ.get(_PURE_PYTHON_ENV, "") not in ("", "0"):
        return f"{_PURE_PYTHON_ENV} is set in its environment"
    import objectspace

    location = str(getattr(objectspace, "__file__", "") or "")
    archive = _archive_of(location)
    if archive is not None:
        return (
            f"objectspace was imported from the zip archive {archive!r} (as --py-files "
            "ships it), and Python cannot load a C extension from a zip"
        )
    try:
        spec = importlib.util.find_spec(CORE_MODULE)
    except (ImportError, ValueError) as exc:
        return f"the extension {CORE_MODULE} cannot be found ({exc})"
    if spec is None:
        return (
            f"the extension {CORE_MODULE} is not installed next to {location!r} (objectspace "
            "was installed from source without a C compiler, or from a pure-Python copy)"
        )
    try:
        importlib.import_module(CORE_MODULE)
    except ImportError as exc:
        return f"the extension {CORE_MODULE} could not be imported: {exc}"
    return (
        f"the extension {CORE_MODULE} imports, but the collections were built before it "
        "could be used (objectspace imported with the pure-Python classes)"
    )


# -- storage -----------------------------------------------------------------------------------


def is_local_master(master: str) -> bool:
    """Whether a Spark master URL runs every task in the driver's own machine and file
    system: ``local``, ``local[4]``, ``local[*, 3]``; not ``local-cluster[...]``, whose
    executors are separate processes like a cluster's."""
    master = master.strip().lower()
    return master == "local" or master.startswith("local[")


def local_paths(storage_url: str) -> list[str]:
    """The local folders a store at ``storage_url`` lives in, which every executor must see:
    a ``sqlite:///`` file's folder, a ``file://`` segment root, and the folder of a
    segment storage's SQLite catalog. Empty for stores reached over the network. A relative
    path stays relative (``"."`` for the working directory): each process resolves it
    against its own working directory, and so does the probe."""
    parsed = urlparse(storage_url)
    scheme = parsed.scheme.lower()
    if scheme == "sqlite":
        path = parsed.path[1:] if parsed.path.startswith("/") else parsed.path
        return [os.path.dirname(path) or "."]
    found: list[str] = []
    if scheme in ("file", "local", ""):
        found.append(parsed.netloc + parsed.path or ".")
    catalog = dict(parse_qsl(parsed.query)).get("catalog")
    if catalog:
        found.extend(p for p in local_paths(catalog) if p not in found)
    return found


@dataclass(frozen=True)
class ProbeResult:
    """What one probe task found: where it ran and the folders it could not read the
    token from (with the reason)."""

    host: str
    process: int
    missing: tuple[tuple[str, str], ...]


Reader = Callable[[Any, list[tuple[str, str, bytes]], int], list[ProbeResult]]
"""Runs the probe: ``(spark, [(folder, token file name, token)], tasks)`` → one result per
task. The default runs :func:`_probe_tasks` on the executors."""


def check_storage(spark: Any, storage_url: str, *, reader: Reader | None = None) -> None:
    """Check, when a query starts, that every executor reaches the store at ``storage_url``.

    On a ``local`` master nothing is checked. On any other master (``local-cluster``,
    standalone, YARN, Kubernetes) ``memory://`` is refused, and for a store in local folders
    (``sqlite:///``, ``file://``, a SQLite catalog) the driver writes a random token file in
    each folder and a probe job, at least one task per executor, reads it back; an executor
    that cannot see it raises :class:`StorageNotSharedError` naming the (redacted) URL and
    what to use instead. The probe only reads: it never opens, and so never creates, a
    store on an executor. The token files are removed afterwards. Costs one small Spark job.

    ``reader`` replaces the probe job (for tests of the checker itself).
    """
    master = _master(spark)
    if master is None or is_local_master(master):
        return
    shown = redact_url(storage_url)
    if urlparse(storage_url).scheme.lower() == "memory":
        raise StorageNotSharedError(
            f"storage {shown!r} lives in one process, and the master {master!r} runs tasks "
            f"in the executors' processes: {_INSTEAD}"
        )
    folders = local_paths(storage_url)
    if not folders:
        return
    tokens = []
    try:
        for folder in folders:
            os.makedirs(folder, exist_ok=True)
            name = _TOKEN_PREFIX + secrets.token_hex(8)
            token = secrets.token_bytes(16)
            with open(os.path.join(folder, name), "xb") as f:
                f.write(token)
            tokens.append((folder, name, token))
        _run_probe(spark, shown, storage_url, tokens, reader or _probe_on_executors)
    finally:
        for folder, name, _ in tokens:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, name))


def _master(spark: Any) -> str | None:
    try:
        value = spark.conf.get("spark.master", None)
    except Exception:  # a session that cannot say: nothing to check against
        return None
    return None if value is None else str(value)


def _run_probe(
    spark: Any,
    shown: str,
    storage_url: str,
    tokens: list[tuple[str, str, bytes]],
    reader: Reader,
) -> None:
    expected = _executor_count(spark)
    tasks = max(2, 2 * expected, _default_parallelism(spark))
    seen: set[tuple[str, int]] = set()
    for _ in range(_PROBE_ROUNDS):
        results = reader(spark, tokens, tasks)
        for result in results:
            if result.missing:
                folder, reason = result.missing[0]
                raise StorageNotSharedError(
                    f"storage {shown!r} is not shared with every executor: the executor on "
                    f"{result.host!r} (process {result.process}) cannot read the token the "
                    f"driver wrote in {folder!r} ({redact_text(reason, [storage_url])}"
                    f"{_RELATIVE if not os.path.isabs(folder) else ''}); a store on a path "
                    f"only some machines see splits the state: {_INSTEAD}"
                )
            seen.add((result.host, result.process))
        if len(seen) >= expected:
            return
        tasks *= 2
    logger.warning(
        "storage probe of %s reached %s of %s executors; the others were not checked",
        shown,
        len(seen),
        expected,
    )


def _executor_count(spark: Any) -> int:
    """How many executors the application has now (1 when that cannot be known, e.g.
    under Spark Connect)."""
    if not is_connect(spark):
        try:
            ids = spark.sparkContext._jsc.sc().getExecutorIds()
            return max(1, int(ids.size()))
        except Exception:  # a session that cannot say: the configured count
            pass
    try:
        return max(1, int(spark.conf.get("spark.executor.instances", "1")))
    except Exception:
        return 1


def _default_parallelism(spark: Any) -> int:
    """The classic session's default parallelism; under Spark Connect the configured one,
    else 2 (asking the server costs a Spark job, and the probe doubles its tasks until
    every executor known answered anyway)."""
    try:
        if not is_connect(spark):
            return int(spark.sparkContext.defaultParallelism)
        return int(spark.conf.get("spark.default.parallelism", None) or 2)
    except Exception:  # a session that cannot say
        return 2


def _probe_on_executors(
    spark: Any, tokens: list[tuple[str, str, bytes]], tasks: int
) -> list[ProbeResult]:
    """Run :func:`_probe_tasks` in ``tasks`` tasks spread over the executors."""
    schema = "host string, process long, folder string, reason string"
    probe = _Probe(tuple(tokens))
    folders = ", ".join(folder for folder, _, _ in tokens)
    try:
        with job_description(spark, f"objectspace: storage probe ({folders})"):
            rows = (
                spark.range(0, tasks, 1, tasks)
                .mapInArrow(lambda batches: probe(batches), schema)
                .collect()
            )
    except Exception as exc:
        text = str(exc)
        if "No module named 'objectspace'" in text:
            raise DeploymentError(
                "objectspace is not installed on the executors (their Python cannot import "
                "it): ship it in a packed environment (see docs/deploy.md)"
            ) from exc
        raise StorageError(
            f"the storage probe failed on the executors: {text.splitlines()[0] if text else exc!r}"
        ) from exc
    by_task: dict[tuple[str, int], list[tuple[str, str]]] = {}
    for row in rows:
        missing = by_task.setdefault((row["host"], int(row["process"])), [])
        if row["folder"] is not None:
            missing.append((row["folder"], row["reason"]))
    return [ProbeResult(h, p, tuple(m)) for (h, p), m in by_task.items()]


class _Probe:
    """The probe task: reads each token file and reports the ones it cannot read. Only
    ``open(..., "rb")``: no store is opened, nothing is created."""

    def __init__(self, tokens: tuple[tuple[str, str, bytes], ...]) -> None:
        self.tokens = tokens

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        for _ in batches:
            pass
        host, process = socket.gethostname(), _executor_process()
        rows: list[dict[str, Any]] = []
        for folder, name, token in self.tokens:
            reason = _read_token(os.path.join(folder, name), token)
            if reason is not None:
                rows.append({"host": host, "process": process, "folder": folder, "reason": reason})
        if not rows:
            rows.append({"host": host, "process": process, "folder": None, "reason": None})
        yield pa.RecordBatch.from_pylist(
            rows,
            schema=pa.schema(
                [
                    ("host", pa.string()),
                    ("process", pa.int64()),
                    ("folder", pa.string()),
                    ("reason", pa.string()),
                ]
            ),
        )


def _read_token(path: str, token: bytes) -> str | None:
    """``None`` when ``path`` holds ``token``, else why not."""
    try:
        with open(path, "rb") as f:
            found = f.read(len(token) + 1)
    except FileNotFoundError:
        return "no such file on this executor"
    except OSError as exc:
        return f"cannot read it: {exc.strerror or exc}"
    if found != token:
        return "the file there holds another token: this executor sees another folder"
    return None


def _executor_process() -> int:
    """The pid of the JVM this Python worker serves (its nearest ``java`` ancestor; the
    worker's own pid where /proc does not say)."""
    pid = os.getpid()
    for _ in range(8):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            parent = int(fields[1])
            with open(f"/proc/{parent}/comm", "rb") as f:
                name = f.read().strip()
        except (OSError, IndexError, ValueError):
            break
        if name == b"java":
            return parent
        if parent <= 1:
            break
        pid = parent
    return os.getpid()

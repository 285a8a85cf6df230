"""Looking into checkpoint storage, and maintaining it: the library behind ``objectspace``.

Every function here takes an open :class:`~objectspace.Storage` (see :func:`open_existing`)
and returns plain data (dicts, lists, ints, strings) that :func:`dumps` turns into the
``--json`` output of the command; the ``render_*`` functions print the same data as tables
with `rich <https://rich.readthedocs.io>`_ (imported only when rendering).

Opening storage without changing it
-----------------------------------

:func:`open_existing` refuses a store that does not exist instead of creating it: a
``sqlite:///`` file (or the SQLite catalog of a segment storage) must exist and hold an
objectspace catalog (checked with a read-only connection), a PostgreSQL schema must hold
the catalog tables, and ``memory://`` (which lives in one process) is refused. Reading
never writes: operators are opened from their stored metadata, not with
:meth:`~objectspace.Job.operator` (which may update it).

Values as JSON
--------------

State values are Python values; :func:`to_json` maps them to JSON with the tags of
:class:`~objectspace.JsonSerializer`: ``{"$tuple": [...]}``, ``{"$bytes": "<base64>"}``,
``{"$datetime": "<iso>"}``, ``{"$date": "<iso>"}``, ``{"$set": [...]}`` (elements
sorted), ``{"$frozenset": [...]}``, ``{"$dict": [[k, v], ...]}`` for a dict whose keys are
not all strings, plus ``{"$float": "nan" | "inf" | "-inf"}`` and, for any other type,
``{"$repr": "<repr>"}``. :func:`json_text` is the compact text of that JSON.

Exported rows (``export`` and :func:`objectspace.spark_state.read_state`)
-------------------------------------------------------------------------

One row per entry, columns :data:`ENTRY_COLUMNS`:

- ``key_group`` (int32): the object's key group;
- ``object_id`` (string) and ``kind`` (string: ``Value``, ``Array``, ``List``, ``Queue``,
  ``Stack``, ``LinkedList``, ``Set``, ``SortedSet``, ``Dict``, ``SortedDict``);
- ``slot`` (string, nullable): for sequences the position in iteration order as decimal
  digits (``"0"``, ``"1"``, ...; a Stack iterates from the top), for dicts the
  :func:`json_text` of the key, for sets that of the element; ``NULL`` for a Value;
- ``value`` (string, nullable): the :func:`json_text` of the value (for sets: of the
  element again).

A Value is one row with ``slot`` NULL; an empty collection is one row with ``slot`` and
``value`` NULL, so every object appears. Rows come by key group, then object id; within
an object in its order (Dict and Set entries sorted by key/element).

The ``--json`` shapes
---------------------

``inspect`` (:func:`inspect_storage`)::

    {"storage": "<URL, secrets masked>",
     "jobs": [{"job": "clicks", "last_checkpoint": 3 | null,
               "checkpoints": [{"checkpoint": 1, "status": "complete" | "pending",
                                "committed_at": "<ISO 8601 UTC>" | null,
                                "writes": 8, "full_writes": 8, "differential_writes": 0,
                                "bytes": 1234}, ...],
               "operators": [{"operator": "sessions", "max_key_groups": 128,
                              "parallelism": 4 | null, "schema_version": 1,
                              "state": {"as_of": 3 | null, "key_groups": 5, "writes": 9,
                                        "rows": 100, "bytes": 2048},
                              "key_groups": [{"key_group": 0, "writes": 2,
                                              "full_version": 1, "rows": 10,
                                              "bytes": 120}, ...]}, ...]}, ...]}

``checkpoints`` lists the restorable (committed, retained) checkpoints, with what their
commit recorded, then the *pending* versions: versions whose every write is uncommitted
(a checkpoint being written, or a failed attempt that retention will remove); their
figures are those of the pending writes. ``key_groups`` lists the key groups that hold
state as of the last checkpoint, with the chain a restore reads (its writes, the version
of its full write, rows and bytes stored); ``state`` sums them.

``show`` (:func:`show_objects`)::

    {"job": "clicks", "operator": "sessions", "checkpoint": 3, "key_group": 5,
     "key": <JSON of the key> (only with --key),
     "objects": [{"id": "42/buffer", "kind": "List", "length": 1000,
                  "items": [<JSON>, ...first limit], "more": 980},
                 {"id": "42/count", "kind": "Value", "length": null, "value": <JSON>},
                 {"id": "42/seen", "kind": "Dict", "length": 3,
                  "items": [[<key JSON>, <value JSON>], ...], "more": 0}, ...]}

``diff`` (:func:`diff_checkpoints`)::

    {"job": ..., "operator": ..., "from": 1, "to": 2,
     "summary": {"added": 1, "removed": 1, "changed": 2, "replaced": 0,
                 "key_groups_changed": 2},
     "objects": [{"key_group": 3, "id": "1/new", "change": "added", "kind": "Value",
                  "length": null, "value": 5},
                 {"key_group": 3, "id": "1/old", "change": "removed", "kind": "Set",
                  "length": 2, "items": [...], "more": 0},
                 {"key_group": 3, "id": "1/count", "change": "changed", "kind": "Value",
                  "old": 5, "new": 7},
                 {"key_group": 3, "id": "1/buffer", "change": "changed", "kind": "List",
                  "old_length": 50, "new_length": 51,
                  "slots": [{"slot": 50, "change": "added", "new": 1.5},
                            {"slot": 3, "change": "changed", "old": 1, "new": 2},
                            {"slot": 0, "change": "removed", "old": 9}, ...],
                  "more": 0},
                 {"key_group": 3, "id": "1/x", "change": "replaced", "kind": "List",
                  "old_kind": "Set"}]}

Objects are ordered by key group and id. A slot is an index (sequences; removed slots
count in the old sequence, added and changed ones in the new; a changed slot that moved
also has ``"old_slot"``), a key (dicts) or an element (sets). Sequences are compared with
:class:`difflib.SequenceMatcher`, so a queue that dropped two items at its head and got
two at its tail shows four slots, not every slot changed (sequences longer than
:data:`MAX_MATCHED` together are compared index by index).

``export``: ``{"path", "rows", "objects", "key_groups", "checkpoint"}``; ``gc``, ``compact``
and ``retain``: see :func:`collect_garbage`, :func:`compact_job` and :func:`retain_job`.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as _dt
import difflib
import json
import os
import re
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import parse_qsl, urlparse

from objectspace.checkpoint import CompactionPolicy, Job, Operator, Storage, open_storage
from objectspace.collections import (
    PersistedDict,
    PersistedObject,
    PersistedSet,
    PersistedSortedDict,
    PersistedSortedSet,
    PersistedValue,
)
from objectspace.errors import CheckpointError, StorageError
from objectspace.keygroups import Key
from objectspace.operators.state import key_prefix
from objectspace.serialization import (
    MsgpackSerializer,
    Serializer,
    serializer_by_name,
    to_tagged_json,
)
from objectspace.space import ObjectSpace
from objectspace.storage.urls import redact_text, redact_url

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "DEFAULT_LIMIT",
    "ENTRY_COLUMNS",
    "KEY_TYPES",
    "MAX_MATCHED",
    "SLICE_KEY_GROUPS",
    "Progress",
    "collect_garbage",
    "compact_job",
    "diff_checkpoints",
    "dumps",
    "entries",
    "export_parquet",
    "find_job",
    "find_operator",
    "format_time",
    "inspect_storage",
    "json_text",
    "open_existing",
    "parquet_schema",
    "parse_duration",
    "parse_key",
    "progress_bar",
    "redact",
    "render_compact",
    "render_diff",
    "render_export",
    "render_gc",
    "render_inspect",
    "render_retain",
    "render_show",
    "resolve_checkpoint",
    "retain_job",
    "serializer_named",
    "show_objects",
    "slices",
    "state_rows",
    "to_json",
]

ENTRY_COLUMNS = ("key_group", "object_id", "kind", "slot", "value")
"""The columns of ``export`` and ``read_state``, in order."""

DEFAULT_LIMIT = 20
"""Items shown per collection (``show``), slots per changed object (``diff``)."""

MAX_MATCHED = 20_000
"""Sequences with more items than this (old and new together) are diffed index by index."""

SLICE_KEY_GROUPS = 64
"""Key groups restored at a time by ``export`` and ``read_state`` (memory bound)."""

KEY_TYPES = ("auto", "int", "str", "json")
"""How ``--key`` text becomes a key (see :func:`parse_key`)."""

Progress = Callable[[int, int], None]
"""A progress callback: ``(done, total)``."""

_SEQUENCE_KINDS = frozenset({"Array", "List", "Queue", "Stack", "LinkedList"})
# -- values as JSON -------------------------------------------------------------------------


def to_json(value: Any) -> Any:
    """``value`` as JSON-able data, with the tags of the module docstring."""
    return to_tagged_json(value, lenient=True)


def _canonical(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def json_text(value: Any) -> str:
    """The compact JSON text of :func:`to_json` of ``value``."""
    return _canonical(to_json(value))


def dumps(data: Any) -> str:
    """The ``--json`` text of a command's data: indented, keys sorted."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)


def format_time(epoch: float) -> str:
    """A commit time as ISO 8601 in UTC, to the microsecond."""
    return _dt.datetime.fromtimestamp(epoch, _dt.UTC).isoformat(timespec="microseconds")


def _sort_pairs(pairs: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """Pairs by their key: natural order when the keys compare, else by JSON text."""
    try:
        return sorted(pairs, key=lambda kv: kv[0])
    except TypeError:
        return sorted(pairs, key=lambda kv: json_text(kv[0]))


def _pairs(obj: PersistedObject) -> list[tuple[Any, Any]]:
    """A collection's entries as (slot, value): index/key/element; sorted for Dict and Set."""
    if isinstance(obj, PersistedSortedDict):
        return list(obj.items())
    if isinstance(obj, PersistedDict):
        return _sort_pairs(list(obj.items()))
    if isinstance(obj, PersistedSortedSet):
        return [(v, v) for v in obj]
    if isinstance(obj, PersistedSet):
        return _sort_pairs([(v, v) for v in obj])
    return list(enumerate(cast(Iterable[Any], obj)))


def entries(obj: PersistedObject) -> Iterator[tuple[str | None, str | None]]:
    """The (slot, value) texts of one object's exported rows (see the module docstring)."""
    if isinstance(obj, PersistedValue):
        yield None, json_text(obj.value)
        return
    pairs = _pairs(obj)
    if not pairs:
        yield None, None
        return
    sequence = obj.kind in _SEQUENCE_KINDS
    for slot, value in pairs:
        yield (str(slot) if sequence else json_text(slot)), json_text(value)


# -- URLs and opening storage ---------------------------------------------------------------


def redact(url: str) -> str:
    """``url`` with passwords and secret options masked (the catalog URL too); see
    :func:`objectspace.storage.redact_url`."""
    return redact_url(url)


def _sqlite_path(url: str) -> str | None:
    parsed = urlparse(url)
    if parsed.scheme.lower() != "sqlite" or parsed.netloc:
        return None
    path = parsed.path[1:] if parsed.path.startswith("/") else parsed.path
    return path or None


def _check_sqlite(path: str, url: str) -> None:
    """Refuse a missing SQLite file or one without an objectspace catalog (read-only)."""
    where = os.path.abspath(path)
    if not os.path.exists(where):
        raise StorageError(
            f"no storage at {redact(url)}: file {where!r} does not exist "
            "(objectspace creates storage only when a job writes to it)"
        )
    if not os.path.isfile(where):
        raise StorageError(f"no storage at {redact(url)}: {where!r} is not a file")
    try:
        conn = sqlite3.connect(Path(where).as_uri() + "?mode=ro", uri=True)
        try:
            found = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ckpt_meta'"
            ).fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StorageError(f"cannot read {where!r} as SQLite: {exc}") from exc
    if found is None:
        raise StorageError(f"{where!r} is a SQLite database but not objectspace storage")


def _check_postgres(backend: Any) -> None:
    """Refuse a PostgreSQL schema without the catalog (instead of creating it)."""
    import psycopg

    conninfo = getattr(backend, "_conninfo", None)
    if conninfo is None:  # pragma: no cover - another backend class
        return
    try:
        timeout = int(getattr(backend, "connect_timeout", 10))  # the URL's, default 10 s
        with psycopg.connect(conninfo, connect_timeout=timeout) as conn:
            row = conn.execute(
                "SELECT 1 FROM information_schema.tables WHERE table_schema = %s "
                "AND table_name = 'ckpt_meta'",
                (backend.schema,),
            ).fetchone()
    except psycopg.Error as exc:
        raise StorageError(
            f"cannot connect to {redact(backend.url)}: {redact_text(exc, [backend.url])}"
        ) from exc
    if row is None:
        raise StorageError(
            f"no storage at {redact(backend.url)}: schema {backend.schema!r} holds no "
            "objectspace catalog"
        )


def open_existing(url: str) -> Storage:
    """Open the storage at ``url`` only if it exists; never create it (module docstring)."""
    if not isinstance(url, str) or not url:
        raise StorageError("a storage URL is a non-empty string")
    try:
        parsed = urlparse(url)
    except ValueError as exc:
        raise StorageError(f"cannot open storage {redact_url(url)!r}: malformed URL") from exc
    scheme = parsed.scheme.lower()
    if scheme == "memory":
        raise StorageError(
            f"{redact_url(url)!r}: memory:// storage lives inside one process; there is "
            "nothing to open here"
        )
    path = _sqlite_path(url)
    if path is not None:
        _check_sqlite(path, url)
    catalog = dict(parse_qsl(parsed.query)).get("catalog")
    if catalog is not None:
        catalog_path = _sqlite_path(catalog)
        if catalog_path is not None:
            _check_sqlite(catalog_path, catalog)
    storage = open_storage(url)
    try:
        # Only a URL naming PostgreSQL imports the PostgreSQL backend (and psycopg).
        module = sys.modules.get("objectspace.storage.postgres_backend")
        inner = getattr(storage.backend, "catalog", storage.backend)
        if module is not None and isinstance(inner, module.PostgresBackend):
            _check_postgres(inner)
    except BaseException:
        storage.close()
        raise
    return storage


def find_job(storage: Storage, name: str) -> Job:
    """The existing job ``name``; :class:`CheckpointError` naming the jobs there are."""
    jobs = storage.jobs()
    if name not in jobs:
        have = ", ".join(repr(j) for j in jobs) if jobs else "none"
        raise CheckpointError(f"no job {name!r} in {redact(storage.url)} (jobs: {have})")
    return storage.job(name)


def serializer_named(name: str | None) -> Serializer | None:
    """The serializer of that short name (``None``: the default, msgpack)."""
    return None if name is None else serializer_by_name(name)


def find_operator(
    storage: Storage, job: str, operator: str, serializer: Serializer | None = None
) -> Operator:
    """The existing operator, opened read-only from its stored metadata."""
    found = find_job(storage, job)
    info = storage.backend.operator_info(job, operator)
    if info is None:
        names = [o.name for o in found.operators()]
        have = ", ".join(repr(n) for n in names) if names else "none"
        raise CheckpointError(f"job {job!r} has no operator {operator!r} (operators: {have})")
    return Operator(found, info, CompactionPolicy(), serializer)


def resolve_checkpoint(job: Job, checkpoint: int | None) -> int:
    """``checkpoint`` if restorable, the last one if ``None``; else a clear error."""
    ids = job.checkpoints()
    if checkpoint is None:
        if not ids:
            raise CheckpointError(f"job {job.name!r} has no committed checkpoint yet")
        return ids[-1]
    if checkpoint not in ids:
        raise CheckpointError(
            f"checkpoint {checkpoint} of job {job.name!r} is not restorable "
            f"(restorable: {_id_summary(ids)})"
        )
    return checkpoint


def _id_summary(ids: Sequence[int]) -> str:
    if not ids:
        return "none"
    if len(ids) <= 8:
        return ", ".join(map(str, ids))
    return f"{ids[0]}..{ids[-1]} ({len(ids)} checkpoints)"


# -- command-line values ----------------------------------------------------------------------

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?\s*$", re.IGNORECASE)
_UNITS = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_INT = re.compile(r"^[+-]?\d+$")


def parse_duration(text: str) -> float:
    """Seconds of ``10m``, ``30s``, ``1h``, ``2d``, ``500ms`` or ``600`` (seconds)."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(
            f"invalid duration {text!r}: use a number of seconds or a number with a unit "
            "ms, s, m, h or d (e.g. 600, 30s, 10m, 1h)"
        )
    unit = match.group(2)
    return float(match.group(1)) * _UNITS[unit.lower() if unit else None]


def _from_key_json(data: Any) -> Any:
    if isinstance(data, list):
        return tuple(_from_key_json(v) for v in data)
    if isinstance(data, dict):
        if len(data) == 1:
            ((tag, payload),) = data.items()
            if tag == "$bytes":
                return base64.b64decode(payload)
            if tag == "$tuple":
                return tuple(_from_key_json(v) for v in payload)
        raise ValueError(f"a key cannot be a JSON object ({_canonical(data)})")
    if isinstance(data, float):
        raise ValueError(f"a key cannot be a float ({data!r})")
    return data


def parse_key(text: str, key_type: str = "auto") -> Key:
    """The key that ``--key text`` names.

    ``auto`` (default): an int if the text is an optionally signed run of digits, else the
    text; ``int``; ``str`` (the text as it is, e.g. ``--key-type str --key 42`` for the
    string ``"42"``); ``json``: JSON where arrays are tuples (multi-column keys) and
    ``{"$bytes": "<base64>"}`` is bytes, e.g. ``[1, "a"]`` for the key ``(1, "a")``.
    """
    if key_type == "str":
        return text
    if key_type == "int" or (key_type == "auto" and _INT.match(text)):
        if not _INT.match(text):
            raise ValueError(f"--key {text!r} is not an integer")
        return int(text)
    if key_type == "auto":
        return text
    if key_type == "json":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"--key {text!r} is not JSON: {exc}") from None
        key: Key = _from_key_json(data)
        return key
    raise ValueError(f"unknown key type {key_type!r}; expected one of {', '.join(KEY_TYPES)}")


# -- inspect ----------------------------------------------------------------------------------


def _checkpoint_rows(job: Job) -> list[dict[str, Any]]:
    infos = job.checkpoint_info()
    committed_versions = {c.checkpoint_id for c in infos}
    rows: list[dict[str, Any]] = [
        {
            "checkpoint": c.checkpoint_id,
            "status": "complete",
            "committed_at": format_time(c.committed_at),
            "writes": c.writes,
            "full_writes": c.full_writes,
            "differential_writes": c.writes - c.full_writes,
            "bytes": c.bytes,
        }
        for c in infos
    ]
    pending: dict[int, dict[str, Any]] = {}
    has_committed: set[int] = set()
    for s in job.backend.write_summary(job.name):
        if s.committed:
            has_committed.add(s.version)
            continue
        row = pending.setdefault(
            s.version,
            {
                "checkpoint": s.version,
                "status": "pending",
                "committed_at": None,
                "writes": 0,
                "full_writes": 0,
                "differential_writes": 0,
                "bytes": 0,
            },
        )
        row["writes"] += s.writes
        row["full_writes" if s.full else "differential_writes"] += s.writes
        row["bytes"] += s.bytes
    rows.extend(
        row
        for version, row in sorted(pending.items())
        if version not in has_committed and version not in committed_versions
    )
    return rows


def _operator_data(job: Job, info: Any, last: int | None) -> dict[str, Any]:
    key_groups: list[dict[str, Any]] = []
    if last is not None:
        chains = job.backend.chains(job.name, info.name, range(info.max_key_groups), last)
        for key_group, writes in sorted(chains.items()):
            if not writes:
                continue
            key_groups.append(
                {
                    "key_group": key_group,
                    "writes": len(writes),
                    "full_version": writes[0].version if writes[0].full else None,
                    "rows": sum(w.rows for w in writes),
                    "bytes": sum(w.bytes for w in writes),
                }
            )
    return {
        "operator": info.name,
        "max_key_groups": info.max_key_groups,
        "parallelism": info.parallelism,
        "schema_version": info.schema_version,
        "state": {
            "as_of": last,
            "key_groups": len(key_groups),
            "writes": sum(k["writes"] for k in key_groups),
            "rows": sum(k["rows"] for k in key_groups),
            "bytes": sum(k["bytes"] for k in key_groups),
        },
        "key_groups": key_groups,
    }


def inspect_storage(
    storage: Storage, job: str | None = None, operator: str | None = None
) -> dict[str, Any]:
    """Jobs, checkpoints, operators and state sizes (the ``inspect`` JSON)."""
    if operator is not None and job is None:
        raise ValueError("--operator needs --job")
    names = [find_job(storage, job).name] if job is not None else storage.jobs()
    jobs = []
    for name in names:
        found = storage.job(name)
        last = found.last_checkpoint()
        infos = found.operators()
        if operator is not None:
            infos = [i for i in infos if i.name == operator]
            if not infos:
                find_operator(storage, name, operator)  # raises, naming the operators
        jobs.append(
            {
                "job": name,
                "last_checkpoint": last,
                "checkpoints": _checkpoint_rows(found),
                "operators": [_operator_data(found, info, last) for info in infos],
            }
        )
    return {"storage": redact(storage.url), "jobs": jobs}


# -- show ---------------------------------------------------------------------------------------


def _contents(obj: PersistedObject, limit: int) -> dict[str, Any]:
    """An object's contents as JSON: a Value's value, else length, first items and the rest."""
    if isinstance(obj, PersistedValue):
        return {"length": None, "value": to_json(obj.value)}
    pairs = _pairs(obj)
    mapping = isinstance(obj, PersistedDict | PersistedSortedDict)
    shown = pairs[:limit]
    items = (
        [[to_json(k), to_json(v)] for k, v in shown] if mapping else [to_json(v) for _, v in shown]
    )
    return {"length": len(pairs), "items": items, "more": len(pairs) - len(shown)}


def _view(object_id: str, obj: PersistedObject, limit: int) -> dict[str, Any]:
    return {"id": object_id, "kind": obj.kind, **_contents(obj, limit)}


def show_objects(
    op: Operator,
    *,
    key: Key | None = None,
    key_group: int | None = None,
    checkpoint: int | None = None,
    limit: int = DEFAULT_LIMIT,
    has_key: bool = False,
) -> dict[str, Any]:
    """The objects of a key (``has_key``) or of a key group as of a checkpoint (``show``)."""
    cp = resolve_checkpoint(op.job, checkpoint)
    if has_key:
        key_group = op.key_groups.key_group(key)
    if key_group is None:
        raise ValueError("give a key or a key group")
    if not 0 <= key_group < op.max_key_groups:
        raise CheckpointError(
            f"key group {key_group} is outside 0..{op.max_key_groups - 1} of operator {op.name!r}"
        )
    space = op.instance(0, 1, checkpoint=cp).space(key_group)
    prefix = key_prefix(key) if has_key else ""
    objects = [
        _view(object_id, space.get(object_id), limit)
        for object_id in sorted(space)
        if object_id.startswith(prefix)
    ]
    data: dict[str, Any] = {
        "job": op.job.name,
        "operator": op.name,
        "checkpoint": cp,
        "key_group": key_group,
        "objects": objects,
    }
    if has_key:
        data["key"] = to_json(key)
    return data


# -- restoring slices of key groups -------------------------------------------------------------


def slices(max_key_groups: int) -> int:
    """How many slices (instances) of at most :data:`SLICE_KEY_GROUPS` key groups cover
    ``max_key_groups``."""
    return max(1, min(max_key_groups, -(-max_key_groups // SLICE_KEY_GROUPS)))


def _slice_spaces(
    op: Operator, checkpoint: int, index: int, count: int
) -> Iterator[tuple[int, ObjectSpace]]:
    """The key groups of slice ``index`` of ``count`` that hold state, restored."""
    key_groups = op.key_groups.range_of(index, count)
    backend = op.job.backend
    if not any(backend.chains(op.job.name, op.name, key_groups, checkpoint).values()):
        return  # nothing stored: skip opening an instance
    instance = op.instance(index, count, checkpoint=checkpoint)
    instance.load_all()  # the whole slice in one read
    for key_group, space in sorted(instance.loaded().items()):
        if len(space):
            yield key_group, space


def state_rows(
    op: Operator, checkpoint: int, indexes: Sequence[int], count: int
) -> Iterator[tuple[int, str, str, str | None, str | None]]:
    """Exported rows (module docstring) of slices ``indexes`` of ``count``, in order."""
    for index in indexes:
        for key_group, space in _slice_spaces(op, checkpoint, index, count):
            for object_id in sorted(space):
                obj = space.get(object_id)
                for slot, value in entries(obj):
                    yield key_group, object_id, obj.kind, slot, value


def parquet_schema() -> Any:
    """The Arrow schema of exported rows."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("key_group", pa.int32(), nullable=False),
            pa.field("object_id", pa.string(), nullable=False),
            pa.field("kind", pa.string(), nullable=False),
            pa.field("slot", pa.string()),
            pa.field("value", pa.string()),
        ]
    )


def export_parquet(
    op: Operator,
    path: str | os.PathLike[str],
    checkpoint: int | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Write every entry of the operator's state as of ``checkpoint`` to a Parquet file.

    The file appears whole or not at all: it is written under a temporary name in the same
    folder and renamed when complete.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    cp = resolve_checkpoint(op.job, checkpoint)
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise StorageError(f"cannot write {str(target)!r}: folder {str(folder)!r} does not exist")
    if target.is_dir():
        raise StorageError(f"cannot write {str(target)!r}: it is a folder")
    schema = parquet_schema()
    count = slices(op.max_key_groups)
    total = objects = 0
    key_groups: set[int] = set()
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        with pq.ParquetWriter(tmp, schema) as writer:
            for index in range(count):
                columns: list[list[Any]] = [[], [], [], [], []]
                last_object: tuple[int, str] | None = None
                for row in state_rows(op, cp, [index], count):
                    for column, value in zip(columns, row, strict=True):
                        column.append(value)
                    if (row[0], row[1]) != last_object:
                        last_object = (row[0], row[1])
                        objects += 1
                        key_groups.add(row[0])
                if columns[0]:
                    writer.write_table(pa.Table.from_arrays(columns, schema=schema))
                    total += len(columns[0])
                if progress is not None:
                    progress(index + 1, count)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return {
        "path": str(target),
        "checkpoint": cp,
        "rows": total,
        "objects": objects,
        "key_groups": len(key_groups),
    }


# -- diff ---------------------------------------------------------------------------------------


def _slot_changes(old: PersistedObject, new: PersistedObject) -> list[dict[str, Any]]:
    """The changed slots of two objects of one (collection) kind."""
    if old.kind in _SEQUENCE_KINDS:
        a = [v for _, v in _pairs(old)]
        b = [v for _, v in _pairs(new)]
        return _sequence_changes(a, b)
    # Keys match by their stored (canonical) encoding, as the collections do: 1, 1.0 and
    # True are one key, whichever spelling each checkpoint holds.
    stored_key = _stored_key(new)
    before = {stored_key(k): (k, v) for k, v in _pairs(old)}
    after = {stored_key(k): (k, v) for k, v in _pairs(new)}
    is_set = isinstance(old, PersistedSet | PersistedSortedSet)
    changes: list[tuple[Any, dict[str, Any]]] = []
    for text, (k, v) in before.items():
        if text not in after:
            entry = {"slot": to_json(k), "change": "removed"}
            if not is_set:
                entry["old"] = to_json(v)
            changes.append((k, entry))
    for text, (k, v) in after.items():
        if text not in before:
            entry = {"slot": to_json(k), "change": "added"}
            if not is_set:
                entry["new"] = to_json(v)
            changes.append((k, entry))
        elif not is_set and json_text(before[text][1]) != json_text(v):
            changes.append(
                (
                    k,
                    {
                        "slot": to_json(k),
                        "change": "changed",
                        "old": to_json(before[text][1]),
                        "new": to_json(v),
                    },
                )
            )
    return [entry for _, entry in _sort_pairs(changes)]


def _stored_key(obj: PersistedObject) -> Callable[[Any], bytes]:
    """The row key a dict key or set element of ``obj`` is stored under."""
    space = obj._space
    encode_key = (space.serializer if space is not None else MsgpackSerializer()).encode_key
    return lambda key: encode_key(key)[0]


def _sequence_changes(a: list[Any], b: list[Any]) -> list[dict[str, Any]]:
    ta = [json_text(v) for v in a]
    tb = [json_text(v) for v in b]
    out: list[dict[str, Any]] = []
    opcodes: Sequence[tuple[str, int, int, int, int]]
    if len(ta) + len(tb) > MAX_MATCHED:
        n = min(len(ta), len(tb))
        opcodes = [
            ("replace", 0, n, 0, n),
            ("delete", n, len(ta), n, n),
            ("insert", n, n, n, len(tb)),
        ]
    else:
        opcodes = difflib.SequenceMatcher(None, ta, tb, autojunk=False).get_opcodes()
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            continue
        paired = min(i2 - i1, j2 - j1) if tag == "replace" else 0
        for k in range(paired):
            i, j = i1 + k, j1 + k
            if ta[i] == tb[j]:
                continue
            entry: dict[str, Any] = {"slot": j, "change": "changed"}
            if i != j:
                entry["old_slot"] = i
            entry["old"] = to_json(a[i])
            entry["new"] = to_json(b[j])
            out.append(entry)
        out.extend(
            {"slot": i, "change": "removed", "old": to_json(a[i])} for i in range(i1 + paired, i2)
        )
        out.extend(
            {"slot": j, "change": "added", "new": to_json(b[j])} for j in range(j1 + paired, j2)
        )
    return out


def _object_diff(
    key_group: int,
    object_id: str,
    old: PersistedObject | None,
    new: PersistedObject | None,
    limit: int,
) -> dict[str, Any] | None:
    head: dict[str, Any] = {"key_group": key_group, "id": object_id}
    if old is None:
        assert new is not None
        return {**head, "change": "added", "kind": new.kind, **_contents(new, limit)}
    if new is None:
        return {**head, "change": "removed", "kind": old.kind, **_contents(old, limit)}
    if old.kind != new.kind:
        return {**head, "change": "replaced", "kind": new.kind, "old_kind": old.kind}
    if isinstance(old, PersistedValue) and isinstance(new, PersistedValue):
        if json_text(old.value) == json_text(new.value):
            return None
        return {
            **head,
            "change": "changed",
            "kind": new.kind,
            "old": to_json(old.value),
            "new": to_json(new.value),
        }
    slots = _slot_changes(old, new)
    if not slots:
        return None
    return {
        **head,
        "change": "changed",
        "kind": new.kind,
        "old_length": len(_pairs(old)),
        "new_length": len(_pairs(new)),
        "slots": slots[:limit],
        "more": max(0, len(slots) - limit),
    }


def diff_checkpoints(
    op: Operator,
    old: int,
    new: int,
    *,
    limit: int = DEFAULT_LIMIT,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """What changed in the operator's state from checkpoint ``old`` to ``new`` (``diff``).

    Key groups whose restore chains are the same at both checkpoints are not read.
    """
    resolve_checkpoint(op.job, old)
    resolve_checkpoint(op.job, new)
    backend = op.job.backend
    count = slices(op.max_key_groups)
    objects: list[dict[str, Any]] = []
    changed_groups = 0
    for index in range(count):
        key_groups = op.key_groups.range_of(index, count)
        chains_old = backend.chains(op.job.name, op.name, key_groups, old)
        chains_new = backend.chains(op.job.name, op.name, key_groups, new)
        differing = [
            g
            for g in key_groups
            if [w.write_id for w in chains_old.get(g, [])]
            != [w.write_id for w in chains_new.get(g, [])]
        ]
        if differing:
            before = op.instance(index, count, checkpoint=old)
            after = op.instance(index, count, checkpoint=new)
            for key_group in differing:
                a, b = before.space(key_group), after.space(key_group)
                found = False
                for object_id in sorted(set(a) | set(b)):
                    entry = _object_diff(
                        key_group,
                        object_id,
                        a.get(object_id) if object_id in a else None,
                        b.get(object_id) if object_id in b else None,
                        limit,
                    )
                    if entry is not None:
                        objects.append(entry)
                        found = True
                changed_groups += found
        if progress is not None:
            progress(index + 1, count)
    summary = {change: 0 for change in ("added", "removed", "changed", "replaced")}
    for entry in objects:
        summary[entry["change"]] += 1
    return {
        "job": op.job.name,
        "operator": op.name,
        "from": old,
        "to": new,
        "summary": {**summary, "key_groups_changed": changed_groups},
        "objects": objects,
    }


# -- maintenance ----------------------------------------------------------------------------------


def collect_garbage(
    storage: Storage, grace_seconds: float, *, dry_run: bool = False
) -> dict[str, Any]:
    """One garbage-collection pass of a segment storage (``gc``).

    Files no write references are stamped; those stamped more than ``grace_seconds`` ago
    are deleted (``dry_run``: only reported). A referenced file is never deleted. SQL
    storages keep state in their database: there are no files to collect.
    """
    from objectspace.storage.segments import SegmentBackend

    backend = storage.backend
    data: dict[str, Any] = {
        "storage": redact(storage.url),
        "segments": isinstance(backend, SegmentBackend),
        "dry_run": dry_run,
        "grace_seconds": grace_seconds,
        "stamped": 0,
        "deleted": [],
        "bytes_deleted": 0,
        "referenced": 0,
        "refused": [],
    }
    if isinstance(backend, SegmentBackend):
        stats = backend.gc(grace_seconds, dry_run=dry_run)
        data.update(
            stamped=stats.stamped,
            deleted=list(stats.deleted),
            bytes_deleted=stats.bytes_deleted,
            referenced=stats.referenced,
            refused=list(stats.refused),
        )
    return data


def compact_job(
    storage: Storage,
    job: str,
    *,
    verify: bool = True,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Rewrite every key group with a differential chain as one full write (``compact``).

    With ``verify`` (the default), every chain to rewrite is read first, so a corrupt or
    missing segment stops the command before anything is written.
    """
    found = find_job(storage, job)
    last = found.last_checkpoint()
    infos = found.operators()
    operators: list[dict[str, Any]] = []
    if last is not None and verify:
        backend = found.backend
        todo: list[tuple[str, int]] = []
        for info in infos:
            chains = backend.chains(job, info.name, range(info.max_key_groups), last)
            todo.extend((info.name, g) for g, writes in sorted(chains.items()) if len(writes) > 1)
        for done, (name, key_group) in enumerate(todo, 1):
            backend.load(job, name, range(key_group, key_group + 1), last)
            if progress is not None:
                progress(done, len(todo) + len(infos))
        offset = len(todo)
    else:
        offset = 0
    for done, info in enumerate(infos, 1):
        stats = Operator(found, info, CompactionPolicy(), None).compact()
        operators.append(
            {
                "operator": info.name,
                "key_groups": stats.key_groups,
                "bytes_read": stats.bytes_read,
                "bytes_written": stats.bytes_written,
            }
        )
        if progress is not None:
            progress(offset + done, offset + len(infos))
    return {
        "job": job,
        "as_of": last,
        "key_groups": sum(o["key_groups"] for o in operators),
        "bytes_read": sum(o["bytes_read"] for o in operators),
        "bytes_written": sum(o["bytes_written"] for o in operators),
        "operators": operators,
    }


def retain_job(storage: Storage, job: str, keep_last: int) -> dict[str, Any]:
    """Drop checkpoints before the last ``keep_last`` and what only they needed (``retain``)."""
    from objectspace.storage.segments import SegmentBackend

    if keep_last < 1:
        raise ValueError(f"--keep-last must be at least 1, not {keep_last}")
    found = find_job(storage, job)
    stats = found.retain(keep_last)
    return {
        "job": job,
        "keep_last": keep_last,
        "kept": list(stats.kept),
        "checkpoints_dropped": stats.checkpoints_dropped,
        "writes_removed": stats.writes_removed,
        "pending_removed": stats.pending_removed,
        "rows_removed": stats.rows_removed,
        "segments": isinstance(storage.backend, SegmentBackend),
    }


# -- rendering (rich) -----------------------------------------------------------------------------


@contextlib.contextmanager
def progress_bar(description: str, *, enabled: bool = True) -> Iterator[Progress]:
    """A rich progress bar on stderr, shown only on a terminal; yields its callback."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TimeElapsedColumn
    from rich.progress import Progress as RichProgress

    console = Console(stderr=True)
    bar = RichProgress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not (enabled and console.is_terminal),
    )
    with bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total if total > 0 else None)

        yield update


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{n} B"  # pragma: no cover


def _n(count: int, word: str) -> str:
    """``1 key group``, ``2 key groups``."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def _short(data: Any, width: int = 120) -> str:
    text = _canonical(data)
    return text if len(text) <= width else text[: width - 1] + "…"


def _text(value: Any) -> Any:
    from rich.text import Text

    return Text("" if value is None else str(value))


def render_inspect(data: dict[str, Any], console: Console, limit: int = DEFAULT_LIMIT) -> None:
    """``inspect`` as tables: per job its checkpoints, operators and key groups."""
    from rich.table import Table

    console.print(_text(f"storage {data['storage']}"))
    if not data["jobs"]:
        console.print("no jobs")
    for job in data["jobs"]:
        console.print()
        last = job["last_checkpoint"]
        console.print(
            _text(f"job {job['job']!r}: last checkpoint {'none' if last is None else last}")
        )
        checkpoints = job["checkpoints"]
        table = Table(title="checkpoints", title_justify="left")
        for name in ("id", "status", "committed at (UTC)", "writes", "full", "diff", "bytes"):
            table.add_column(
                name,
                justify="right" if name in {"id", "writes", "full", "diff", "bytes"} else "left",
            )
        shown = checkpoints[-limit:] if limit > 0 else checkpoints
        for c in shown:
            table.add_row(
                _text(c["checkpoint"]),
                _text(c["status"]),
                _text(c["committed_at"][:19].replace("T", " ") if c["committed_at"] else "-"),
                _text(c["writes"]),
                _text(c["full_writes"]),
                _text(c["differential_writes"]),
                _text(_size(c["bytes"])),
            )
        if len(shown) < len(checkpoints):
            table.caption = f"… and {len(checkpoints) - len(shown)} older"
        console.print(table if checkpoints else "no checkpoints")
        ops = Table(title="operators", title_justify="left")
        for name in (
            "operator",
            "max key groups",
            "parallelism",
            "schema",
            "key groups with state",
            "rows",
            "bytes",
        ):
            ops.add_column(name, justify="left" if name == "operator" else "right")
        for o in job["operators"]:
            s = o["state"]
            ops.add_row(
                _text(o["operator"]),
                _text(o["max_key_groups"]),
                _text("-" if o["parallelism"] is None else o["parallelism"]),
                _text(o["schema_version"]),
                _text(s["key_groups"]),
                _text(s["rows"]),
                _text(_size(s["bytes"])),
            )
        console.print(ops)
        for o in job["operators"]:
            groups = o["key_groups"]
            if not groups:
                continue
            kg = Table(
                title=f"state of {o['operator']!r} by key group, as of checkpoint "
                f"{o['state']['as_of']}",
                title_justify="left",
            )
            for name in ("key group", "writes", "full version", "rows", "bytes"):
                kg.add_column(name, justify="right")
            picked = groups[:limit] if limit > 0 else groups
            for g in picked:
                kg.add_row(
                    _text(g["key_group"]),
                    _text(g["writes"]),
                    _text("-" if g["full_version"] is None else g["full_version"]),
                    _text(g["rows"]),
                    _text(_size(g["bytes"])),
                )
            if len(picked) < len(groups):
                kg.caption = f"… and {len(groups) - len(picked)} more key groups (--json lists all)"
            console.print(kg)


def _render_contents(console: Console, view: dict[str, Any], indent: str = "  ") -> None:
    if "value" in view:
        return
    for i, item in enumerate(view["items"]):
        if view["kind"] in {"Dict", "SortedDict"}:
            console.print(_text(f"{indent}{_short(item[0], 60)}: {_short(item[1])}"))
        elif view["kind"] in {"Set", "SortedSet"}:
            console.print(_text(f"{indent}{_short(item)}"))
        else:
            console.print(_text(f"{indent}[{i}] {_short(item)}"))
    if view["more"]:
        console.print(_text(f"{indent}… and {view['more']} more"))


def _headline(view: dict[str, Any]) -> str:
    if "value" in view:
        return f"{view['kind']} = {_short(view['value'])}"
    n = view["length"]
    return f"{view['kind']} ({n} item{'' if n == 1 else 's'})"


def render_show(data: dict[str, Any], console: Console) -> None:
    """``show``: each object with its kind and (truncated) contents."""
    what = (
        f"key {_short(data['key'])} (key group {data['key_group']})"
        if "key" in data
        else (f"key group {data['key_group']}")
    )
    console.print(
        _text(
            f"{data['job']}/{data['operator']} as of checkpoint {data['checkpoint']}: {what}, "
            f"{len(data['objects'])} object{'' if len(data['objects']) == 1 else 's'}"
        )
    )
    for view in data["objects"]:
        console.print(_text(f"{view['id']}  {_headline(view)}"))
        _render_contents(console, view)


def render_diff(data: dict[str, Any], console: Console) -> None:
    """``diff``: one line per changed object, then its changed slots."""
    s = data["summary"]
    console.print(
        _text(
            f"{data['job']}/{data['operator']}: checkpoint {data['from']} -> {data['to']}: "
            f"{s['added']} added, {s['removed']} removed, {s['changed']} changed, "
            f"{s['replaced']} replaced objects in {_n(s['key_groups_changed'], 'key group')}"
        )
    )
    marks = {"added": "+", "removed": "-", "changed": "~", "replaced": "!"}
    for entry in data["objects"]:
        head = f"{marks[entry['change']]} [kg {entry['key_group']}] {entry['id']}  "
        change = entry["change"]
        if change in {"added", "removed"}:
            console.print(_text(head + f"{change}: " + _headline(entry)))
            _render_contents(console, entry, "    ")
        elif change == "replaced":
            console.print(_text(head + f"replaced: {entry['old_kind']} -> {entry['kind']}"))
        elif "old" in entry:
            console.print(
                _text(
                    head
                    + f"{entry['kind']}: {_short(entry['old'], 50)} -> {_short(entry['new'], 50)}"
                )
            )
        else:
            console.print(
                _text(
                    head + f"{entry['kind']}: {entry['old_length']} -> {entry['new_length']} items"
                )
            )
            for slot in entry["slots"]:
                where = _short(slot["slot"], 60)
                if slot["change"] == "added":
                    line = f"+ {where}" + (f": {_short(slot['new'])}" if "new" in slot else "")
                elif slot["change"] == "removed":
                    line = f"- {where}" + (f": {_short(slot['old'])}" if "old" in slot else "")
                else:
                    line = f"~ {where}: {_short(slot['old'], 50)} -> {_short(slot['new'], 50)}"
                console.print(_text("    " + line))
            if entry["more"]:
                console.print(_text(f"    … and {entry['more']} more changed slots"))


def render_export(data: dict[str, Any], console: Console) -> None:
    console.print(
        _text(
            f"wrote {_n(data['rows'], 'row')} ({_n(data['objects'], 'object')} in "
            f"{_n(data['key_groups'], 'key group')}, checkpoint {data['checkpoint']}) to "
            f"{data['path']}"
        )
    )


def render_gc(data: dict[str, Any], console: Console) -> None:
    if not data["segments"]:
        console.print(
            _text(f"{data['storage']} keeps state in its database: there are no files to collect")
        )
        return
    deleted = data["deleted"]
    verb = "would delete" if data["dry_run"] else "deleted"
    stamped = "would stamp" if data["dry_run"] else "stamped"
    console.print(
        _text(
            f"{verb} {_n(len(deleted), 'unreferenced segment file')} "
            f"({_size(data['bytes_deleted'])}); {stamped} {data['stamped']} newly unreferenced "
            f"(deleted after the grace period of {data['grace_seconds']:g} s); "
            f"{data['referenced']} referenced files kept"
        )
    )
    for path in deleted:
        console.print(_text(f"  {path}"))
    for path in data.get("refused", []):
        console.print(_text(f"  refused (not inside the storage root): {path}"))


def render_compact(data: dict[str, Any], console: Console) -> None:
    if data["as_of"] is None:
        console.print(_text(f"job {data['job']!r} has no checkpoint: nothing to compact"))
        return
    console.print(
        _text(
            f"compacted {_n(data['key_groups'], 'key group')} of job {data['job']!r} as of checkpoint "
            f"{data['as_of']}: read {_size(data['bytes_read'])}, wrote "
            f"{_size(data['bytes_written'])}; nothing was removed (the older writes stay "
            "until `objectspace retain`)"
        )
    )
    for o in data["operators"]:
        console.print(_text(f"  {o['operator']}: {_n(o['key_groups'], 'key group')}"))


def render_retain(data: dict[str, Any], console: Console) -> None:
    kept = data["kept"]
    console.print(
        _text(
            f"job {data['job']!r}: dropped {_n(data['checkpoints_dropped'], 'checkpoint')}, removed "
            f"{data['writes_removed']} writes ({data['rows_removed']} rows) and "
            f"{data['pending_removed']} pending writes; kept checkpoints "
            f"{_id_summary(kept)}"
        )
    )
    if data["segments"] and (data["writes_removed"] or data["pending_removed"]):
        console.print("segment files no longer referenced are deleted by `objectspace gc`")

"""Opening existing checkpoint storage without changing it, and finding jobs, operators and
checkpoints in it.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlparse

from objectspace.checkpoint import CompactionPolicy, Job, Operator, Storage, open_storage
from objectspace.errors import CheckpointError, StorageError
from objectspace.serialization import (
    Serializer,
    serializer_by_name,
)
from objectspace.storage.urls import redact_text, redact_url

__all__ = [
    "find_job",
    "find_operator",
    "id_summary",
    "open_existing",
    "redact",
    "resolve_checkpoint",
    "serializer_named",
]


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
        module = sys.modules.get("objectspace.storage.postgresql.backend")
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
            f"(restorable: {id_summary(ids)})"
        )
    return checkpoint


def id_summary(ids: Sequence[int]) -> str:
    """Checkpoint ids as short text: all of them when few, else the first and last ones."""
    if not ids:
        return "none"
    if len(ids) <= 8:
        return ", ".join(map(str, ids))
    return f"{ids[0]}..{ids[-1]} ({len(ids)} checkpoints)"

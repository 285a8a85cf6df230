"""Layer 2: versioned checkpoint storage, chosen by URL.

:func:`open_backend` is the registry: it picks the backend by URL scheme and imports its
subpackage lazily (``sqlite`` for ``sqlite:///`` and ``memory://``, ``postgresql``,
``segments``). ``contract`` is what every backend implements (:class:`Backend`); ``sql`` is
a library shared by the SQL backends and segment storage's catalog, not a backend;
``blocks`` the one block format of every backend. ``stores`` holds the one-space,
unversioned stores (:class:`~objectspace.MemoryStore`, :class:`~objectspace.SQLiteStore`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import parse_qs, urlparse

from objectspace.errors import StorageError
from objectspace.storage.contract import (
    Backend,
    CheckpointInfo,
    OperatorInfo,
    PendingPart,
    RetentionStats,
    WriteInfo,
    WriteSummary,
    materialize,
)
from objectspace.storage.urls import redact_text, redact_url

__all__ = [
    "Backend",
    "CheckpointInfo",
    "OperatorInfo",
    "PendingPart",
    "RetentionStats",
    "WriteInfo",
    "WriteSummary",
    "materialize",
    "open_backend",
    "redact_text",
    "redact_url",
]


@contextmanager
def _extra(extra: str, url: str) -> Iterator[None]:
    """Turn a backend's missing optional dependency into a :class:`StorageError`."""
    try:
        yield
    except ImportError as exc:
        raise StorageError(
            f"cannot open storage {redact_url(url)!r}: {exc} "
            f"(install the extra: pip install 'objectspace[{extra}]')"
        ) from exc


def _open_catalog(url: str) -> Backend:
    """The catalog of a segment storage: as :func:`open_backend`, but a new SQLite catalog
    gets :data:`~objectspace.storage.sqlite.backend.CATALOG_PAGE_SIZE` pages."""
    return open_backend(url, _catalog=True)


def open_backend(url: str, *, _catalog: bool = False) -> Backend:
    """The checkpoint storage backend for ``url``.

    ``memory://[name]`` (in-process), ``sqlite:///relative/path`` or
    ``sqlite:////absolute/path``, ``postgresql://…``, or segment files on a filesystem URL
    with ``?catalog=<sqlite or postgresql URL>``. Each backend's module is imported only
    when its scheme is opened; a missing optional dependency raises :class:`StorageError`
    naming the extra to install.
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
        from objectspace.storage.sqlite import SQLiteBackend

        return SQLiteBackend(None, memory_name=(parsed.netloc + parsed.path) or "default")
    if scheme == "sqlite":
        from objectspace.storage.sqlite import SQLiteBackend

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
        if _catalog:
            from objectspace.storage.sqlite.backend import CATALOG_PAGE_SIZE

            return SQLiteBackend(path, page_size=CATALOG_PAGE_SIZE)
        return SQLiteBackend(path)
    if scheme in ("postgresql", "postgres"):
        with _extra("postgresql", url):
            from objectspace.storage.postgresql import PostgresBackend

        return PostgresBackend(url)
    if "catalog=" in parsed.query or scheme in ("file", "s3", "s3a", "hdfs", "gs", "memfs"):
        with _extra("segments", url):
            from objectspace.storage.segments import SegmentBackend

        return SegmentBackend.from_url(url, _open_catalog)
    raise StorageError(
        f"cannot open storage {redact_url(url)!r}: unknown scheme {parsed.scheme!r} (expected memory://, "
        "sqlite:///, postgresql://, or a filesystem URL such as file:// or s3:// with "
        "?catalog=<sqlite or postgresql URL>)"
    )

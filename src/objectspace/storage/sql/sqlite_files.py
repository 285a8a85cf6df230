"""Opening SQLite files: the checks and connection settings shared by every SQLite user.

:func:`check_sqlite_file` refuses a file that is not SQLite or holds another kind of
objectspace data; :func:`connect_sqlite` opens a connection in WAL mode with the project's
page size and cache. Used by the ``sqlite:///`` backend and by :class:`~objectspace.SQLiteStore`.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from pathlib import Path

from objectspace.errors import StorageError
from objectspace.storage import forks

__all__ = ["PAGE_SIZE", "WAL_BYTES_STORAGE", "check_sqlite_file", "connect_sqlite"]


# A new database's page size: the file system's block size. Every commit writes whole pages
# (to the WAL, and again when the WAL is copied back), so pages larger than the rows and
# blocks a commit changes cost bytes at the disk (BENCHMARKS.md). Below 4 KiB a B-tree of
# many rows grows deeper; SQLiteStore, whose rows are whole blocks, asks for 1 KiB itself.
PAGE_SIZE = 4096
# The WAL is copied back into the database once it holds this much (and cut back to it
# after a copy if it grew beyond: readers kept it), unless the caller asks for another
# size. A page changed by several commits between two copies reaches the database once:
# checkpoint storage (``sqlite:///`` and segment catalogs) asks for WAL_BYTES_STORAGE.
_WAL_BYTES = 4 * 1024 * 1024
WAL_BYTES_STORAGE = 64 * 1024 * 1024
"""The WAL size of checkpoint storage: the larger the WAL, the more often a page that
several commits change (retention frees pages that later saves reuse) reaches the database
once, and the fewer bytes reach the disk. (A :class:`~objectspace.SQLiteStore`, whose
commits append, gains nothing from it and keeps 4 MiB.) 64 MiB is RocksDB's default memtable
size; the cost is up to that much disk space for the WAL while the storage is open (it is
removed on close) and a copy of up to that much in the commit that crosses it."""
_CACHE_KIB = 32 * 1024


_HEADER = b"SQLite format 3\x00"
# The first table of each kind of objectspace SQLite file, and what that kind is called.
_KINDS = {"space_meta": "an objectspace store (SQLiteStore)", "ckpt_meta": "objectspace storage"}


def check_sqlite_file(path: str, marker: str) -> None:
    """Refuse, without changing it, a file that objectspace must not open as the SQLite file
    whose first table is ``marker`` (``space_meta``: a :class:`SQLiteStore`; ``ckpt_meta``:
    versioned storage or a segment catalog).

    A missing path or an empty file is created; a file holding ``marker`` is opened; a
    SQLite database without tables (a creation that stopped early) is initialised. Anything
    else (another application's database, a file that is not SQLite) raises
    :class:`~objectspace.StorageError` naming the file, which stays byte for byte as it was:
    no table is added and its journal mode is not switched to WAL.
    """
    want = _KINDS[marker]
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StorageError(f"cannot open {path!r} as {want}: {exc}") from exc
    if stat.st_size == 0:
        return
    # The check opens and closes the file, and closing any descriptor of a file drops every
    # POSIX lock this process holds on it, including those of a live SQLite connection to it.
    # Without its locks, another process that closes its connection believes it is the last
    # one, copies the WAL back and deletes it under the live connection, whose later commits
    # are then lost. So a file this process has open through connect_sqlite is read only
    # through SQLite, which shares one descriptor per file among a process's connections.
    with _OPEN_LOCK:
        in_use = bool(_OPEN.get((stat.st_dev, stat.st_ino)))
    _check_file(path, marker, want, in_use=in_use)


# (device, inode) → how many connections from connect_sqlite this process has open on it.
_OPEN: dict[tuple[int, int], int] = {}
_OPEN_LOCK = threading.Lock()


def _opened(conn: sqlite3.Connection, path: str) -> None:
    stat = os.stat(path)
    key = (stat.st_dev, stat.st_ino)
    with _OPEN_LOCK:
        _OPEN[key] = _OPEN.get(key, 0) + 1
    conn._release = weakref.finalize(conn, _closed, key)  # type: ignore[attr-defined]


def _closed(key: tuple[int, int]) -> None:
    with _OPEN_LOCK:
        left = _OPEN.get(key, 0) - 1
        if left > 0:
            _OPEN[key] = left
        else:
            _OPEN.pop(key, None)


def _forget_open_files() -> None:
    """In a forked child: it holds none of its parent's locks (POSIX locks are not inherited),
    so closing a descriptor there drops nothing; the inherited connections are abandoned."""
    global _OPEN_LOCK
    _OPEN_LOCK = threading.Lock()
    _OPEN.clear()


forks.on_fork_in_child(_forget_open_files)


class _Connection(sqlite3.Connection):
    """A connection that tells :func:`check_sqlite_file` when its file is no longer open."""

    def close(self) -> None:
        super().close()
        release = getattr(self, "_release", None)
        if release is not None:
            release()


def _check_file(path: str, marker: str, want: str, *, in_use: bool = False) -> None:
    if not in_use:  # a file this process has open is a SQLite database
        try:
            with open(path, "rb") as f:
                head = f.read(len(_HEADER))
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StorageError(f"cannot open {path!r} as {want}: {exc}") from exc
        if head != _HEADER:
            raise StorageError(
                f"{path!r} is not a SQLite database, so not {want}; objectspace leaves it "
                "unchanged (give a new path, or an empty file, to create one)"
            )
    try:
        # Without a WAL beside it (and not open in this process), read the file as immutable:
        # no lock, and no -wal/-shm files created. With one (a WAL database in use), read
        # through it: the schema may not be in the main file yet, and the -shm file is there.
        try:
            wal = in_use or os.path.getsize(path + "-wal") > 0
        except OSError:
            wal = False
        mode = "?mode=ro" if wal else "?mode=ro&immutable=1"
        conn = sqlite3.connect(Path(path).absolute().as_uri() + mode, uri=True)
        try:
            tables = {
                name
                for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StorageError(f"cannot read {path!r} as {want}: {exc}") from exc
    if not tables or marker in tables:
        return
    other = next((kind for name, kind in _KINDS.items() if name in tables), None)
    what = (
        other
        or f"a SQLite database of another application (tables: {', '.join(sorted(tables)[:5])})"
    )
    raise StorageError(
        f"{path!r} is {what}, not {want}; objectspace leaves it unchanged "
        "(give a new path, or an empty file, to create one)"
    )


def _enable_wal(conn: sqlite3.Connection, seconds: float = 60.0) -> None:
    """Switch to WAL unless the file is in WAL already. Switching can fail with "database is
    locked" at once, without SQLite's busy wait, while another process writes: retry."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def connect_sqlite(
    path: str,
    *,
    synchronous: str = "NORMAL",
    page_size: int = PAGE_SIZE,
    wal_bytes: int = _WAL_BYTES,
) -> sqlite3.Connection:
    """Open ``path`` in WAL mode for one writer and concurrent readers.

    ``synchronous=NORMAL`` keeps every committed transaction across a process crash (the WAL
    is in the operating system's cache); an operating-system crash or power loss can lose
    the commits made since the WAL was last synced (at a WAL checkpoint, every ``wal_bytes``
    of WAL, 4 MiB unless given, or as
    the OS writes dirty pages back), never corrupt the file: it opens at an earlier commit.
    Pass ``"FULL"`` to survive those too, at the cost of an fsync per commit (several times
    the bytes at the disk and the time of a commit). ``page_size``
    applies to a database created by this call; an existing file keeps its own.
    """
    if synchronous.upper() not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
        raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise StorageError(f"cannot open SQLite store {path!r}: folder {parent!r} does not exist")
    try:
        conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=60, factory=_Connection
        )
        conn.execute(f"PRAGMA page_size={int(page_size)}")  # before WAL fixes the layout
        _enable_wal(conn)
        conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
        # Copy the WAL back into the database once it holds ~4 MiB, whatever the file's page
        # size (SQLite's default is 1,000 pages: 4 MiB only with 4 KiB pages).
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        conn.execute(f"PRAGMA wal_autocheckpoint={max(1, int(wal_bytes) // int(size))}")
        conn.execute(f"PRAGMA journal_size_limit={int(wal_bytes)}")
        # A checkpoint touches pages all over the file: keep them cached between commits
        # (SQLite's default cache is 2 MB; this is an upper bound, used only as needed).
        conn.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
        # Builds of SQLite that default to secure_delete=ON (Debian's, among others) overwrite
        # every freed page with zeros, through the WAL: retention that drops a key group's old
        # blocks wrote as many bytes again as the blocks held. FAST still zeroes deleted
        # content inside the pages a commit writes anyway, and writes no page for it.
        conn.execute("PRAGMA secure_delete=FAST")
        _opened(conn, path)
    except sqlite3.Error as exc:
        raise StorageError(f"cannot open SQLite store {path!r}: {exc}") from exc
    return conn

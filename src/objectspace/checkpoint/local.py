"""An instance's local store: each key group's committed state by object, on local disk.

A :class:`LocalStore` is one SQLite file per instance (job, operator, index, parallelism)
holding, per key group, the rows its objects are stored as (the tables of
:mod:`objectspace.space`) keyed so that one object's rows, and all the objects of one key,
are one range. It lets an instance keep only the objects a batch touches as Python
objects (:class:`~objectspace.ObjectSpace` with a backing, see :class:`GroupView`) and
lets another process of the machine, or the same one after a restart, continue without
restoring what the batch does not touch.

It is a cache, never the source of truth. Per key group it records the committed write
its rows are the state of (``(write id, version, digest)``) and its restore chain's cost;
a key group is used only while that write is the one the store's restore chain ends with
as of the checkpoint the instance runs on, and is rebuilt from the store otherwise. A
save's edits wait as *pending* rows (with the write they will be once committed) until the
save is acknowledged; a process that finds the write committed applies them (inside
SQLite), one that finds it was not drops them. Every row carries a CRC-32 of its key group, key and value,
checked on read: a row that fails it raises :class:`~objectspace.CorruptStateError`, and
the instance rebuilds the key group from the store. Nothing stored here is unpickled:
values are the serializer's own encoding.

Row keys: the object id's UTF-8 with NUL escaped (``00`` → ``00 ff``), ``00 00``, a tag
(``K`` the object's kind row in ``state/index``, ``M``/``I``/``D`` its ``metadata``,
``items`` and ``data`` tables), then the row's own key.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pathlib
import sqlite3
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import NamedTuple

from objectspace.errors import CorruptStateError
from objectspace.space import INDEX_TABLE
from objectspace.tables import DELETED, TableChanges

__all__ = ["GroupView", "LocalHead", "LocalStore", "Pending", "holds_state", "try_lock", "unlock"]

_ITEM = "state/item/"
_SUFFIX_TAG = {"metadata": b"M", "items": b"I", "data": b"D"}
_TAG_SUFFIX = {v[0]: k for k, v in _SUFFIX_TAG.items()}
_KIND_TAG = b"K"
_END = b"\x00\x00"
_CRC = struct.Struct(">I")
_SCHEMA = 3
_GROUP_TABLES = ("rows", "groups", "pending", "pending_rows")

_DDL = (
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value BLOB) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS rows (g INTEGER, k BLOB, v BLOB, PRIMARY KEY (g, k)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS groups (g INTEGER PRIMARY KEY, write_id INTEGER, "
    "version INTEGER, digest INTEGER, full_bytes INTEGER, diff_bytes INTEGER, "
    "length INTEGER)",
    "CREATE TABLE IF NOT EXISTS pending (g INTEGER PRIMARY KEY, checkpoint_id INTEGER, "
    "write_id INTEGER, version INTEGER, digest INTEGER, parent INTEGER, full INTEGER, "
    "bytes INTEGER, rows INTEGER)",
    # A pending save's edits: op 0 put k = v, 1 delete k, 2 delete the range k <= key < v.
    "CREATE TABLE IF NOT EXISTS pending_rows (g INTEGER, seq INTEGER, op INTEGER, k BLOB, "
    "v BLOB, PRIMARY KEY (g, seq)) WITHOUT ROWID",
)


class LocalHead(NamedTuple):
    """The committed write a key group's local rows are the state of, and its chain's cost
    (see :class:`~objectspace.checkpoint.compaction.CompactionPolicy`); ``write_id`` 0:
    no write (an empty key group)."""

    write_id: int
    version: int
    digest: int | None
    full_bytes: int | None
    diff_bytes: int
    length: int


class Pending(NamedTuple):
    """A save of one key group waiting for its commit: the write it is (``write_id`` 0 for a
    staged write, whose id the commit gives; then ``version``, ``digest`` and ``parent``
    identify it). Its edits wait in the local store's ``pending_rows``."""

    checkpoint_id: int
    write_id: int
    version: int
    digest: int | None
    parent: int
    full: bool
    bytes: int
    rows: int


def _escape(object_id: str) -> bytes:
    raw = object_id.encode("utf-8")
    return raw.replace(b"\x00", b"\x00\xff") if b"\x00" in raw else raw


def object_key(object_id: str) -> bytes:
    """The prefix of every row of object ``object_id``."""
    return _escape(object_id) + _END


def _unescape(raw: bytes) -> str:
    return raw.replace(b"\x00\xff", b"\x00").decode("utf-8")


def _id_end(k: bytes) -> int:
    """Where the escaped object id of local key ``k`` ends: at its first ``00 00`` (an
    escaped id has none: its NULs are ``00 ff``, and UTF-8 has no ``ff``)."""
    return k.find(_END)


def _row_key(table: str, key: bytes) -> bytes:
    """The local key of row ``key`` of a space's ``table``."""
    if table == INDEX_TABLE:
        return _escape(key.decode("utf-8")) + _END + _KIND_TAG
    if table.startswith(_ITEM):
        cut = table.rfind("/")
        tag = _SUFFIX_TAG.get(table[cut + 1 :])
        if tag is not None and cut > len(_ITEM):
            return object_key(table[len(_ITEM) : cut]) + tag + key
    raise CorruptStateError(f"a space wrote table {table!r}, which a local store cannot hold")


def _table_range(table: str) -> tuple[bytes, bytes]:
    """The local key range of a space's whole ``table`` (for a table delete)."""
    start = _row_key(table, b"")
    return start, start + b"\xff"


def _seal(g: int, k: bytes, v: bytes) -> bytes:
    return v + _CRC.pack(zlib.crc32(v, zlib.crc32(k, g & 0xFFFFFFFF)))


def _open(g: int, k: bytes, sealed: bytes) -> bytes:
    if type(sealed) is not bytes or type(k) is not bytes:
        raise CorruptStateError(f"local store row {k!r} of key group {g} is not bytes")
    v = sealed[:-4]
    if len(sealed) < 4 or _CRC.unpack(sealed[-4:])[0] != zlib.crc32(
        v, zlib.crc32(k, g & 0xFFFFFFFF)
    ):
        raise CorruptStateError(f"local store row {k!r} of key group {g} fails its checksum")
    return v


def try_lock(fd: int) -> bool:
    """Take an exclusive lock on ``fd`` (a store's ``.lock`` file) without waiting; whether
    it was free."""
    try:
        import fcntl
    except ImportError:  # not POSIX: one process per file is the caller's care
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (BlockingIOError, PermissionError):
        return False
    return True


def unlock(fd: int) -> None:
    """Release the lock :func:`try_lock` took on ``fd``."""
    with contextlib.suppress(ImportError, OSError):
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_UN)


def holds_state(path: str) -> bool:
    """Whether the store in ``path`` holds any key group or a save waiting for its commit
    (a missing or unreadable file holds none)."""
    if not os.path.exists(path):
        return False
    try:
        # (read-write, never created: a read-only connection cannot open a database in
        # WAL mode whose -wal file is gone, and would read as holding nothing)
        uri = pathlib.Path(os.path.abspath(path)).as_uri() + "?mode=rw"
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
            query = "SELECT 1 FROM groups UNION ALL SELECT 1 FROM pending LIMIT 1"
            return db.execute(query).fetchone() is not None
    except sqlite3.OperationalError as exc:
        return "no such table" not in str(exc)  # busy or locked: in use, so kept
    except sqlite3.Error:
        return False


class LocalStore:
    """The local store of one instance, in the SQLite file ``path`` (created if missing).

    One process uses a file at a time: :meth:`open` takes an exclusive lock on it
    (``None`` when another process holds it: that process runs the instance, or an
    attempt of it still does, and the caller works without a local store's history, in a
    file of its own). ``identity`` (bytes) names what the file caches; a file of another
    identity, of another schema, or that SQLite cannot read is started afresh.
    """

    def __init__(self, path: str, identity: bytes, lock_fd: int | None) -> None:
        self.path = path
        self._lock_fd = lock_fd
        self.locked = lock_fd is not None
        self._identity = identity
        self._db = self._connect(path, identity)
        # Where key groups it lacks may come from: ``source(key_groups, at_most)`` puts
        # those a copy made at or before checkpoint ``at_most`` holds (copies.Source).
        self.source: Callable[[list[int], int], int] | None = None

    @classmethod
    def open(
        cls, path: str, identity: bytes, seed: Callable[[str], object] | None = None
    ) -> LocalStore | None:
        """The store in ``path``, locked for this process, or ``None`` if it is in use.
        ``seed(path)``, called under the lock when the file at ``path`` holds no key group
        and no pending save (or there is none), may put one there (:mod:`.seeds`); a file
        it puts is checked as any other (its identity, its schema)."""
        fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        if not try_lock(fd):
            os.close(fd)
            return None
        try:
            if seed is not None and not holds_state(path):
                for suffix in ("", "-wal", "-shm"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path + suffix)
                seed(path)
            return cls(path, identity, fd)
        except BaseException:
            os.close(fd)
            raise

    @staticmethod
    def delete_unused(path: str) -> bool:
        """Delete the store in ``path`` (its files and lock file) unless a process holds
        it; whether it is gone."""
        try:
            fd = os.open(path + ".lock", os.O_RDWR)
        except FileNotFoundError:
            fd = None
        except OSError:
            return False
        if fd is not None and not try_lock(fd):
            os.close(fd)
            return False
        try:
            for suffix in ("", "-wal", "-shm", ".lock"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path + suffix)
        except OSError:
            return False
        finally:
            if fd is not None:
                os.close(fd)
        return True

    def release(self) -> None:
        """Let another process open the file until :meth:`acquire` (the connection stays)."""
        if self._lock_fd is not None and self.locked:
            unlock(self._lock_fd)
            self.locked = False

    def acquire(self) -> bool:
        """Take the file's lock again after :meth:`release`; whether it was free."""
        if self._lock_fd is None:
            return False
        if not self.locked:
            self.locked = try_lock(self._lock_fd)
        return self.locked

    @staticmethod
    def _connect(path: str, identity: bytes) -> sqlite3.Connection:
        for attempt in range(2):
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            db.text_factory = bytes  # a value damaged into text still reads, then fails its CRC
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=OFF")  # a cache: a lost write is a rebuild
                db.execute("PRAGMA cache_size=-8192")
                for ddl in _DDL:
                    db.execute(ddl)
                found = {
                    bytes(name).decode("utf-8", "replace"): value
                    for name, value in db.execute("SELECT name, value FROM meta")
                }
                if not found:
                    db.executemany(
                        "INSERT INTO meta VALUES (?, ?)",
                        [("schema", _SCHEMA), ("identity", identity)],
                    )
                    return db
                if found.get("schema") == _SCHEMA and found.get("identity") == identity:
                    return db
            except sqlite3.DatabaseError:
                if attempt:
                    raise
            db.close()
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path + suffix)
        raise AssertionError("unreachable")

    @contextlib.contextmanager
    def frozen(self, folder: str) -> Iterator[str]:
        """A consistent file of this whole store while the context lasts: its own file, the
        log checkpointed into it and a read transaction held (no copy written), or where
        another connection holds the log, a backup in ``folder``."""
        db, backup = self._db, os.path.join(folder, "store.db")
        if db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:  # busy
            with contextlib.closing(sqlite3.connect(backup)) as copy:
                db.backup(copy)
            yield backup
            return
        db.execute("BEGIN")
        try:
            db.execute("SELECT count(*) FROM meta").fetchone()  # the read starts here
            yield self.path
        finally:
            db.execute("COMMIT")

    def adopt(self, source: str) -> bool:
        """Replace this store, which holds nothing, by the store file ``source`` (moved
        here; a copy of this store); whether it is of this store's identity and schema
        (if not, the store is empty again)."""
        self._db.close()
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path + suffix)
        os.replace(source, self.path)
        self._db = self._connect(self.path, self._identity)
        return self.holds() > 0

    def copied_at(self) -> int | None:
        """The checkpoint of the last copy of this file put in storage (:meth:`set_copied_at`)."""
        row = self._db.execute("SELECT value FROM meta WHERE name = 'copied_at'").fetchone()
        return None if row is None or type(row[0]) is not int else row[0]

    def set_copied_at(self, checkpoint_id: int | None) -> None:
        self._db.execute("INSERT OR REPLACE INTO meta VALUES ('copied_at', ?)", (checkpoint_id,))

    def import_groups(self, source: str, key_groups: Iterable[range]) -> None:
        """Copy the key groups ``key_groups`` of the store file ``source`` (the same
        operator's store at another parallelism, a copy read in part) into this store as
        they are there: rows, recorded heads, pending saves; in one transaction. Raises
        ``sqlite3.DatabaseError`` (nothing copied) when ``source`` is not a store of this
        schema or cannot be read."""
        db = self._db
        db.execute("ATTACH DATABASE ? AS source", (source,))
        try:
            found = db.execute("SELECT value FROM source.meta WHERE name = 'schema'").fetchone()
            if found is None or found[0] != _SCHEMA:
                raise sqlite3.DatabaseError(f"{source} is not a local store of schema {_SCHEMA}")
            db.execute("BEGIN IMMEDIATE")
            try:
                for table, run in itertools.product(_GROUP_TABLES, key_groups):
                    db.execute(
                        f"INSERT OR REPLACE INTO main.{table} "
                        f"SELECT * FROM source.{table} WHERE g >= ? AND g < ?",
                        (run.start, run.stop),
                    )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        finally:
            db.execute("DETACH DATABASE source")

    def holds(self) -> int:
        """How many key groups the store holds (with a recorded head or a pending save)."""
        found = self._db.execute(
            "SELECT count(*) FROM (SELECT g FROM groups UNION SELECT g FROM pending)"
        ).fetchone()
        return int(found[0])

    def close(self) -> None:
        """Close the file and release its lock."""
        with contextlib.suppress(sqlite3.Error):
            self._db.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
            self.locked = False

    # -- what is cached ---------------------------------------------------------------------

    def heads(self, key_groups: Iterable[int]) -> dict[int, LocalHead]:
        """The recorded head of each of ``key_groups`` the file holds."""
        wanted = sorted(set(key_groups))
        if not wanted:
            return {}
        found = {}
        for g, *rest in self._db.execute(
            "SELECT g, write_id, version, digest, full_bytes, diff_bytes, length FROM groups "
            "WHERE g BETWEEN ? AND ?",
            (wanted[0], wanted[-1]),
        ):
            found[g] = LocalHead(*rest)
        return {g: found[g] for g in wanted if g in found}

    def pending(self, key_group: int) -> Pending | None:
        row = self._db.execute(
            "SELECT checkpoint_id, write_id, version, digest, parent, full, bytes, rows "
            "FROM pending WHERE g = ?",
            (key_group,),
        ).fetchone()
        return None if row is None else Pending._make((*row[:5], bool(row[5]), *row[6:]))

    def set_pending(
        self, key_group: int, pending: Pending, edits: Mapping[str, TableChanges]
    ) -> None:
        """Record a save of ``key_group`` and its ``edits`` (what changed since the rows
        kept, also for a full write: ``pending.full`` is the write's, for its chain) until
        :meth:`apply_pending` or :meth:`drop_pending`; the edits go to the file row by row,
        never as one object."""
        g = key_group
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("DELETE FROM pending_rows WHERE g = ?", (g,))
            db.execute(
                "INSERT OR REPLACE INTO pending VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", (g, *pending)
            )
            db.executemany(
                "INSERT INTO pending_rows VALUES (?, ?, ?, ?, ?)", self._pending_rows(g, edits)
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    @staticmethod
    def _pending_rows(
        g: int, edits: Mapping[str, TableChanges]
    ) -> Iterator[tuple[int, int, int, bytes, bytes | None]]:
        seq = 0
        for table, changes in edits.items():
            if changes.truncated:
                low, high = _table_range(table)
                yield g, seq, 2, low, high
                seq += 1
        for table, changes in edits.items():
            for key, value in changes.rows.items():
                k = _row_key(table, key)
                if value is DELETED:
                    yield g, seq, 1, k, None
                else:
                    yield g, seq, 0, k, _seal(g, k, value)  # type: ignore[arg-type]
                seq += 1

    def drop_pending(self, key_groups: Iterable[int]) -> None:
        groups = [(g,) for g in key_groups]
        self._db.executemany("DELETE FROM pending WHERE g = ?", groups)
        self._db.executemany("DELETE FROM pending_rows WHERE g = ?", groups)

    def apply_pending(self, key_group: int, head: LocalHead) -> bool:
        """Apply the pending save of ``key_group`` (its write was committed) and record
        ``head``, in one transaction, inside SQLite; whether there was one."""
        g = key_group
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            found = db.execute("SELECT 1 FROM pending WHERE g = ?", (g,)).fetchone()
            if found is None:
                db.execute("ROLLBACK")
                return False
            for low, high in db.execute(
                "SELECT k, v FROM pending_rows WHERE g = ? AND op = 2", (g,)
            ).fetchall():
                db.execute("DELETE FROM rows WHERE g = ? AND k >= ? AND k < ?", (g, low, high))
            db.execute(
                "DELETE FROM rows WHERE g = ? AND k IN "
                "(SELECT k FROM pending_rows WHERE g = ? AND op = 1)",
                (g, g),
            )
            db.execute(
                "INSERT OR REPLACE INTO rows SELECT g, k, v FROM pending_rows "
                "WHERE g = ? AND op = 0",
                (g,),
            )
            self._set_head(g, head)
            db.execute("DELETE FROM pending WHERE g = ?", (g,))
            db.execute("DELETE FROM pending_rows WHERE g = ?", (g,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return True

    def replace(
        self, key_group: int, tables: Mapping[str, Mapping[bytes, bytes]], head: LocalHead
    ) -> None:
        """Make ``tables`` (a key group restored from storage) the whole local state of
        ``key_group`` and record ``head``, in one transaction; drops any pending save."""
        g = key_group
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            for table in ("rows", "pending", "pending_rows"):
                db.execute(f"DELETE FROM {table} WHERE g = ?", (g,))
            db.executemany(
                "INSERT OR REPLACE INTO rows VALUES (?, ?, ?)",
                (
                    (g, k, _seal(g, k, value))
                    for table, rows in tables.items()
                    for k, value in ((_row_key(table, key), v) for key, v in rows.items())
                ),
            )
            self._set_head(g, head)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def catch_up(self, key_group: int, edits: Mapping[str, TableChanges], head: LocalHead) -> None:
        """Apply ``edits`` (the committed writes that followed the state kept, merged) to
        the rows of ``key_group`` and record ``head``, in one transaction; drops any
        pending save."""
        g = key_group
        db = self._db
        ops = list(self._pending_rows(g, edits))
        db.execute("BEGIN IMMEDIATE")
        try:
            for table in ("pending", "pending_rows"):
                db.execute(f"DELETE FROM {table} WHERE g = ?", (g,))
            for _, _, op, k, v in ops:
                if op == 2:  # a deleted table (these come first)
                    db.execute("DELETE FROM rows WHERE g = ? AND k >= ? AND k < ?", (g, k, v))
            db.executemany(
                "DELETE FROM rows WHERE g = ? AND k = ?",
                [(g, k) for _, _, op, k, _ in ops if op == 1],
            )
            db.executemany(
                "INSERT OR REPLACE INTO rows VALUES (?, ?, ?)",
                [(g, k, v) for _, _, op, k, v in ops if op == 0],
            )
            self._set_head(g, head)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def forget(self, key_groups: Iterable[int]) -> None:
        """Drop what the file holds of ``key_groups`` (rows, head, pending edits)."""
        db = self._db
        groups = [(g,) for g in key_groups]
        db.execute("BEGIN IMMEDIATE")
        try:
            for table in _GROUP_TABLES:
                db.executemany(f"DELETE FROM {table} WHERE g = ?", groups)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _set_head(self, key_group: int, head: LocalHead) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO groups VALUES (?, ?, ?, ?, ?, ?, ?)",
            (key_group, *head),
        )

    def full_changes(
        self, key_group: int, edits: Mapping[str, TableChanges]
    ) -> dict[str, TableChanges]:
        """The whole state of ``key_group`` once ``edits`` apply to the rows kept, as the
        changes of a full write (one key group's rows in memory, as bytes: no object of
        it is decoded). A key group with no rows kept (its first write) is its edits as
        they are, when they delete nothing: no second copy."""
        if self._db.execute(
            "SELECT 1 FROM rows WHERE g = ? LIMIT 1", (key_group,)
        ).fetchone() is None and all(
            not c.truncated and all(v is not DELETED for v in c.rows.values())
            for c in edits.values()
        ):
            return dict(edits)
        whole: dict[str, TableChanges] = {}
        for _, table, key, kept in self.view(key_group).rows():
            found = whole.get(table)
            if found is None:
                found = whole[table] = TableChanges()
            found.rows[key] = kept
        for table, changes in edits.items():
            target = whole.get(table)
            if target is None:
                target = whole[table] = TableChanges()
            elif changes.truncated:
                target.rows.clear()
            for key, edit in changes.rows.items():
                if edit is DELETED:
                    target.rows.pop(key, None)
                else:
                    target.rows[key] = edit
        return {t: c for t, c in whole.items() if c.rows}

    def view(self, key_group: int, repair: Callable[[int], None] | None = None) -> GroupView:
        """The rows of ``key_group``, as an object space's backing; ``repair(key_group)``
        rebuilds them when a read finds a damaged row (then the read is tried again)."""
        return GroupView(self, key_group, repair)

    # -- reads -------------------------------------------------------------------------------

    def _range(self, g: int, low: bytes, high: bytes) -> list[tuple[bytes, bytes]]:
        return self._db.execute(
            "SELECT k, v FROM rows WHERE g = ? AND k >= ? AND k < ?", (g, low, high)
        ).fetchall()

    def fetch(self, g: int, object_id: str) -> tuple[bytes, dict[str, dict[bytes, bytes]]] | None:
        """Object ``object_id``'s kind row and tables, or ``None`` if the key group has none."""
        start = object_key(object_id)
        rows = self._range(g, start, start + b"\xff")
        if not rows:
            return None
        kind = None
        tables: dict[str, dict[bytes, bytes]] = {}
        cut = len(start)
        prefix = _ITEM + object_id + "/"
        for k, sealed in rows:
            v = _open(g, k, sealed)
            tag = k[cut]
            if tag == _KIND_TAG[0]:
                kind = v
                continue
            suffix = _TAG_SUFFIX.get(tag)
            if suffix is None:
                raise CorruptStateError(f"local store row {k!r} of key group {g} has no table")
            name = prefix + suffix
            table = tables.get(name)
            if table is None:
                table = tables[name] = {}
            table[k[cut + 1 :]] = v
        if kind is None:
            raise CorruptStateError(f"object {object_id!r} of key group {g} has rows but no kind")
        return kind, tables

    def ids(self, g: int, prefix: str = "") -> Iterator[str]:
        """Ids of the key group's objects starting with ``prefix``, in key order."""
        low = _escape(prefix)
        for (k,) in self._db.execute(
            "SELECT k FROM rows WHERE g = ? AND k >= ? AND k < ? AND substr(k, -3) = ?",
            (g, low, low + b"\xff", _END + _KIND_TAG),
        ):
            if _id_end(k) == len(k) - 3:  # a kind row, not a row whose own key ends so
                yield _unescape(k[:-3])

    def rows(self, g: int) -> Iterator[tuple[str, str, bytes, bytes]]:
        """Every row of the key group as ``(object id, space table, row key, value)``, in
        key order (streamed: a full write of the key group without its objects)."""
        cursor = self._db.execute("SELECT k, v FROM rows WHERE g = ? ORDER BY k", (g,))
        for k, sealed in cursor:
            v = _open(g, k, sealed)
            cut = _id_end(k)
            object_id = _unescape(k[:cut])
            tag = k[cut + 2]
            if tag == _KIND_TAG[0]:
                yield object_id, INDEX_TABLE, object_id.encode("utf-8"), v
            else:
                yield object_id, f"{_ITEM}{object_id}/{_TAG_SUFFIX[tag]}", k[cut + 3 :], v


class GroupView:
    """One key group of a :class:`LocalStore`, as an object space's backing
    (:class:`objectspace.space.Backing`). A read that finds a damaged row calls ``repair``
    (which rebuilds the key group from storage) and reads again."""

    __slots__ = ("key_group", "repair", "store")

    def __init__(
        self, store: LocalStore, key_group: int, repair: Callable[[int], None] | None = None
    ) -> None:
        self.store = store
        self.key_group = key_group
        self.repair = repair

    def _again(self, exc: CorruptStateError) -> None:
        if self.repair is None:
            raise exc
        self.repair(self.key_group)

    def fetch(self, object_id: str) -> tuple[bytes, dict[str, dict[bytes, bytes]]] | None:
        try:
            return self.store.fetch(self.key_group, object_id)
        except CorruptStateError as exc:
            self._again(exc)
        return self.store.fetch(self.key_group, object_id)

    def ids(self, prefix: str = "") -> Iterator[str]:
        try:
            found = list(self.store.ids(self.key_group, prefix))
        except CorruptStateError as exc:
            self._again(exc)
            found = list(self.store.ids(self.key_group, prefix))
        return iter(found)

    def rows(self) -> Iterator[tuple[str, str, bytes, bytes]]:
        """Every row, streamed; a damaged row repairs the key group and the rows are read
        again from the start (a caller that stores them by key overwrites what it had)."""
        try:
            yield from self.store.rows(self.key_group)
        except CorruptStateError as exc:
            self._again(exc)
            yield from self.store.rows(self.key_group)

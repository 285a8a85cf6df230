"""The table contract every store keeps, run on MemoryStore and SQLiteStore alike.

Plus what only SQLite has: pickling, reopening, schema versions and bad paths.
"""

from __future__ import annotations

import hashlib
import pickle
import sqlite3
import subprocess
import sys
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import objectspace as osp
from objectspace.storage.sql.sqlite_files import check_sqlite_file, connect_sqlite
from objectspace.tables import WriterStatus

FULL = osp.CheckpointKind.FULL
DIFF = osp.CheckpointKind.DIFFERENTIAL


class CommitFailed(Exception):
    pass


def _fail() -> osp.WriteStats:
    raise CommitFailed("injected")


def commit(store: osp.Store, kind: osp.CheckpointKind, fill: Callable[[osp.StateWriter], None]):
    writer = store.writer(kind)
    fill(writer)
    return writer.commit()


def seed(store: osp.Store) -> None:
    """Two tables of two rows each."""

    def fill(w: osp.StateWriter) -> None:
        w.put("t1", b"a", b"1")
        w.put("t1", b"b", b"2")
        w.put("t2", b"x", b"9")
        w.put("t2", b"y", b"8")

    commit(store, DIFF, fill)


SEEDED = {"t1": {b"a": b"1", b"b": b"2"}, "t2": {b"x": b"9", b"y": b"8"}}


@pytest.fixture(params=["memory", "sqlite"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], osp.Store]]:
    """A factory of stores; each SQLite store gets a file of its own."""
    opened: list[osp.SQLiteStore] = []
    counter = iter(range(1_000_000))

    def make() -> osp.Store:
        if request.param == "memory":
            return osp.MemoryStore()
        store = osp.SQLiteStore(tmp_path / f"store-{next(counter)}.db")
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def store(make_store: Callable[[], osp.Store]) -> osp.Store:
    return make_store()


class TestStoreContract:
    def test_new_store_is_empty(self, store: osp.Store) -> None:
        reader = store.reader()
        assert reader.tables() == []
        assert list(reader.items("t")) == []
        assert list(reader.keys("t")) == []
        assert reader.get("t", b"k") is None
        assert reader.dump() == {}
        assert store.dump() == {}

    def test_put_and_read_back(self, store: osp.Store) -> None:
        seed(store)
        reader = store.reader()
        assert sorted(reader.tables()) == ["t1", "t2"]
        assert dict(reader.items("t1")) == SEEDED["t1"]
        assert sorted(reader.keys("t2")) == [b"x", b"y"]
        assert reader.get("t1", b"b") == b"2"
        assert reader.get("t1", b"zz") is None
        assert reader.get("missing", b"a") is None
        assert reader.dump() == SEEDED
        assert store.dump() == SEEDED

    def test_odd_keys_values_and_table_names(self, store: osp.Store) -> None:
        rows = {
            b"": b"empty key",
            b"\x00": b"",
            b"\xff\x00\xfe": b"\x00" * 3,
            b"k" * 1000: b"v" * 10,
        }
        name = "state/item/ключ 🙂/items"
        commit(store, DIFF, lambda w: w.put_many(name, rows.items()))
        assert store.dump() == {name: rows}
        assert store.reader().get(name, b"\x00") == b""

    def test_later_put_replaces_earlier(self, store: osp.Store) -> None:
        seed(store)

        def fill(w: osp.StateWriter) -> None:
            w.put("t1", b"a", b"first")
            w.put("t1", b"a", b"second")

        commit(store, DIFF, fill)
        assert store.dump()["t1"] == {b"a": b"second", b"b": b"2"}

    def test_delete_rows(self, store: osp.Store) -> None:
        seed(store)

        def fill(w: osp.StateWriter) -> None:
            w.delete("t1", b"a")
            w.delete("t1", b"not stored")  # a no-op
            w.delete("never", b"x")  # a no-op as well
            w.put("t2", b"z", b"7")
            w.delete("t2", b"z")  # the later delete wins over the earlier put

        stats = commit(store, DIFF, fill)
        assert store.dump() == {"t1": {b"b": b"2"}, "t2": SEEDED["t2"]}
        assert stats.items_deleted == 4 and stats.items_written == 0

    def test_put_after_delete_wins(self, store: osp.Store) -> None:
        seed(store)

        def fill(w: osp.StateWriter) -> None:
            w.delete("t1", b"a")
            w.put("t1", b"a", b"back")

        commit(store, DIFF, fill)
        assert store.dump()["t1"] == {b"a": b"back", b"b": b"2"}

    def test_table_without_rows_disappears(self, store: osp.Store) -> None:
        seed(store)

        def fill(w: osp.StateWriter) -> None:
            w.delete("t1", b"a")
            w.delete("t1", b"b")

        commit(store, DIFF, fill)
        assert store.reader().tables() == ["t2"]
        assert store.dump() == {"t2": SEEDED["t2"]}

    def test_delete_table_drops_stored_rows_and_earlier_puts_but_keeps_later_ones(
        self, store: osp.Store
    ) -> None:
        seed(store)

        def fill(w: osp.StateWriter) -> None:
            w.put("t1", b"early", b"dropped")
            w.delete_table("t1")
            w.put("t1", b"late", b"kept")
            w.delete_table("missing table")  # a no-op

        stats = commit(store, DIFF, fill)
        assert store.dump() == {"t1": {b"late": b"kept"}, "t2": SEEDED["t2"]}
        assert (stats.items_written, stats.items_deleted, stats.tables_deleted) == (1, 0, 2)

    def test_delete_table_then_nothing_removes_the_table(self, store: osp.Store) -> None:
        seed(store)
        commit(store, DIFF, lambda w: w.delete_table("t2"))
        assert store.dump() == {"t1": SEEDED["t1"]}
        assert store.reader().tables() == ["t1"]

    def test_merge_applies_normalised_changes_in_order(self, store: osp.Store) -> None:
        from objectspace.tables import TableChanges

        seed(store)

        def fill(w: osp.StateWriter) -> None:
            w.put("t1", b"before", b"dropped by the merged truncate")
            w.merge({"t1": TableChanges(truncated=True, rows={b"m": b"1"})})
            w.merge({"t2": TableChanges(rows={b"x": osp.tables.DELETED, b"n": b"2"})})

        commit(store, DIFF, fill)
        assert store.dump() == {"t1": {b"m": b"1"}, "t2": {b"y": b"8", b"n": b"2"}}

    def test_full_writer_replaces_all_content(self, store: osp.Store) -> None:
        seed(store)
        commit(store, FULL, lambda w: w.put("t3", b"only", b"this"))
        assert store.dump() == {"t3": {b"only": b"this"}}
        # a FULL writer that writes one of the old tables keeps only the new rows of it
        commit(store, FULL, lambda w: w.put("t1", b"a", b"new"))
        assert store.dump() == {"t1": {b"a": b"new"}}

    def test_empty_full_writer_empties_the_store(self, store: osp.Store) -> None:
        seed(store)
        stats = commit(store, FULL, lambda w: None)
        assert store.dump() == {}
        assert stats.items_written == 0

    def test_empty_differential_writer_changes_nothing(self, store: osp.Store) -> None:
        seed(store)
        stats = commit(store, DIFF, lambda w: None)
        assert store.dump() == SEEDED
        assert (stats.items_written, stats.items_deleted, stats.tables_deleted) == (0, 0, 0)
        assert stats.bytes_written == 0

    @pytest.mark.parametrize("kind", [DIFF, FULL])
    def test_failed_commit_changes_nothing(
        self, store: osp.Store, kind: osp.CheckpointKind
    ) -> None:
        seed(store)
        writer = store.writer(kind)
        writer.put("t1", b"a", b"changed")
        writer.delete_table("t2")
        writer.put("t9", b"new", b"table")
        writer._apply = _fail  # type: ignore[method-assign]
        with pytest.raises(CommitFailed):
            writer.commit()
        assert writer.status is WriterStatus.FAILED
        assert store.dump() == SEEDED
        with pytest.raises(osp.StorageError):
            writer.commit()  # a failed writer is not retried
        # the store is still usable
        commit(store, DIFF, lambda w: w.put("t9", b"new", b"table"))
        assert store.dump()["t9"] == {b"new": b"table"}

    @pytest.mark.parametrize("kind", [DIFF, FULL])
    def test_commit_failing_inside_the_store_changes_nothing(
        self, store: osp.Store, kind: osp.CheckpointKind
    ) -> None:
        """A row the store cannot write fails the commit after other rows were applied."""
        seed(store)
        writer = store.writer(kind)
        writer.put("t1", b"a", b"changed")
        writer.put("fresh", b"k", b"v")
        writer.put("zz", b"bad", object())  # type: ignore[arg-type]
        with pytest.raises(Exception):  # noqa: B017 - each store reports it its own way
            writer.commit()
        assert writer.status is WriterStatus.FAILED
        assert store.dump() == SEEDED
        # a table first created by the failed commit works in the next one
        commit(store, DIFF, lambda w: w.put("fresh", b"k", b"v2"))
        assert store.dump() == {**SEEDED, "fresh": {b"k": b"v2"}}

    def test_rollback_changes_nothing_and_ends_the_writer(self, store: osp.Store) -> None:
        seed(store)
        writer = store.writer(DIFF)
        writer.put("t1", b"a", b"changed")
        writer.delete_table("t2")
        writer.rollback()
        assert writer.status is WriterStatus.ROLLED_BACK
        with pytest.raises(osp.StorageError):
            writer.commit()
        assert store.dump() == SEEDED

    def test_writer_cannot_be_committed_twice(self, store: osp.Store) -> None:
        writer = store.writer(DIFF)
        writer.put("t", b"k", b"v")
        writer.commit()
        assert writer.status is WriterStatus.COMMITTED
        with pytest.raises(osp.StorageError):
            writer.commit()
        assert store.dump() == {"t": {b"k": b"v"}}

    @pytest.mark.parametrize(
        "reuse",
        [
            lambda w: w.put("new table", b"k", b"v"),
            lambda w: w.put("t", b"k2", b"v"),
            lambda w: w.delete("t", b"k"),
        ],
        ids=["put-new-table", "put-same-table", "delete"],
    )
    def test_writer_refuses_edits_after_commit(
        self, store: osp.Store, reuse: Callable[[osp.StateWriter], None]
    ) -> None:
        """A writer is used once: an edit after its commit raises, it is never dropped silently."""
        writer = store.writer(DIFF)
        writer.put("t", b"k", b"v")
        writer.commit()
        with pytest.raises(osp.StorageError):
            reuse(writer)
        assert store.dump() == {"t": {b"k": b"v"}}

    def test_reader_is_a_consistent_snapshot(self, store: osp.Store) -> None:
        seed(store)
        reader = store.reader()

        def fill(w: osp.StateWriter) -> None:
            w.put("t1", b"a", b"changed")
            w.delete_table("t2")
            w.put("t3", b"n", b"new")

        commit(store, DIFF, fill)
        assert reader.dump() == SEEDED
        assert reader.get("t1", b"a") == b"1"
        assert sorted(reader.tables()) == ["t1", "t2"]
        assert store.reader().dump() == {"t1": {b"a": b"changed", b"b": b"2"}, "t3": {b"n": b"new"}}

    def test_uncommitted_writer_is_invisible(self, store: osp.Store) -> None:
        seed(store)
        writer = store.writer(DIFF)
        writer.put("t1", b"a", b"pending")
        assert store.reader().get("t1", b"a") == b"1"
        assert store.dump() == SEEDED
        writer.commit()
        assert store.reader().get("t1", b"a") == b"pending"

    def test_write_stats_count_what_was_committed(self, store: osp.Store) -> None:
        seed(store)
        writer = store.writer(DIFF)
        writer.put("t1", b"a", b"11")
        writer.put("t1", b"c", b"33")
        writer.put("t4", b"key", b"value")
        writer.delete("t1", b"b")
        writer.delete_table("t2")
        counted = writer.count()
        stats = writer.commit()
        assert (counted.items_written, counted.items_deleted, counted.tables_deleted) == (3, 1, 1)
        assert (stats.items_written, stats.items_deleted, stats.tables_deleted) == (3, 1, 1)
        assert writer.stats is stats
        # at least every key and value, plus the new table's name
        payload = len(b"a11") + len(b"c33") + len(b"keyvalue")
        assert stats.bytes_written >= payload + len("t4")
        assert stats.bytes_written < payload + 100
        assert stats.seconds >= 0

    def test_bytes_written_grow_with_the_payload(self, store: osp.Store) -> None:
        commit(store, DIFF, lambda w: w.put("t", b"k", b""))  # the table exists from now on
        small = commit(store, DIFF, lambda w: w.put("t", b"k", b"v"))
        big = commit(store, DIFF, lambda w: w.put("t", b"k", b"v" * 10_000))
        assert big.bytes_written - small.bytes_written == 9_999

    def test_write_stats_add_up(self) -> None:
        total = osp.WriteStats()
        total += osp.WriteStats(1, 2, 3, 4, 0.5)
        total += osp.WriteStats(10, 20, 30, 40, 0.25)
        assert (total.bytes_written, total.items_written, total.items_deleted) == (11, 22, 33)
        assert total.tables_deleted == 44 and total.seconds == 0.75

    def test_writer_kind_must_be_a_checkpoint_kind(self, store: osp.Store) -> None:
        with pytest.raises(TypeError):
            store.writer("full")  # type: ignore[arg-type]
        assert store.writer().kind is DIFF
        assert store.writer(FULL).kind is FULL

    def test_many_commits_accumulate(self, store: osp.Store) -> None:
        for i in range(20):
            commit(store, DIFF, lambda w, i=i: w.put("t", b"%d" % i, b"%d" % (i * i)))
        commit(store, DIFF, lambda w: [w.delete("t", b"%d" % i) for i in range(0, 20, 2)])
        assert store.dump() == {"t": {b"%d" % i: b"%d" % (i * i) for i in range(1, 20, 2)}}


# -- the contract against a model, on random edits -------------------------------------------------

KEYS = st.binary(max_size=2)
TABLES = st.sampled_from(["a", "b", "c/items"])
EDITS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), TABLES, KEYS, st.binary(max_size=3)),
        st.tuples(st.just("delete"), TABLES, KEYS, st.none()),
        st.tuples(st.just("delete_table"), TABLES, st.none(), st.none()),
    ),
    max_size=12,
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    commits=st.lists(st.tuples(st.sampled_from([DIFF, DIFF, FULL]), EDITS), min_size=1, max_size=4)
)
def test_random_commits_match_a_model(make_store: Callable[[], osp.Store], commits) -> None:
    store = make_store()
    model: dict[str, dict[bytes, bytes]] = {}
    for kind, edits in commits:
        if kind is FULL:
            model = {}
        writer = store.writer(kind)
        for op, table, key, value in edits:
            if op == "put":
                writer.put(table, key, value)
                model.setdefault(table, {})[key] = value
            elif op == "delete":
                writer.delete(table, key)
                model.get(table, {}).pop(key, None)
            else:
                writer.delete_table(table)
                model.pop(table, None)
        writer.commit()
        model = {name: rows for name, rows in model.items() if rows}
        assert store.dump() == model
        assert sorted(store.reader().tables()) == sorted(model)


# -- SQLite only ---------------------------------------------------------------------------------


def test_sqlite_store_pickles_and_keeps_working(tmp_path: Path) -> None:
    store = osp.SQLiteStore(tmp_path / "p.db")
    seed(store)
    copy = pickle.loads(pickle.dumps(store))
    assert isinstance(copy, osp.SQLiteStore)
    assert copy.path == store.path
    assert copy.dump() == SEEDED
    commit(copy, DIFF, lambda w: w.put("t1", b"c", b"3"))
    assert store.dump()["t1"] == {b"a": b"1", b"b": b"2", b"c": b"3"}
    # pickling an unused store works too (no connection yet)
    fresh = pickle.loads(pickle.dumps(osp.SQLiteStore(tmp_path / "unused.db")))
    assert fresh.dump() == {}
    store.close()
    copy.close()
    fresh.close()


def test_sqlite_store_reopens(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    store = osp.SQLiteStore(path)
    space = osp.ObjectSpace()
    space.create_list("l").extend([1, 2, 3])
    space.checkpoint(store)
    store.close()
    assert store.dump() == osp.SQLiteStore(path).dump()  # close, then reopen on use
    reopened = osp.SQLiteStore(str(path))
    restored = osp.ObjectSpace.load(reopened.reader())
    assert list(restored.get_list("l")) == [1, 2, 3]
    restored.get_list("l").append(4)
    restored.checkpoint(reopened)
    reopened.close()
    assert list(osp.ObjectSpace.load(osp.SQLiteStore(path).reader()).get_list("l")) == [1, 2, 3, 4]
    store.close()


def test_sqlite_commits_are_visible_to_another_store_on_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    writer_store = osp.SQLiteStore(path)
    reader_store = osp.SQLiteStore(path)
    seed(writer_store)
    assert reader_store.dump() == SEEDED
    commit(writer_store, DIFF, lambda w: w.delete_table("t1"))
    assert reader_store.dump() == {"t2": SEEDED["t2"]}
    writer_store.close()
    reader_store.close()


def test_checking_a_file_in_use_keeps_its_connections_commits(tmp_path: Path) -> None:
    """Opening a second store on a file this process uses must not drop the first one's
    file locks: without them, another process that closes its connection takes itself for
    the last one and deletes the WAL under the first connection, whose commits are lost."""
    path = str(tmp_path / "shared.db")
    check_sqlite_file(path, "space_meta")  # a new file: nothing to check
    first = connect_sqlite(path)
    first.execute("CREATE TABLE space_meta (x)")
    first.execute("INSERT INTO space_meta VALUES (1)")
    check_sqlite_file(path, "space_meta")  # what a second store does before it connects
    other = (
        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
        "c.execute('INSERT INTO space_meta VALUES (2)'); c.close()"
    )
    subprocess.run([sys.executable, "-c", other, path], check=True, timeout=60)
    first.execute("INSERT INTO space_meta VALUES (3)")
    fresh = sqlite3.connect(path)
    try:
        assert fresh.execute("SELECT x FROM space_meta ORDER BY x").fetchall() == [(1,), (2,), (3,)]
    finally:
        fresh.close()
        first.close()


def test_deleting_a_blob_writes_no_page_per_freed_page(tmp_path: Path) -> None:
    """Freed pages are not overwritten with zeros through the WAL (some SQLite builds default
    to secure_delete=ON, which wrote every freed page again: ~200 pages here)."""
    path = str(tmp_path / "s.db")
    conn = connect_sqlite(path, page_size=1024)
    try:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, data BLOB)")
        conn.execute("INSERT INTO t VALUES (1, ?)", (bytes(range(256)) * 800,))
        assert conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
        conn.execute("DELETE FROM t WHERE id = 1")
        frames = (Path(f"{path}-wal").stat().st_size - 32) // (24 + 1024)
    finally:
        conn.close()
    assert frames <= 8, frames


def test_checkpoint_storage_copies_its_wal_back_every_64_mib(tmp_path: Path) -> None:
    """Checkpoint storage keeps up to 64 MiB of WAL (a page changed by several commits
    reaches the database once); a SQLiteStore keeps 4 MiB."""
    storage = osp.open_storage(f"sqlite:///{tmp_path / 'storage.db'}")
    store = osp.SQLiteStore(tmp_path / "store.db")
    try:
        conn = storage.backend.connection  # type: ignore[attr-defined]
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] * page == 64 << 20
        assert conn.execute("PRAGMA journal_size_limit").fetchone()[0] == 64 << 20
        seed(store)
        conn = store._conn  # type: ignore[attr-defined]
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] * page == 4 << 20
    finally:
        storage.close()
        store.close()


def test_sqlite_newer_schema_version_raises(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    store = osp.SQLiteStore(path)
    seed(store)
    store.close()
    conn = sqlite3.connect(path)
    with conn:
        updated = conn.execute(
            "UPDATE space_meta SET value = '999' WHERE name = 'schema_version'"
        ).rowcount
    conn.close()
    assert updated == 1
    with pytest.raises(osp.StorageError, match="999"):
        osp.SQLiteStore(path).reader()
    with pytest.raises(osp.StorageError, match="999"):
        commit(osp.SQLiteStore(path), DIFF, lambda w: w.put("t", b"k", b"v"))
    # the file was not touched
    conn = sqlite3.connect(path)
    assert conn.execute(
        "SELECT value FROM space_meta WHERE name = 'schema_version'"
    ).fetchone() == ("999",)
    conn.close()


def test_sqlite_path_in_a_missing_folder_raises(tmp_path: Path) -> None:
    path = tmp_path / "no" / "such" / "folder" / "x.db"
    with pytest.raises(osp.StorageError):
        osp.SQLiteStore(path).reader()
    with pytest.raises(osp.StorageError):
        commit(osp.SQLiteStore(path), DIFF, lambda w: w.put("t", b"k", b"v"))
    with pytest.raises(osp.StorageError):
        osp.ObjectSpace().checkpoint(osp.SQLiteStore(path))
    assert not path.parent.exists()


def test_sqlite_file_that_is_not_a_database_raises(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a SQLite database" * 100)
    with pytest.raises(osp.StorageError):
        osp.SQLiteStore(path).reader()


# -- files that are not objectspace's ------------------------------------------------------


def _foreign_files(folder: Path) -> dict[str, Path]:
    """Files objectspace must refuse to open, and must leave byte for byte as they were."""
    app = folder / "app.db"
    conn = sqlite3.connect(app)
    with conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO customers VALUES (1, 'ACME')")
    conn.close()
    text = folder / "notes.txt"
    text.write_bytes(b"not a database at all\n" * 50)
    other_kind = folder / "checkpoints.db"
    storage = osp.open_storage(f"sqlite:///{other_kind}")
    storage.job("j").operator("o", max_key_groups=4)
    storage.close()
    space = folder / "space.db"
    seed(osp.SQLiteStore(space))
    return {"app": app, "text": text, "checkpoints": other_kind, "space": space}


def _fingerprint(path: Path) -> tuple[str, list[str]]:
    siblings = sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name))
    return hashlib.sha256(path.read_bytes()).hexdigest(), siblings


@pytest.mark.parametrize("kind", ["app", "text", "checkpoints"])
def test_sqlite_store_never_modifies_a_foreign_file(tmp_path: Path, kind: str) -> None:
    path = _foreign_files(tmp_path)[kind]
    before = _fingerprint(path)
    with pytest.raises(osp.StorageError) as err:
        osp.SQLiteStore(path).reader()
    assert str(path) in str(err.value)
    with pytest.raises(osp.StorageError):
        commit(osp.SQLiteStore(path), DIFF, lambda w: w.put("t", b"k", b"v"))
    assert _fingerprint(path) == before
    if kind == "app":  # still in its own journal mode, with only its own table
        conn = sqlite3.connect(path)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
        assert [n for (n,) in conn.execute("SELECT name FROM sqlite_master")] == ["customers"]
        conn.close()


@pytest.mark.parametrize("kind", ["app", "text", "space"])
@pytest.mark.parametrize("layout", ["sqlite", "catalog"])
def test_sqlite_storage_never_modifies_a_foreign_file(
    tmp_path: Path, kind: str, layout: str
) -> None:
    path = _foreign_files(tmp_path)[kind]
    before = _fingerprint(path)
    url = f"sqlite:///{path}"
    if layout == "catalog":
        url = f"file://{tmp_path}/segments?catalog=" + urllib.parse.quote(url)
    with pytest.raises(osp.StorageError) as err:
        osp.open_storage(url).job("j").operator("o", max_key_groups=4)
    assert str(path) in str(err.value)
    assert _fingerprint(path) == before


def test_sqlite_new_path_and_empty_file_are_created(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    commit(osp.SQLiteStore(empty), DIFF, lambda w: w.put("t", b"k", b"v"))
    assert osp.SQLiteStore(empty).dump() == {"t": {b"k": b"v"}}
    for name in ("new.db", "empty-storage.db"):
        if name.startswith("empty"):
            (tmp_path / name).touch()
        storage = osp.open_storage(f"sqlite:///{tmp_path / name}")
        storage.job("j").operator("o", max_key_groups=4)
        storage.close()
        assert osp.open_storage(f"sqlite:///{tmp_path / name}").jobs() == ["j"]

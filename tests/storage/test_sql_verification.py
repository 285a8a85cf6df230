"""Stored state is verified on read (SQLite and PostgreSQL versioned storage, and the core
SQLiteStore): a changed byte of a block, a deleted block or row of any catalog table, a block
swapped for another, or a write missing from a chain raises CorruptStateError naming what is
wrong, never an empty or altered state."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import objectspace as osp
from objectspace.checkpoint import Operator
from objectspace.storage import blocks
from objectspace.tables import DELETED, TableChanges
from tests.support.packs import Write, delete_write, edit_write, unpack_to_legacy, writes

MAX_KG = 4
KEY = "acct-7"


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state.db'}"
    return str(request.getfixturevalue("postgres_url"))


def run(storage: osp.Storage, sql: str, params: tuple[Any, ...] = ()) -> Any:
    """One statement through the backend's own transaction (``?`` parameters)."""
    backend: Any = storage.backend
    return backend._run("test", lambda tx: tx.execute(sql, params).rowcount)


def catalog(storage: osp.Storage) -> list[Write]:
    """The catalog's writes (from its packs)."""
    backend: Any = storage.backend
    return list(backend._run("test", writes, write=False))


def edit(storage: osp.Storage, write_id: int, **fields: Any) -> bool:
    """Change fields of a write's catalog entry; whether the write exists."""
    backend: Any = storage.backend
    return bool(backend._run("test", lambda tx: edit_write(tx, write_id, **fields)))


def drop(storage: osp.Storage, write_id: int) -> bool:
    """Remove a write's catalog entry; whether it existed."""
    backend: Any = storage.backend
    return bool(backend._run("test", lambda tx: delete_write(tx, write_id)))


def history(url: str) -> tuple[osp.Storage, Operator, int]:
    """Checkpoints 1..3 of job ``j``, operator ``o``: ``KEY``'s account goes ACC-1, -2, -3
    (differential writes); returns the storage, the operator and ``KEY``'s key group."""
    storage = osp.open_storage(url)
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    inst = op.instance(0, 1)
    for cp in (1, 2, 3):
        space = inst.space_for_key(KEY)
        if cp == 1:
            space.create_value("account", f"ACC-{cp}")
            space.create_list("log")
        else:
            space.get_value("account").value = f"ACC-{cp}"
        space.get_list("log").append(cp)
        for other in range(8):  # other key groups have state too
            other_space = inst.space_for_key(f"other-{other}")
            if f"n-{other}" not in other_space:
                other_space.create_value(f"n-{other}", cp)
        assert job.commit(cp, [inst.save(cp)]) is True
        inst.on_saved()
    return storage, op, op.key_groups.key_group(KEY)


def restore(url: str, checkpoint: int | None = None) -> Any:
    fresh = osp.open_storage(url)
    try:
        op = fresh.job("j").operator("o", max_key_groups=MAX_KG)
        space = op.instance(0, 1, checkpoint).space_for_key(KEY)
        return space.get_value("account").value, list(space.get_list("log"))
    finally:
        fresh.close()


def write_ids(storage: osp.Storage, key_group: int) -> dict[int, int]:
    backend: Any = storage.backend
    chains = backend.chains("j", "o", range(key_group, key_group + 1), 3)
    return {w.version: w.write_id for w in chains[key_group]}


def expect_corrupt(url: str, *words: str, checkpoint: int | None = None) -> str:
    with pytest.raises(osp.CorruptStateError) as err:
        restore(url, checkpoint)
    text = str(err.value)
    for word in ("'j'", "'o'", *words):
        assert word in text, text
    return text


def test_intact_state_restores(url: str) -> None:
    storage, _, _ = history(url)
    storage.close()
    assert restore(url) == ("ACC-3", [1, 2, 3])
    assert restore(url, 1) == ("ACC-1", [1])


def block_of(storage: osp.Storage, write_id: int) -> bytes:
    backend: Any = storage.backend
    [(data,)] = backend._run(
        "test", lambda tx: tx.all("SELECT data FROM ckpt_blocks WHERE write = ?", (write_id,))
    )
    return bytes(data)


def test_changed_byte_of_a_block_is_detected(url: str) -> None:
    storage, _, group = history(url)
    ids = write_ids(storage, group)
    block = bytearray(block_of(storage, ids[1]))
    block[-3] ^= 0x01
    run(storage, "UPDATE ckpt_blocks SET data = ? WHERE write = ?", (bytes(block), ids[1]))
    storage.close()
    expect_corrupt(url, f"key group {group}", "checkpoint 1", "checksum")


@pytest.mark.parametrize("length", [0, 1, 4, 8, 9, 12])
def test_a_block_cut_to_any_length_is_detected(url: str, length: int) -> None:
    storage, _, group = history(url)
    ids = write_ids(storage, group)
    block = block_of(storage, ids[2])[:length]
    run(storage, "UPDATE ckpt_blocks SET data = ? WHERE write = ?", (block, ids[2]))
    storage.close()
    expect_corrupt(url, f"key group {group}", "checkpoint 2")


def test_flipped_byte_in_the_sqlite_file_is_detected(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    storage, _, group = history(url)
    ids = write_ids(storage, group)
    block = block_of(storage, ids[1])[9:]  # the block's body, after its kind and checksum
    storage.close()  # the last connection copies the WAL back into the file
    path = tmp_path / "state.db"
    data = path.read_bytes()
    at = data.find(block)
    assert at > 0 and data.find(block, at + 1) < 0
    at += len(block) // 2
    path.write_bytes(data[:at] + bytes([data[at] ^ 0x10]) + data[at + 1 :])
    expect_corrupt(url, f"key group {group}", "checkpoint 1", "state.db", "checksum")


def intern_folders(storage: osp.Storage, write_id: int) -> dict[str, int]:
    """Rewrite ``write_id``'s block as storage wrote blocks before they carried their table
    folders' names: the folders interned in ``ckpt_tables``, the block naming their ids.
    Returns the folders' ids."""
    backend: Any = storage.backend
    truncated, rows = blocks.decode_block(block_of(storage, write_id), "test")
    changes: dict[str, TableChanges] = {}
    for name, key, value in rows:
        changes.setdefault(name, TableChanges()).rows[key] = DELETED if value is None else value
    for name in truncated:
        changes.setdefault(name, TableChanges()).truncated = True
    folders = blocks.block_heads(changes)

    def work(tx: Any) -> dict[str, int]:
        for name in folders:
            tx.execute("INSERT INTO ckpt_tables (name) VALUES (?)", (name,))
        ids = {
            name: int(tx.one("SELECT id FROM ckpt_tables WHERE name = ?", (name,))[0])
            for name in folders
        }
        block, count = blocks.encode_block(changes, False, head_ids=ids)
        tx.execute("UPDATE ckpt_blocks SET data = ? WHERE write = ?", (block, write_id))
        assert edit_write(
            tx, write_id, bytes=len(block), rows=count, digest=blocks.block_digest(block)
        )
        return ids

    return dict(backend._run("test", work))


def test_blocks_carry_their_folders(url: str) -> None:
    """New writes intern nothing in the catalog: each block names its table folders."""
    storage, _, _ = history(url)
    [(count,)] = storage.backend._run(  # type: ignore[attr-defined]
        "test", lambda tx: tx.all("SELECT COUNT(*) FROM ckpt_tables")
    )
    storage.close()
    assert count == 0


def test_block_with_interned_folders_still_reads(url: str) -> None:
    storage, _, group = history(url)
    ids = write_ids(storage, group)
    assert intern_folders(storage, ids[1])
    storage.close()
    assert restore(url) == ("ACC-3", [1, 2, 3])
    assert restore(url, 1) == ("ACC-1", [1])


@pytest.mark.parametrize("table", ["ckpt_blocks", "ckpt_tables"])
def test_deleted_row_is_detected(url: str, table: str) -> None:
    storage, _, group = history(url)
    ids = write_ids(storage, group)
    if table == "ckpt_blocks":
        deleted = run(storage, "DELETE FROM ckpt_blocks WHERE write = ?", (ids[2],))
        words = [f"key group {group}", "checkpoint 2", "block is missing"]
    else:
        folders = intern_folders(storage, ids[1])
        [tid] = [tid for name, tid in folders.items() if "account" in name]
        deleted = run(storage, "DELETE FROM ckpt_tables WHERE id = ?", (tid,))
        words = [f"key group {group}", "checkpoint 1", "no name"]
    assert deleted == 1
    storage.close()
    expect_corrupt(url, *words)


def test_replaced_block_is_detected(url: str) -> None:
    """A valid block of another write in place of the write's own: its checksum holds, the
    catalog's digest does not."""
    storage, _, group = history(url)
    ids = write_ids(storage, group)
    other = block_of(storage, ids[2])
    run(storage, "UPDATE ckpt_blocks SET data = ? WHERE write = ?", (other, ids[3]))
    storage.close()
    expect_corrupt(url, f"key group {group}", "checkpoint 3", "rows missing or added")


def test_wrong_row_count_is_detected(url: str) -> None:
    storage, _, group = history(url)
    ids = write_ids(storage, group)
    [write] = [w for w in catalog(storage) if w.id == ids[3]]
    assert edit(storage, ids[3], rows=write.rows + 1)
    storage.close()
    expect_corrupt(url, f"key group {group}", "checkpoint 3", "rows missing or added")


def test_missing_write_is_detected(url: str) -> None:
    storage, _, group = history(url)
    ids = write_ids(storage, group)
    assert drop(storage, ids[2])
    storage.close()
    expect_corrupt(url, "checkpoint 2", "gap")
    assert restore(url, 1) == ("ACC-1", [1])  # a chain that does not span it is fine


def test_missing_write_while_reading_a_planned_chain_is_detected(url: str) -> None:
    storage, _, group = history(url)
    backend: Any = storage.backend
    chain = backend.chains("j", "o", range(group, group + 1), 3)[group]
    assert drop(storage, chain[1].write_id)
    with pytest.raises(osp.CorruptStateError, match="missing from the catalog") as err:
        backend.read("j", "o", chain)
    assert f"key group {group} checkpoint 2" in str(err.value)
    storage.close()


def test_missing_operator_row_is_detected(url: str) -> None:
    storage, _, _ = history(url)
    assert run(storage, "DELETE FROM ckpt_operators WHERE name = 'o'") == 1
    storage.close()
    with pytest.raises(osp.CorruptStateError, match="operator row is missing") as err:
        restore(url)
    assert "'o'" in str(err.value) and "'j'" in str(err.value)


def test_writes_without_digest_are_still_readable(url: str) -> None:
    """Stores written before digests existed have NULL digests: read, not verified."""
    storage, _, _ = history(url)
    for write in catalog(storage):
        assert edit(storage, write.id, digest=None)
    storage.close()
    assert restore(url) == ("ACC-3", [1, 2, 3])


def test_sqlite_store_from_before_digests_is_upgraded(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    storage, _, _ = history(url)
    storage.close()
    conn = sqlite3.connect(tmp_path / "state.db")
    with conn:
        unpack_to_legacy(conn)  # one row per write, as schema version 1 kept them
        conn.execute("ALTER TABLE ckpt_writes DROP COLUMN digest")
        conn.execute("UPDATE ckpt_meta SET value = '1' WHERE name = 'schema_version'")
    conn.close()
    assert restore(url) == ("ACC-3", [1, 2, 3])


# -- the core SQLiteStore: a checksum per row ------------------------------------------------


def _space_store(path: Path) -> osp.SQLiteStore:
    store = osp.SQLiteStore(path)
    space = osp.ObjectSpace()
    space.create_value("account", "ACC-1")
    space.create_list("log").extend(range(50))
    space.checkpoint(store)
    store.close()
    return store


def test_sqlite_store_flipped_byte_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "space.db"
    _space_store(path)
    data = path.read_bytes()
    at = data.find(b"ACC-1")
    assert at > 0 and data.find(b"ACC-1", at + 1) < 0
    path.write_bytes(data[:at] + b"ACC-9" + data[at + 5 :])
    with pytest.raises(osp.CorruptStateError) as err:
        osp.ObjectSpace.load(osp.SQLiteStore(path).reader())
    assert str(path) in str(err.value) and "checksum" in str(err.value)


_V1_SCHEMA = """
CREATE TABLE space_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE space_tables (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE space_rows (
    tbl INTEGER NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL, crc INTEGER,
    PRIMARY KEY (tbl, key)
) WITHOUT ROWID;
INSERT INTO space_meta VALUES ('schema_version', '1');
"""


def _v1_store(path: Path) -> dict[str, dict[bytes, bytes]]:
    """A store file of schema version 1 (a row per entry, CRC-32 checksums) holding
    :func:`_space_store`'s space; returns its tables."""
    import zlib

    memory = osp.MemoryStore()
    space = osp.ObjectSpace()
    space.create_value("account", "ACC-1")
    space.create_list("log").extend(range(50))
    space.checkpoint(memory)
    dump = memory.dump()
    conn = sqlite3.connect(path)
    conn.executescript(_V1_SCHEMA)
    with conn:
        for tid, (name, rows) in enumerate(dump.items(), 1):
            conn.execute("INSERT INTO space_tables VALUES (?, ?)", (tid, name))
            seed = zlib.crc32(name.encode())
            for key, value in rows.items():
                crc = zlib.crc32(value, zlib.crc32(key, seed) ^ len(key)) - (1 << 31)
                conn.execute("INSERT INTO space_rows VALUES (?, ?, ?, ?)", (tid, key, value, crc))
    conn.close()
    return dump


def test_sqlite_store_version_1_is_converted(tmp_path: Path) -> None:
    """A store of the previous format (a row per entry) is read, converted into one
    snapshot block, and written to as usual afterwards."""
    path = tmp_path / "space.db"
    dump = _v1_store(path)
    store = osp.SQLiteStore(path)
    assert store.dump() == dump
    space = osp.ObjectSpace.load(store.reader())
    space.get_value("account").value = "ACC-2"
    space.checkpoint(store)
    store.close()
    space = osp.ObjectSpace.load(osp.SQLiteStore(path).reader())
    assert space.get_value("account").value == "ACC-2"
    assert list(space.get_list("log")) == list(range(50))
    conn = sqlite3.connect(path)
    tables = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    version = conn.execute("SELECT value FROM space_meta WHERE name = 'schema_version'")
    assert tables == {"space_meta", "space_blocks"} and version.fetchone() == ("2",)
    conn.close()


def test_sqlite_store_version_1_deleted_table_name_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "space.db"
    _v1_store(path)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DELETE FROM space_tables WHERE id = (SELECT MIN(tbl) FROM space_rows)")
    conn.close()
    with pytest.raises(osp.CorruptStateError, match="no name") as err:
        osp.SQLiteStore(path).reader()
    assert "schema version 1" in str(err.value)
    conn = sqlite3.connect(path)  # left as it was: not converted
    assert conn.execute("SELECT COUNT(*) FROM space_rows").fetchone()[0] > 0
    conn.close()


def test_sqlite_store_version_1_flipped_byte_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "space.db"
    _v1_store(path)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "UPDATE space_rows SET value = CAST(X'A5414343' || value AS BLOB) WHERE length(value) > 3"
        )
    conn.close()
    with pytest.raises(osp.CorruptStateError, match="checksum"):
        osp.SQLiteStore(path).reader()


def test_sqlite_store_version_1_rows_without_checksum_are_read(tmp_path: Path) -> None:
    """Rows written before checksums (``NULL``, or no ``crc`` column) are read unverified."""
    for drop in (False, True):
        path = tmp_path / f"space-{drop}.db"
        _v1_store(path)
        conn = sqlite3.connect(path)
        with conn:
            if drop:
                conn.execute("ALTER TABLE space_rows DROP COLUMN crc")
            else:
                conn.execute("UPDATE space_rows SET crc = NULL")
        conn.close()
        space = osp.ObjectSpace.load(osp.SQLiteStore(path).reader())
        assert space.get_value("account").value == "ACC-1"
        assert list(space.get_list("log")) == list(range(50))


def _blocks(path: Path) -> list[tuple[int, int]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT seq, full FROM space_blocks ORDER BY seq").fetchall()
    finally:
        conn.close()


def test_sqlite_store_writes_one_block_per_commit(tmp_path: Path) -> None:
    """A commit appends one row, whatever the number of tables and entries it changes."""
    path = tmp_path / "space.db"
    store = osp.SQLiteStore(path)
    space = osp.ObjectSpace()
    lists = [space.create_list(f"l{i}") for i in range(20)]
    space.checkpoint(store)
    for round_ in range(3):
        for lst in lists:
            lst.append(round_)
        space.checkpoint(store)
    store.close()
    assert _blocks(path) == [(1, 0), (2, 0), (3, 0), (4, 0)]
    space = osp.ObjectSpace.load(osp.SQLiteStore(path).reader())
    assert [list(space.get_list(f"l{i}")) for i in range(20)] == [[0, 1, 2]] * 20


def test_sqlite_store_compacts_its_chain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Differential blocks that outweigh the snapshot are compacted into a new snapshot,
    which replaces the chain; a FULL checkpoint does too."""
    from objectspace.storage.stores import sqlite as sqlite_store

    monkeypatch.setattr(sqlite_store, "COMPACT_MIN_BYTES", 0)
    monkeypatch.setattr(sqlite_store, "MAX_CHAIN", 4)
    path = tmp_path / "space.db"
    store = osp.SQLiteStore(path)
    space = osp.ObjectSpace()
    d = space.create_dict("d")
    for i in range(200):
        d[i] = i
    space.checkpoint(store, kind=osp.CheckpointKind.FULL)
    assert _blocks(path) == [(1, 1)]
    for i in range(6):
        d[i] = -i
        del d[100 + i]
        space.checkpoint(store)
        chain = _blocks(path)
        assert chain[0][1] == 1 and len(chain) <= 4
    assert any(seq > 1 for seq, full in _blocks(path) if full)
    expected = {i: (-i if i < 6 else i) for i in range(200) if not 100 <= i < 106}
    store.close()
    assert dict(osp.ObjectSpace.load(osp.SQLiteStore(path).reader()).get_dict("d")) == expected


def test_sqlite_store_missing_block_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "space.db"
    store = osp.SQLiteStore(path)
    space = osp.ObjectSpace()
    d = space.create_dict("d")
    for i in range(3):
        d[i] = i
        space.checkpoint(store)
    store.close()
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DELETE FROM space_blocks WHERE seq = 2")
    conn.close()
    with pytest.raises(osp.CorruptStateError, match="block 2 of its chain is missing"):
        osp.SQLiteStore(path).reader()


def test_sqlite_store_corrupt_block_names_file_and_block(tmp_path: Path) -> None:
    path = tmp_path / "space.db"
    _space_store(path)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "UPDATE space_blocks SET block = CAST(substr(block, 1, 20) || X'00' || "
            "substr(block, 22) AS BLOB) WHERE seq = 1"
        )
    conn.close()
    with pytest.raises(osp.CorruptStateError) as err:
        osp.SQLiteStore(path).reader()
    assert str(path) in str(err.value) and "block 1" in str(err.value)


def test_sqlite_store_page_sizes(tmp_path: Path) -> None:
    """A new store file gets the store's small pages (its rows are whole blocks); other SQLite
    files get the shared default; an existing file keeps its own."""
    from objectspace.storage.sql import sqlite_files
    from objectspace.storage.stores import sqlite as sqlite_store

    store = osp.SQLiteStore(tmp_path / "space.db")
    assert store.connection.execute("PRAGMA page_size").fetchone() == (sqlite_store.PAGE_SIZE,)
    store.close()
    conn = sqlite_files.connect_sqlite(str(tmp_path / "other.db"))
    conn.execute("CREATE TABLE space_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
    assert conn.execute("PRAGMA page_size").fetchone() == (sqlite_files.PAGE_SIZE,)
    conn.close()
    store = osp.SQLiteStore(tmp_path / "other.db")
    assert store.connection.execute("PRAGMA page_size").fetchone() == (sqlite_files.PAGE_SIZE,)
    store.close()


def test_sqlite_store_compaction_does_not_change_bytes_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``bytes_written`` counts what the checkpoint changed, the same as MemoryStore's plus
    the row overhead, whether or not the commit compacts the chain into a snapshot."""
    from objectspace import tables
    from objectspace.storage.stores import sqlite as sqlite_store

    monkeypatch.setattr(sqlite_store, "COMPACT_MIN_BYTES", 0)
    monkeypatch.setattr(sqlite_store, "MAX_CHAIN", 2)
    counts = []
    for store in (osp.MemoryStore(), osp.SQLiteStore(tmp_path / "s.db")):
        space = osp.ObjectSpace()
        lists = [space.create_list(f"l{i}") for i in range(5)]
        for lst in lists:
            lst.append(-1)
        space.checkpoint(store)  # every table exists from here on
        seen = []
        for round_ in range(4):
            for lst in lists:
                lst.append(round_)
            stats = space.checkpoint(store)
            seen.append((stats.bytes_written, stats.items_written))
        counts.append(seen)
    memory, sqlite = counts
    assert [b + n * tables.ROW_OVERHEAD for b, n in memory] == [b for b, _ in sqlite]
    assert any(seq > 1 for seq, full in _blocks(tmp_path / "s.db") if full)


def test_sqlite_store_opens_while_another_connection_writes(tmp_path: Path) -> None:
    """Opening a store file of the current version takes no write lock: a reader opens and
    reads while another connection holds a write transaction."""
    import threading

    path = tmp_path / "space.db"
    _space_store(path)
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    got: list[Any] = []
    thread = threading.Thread(target=lambda: got.append(osp.SQLiteStore(path).dump()), daemon=True)
    try:
        thread.start()
        thread.join(5)
        assert got and got[0], "the reader waited for the writer's lock"
    finally:
        writer.execute("ROLLBACK")
        writer.close()
        thread.join(60)


def _flip_last_byte(storage: osp.Storage, table: str, column: str, key: str) -> None:
    """Flip a bit of the last byte of every ``column`` of ``table`` (its checksum)."""
    backend: Any = storage.backend

    def work(tx: Any) -> None:
        for row_key, data in tx.all(f"SELECT {key}, {column} FROM {table}"):
            data = bytes(data)
            broken = data[:-1] + bytes([data[-1] ^ 0x01])
            tx.execute(f"UPDATE {table} SET {column} = ? WHERE {key} = ?", (broken, row_key))

    backend._run("test", work)


def test_changed_catalog_records_are_detected(url: str) -> None:
    """The catalog's packs of writes and its heads carry their own checksum: a changed
    byte raises CorruptStateError naming the job, operator and checkpoint, never a state
    built from misread records."""
    storage, _, _ = history(url)
    _flip_last_byte(storage, "ckpt_packs", "entries", "id")
    storage.close()
    text = expect_corrupt(url, "checkpoint", "fail their checksum")
    assert "records of its writes" in text


def test_changed_heads_are_detected(url: str) -> None:
    storage, op, _ = history(url)
    _flip_last_byte(storage, "ckpt_head_chunks", "heads", "chunk")
    inst = op.instance(0, 1)  # a restore reads its chains, the next commit the heads
    inst.space_for_key(KEY).get_value("account").value = "ACC-4"
    with pytest.raises(osp.CorruptStateError, match="heads fail their checksum") as err:
        op.job.commit(4, [inst.save(4)])
    assert "'j'" in str(err.value) and "'o'" in str(err.value)
    storage.close()


def test_a_store_of_rows_per_write_is_packed_with_its_ids(url: str) -> None:
    """A store that keeps a row per write (schema version 6), on either dialect, opens as
    version 7: each write a pack of its own with its id, the state as it was, and new packs
    numbered above every old id."""
    storage, _, _ = history(url)
    backend: Any = storage.backend
    before = [(w.id, w.key_group, w.version, w.digest) for w in catalog(storage)]

    def to_legacy(tx: Any) -> None:
        unpack_to_legacy(tx)
        tx.execute("UPDATE ckpt_meta SET value = '6' WHERE name = 'schema_version'")

    backend._run("test", to_legacy)
    storage.close()
    assert restore(url) == ("ACC-3", [1, 2, 3])
    assert restore(url, 1) == ("ACC-1", [1])
    storage = osp.open_storage(url)
    found = catalog(storage)
    assert [(w.id, w.key_group, w.version, w.digest) for w in found] == before
    assert all(w.pack == w.id for w in found)
    job = storage.job("j")
    inst = job.operator("o").instance(0, 1)
    inst.space_for_key(KEY).get_value("account").value = "ACC-4"
    receipt = inst.save(4)
    assert job.commit(4, [receipt]) is True
    assert min(wid for _, wid in receipt.writes) > max(w.id for w in found)
    storage.close()
    assert restore(url) == ("ACC-4", [1, 2, 3])

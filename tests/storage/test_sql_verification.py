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


def folder_id(storage: osp.Storage, fragment: str) -> int:
    """The id of the interned table folder whose name holds ``fragment``."""
    backend: Any = storage.backend
    [(tid,)] = backend._run(
        "test",
        lambda tx: tx.all("SELECT id FROM ckpt_tables WHERE name LIKE ?", (f"%{fragment}%",)),
    )
    return int(tid)


@pytest.mark.parametrize("table", ["ckpt_blocks", "ckpt_tables"])
def test_deleted_row_is_detected(url: str, table: str) -> None:
    storage, _, group = history(url)
    ids = write_ids(storage, group)
    if table == "ckpt_blocks":
        deleted = run(storage, "DELETE FROM ckpt_blocks WHERE write = ?", (ids[2],))
        words = [f"key group {group}", "checkpoint 2", "block is missing"]
    else:
        tid = folder_id(storage, "account")
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
    run(storage, "UPDATE ckpt_writes SET rows = rows + 1 WHERE id = ?", (ids[3],))
    storage.close()
    expect_corrupt(url, f"key group {group}", "checkpoint 3", "rows missing or added")


def test_missing_write_is_detected(url: str) -> None:
    storage, _, group = history(url)
    ids = write_ids(storage, group)
    assert run(storage, "DELETE FROM ckpt_writes WHERE id = ?", (ids[2],)) == 1
    storage.close()
    expect_corrupt(url, "checkpoint 2", "gap")
    assert restore(url, 1) == ("ACC-1", [1])  # a chain that does not span it is fine


def test_missing_write_while_reading_a_planned_chain_is_detected(url: str) -> None:
    storage, _, group = history(url)
    backend: Any = storage.backend
    chain = backend.chains("j", "o", range(group, group + 1), 3)[group]
    assert run(storage, "DELETE FROM ckpt_writes WHERE id = ?", (chain[1].write_id,)) == 1
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
    run(storage, "UPDATE ckpt_writes SET digest = NULL")
    storage.close()
    assert restore(url) == ("ACC-3", [1, 2, 3])


def test_sqlite_store_from_before_digests_is_upgraded(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    storage, _, _ = history(url)
    storage.close()
    conn = sqlite3.connect(tmp_path / "state.db")
    with conn:
        conn.execute("ALTER TABLE ckpt_writes DROP COLUMN digest")
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


def test_sqlite_store_deleted_table_name_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "space.db"
    _space_store(path)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DELETE FROM space_tables WHERE id = (SELECT MIN(tbl) FROM space_rows)")
    conn.close()
    with pytest.raises(osp.CorruptStateError, match="no name"):
        osp.SQLiteStore(path).reader()


def test_sqlite_store_rows_without_checksum_are_read(tmp_path: Path) -> None:
    """A store written before checksums: its rows are read, unverified, and new writes
    get checksums."""
    path = tmp_path / "space.db"
    _space_store(path)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE space_rows SET crc = NULL")
    conn.close()
    space = osp.ObjectSpace.load(osp.SQLiteStore(path).reader())
    assert space.get_value("account").value == "ACC-1"
    assert list(space.get_list("log")) == list(range(50))


def test_sqlite_store_from_before_checksums_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "space.db"
    _space_store(path)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("ALTER TABLE space_rows DROP COLUMN crc")
    conn.close()
    store = osp.SQLiteStore(path)
    space = osp.ObjectSpace.load(store.reader())
    space.get_value("account").value = "ACC-2"
    space.checkpoint(store)
    store.close()
    space = osp.ObjectSpace.load(osp.SQLiteStore(path).reader())
    assert space.get_value("account").value == "ACC-2"
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT COUNT(crc) FROM space_rows").fetchone()[0] >= 1
    conn.close()

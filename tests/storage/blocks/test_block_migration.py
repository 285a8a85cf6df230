"""A store written before blocks (schema version 2: one row per entry in ``ckpt_rows`` and
``ckpt_truncates``) is converted into blocks when it is opened, and restores the same state.

``fixtures/ckpt_schema_v2.sql`` is the SQL dump of such a store, written by the code of
schema version 2: job ``j``, operator ``o`` (4 key groups), checkpoints 1..3 of key
``acct-7`` (a value set thrice, a list appended to, then cleared and appended to in
checkpoint 3, a dict with an entry deleted in checkpoint 3) and six other keys.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import objectspace as osp
from objectspace.storage.sql import SCHEMA_VERSION
from tests.support.packs import writes

FIXTURE = Path(__file__).parent.parent / "fixtures" / "ckpt_schema_v2.sql"
KEY = "acct-7"


def old_store(tmp_path: Path) -> Path:
    path = tmp_path / "v2.db"
    conn = sqlite3.connect(path)
    conn.executescript(FIXTURE.read_text())
    conn.close()
    return path


def state(url: str, checkpoint: int | None = None) -> tuple[Any, ...]:
    storage = osp.open_storage(url)
    try:
        op = storage.job("j").operator("o")
        inst = op.instance(0, 1, checkpoint)
        space = inst.space_for_key(KEY)
        others = {i: inst.space_for_key(f"other-{i}").get_value(f"n-{i}").value for i in range(6)}
        return (
            space.get_value("account").value,
            list(space.get_list("log")),
            dict(space.get_dict("seen")),
            others,
        )
    finally:
        storage.close()


def test_a_schema_2_store_is_converted_to_blocks(tmp_path: Path) -> None:
    path = old_store(tmp_path)
    url = f"sqlite:///{path}"
    assert state(url) == ("ACC-3", [30], {2: 2.0, 3: 3.0}, {i: 1 for i in range(6)})
    assert state(url, 2) == ("ACC-2", [1, 2], {1: 1.0, 2: 2.0}, {i: 1 for i in range(6)})
    assert state(url, 1) == ("ACC-1", [1], {1: 1.0}, {i: 1 for i in range(6)})
    conn = sqlite3.connect(path)
    try:
        tables = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert "ckpt_rows" not in tables and "ckpt_truncates" not in tables
        version = conn.execute("SELECT value FROM ckpt_meta WHERE name = 'schema_version'")
        assert version.fetchone() == (str(SCHEMA_VERSION),)
        # every write has its block, and its digest is the block's checksum
        found = writes(conn)
        blocks = {w for (w,) in conn.execute("SELECT write FROM ckpt_blocks")}
        assert found and all(w.id in blocks and w.digest is not None for w in found)
        assert len(blocks) == len(found)
    finally:
        conn.close()


def test_a_converted_store_keeps_working(tmp_path: Path) -> None:
    url = f"sqlite:///{old_store(tmp_path)}"
    storage = osp.open_storage(url)
    job = storage.job("j")
    op = job.operator("o")
    inst = op.instance(0, 1)
    inst.space_for_key(KEY).get_list("log").append(40)
    assert job.commit(4, [inst.save(4)]) is True
    job.compact()
    storage.close()
    assert state(url)[1] == [30, 40]
    assert state(url, 3)[1] == [30]

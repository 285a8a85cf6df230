"""The catalog of schema version 7: a save and a commit write a handful of pages, and stores
written by schema versions 3, 4, 5 and 6 are migrated when they are opened.

``fixtures/ckpt_schema_v3.sql`` is the SQL dump of a store written by the code of schema
version 3 (blocks in ``ckpt_blocks``, writes indexed by ``(op, committed, key_group,
version)``): job ``j``, operator ``o`` (4 key groups), checkpoints 1..3 of key ``acct-7`` (a
value set thrice, a list appended to, then cleared and appended to in checkpoint 3, a dict
with an entry deleted in checkpoint 3), six other keys, and the pending writes of an
attempt of checkpoint 4 that never committed (``account`` set to ``LOST``).
``fixtures/ckpt_schema_v4.sql`` is that store as the code of schema version 4 left it after
opening it (writes indexed by ``(op, key_group, version)``, no ``ckpt_heads``), and
``fixtures/ckpt_schema_v5.sql`` as the code of schema version 5 left it (writes indexed by
``(op, version, key_group)`` and, partially, by segment; ``ckpt_heads``; its blocks name
their table folders by ids interned in ``ckpt_tables``), and ``fixtures/ckpt_schema_v6.sql``
as the code of schema version 6 (commit 726599f) left the version 5 store after opening it
and compacting it (a full write of the key group at checkpoint 3, in the compact block
form that names its folders). Version 7 keeps writes in packs (``ckpt_packs``); a migrated
store's writes become packs of one write each, with their ids.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import objectspace as osp
from objectspace.storage.sql import SCHEMA_VERSION
from objectspace.storage.sqlite import backend as sqlite_backend
from tests.support.packs import heads as catalog_heads
from tests.support.packs import writes

FIXTURES = Path(__file__).parent / "fixtures"
KEY = "acct-7"
# the index each older schema version kept its writes by
OLD_INDEX = {
    3: "ckpt_writes_chain",
    4: "ckpt_writes_groups",
    5: "ckpt_writes_segments",
    6: "ckpt_writes_versions",
}
VERSIONS = [3, 4, 5, 6]


def old_store(tmp_path: Path, version: int = 3) -> Path:
    path = tmp_path / f"v{version}.db"
    conn = sqlite3.connect(path)
    conn.executescript((FIXTURES / f"ckpt_schema_v{version}.sql").read_text())
    conn.close()
    return path


def state(url: str, checkpoint: int | None = None) -> tuple[Any, ...]:
    storage = osp.open_storage(url)
    try:
        inst = storage.job("j").operator("o").instance(0, 1, checkpoint)
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


def indexes(path: Path, table: str = "ckpt_writes") -> dict[str, list[str]]:
    conn = sqlite3.connect(path)
    try:
        names = [row[1] for row in conn.execute(f"PRAGMA index_list({table})")]
        return {
            n: [str(r[2]) for r in conn.execute(f"PRAGMA index_info({n})")]
            for n in names
            if not n.startswith("sqlite_")
        }
    finally:
        conn.close()


def tables(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        conn.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_an_older_store_is_read_and_migrated(tmp_path: Path, version: int) -> None:
    path = old_store(tmp_path, version)
    assert OLD_INDEX[version] in indexes(path)
    conn = sqlite3.connect(path)
    try:
        old_ids = [w for (w,) in conn.execute("SELECT id FROM ckpt_writes ORDER BY id")]
    finally:
        conn.close()
    url = f"sqlite:///{path}"
    others = {i: 1 for i in range(6)}
    # the pending writes of checkpoint 4 stay uncommitted: never part of the state
    assert state(url) == ("ACC-3", [30], {2: 2.0, 3: 3.0}, others)
    assert state(url, 2) == ("ACC-2", [1, 2], {1: 1.0, 2: 2.0}, others)
    assert state(url, 1) == ("ACC-1", [1], {1: 1.0}, others)
    assert not {"ckpt_writes", "ckpt_heads"} & tables(path)  # packed now
    assert indexes(path, "ckpt_packs") == {"ckpt_packs_versions": ["op", "version"]}
    conn = sqlite3.connect(path)
    try:
        version_row = conn.execute("SELECT value FROM ckpt_meta WHERE name = 'schema_version'")
        assert version_row.fetchone() == (str(SCHEMA_VERSION),)
        # each key group's head: its newest committed write (write 6, pending, is none)
        heads = [
            (group, head.write, head.version, int(head.compaction))
            for (_, group), head in sorted(catalog_heads(conn).items())
        ]
        found = writes(conn)
    finally:
        conn.close()
    # every write kept its id, each alone in its pack
    assert [w.id for w in found] == old_ids
    assert all(w.pack == w.id for w in found)
    newest: dict[int, Any] = {}
    for w in sorted(found, key=lambda w: (w.version, w.id)):
        if w.committed:
            newest[w.key_group] = (w.key_group, w.id, w.version, int(w.attempt == "compaction"))
    assert heads == [newest[g] for g in sorted(newest)]
    assert 6 not in [head for _, head, _, _ in heads]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_migrated_store_keeps_working(tmp_path: Path, version: int) -> None:
    url = f"sqlite:///{old_store(tmp_path, version)}"
    storage = osp.open_storage(url)
    job = storage.job("j")
    assert job.last_checkpoint() == 3
    inst = job.operator("o").instance(0, 1)
    assert inst.space_for_key(KEY).get_value("account").value == "ACC-3"
    inst.space_for_key(KEY).get_list("log").append(40)
    assert job.commit(4, [inst.save(4)]) is True
    job.compact()
    stats = job.retain(2)
    assert stats.pending_removed >= 1  # the abandoned attempt of checkpoint 4
    storage.close()
    assert state(url)[:2] == ("ACC-3", [30, 40])
    assert state(url, 3)[1] == [30]


def empty_wal(path: Path) -> None:
    """Copy the WAL of the store at ``path`` back and empty it: what it holds next, the
    next transaction wrote."""
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    finally:
        conn.close()


def wal_pages(path: Path, page_size: int) -> int:
    return (os.path.getsize(f"{path}-wal") - 32) // (24 + page_size)


def list_workload(path: Path, measure: str) -> tuple[int, int, Any]:
    """30 checkpoints of 1,024 keys appending to a list in 256 key groups; the WAL pages
    the last checkpoint's ``measure`` ("save" or "commit") wrote, the page size and the
    last receipt."""
    storage = osp.open_storage(f"sqlite:///{path}")
    job = storage.job("j")
    inst = job.operator("o", max_key_groups=256).instance(0, 1)
    page_size = 0
    pages = 0
    for cp in range(1, 31):
        for k in range(1024):
            space = inst.space_for_key(k)
            (space.get_list("l") if "l" in space else space.create_list("l")).append(cp)
        page_size = int(storage.backend.connection.execute("PRAGMA page_size").fetchone()[0])
        if measure == "save":
            empty_wal(path)
        receipt = inst.save(cp)
        if measure == "save":
            pages = wal_pages(path, page_size)
        else:
            empty_wal(path)
        assert job.commit(cp, [receipt]) is True
        if measure == "commit":
            pages = wal_pages(path, page_size)
        inst.on_saved()
    storage.close()
    assert len(receipt.writes) > 200
    return pages, page_size, receipt


def test_a_commit_writes_a_handful_of_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit marks its writes in the rows just appended and rewrites the key groups'
    heads, ~20 bytes each: a handful of pages (before schema version 4 it moved one index
    entry per write into its key group's place in the index: ~20 pages of 4 KiB here)."""
    monkeypatch.setattr(sqlite_backend, "PAGE_SIZE", 4096)  # the page size it was measured at
    pages, _, _ = list_workload(tmp_path / "s.db", "commit")
    assert pages <= 10, pages


def test_a_save_writes_pages_for_its_blocks_not_one_per_key_group(tmp_path: Path) -> None:
    """A save appends its write records at the end of the catalog's index (schema version 5):
    the pages it writes are those of its blocks and rows plus a few, not one index page per
    key group written."""
    pages, page_size, receipt = list_workload(tmp_path / "s.db", "save")
    assert receipt.bytes_written < 40 * page_size
    # its blocks, ~64 bytes of write record and block row per write, and a few more pages
    # (46 measured at 1 KiB pages; 145 with the index by key group first)
    rows = receipt.bytes_written + 64 * len(receipt.writes)
    assert pages <= rows // page_size + 30, (pages, receipt.bytes_written)


@pytest.mark.parametrize("version", [None, *VERSIONS])
def test_writes_are_packs_indexed_by_version_only(tmp_path: Path, version: int | None) -> None:
    """No write has a row or an index entry of its own, fresh or migrated: a save's writes
    are one pack, indexed by (op, version); the garbage collector reads ``ckpt_packs`` once
    per pass (versions 3 and 4 indexed every write by segment, version 5 those in segment
    files, versions 5 and 6 every write by version)."""
    path = tmp_path / "fresh.db" if version is None else old_store(tmp_path, version)
    storage = osp.open_storage(f"sqlite:///{path}")
    job = storage.job("j")
    inst = job.operator("o", max_key_groups=4).instance(0, 1)
    for key in range(8):
        inst.space_for_key(key).create_value(f"v{key}", key)
    checkpoint = (job.last_checkpoint() or 0) + 1
    receipt = inst.save(checkpoint)
    assert job.commit(checkpoint, [receipt]) is True
    storage.close()
    assert "ckpt_writes" not in tables(path)
    assert indexes(path, "ckpt_packs") == {"ckpt_packs_versions": ["op", "version"]}
    conn = sqlite3.connect(path)
    try:
        found = [w for w in writes(conn) if w.version == checkpoint and w.committed]
    finally:
        conn.close()
    assert len(found) == len(receipt.writes) == 4
    assert len({w.pack for w in found}) == 1


def test_heads_as_of_an_older_checkpoint_walk_back_past_a_page_of_packs(tmp_path: Path) -> None:
    """A key group written at checkpoint 1 and again at 72: as of 70 its head is the write
    of checkpoint 1, found by walking the packs back from 70 (69 packs of other key groups
    in between, more than a page of them)."""
    storage = osp.open_storage(f"sqlite:///{tmp_path / 's.db'}")
    job = storage.job("j")
    op = job.operator("o", max_key_groups=4)
    inst = op.instance(0, 1)
    kg = op.key_groups
    busy = next(k for k in range(100) if kg.key_group(k) == 0)
    idle = next(k for k in range(100) if kg.key_group(k) == 1)
    inst.space_for_key(busy).create_value("v", 0)
    inst.space_for_key(idle).create_value("w", 0)
    for cp in range(1, 73):
        if cp > 1:
            inst.space_for_key(busy).get_value("v").value = cp
        if cp == 72:
            inst.space_for_key(idle).get_value("w").value = cp
        assert job.commit(cp, [inst.save(cp)]) is True
        inst.on_saved()
    backend: Any = storage.backend
    first = backend.chains("j", "o", range(1, 2), 1)[1][-1].write_id
    assert backend.heads("j", "o", range(0, 4), 70) == {
        0: (backend.chains("j", "o", range(0, 1), 70)[0][-1].write_id, 70),
        1: (first, 1),
    }
    assert backend.heads("j", "o", range(0, 4), 72)[1][1] == 72
    restored = op.instance(0, 1, 70)
    assert restored.space_for_key(idle).get_value("w").value == 0
    assert restored.space_for_key(busy).get_value("v").value == 70
    storage.close()

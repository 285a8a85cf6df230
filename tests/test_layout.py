"""The package layout: names import from their homes without a warning, each backend is
imported only when its URL scheme is opened, and the lower layers import neither pyspark nor
rich nor argparse."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

import objectspace as osp
from objectspace.storage import open_backend


def test_new_homes_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from objectspace.inspection import open_existing  # noqa: F401
        from objectspace.spark import read_state  # noqa: F401
        from objectspace.storage import Backend, redact_url  # noqa: F401
        from objectspace.storage.stores import MemoryStore, SQLiteStore, Store  # noqa: F401
        from objectspace.tables import DELETED, CheckpointKind, StateWriter  # noqa: F401
    assert osp.Store is Store and osp.SQLiteStore is SQLiteStore


GONE = [
    "objectspace.plots",
    "objectspace.spark_demo",
    "objectspace.spark_state",
    "objectspace.stores",
    "objectspace.storage.base",
    "objectspace.storage.memory",
    "objectspace.storage.versioned",
    "objectspace.storage.sqlite_backend",
    "objectspace.storage.postgres_backend",
    "objectspace.storage.segments.codec",
    "objectspace.operators.execution",
    "objectspace.operators.state",
    "objectspace.operators.timing",
    "objectspace.demo.plots",
]


@pytest.mark.parametrize("old", GONE)
def test_no_module_left_at_an_old_path(old: str) -> None:
    """The package was never released: old paths are removed, not forwarded."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


@pytest.mark.parametrize(
    ("package", "name"),
    [
        ("objectspace", "CheckpointStats"),
        ("objectspace.storage", "SQLiteStore"),
        ("objectspace.storage.sqlite", "SQLiteStore"),
        ("objectspace.inspection", "render_inspect"),
        ("objectspace.operators", "KeyState"),
    ],
)
def test_no_name_forwarded_from_an_old_home(package: str, name: str) -> None:
    assert not hasattr(importlib.import_module(package), name)


@pytest.mark.parametrize(
    ("url", "module", "extra"),
    [
        ("postgresql://user@localhost:1/db", "objectspace.storage.postgresql", "postgresql"),
        ("file:///tmp/x?catalog=memory%3A%2F%2Fc", "objectspace.storage.segments", "segments"),
    ],
)
def test_missing_extra_is_a_storage_error_naming_it(
    url: str, module: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as if its dependency were not installed
    with pytest.raises(osp.StorageError, match=rf"pip install 'objectspace\[{extra}\]'"):
        open_backend(url)


def test_lower_layers_import_no_spark_rich_or_argparse() -> None:
    code = (
        "import sys, objectspace, objectspace.checkpoint, objectspace.operators, "
        "objectspace.inspection, objectspace.storage.sqlite\n"
        "objectspace.open_storage('memory://layout').close()\n"
        "print(sorted(m for m in ('pyspark', 'rich', 'argparse', 'psycopg', 'fsspec') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_public_members_that_replace_private_reach_ins() -> None:
    """ObjectSpace.get_as (operators), PersistedObject.space (inspection) and
    Instance.pending_save (the Spark task) are public and behave as the private names did."""
    space = osp.ObjectSpace()
    lst = space.create_list("l")
    assert space.get_as("l", osp.PersistedList) is lst
    with pytest.raises(osp.WrongKindError, match="'l' is a List, not a Value"):
        space.get_as("l", osp.PersistedValue)
    with pytest.raises(KeyError):
        space.get_as("missing", osp.PersistedList)
    assert lst.space is space
    space.delete("l")
    assert lst.space is None

    storage = osp.open_storage("memory://layout-pending-save")
    try:
        job = storage.job("j")
        instance = job.operator("o", max_key_groups=4).instance(0, 1)
        assert instance.pending_save is None
        instance.space_for_key("k").create_value("v", 1)
        receipt = instance.save(1)
        pending = instance.pending_save
        assert pending is not None and pending[0] == 1
        assert [(w.key_group, w.write_id) for w in pending[1]] == list(receipt.writes)
        assert job.commit(1, [receipt])
        instance.on_saved()
        assert instance.pending_save is None
    finally:
        storage.close()

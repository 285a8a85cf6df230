"""Bad input to the public API: each gets an objectspace error, or the builtin error the API
promises, whose message names what was wrong, and leaves committed state untouched.

Every case runs against a store with one committed checkpoint; after the failed call the
store is read back through a fresh connection and must be exactly as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import objectspace as osp
from objectspace.keygroups import MAX_KEY_GROUPS
from objectspace.spark import StatefulRunner
from tests.support.storage import segment_url

BIG = 2**64


@dataclass
class Env:
    """A store with checkpoint 0 committed for job ``j``, operator ``o`` (4 key groups)."""

    tmp: Path
    url: str
    storage: osp.Storage
    job: osp.Job
    op: osp.Operator


def _deep_tuple(depth: int) -> Any:
    key: Any = "k"
    for _ in range(depth):
        key = (key,)
    return key


def _runner(env: Env, **kw: Any) -> StatefulRunner:
    args: dict[str, Any] = {
        "key": "k",
        "order_by": "ts",
        "output_schema": "k long",
        "storage": env.url,
        "job": "spark",
        "operator": "o",
    }
    args.update(kw)
    return StatefulRunner(lambda key, rows, state: [], **args)


Call = Callable[[Env], object]

CASES: list[tuple[str, Call, type[BaseException], str]] = [
    # names
    ("job name with a lone surrogate", lambda e: e.storage.job("\ud800").operator("o", 4),
     ValueError, "job name"),
    ("job name with NUL", lambda e: e.storage.job("a\x00b"), ValueError, "NUL"),
    ("operator name with a lone surrogate", lambda e: e.job.operator("\ud800", 4),
     ValueError, "operator name"),
    ("operator name with NUL", lambda e: e.job.operator("a\x00b", 4), ValueError, "NUL"),
    # checkpoint ids and counts
    ("commit of a checkpoint id beyond 64 bits", lambda e: e.job.commit(BIG, []),
     ValueError, "checkpoint id"),
    ("save as a checkpoint id beyond 64 bits", lambda e: e.op.instance(0, 1).save(BIG),
     ValueError, "checkpoint id"),
    ("restore as of a checkpoint id beyond 64 bits",
     lambda e: e.op.instance(0, 1, checkpoint=BIG), ValueError, "checkpoint id"),
    ("retain beyond 64 bits", lambda e: e.job.retain(BIG), ValueError, "keep_last"),
    ("retain None", lambda e: e.job.retain(None), ValueError, "keep_last"),  # type: ignore[arg-type]
    ("retain True", lambda e: e.job.retain(True), ValueError, "keep_last"),
    ("retain a float", lambda e: e.job.retain(2.5), ValueError, "keep_last"),  # type: ignore[arg-type]
    ("compact None", lambda e: e.job.compact(None), ValueError, "min_chain_length"),  # type: ignore[arg-type]
    ("operator compact -1", lambda e: e.op.compact(-1), ValueError, "min_chain_length"),
    # key groups
    ("KeyGroups 2**32", lambda e: osp.KeyGroups(2**32), ValueError, str(MAX_KEY_GROUPS)),
    ("KeyGroups True", lambda e: osp.KeyGroups(True), ValueError, "MAX_KEY_GROUPS"),
    ("operator with 10**7 key groups", lambda e: e.job.operator("huge", 10**7),
     ValueError, str(MAX_KEY_GROUPS)),
    ("runner with 2**32 key groups", lambda e: _runner(e, job="fresh", max_key_groups=2**32),
     ValueError, str(MAX_KEY_GROUPS)),
    ("runner with parallelism True", lambda e: _runner(e, max_key_groups=4, parallelism=True),
     ValueError, "parallelism"),
    ("runner with parallelism 2.0", lambda e: _runner(e, max_key_groups=4, parallelism=2.0),
     ValueError, "parallelism"),
    ("runner batch with a checkpoint id beyond 64 bits",
     lambda e: _runner(e, max_key_groups=4).process(None, BIG), ValueError, "checkpoint_id"),
    ("runner batch at parallelism 0",
     lambda e: _runner(e, max_key_groups=4).process(None, 1, parallelism=0),
     ValueError, "parallelism"),
    ("key with a lone surrogate", lambda e: osp.key_group_hash("\ud800"),
     ValueError, "lone surrogate"),
    ("key tuple nested 10000 deep", lambda e: osp.key_group_hash(_deep_tuple(10_000)),
     ValueError, "nest"),
    ("space_for_key with a lone surrogate", lambda e: e.op.instance(0, 1).space_for_key("\udcff"),
     ValueError, "lone surrogate"),
    # collections
    ("array of 2**64 slots", lambda e: osp.ObjectSpace().create_array("a", BIG),
     ValueError, "array 'a'"),
    # storage URLs and paths
    ("sqlite URL with NUL", lambda e: osp.open_storage(f"sqlite:///{e.tmp}/a\x00b.db"),
     osp.StorageError, "NUL"),
    ("sqlite URL with a lone surrogate",
     lambda e: osp.open_storage(f"sqlite:///{e.tmp}/\ud800.db").job("j").operator("o", 4),
     osp.StorageError, "UTF-8"),
    ("segment URL with a bad level",
     lambda e: osp.open_storage(
         segment_url(f"file://{e.tmp}/seg", f"sqlite:///{e.tmp}/cat.db", level="max")),
     osp.StorageError, "level"),
    ("segment URL with a bad fsync",
     lambda e: osp.open_storage(
         segment_url(f"file://{e.tmp}/seg", f"sqlite:///{e.tmp}/cat.db", fsync="sometimes")),
     osp.StorageError, "fsync must be 1 or 0"),
    ("SQLiteStore path with NUL", lambda e: osp.SQLiteStore(f"{e.tmp}/a\x00b.db"),
     ValueError, "NUL"),
    ("SQLiteStore path None", lambda e: osp.SQLiteStore(None),  # type: ignore[arg-type]
     TypeError, "SQLite store path"),
]  # fmt: skip


@pytest.fixture
def env(tmp_path: Path) -> Env:
    url = f"sqlite:///{tmp_path}/state.db"
    storage = osp.open_storage(url)
    job = storage.job("j")
    op = job.operator("o", 4)
    instance = op.instance(0, 1)
    instance.space_for_key("user-1").create_list("buf").extend([1, 2, 3])
    job.commit(0, [instance.save(0)])
    storage.job("spark").operator("o", 4)  # the runners' job, so making one changes nothing
    return Env(tmp_path, url, storage, job, op)


def _committed(url: str) -> Any:
    storage = osp.open_storage(url)
    try:
        job = storage.job("j")
        op = job.operator("o")
        spaces = {
            kg: {oid: list(space.get(oid)) for oid in space}
            for kg, space in op.instance(0, 1).spaces()
        }
        return (
            job.checkpoints(),
            [(o.name, o.max_key_groups) for o in job.operators()],
            storage.jobs(),
            spaces,
        )
    finally:
        storage.close()


@pytest.mark.parametrize(("name", "call", "error", "needle"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_clearly(
    env: Env, name: str, call: Call, error: type[BaseException], needle: str
) -> None:
    before = _committed(env.url)
    with pytest.raises(error) as info:
        call(env)
    message = str(info.value)
    assert needle in message, f"{name}: {message!r}"
    assert type(info.value) not in (OverflowError, UnicodeEncodeError, RecursionError)
    assert _committed(env.url) == before


def test_cli_bad_keep_is_one_line_error(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    from objectspace.cli import main

    before = _committed(env.url)
    assert main(["retain", env.url, "--job", "j", "--keep", str(BIG)]) == 1
    err = capsys.readouterr().err
    assert "keep_last" in err and "OverflowError" not in err and "SQLite" not in err
    assert _committed(env.url) == before

"""``keep_arenas``: a process that saves state keeps freed object arenas for reuse (the C
extension wraps the interpreter's arena allocator; the pure-Python twin records the limit
and keeps nothing). Each scenario runs in a fresh interpreter: the allocator is the
process's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from objectspace.collections import _impl, _pycore
from objectspace.space import ARENAS_KEPT

C_BUILD = _impl.IMPLEMENTATION == "c"
needs_c = pytest.mark.skipif(not C_BUILD, reason="the pure-Python build keeps no arenas")


def _run(script: str, pure: bool = False) -> Any:
    """Run ``script`` in a fresh interpreter; it prints one JSON value last."""
    env = dict(os.environ)
    env.pop(_impl.PURE_PYTHON_ENV, None)
    if pure:
        env[_impl.PURE_PYTHON_ENV] = "1"
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("twin", ["python", "c"])
def test_bad_limits_raise(twin: str) -> None:
    if twin == "c" and not C_BUILD:
        pytest.skip("no C extension")
    keep = _pycore.keep_arenas if twin == "python" else _impl.keep_arenas
    with pytest.raises(ValueError, match="must be >= 0"):
        keep(-1)
    with pytest.raises(TypeError):
        keep("8")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        keep(2.0)  # type: ignore[arg-type]


_FIRST_SAVE = """
    import json
    import objectspace as osp
    from objectspace.collections import arena_stats, keep_arenas
    before = arena_stats()[2]
    if {preset} is not None:
        keep_arenas({preset})
    space = osp.ObjectSpace()
    space.create_list("a").append(1)
    space.checkpoint(osp.MemoryStore())
    print(json.dumps([before, arena_stats()[2]]))
"""


@pytest.mark.parametrize("pure", [False, True], ids=["build", "pure-python"])
def test_the_first_save_sets_the_limit(pure: bool) -> None:
    assert _run(_FIRST_SAVE.format(preset=None), pure) == [-1, ARENAS_KEPT]


@pytest.mark.parametrize("pure", [False, True], ids=["build", "pure-python"])
def test_a_limit_set_before_the_first_save_stays(pure: bool) -> None:
    assert _run(_FIRST_SAVE.format(preset=3), pure) == [-1, 3]
    assert _run(_FIRST_SAVE.format(preset=0), pure) == [-1, 0]


_CHURN = """
    import json, resource
    from objectspace.collections import arena_stats, keep_arenas

    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    assert keep_arenas({limit}) == 0
    rounds = []
    for r in range(3):
        start = faults()
        junk = [(i, str(i)) for i in range(400_000)]  # about 60 MiB of small objects
        check = sum(i for i, _ in junk)
        del junk
        rounds.append([faults() - start, *arena_stats(), check])
    kept_then = arena_stats()[0]
    previous = keep_arenas(0)
    print(json.dumps({{"rounds": rounds, "kept": kept_then, "previous": previous,
                      "after": arena_stats()}}))
"""


@needs_c
def test_freed_arenas_are_reused_up_to_the_limit() -> None:
    out = _run(_CHURN.format(limit=32))
    first, second, third = out["rounds"]
    assert first[4] == second[4] == third[4] == sum(range(400_000))
    assert 0 < first[1] <= 32  # kept after the first round's objects went
    assert second[2] >= first[1] - 1 and third[2] > second[2]  # handed out again
    assert out["kept"] <= 32 and out["previous"] == 32
    assert out["after"][0] == 0 and out["after"][2] == 0  # a limit of 0 returns them


@needs_c
def test_kept_arenas_spare_the_page_faults() -> None:
    kept = _run(_CHURN.format(limit=256))["rounds"]
    unkept = _run(_CHURN.format(limit=0))["rounds"]
    # Without: each round maps its arenas again (about 15,000 faults of 4 KiB); with: the
    # later rounds reuse the first's.
    assert unkept[1][0] > 5_000 and unkept[2][0] > 5_000
    assert kept[1][0] < unkept[1][0] / 4 and kept[2][0] < unkept[2][0] / 4

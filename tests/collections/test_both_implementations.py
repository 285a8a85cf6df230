"""One run tests both implementations of the persisted classes: conftest.py collects the
collection test modules a second time on a pure-Python copy, in this process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from objectspace.collections import _impl

ROOT = Path(__file__).resolve().parents[2]


def test_collection_tests_are_collected_on_both_implementations() -> None:
    if os.environ.get(_impl.PURE_PYTHON_ENV, "") not in ("", "0"):
        pytest.skip("this run is on the pure-Python classes only")
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only"),
            *("tests/collections/test_core.py", "tests/space/test_space_statemachines.py"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ids = done.stdout.split()
    assert "tests/collections/test_core.py::test_list_append_len_getitem" in ids
    assert "tests/collections/test_core.py[python]::test_list_append_len_getitem" in ids
    # the pickling tests run in a subprocess instead (pickle finds the original classes)
    assert (
        "tests/collections/test_core.py[python]::test_pickle_round_trip_with_pending_pages[2]"
        not in ids
    )
    machines = [i for i in ids if i.startswith("tests/space/test_space_statemachines.py[python]::")]
    assert machines and all("memory" in i for i in machines)


def test_the_copy_is_on_the_pure_python_classes() -> None:
    """What the copied test modules see: the pure-Python bases; the layers below shared."""
    import objectspace as original
    from tests.conftest import pure_python_copy

    with pure_python_copy():
        import objectspace as copy
        from objectspace.collections import _impl as copy_impl

        assert copy_impl.IMPLEMENTATION == "python"
        assert copy.ObjectSpaceError is original.ObjectSpaceError  # errors are shared
        assert copy.MemoryStore is original.MemoryStore  # stores too
        copy_list = copy.PersistedList
    from objectspace.collections import PersistedList

    assert sys.modules["objectspace"] is original
    assert copy_list is not PersistedList
    bases = {(c.__module__, c.__name__) for c in copy_list.__mro__}
    assert ("objectspace.collections._pycore", "ListBase") in bases
    assert ("objectspace.collections._core", "ListBase") not in bases

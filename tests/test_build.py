"""The C extension's build: ``OBJECTSPACE_REQUIRE_C=1`` turns a failed compile into an error."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from objectspace.collections import _impl

ROOT = Path(__file__).resolve().parent.parent
REQUIRE_C_ENV = "OBJECTSPACE_REQUIRE_C"


def _build_broken(tmp_path: Path, require: bool) -> subprocess.CompletedProcess[str]:
    """``setup.py build_ext --inplace`` on a copy of the project whose ``_core.c`` does not compile."""
    shutil.copy(ROOT / "setup.py", tmp_path / "setup.py")
    # The project's pyproject.toml needs a newer setuptools (``project.license``) than some
    # venvs have; the build only needs a name and a version.
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "0"\n')
    source = tmp_path / "src" / "objectspace" / "collections"
    source.mkdir(parents=True)
    (source / "_core.c").write_text("this is not C;\n")
    env = {k: v for k, v in os.environ.items() if k != REQUIRE_C_ENV}
    if require:
        env[REQUIRE_C_ENV] = "1"
    return subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_broken_extension_fails_the_build_when_required(tmp_path: Path) -> None:
    done = _build_broken(tmp_path, require=True)
    assert done.returncode != 0, done.stdout + done.stderr
    assert "objectspace.collections._core" in done.stderr


def test_broken_extension_is_skipped_when_not_required(tmp_path: Path) -> None:
    done = _build_broken(tmp_path, require=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_required_extension_is_the_implementation_in_use() -> None:
    """Under ``OBJECTSPACE_REQUIRE_C=1`` (``make test``) the C classes are in use: a missing
    extension fails here instead of skipping the C-specific tests."""
    if os.environ.get(REQUIRE_C_ENV, "") in ("", "0"):
        pytest.skip(f"{REQUIRE_C_ENV} is not set")
    if os.environ.get(_impl.PURE_PYTHON_ENV, "") not in ("", "0"):
        pytest.skip(f"{_impl.PURE_PYTHON_ENV} is set")
    assert _impl.IMPLEMENTATION == "c"

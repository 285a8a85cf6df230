"""The build: ``OBJECTSPACE_REQUIRE_C=1`` turns a failed compile of the C extension into an
error, and ``make wheel``'s steps give an sdist that builds and a ``manylinux`` wheel that
carries the extension."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
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


# -- the dists a package index accepts (make wheel) ---------------------------------------------


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The sdist, the wheel built from it, and that wheel repaired by auditwheel."""
    from tests.support.deploy import build_dists, repair_wheel

    base = tmp_path_factory.mktemp("dists")
    built = build_dists(base / "dist")
    return built.sdist, built.wheel, repair_wheel(built.wheel, base / "wheelhouse")


def test_sdist_carries_what_the_build_needs(dists: tuple[Path, Path, Path]) -> None:
    sdist, _, _ = dists
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    for needed in (
        "pyproject.toml",
        "setup.py",
        "README.md",
        "src/objectspace/__init__.py",
        "src/objectspace/py.typed",
        "src/objectspace/collections/_core.c",
        "src/objectspace/collections/_core.pyi",
    ):
        assert needed in names, needed


def test_repaired_wheel_is_manylinux_with_the_extension(dists: tuple[Path, Path, Path]) -> None:
    _, wheel, repaired = dists
    assert wheel.name.endswith("linux_x86_64.whl") or "linux" in wheel.name
    # name-version-python-abi-platform.whl, the platform tags joined by dots
    platforms = repaired.name[: -len(".whl")].split("-")[-1].split(".")
    assert platforms and all(p.startswith("manylinux") for p in platforms), repaired.name
    with zipfile.ZipFile(repaired) as zf:
        names = zf.namelist()
        metadata = next(n for n in names if n.endswith(".dist-info/WHEEL"))
        tags = [
            line.split(":", 1)[1].strip()
            for line in zf.read(metadata).decode().splitlines()
            if line.startswith("Tag:")
        ]
    assert tags and all("manylinux" in tag for tag in tags), tags
    assert "Root-Is-Purelib: false" in zipfile.ZipFile(repaired).read(metadata).decode()
    extensions = [n for n in names if re.fullmatch(r"objectspace/collections/_core\..*\.so", n)]
    assert extensions, names
    assert "objectspace/py.typed" in names
    assert "objectspace/collections/_core.c" not in names

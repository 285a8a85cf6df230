"""The import graph of docs/architecture.md is enforced by pytest too, not only by `make lint`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKER = ROOT / "tools" / "check_private_imports.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_import_contracts_are_kept() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = _run(str(lint_imports), "--no-cache")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_no_private_names_imported_across_packages() -> None:
    result = _run(sys.executable, str(CHECKER), "src")
    assert result.returncode == 0, result.stdout + result.stderr


def test_private_name_checker_finds_a_violation(tmp_path: Path) -> None:
    pkg = tmp_path / "objectspace"
    (pkg / "inner").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "inner" / "__init__.py").write_text("")
    (pkg / "inner" / "mod.py").write_text("_hidden = 1\n")
    (pkg / "inner" / "_impl.py").write_text("X = 1\n")
    # inside the package: allowed
    (pkg / "inner" / "ok.py").write_text(
        "from objectspace.inner.mod import _hidden\nfrom ._impl import X\n"
    )
    # outside the package: a private name and a private module
    (pkg / "outer.py").write_text(
        "from objectspace.inner.mod import _hidden\nfrom objectspace.inner._impl import X\n"
    )
    result = _run(sys.executable, str(CHECKER), str(tmp_path))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert len(lines) == 2, result.stdout
    assert all("objectspace.outer imports" in line for line in lines)
    assert "objectspace.inner.mod._hidden (private to objectspace.inner)" in lines[0]
    assert "objectspace.inner._impl.X (private to objectspace.inner)" in lines[1]

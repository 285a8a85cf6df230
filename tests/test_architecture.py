"""The import graph of docs/architecture.md is enforced by pytest too, not only by `make lint`."""

from __future__ import annotations

import graphlib
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


# The C extension is no Python file: the import graph sees ``from objectspace.collections
# import _core`` as an import of the package itself.
_NOT_AN_IMPORT_OF_THE_PACKAGE = {("objectspace.collections._impl", "objectspace.collections")}


def test_no_import_circle_between_modules() -> None:
    """Modules import one another without a circle, imports under ``TYPE_CHECKING`` aside."""
    import grimp

    graph = grimp.build_graph("objectspace", exclude_type_checking_imports=True)
    edges = {
        m: {
            x
            for x in graph.find_modules_directly_imported_by(m)
            if x.startswith("objectspace") and (m, x) not in _NOT_AN_IMPORT_OF_THE_PACKAGE
        }
        for m in graph.modules
    }
    try:
        tuple(graphlib.TopologicalSorter(edges).static_order())
    except graphlib.CycleError as exc:
        raise AssertionError(f"import circle: {' -> '.join(exc.args[1])}") from exc


def test_no_module_or_class_too_large_outside_the_collections() -> None:
    """A module of at most 700 lines, a class of at most 40 methods: a file a page or two per
    role. The collections (one module per structure, as sortedcontainers) are exempt."""
    import ast

    large = []
    for path in sorted((ROOT / "src" / "objectspace").rglob("*.py")):
        if "collections" in path.relative_to(ROOT / "src" / "objectspace").parts:
            continue
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > 700:
            large.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                methods = [
                    b for b in node.body if isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef)
                ]
                if len(methods) > 40:
                    large.append(
                        f"{path.relative_to(ROOT)}: {node.name} has {len(methods)} methods"
                    )
    assert not large, large

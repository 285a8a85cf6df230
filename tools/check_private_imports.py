"""Report imports of private names across package boundaries.

A name that starts with one underscore (``_helper``, the module ``_pycore``) is private to the
package that defines it: a module inside that package (or one of its subpackages) may import
it, a module outside may not. ``from objectspace.collections._impl import X`` is fine in
``objectspace/collections/set.py`` and a violation in ``objectspace/space.py``; ``from
objectspace.storage.sql.tx import _chunks`` is a violation outside ``objectspace.storage.sql``.
Dunder names (``__version__``) are public.

Usage: ``python tools/check_private_imports.py [SRC_DIR]`` (default ``src``). Prints one line per
violation (``file:line: importer imports name (private to package)``) and exits 1 if there is
any, 0 otherwise. ``import-linter`` checks which modules import which; this checks names.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Violation:
    path: Path
    line: int
    importer: str
    name: str
    owner: str

    def __str__(self) -> str:
        return (
            f"{self.path}:{self.line}: {self.importer} imports {self.name} "
            f"(private to {self.owner})"
        )


def is_private(part: str) -> bool:
    """True for ``_x``, false for ``x`` and ``__x__``."""
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def module_name(path: Path, src: Path) -> tuple[str, bool]:
    """The dotted module name of ``path`` under ``src`` and whether it is a package."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def resolve(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The absolute module a ``from … import`` statement names."""
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    if not is_package:
        base.pop()
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def owner_of(dotted: str, src: Path) -> str | None:
    """The package a dotted name is private to, or None for a public name.

    The part before the first private part names a package (``collections`` in
    ``collections._impl``): the name is private to it. Or it names a module (``cli.commands`` in
    ``cli.commands._show``): the name is private to the package holding that module.
    """
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if is_private(part):
            prefix = parts[:i]
            if src.joinpath(*prefix).with_suffix(".py").is_file():
                prefix = prefix[:-1]
            return ".".join(prefix)
    return None


def inside(importer: str, package: str) -> bool:
    return importer == package or importer.startswith(package + ".")


def imported_names(tree: ast.AST, importer: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """Every dotted name a module imports, with its line."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            module = resolve(node, importer, is_package)
            for alias in node.names:
                if alias.name == "*":
                    yield node.lineno, module
                else:
                    yield node.lineno, f"{module}.{alias.name}"


def check(src: Path, root: str = "objectspace") -> list[Violation]:
    """The private-name imports across package boundaries in the ``root`` package under ``src``."""
    found: list[Violation] = []
    for path in sorted((src / root).rglob("*.py")):
        importer, is_package = module_name(path, src)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, name in imported_names(tree, importer, is_package):
            if not inside(name, root):
                continue
            owner = owner_of(name, src)
            if owner is not None and not inside(importer, owner):
                found.append(Violation(path, line, importer, name, owner))
    return found


def main(argv: list[str]) -> int:
    src = Path(argv[1]) if len(argv) > 1 else Path("src")
    violations = check(src)
    for violation in violations:
        print(violation)
    if violations:
        print(f"{len(violations)} import(s) of private names across packages", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

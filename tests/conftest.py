"""Shared fixtures: throwaway PostgreSQL and S3-compatible servers, started once per run.

The servers are real (the machine's PostgreSQL binaries, moto's server mode), on
127.0.0.1 only, and stopped at the end of the session.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import itertools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.servers import PostgresServer, S3Server, start_postgres, start_s3
from tests.support.storage import segment_url

_names = itertools.count()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = start_postgres()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A fresh PostgreSQL schema per test, so tests never see each other's jobs."""
    schema = f"t{os.getpid()}_{next(_names)}"
    return f"{postgres_server.url}?schema={schema}"


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    server = start_s3()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> str:
    """A new, empty bucket on the S3 server; returns its name."""
    import s3fs

    name = f"objectspace-test-{os.getpid()}-{next(_names)}"
    fs = s3fs.S3FileSystem(
        key="testing", secret="testing", client_kwargs={"endpoint_url": s3_server.endpoint}
    )
    fs.mkdir(name)
    return name


StorageFactory = Callable[[], str]


@pytest.fixture(params=["memory", "sqlite", "postgresql", "file", "s3"])
def any_storage_url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    """A storage URL for each backend of the contract suite."""
    kind = request.param
    base = os.fspath(tmp_path)
    if kind == "memory":
        return f"memory://contract-{os.getpid()}-{next(_names)}"
    if kind == "sqlite":
        return f"sqlite:///{base}/state.db"
    if kind == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    if kind == "file":
        return segment_url(f"file://{base}/segments", f"sqlite:///{base}/catalog.db")
    server: S3Server = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    return segment_url(
        f"s3://{bucket}/state",
        str(request.getfixturevalue("postgres_url")),
        endpoint_url=server.endpoint,
        key="testing",
        secret="testing",
    )


# -- both implementations in one run --------------------------------------------------------------
#
# The persisted classes take their fields from the C extension or from the pure-Python twin
# (``objectspace.collections._impl``, chosen once at import). These modules are collected twice:
# as usual, and as "<file>[python]", imported again against a second copy of the modules that
# build on those classes (collections, space and everything above them), made with
# OBJECTSPACE_PURE_PYTHON=1. The modules below them (errors, tables, serialization, keygroups,
# storage) are shared, so exception classes and store types are the same in both.
# Pickling tests are not collected under the copy: pickle finds a class by its module and
# name, i.e. in the original modules, so a copy's objects cannot round-trip in this process;
# each of these files still runs its pickling tests in a subprocess with
# OBJECTSPACE_PURE_PYTHON=1 (``-k pickl``). Under the copy ``PURE`` is true, so the C-only
# tests and those subprocess runs skip.
PURE_PYTHON_TWINS = {
    "test_core.py": None,
    "test_exception_safety.py": None,
    "test_conformance.py": None,
    # the state machines on the memory store only (the SQLite store adds nothing per class)
    "test_space_statemachines.py": "memory",
}
_SHARED = ("errors", "tables", "serialization", "keygroups", "storage")
_pure_copy: dict[str, object] | None = None


def _rebuilt(name: str) -> bool:
    """Whether module ``name`` is one the pure-Python copy imports again."""
    if name != "objectspace" and not name.startswith("objectspace."):
        return False
    parts = name.split(".")
    if len(parts) > 1 and parts[1] in _SHARED:
        return False
    return name != "objectspace.collections._core"


def _swap_in_pure_copy() -> dict[str, object]:
    """Put the pure-Python copy in ``sys.modules``; return what it replaced."""
    global _pure_copy
    import objectspace  # noqa: F401  (the original is loaded first, so it is what is shared)
    from objectspace.collections import _impl

    replaced = {name: module for name, module in sys.modules.items() if _rebuilt(name)}
    for name in replaced:
        del sys.modules[name]
    if _pure_copy is None:
        previous = os.environ.get(_impl.PURE_PYTHON_ENV)
        os.environ[_impl.PURE_PYTHON_ENV] = "1"
        try:
            importlib.import_module("objectspace")
            importlib.import_module("objectspace.collections._impl")
        finally:
            if previous is None:
                del os.environ[_impl.PURE_PYTHON_ENV]
            else:
                os.environ[_impl.PURE_PYTHON_ENV] = previous
        _pure_copy = {name: m for name, m in sys.modules.items() if _rebuilt(name)}
        assert sys.modules["objectspace.collections._impl"].IMPLEMENTATION == "python"  # type: ignore[attr-defined]
    else:
        sys.modules.update(_pure_copy)  # type: ignore[arg-type]
    return replaced


@contextlib.contextmanager
def pure_python_copy() -> Iterator[None]:
    """Within: ``import objectspace...`` gives the pure-Python copy (with the environment
    variable set, so that a module reading it at import sees it)."""
    from objectspace.collections import _impl

    replaced = _swap_in_pure_copy()
    previous = os.environ.get(_impl.PURE_PYTHON_ENV)
    os.environ[_impl.PURE_PYTHON_ENV] = "1"
    try:
        yield
    finally:
        if previous is None:
            del os.environ[_impl.PURE_PYTHON_ENV]
        else:
            os.environ[_impl.PURE_PYTHON_ENV] = previous
        for name in [n for n in sys.modules if _rebuilt(n)]:
            del sys.modules[name]
        sys.modules.update(replaced)  # type: ignore[arg-type]


class PurePythonModule(pytest.Module):
    """A test module imported again on the pure-Python copy of objectspace."""

    def _getobj(self) -> Any:
        with pure_python_copy():
            name = f"{self.path.stem}__pure_python"
            spec = importlib.util.spec_from_file_location(name, self.path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            return module


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    if file_path.name not in PURE_PYTHON_TWINS:
        return None
    if os.environ.get("OBJECTSPACE_PURE_PYTHON", "") not in ("", "0"):
        return None  # this whole run is on the pure-Python classes already
    module: pytest.Module = PurePythonModule.from_parent(
        parent, path=file_path, nodeid=f"{parent.nodeid}/{file_path.name}[python]".lstrip("/")
    )
    return module


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under the pure-Python copy: no pickling tests (see above), nor the tests that start the
    pure-Python subprocess, and the state machines on the store :data:`PURE_PYTHON_TWINS`
    names only."""
    kept, dropped = [], []
    for item in items:
        module = item.getparent(PurePythonModule)
        if module is not None:
            only = PURE_PYTHON_TWINS[module.path.name]
            if (
                "pickl" in item.name
                or item.name.startswith("test_pure_python")
                or (
                    only is not None
                    and item.name.startswith("test_machine")
                    and only not in item.name
                )
            ):
                dropped.append(item)
                continue
        kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept

"""Shared fixtures: throwaway PostgreSQL and S3-compatible servers, started once per run.

The servers are real (the machine's PostgreSQL binaries, moto's server mode), on
127.0.0.1 only, and stopped at the end of the session.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator

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

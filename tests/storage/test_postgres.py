"""The PostgreSQL backend against a real server: the connection pool, SERIALIZABLE
transactions and their retries, schema versioning, bulk loading and bad URLs."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import objectspace as osp
from objectspace.storage.postgresql import PostgresBackend
from objectspace.storage.postgresql import backend as postgres_backend
from objectspace.storage.sql import SCHEMA_VERSION
from tests.support.servers import PostgresServer, free_port

MAX_KG = 8


def schema_of(url: str) -> str:
    return url.split("schema=")[1].split("&")[0]


def raw(server: PostgresServer, schema: str | None = None) -> psycopg.Connection[Any]:
    conn = psycopg.connect(server.url, autocommit=True)
    if schema is not None:
        conn.execute(
            psycopg.sql.SQL("SET search_path TO {}").format(psycopg.sql.Identifier(schema))
        )
    return conn


def pg(storage: osp.Storage) -> PostgresBackend:
    assert isinstance(storage.backend, PostgresBackend)
    return storage.backend


@pytest.fixture
def storage(postgres_url: str) -> Iterator[osp.Storage]:
    s = osp.open_storage(postgres_url)
    yield s
    s.close()


def commit_value(job: osp.Job, op: osp.Operator, checkpoint: int, key: str, value: Any) -> None:
    inst = op.instance(0, 1)
    space = inst.space_for_key(key)
    if key in space:
        space.get_value(key).value = value
    else:
        space.create_value(key, value)
    assert job.commit(checkpoint, [inst.save(checkpoint)]) is True


# -- the pool -------------------------------------------------------------------------------


def test_pool_is_bounded_and_idle_connections_close(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    app = f"objectspace-pool-{uuid.uuid4().hex[:8]}"
    storage = osp.open_storage(f"{postgres_url}&pool_max=2&pool_idle=1&application_name={app}")
    backend = pg(storage)
    monitor = raw(postgres_server)

    def connections() -> int:
        row = monitor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND datname = %s",
            (app, "postgres"),
        ).fetchone()
        assert row is not None
        return int(row[0])

    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, connections())
            time.sleep(0.002)

    done: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    units = iter(range(50))

    def worker() -> None:
        try:
            while True:
                with lock:
                    n = next(units, None)
                if n is None:
                    return
                if n % 3 == 0:
                    storage.jobs()
                elif n % 3 == 1:
                    job.checkpoints()
                else:
                    storage.job(f"job-{n}").operator("o", max_key_groups=MAX_KG)
                with lock:
                    done.append(n)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    sampler = threading.Thread(target=sample)
    sampler.start()
    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    sampler.join()
    assert not errors, errors
    assert sorted(done) == list(range(50))
    assert backend.transactions >= 50
    assert 1 <= peak <= 2, f"{peak} connections for a pool of 2"
    assert connections() <= 2
    stats = backend.pool.get_stats()
    assert stats.get("pool_available", 0) == stats.get("pool_size", 0)  # all returned
    assert len(storage.jobs()) == 1 + 16
    assert op.job.checkpoints() == []

    deadline = time.monotonic() + 6
    while connections() and time.monotonic() < deadline:
        time.sleep(0.25)
    assert connections() == 0, "idle connections were not closed after pool_idle=1 s"
    assert storage.jobs()  # the pool reconnects
    storage.close()
    # The server ends a closed connection's backend asynchronously: allow it a moment.
    deadline = time.monotonic() + 3
    while connections() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert connections() == 0
    monitor.close()


# -- SERIALIZABLE transactions and retries ----------------------------------------------------


def test_retry_wrapper_retries_serialization_failures(storage: osp.Storage) -> None:
    backend = pg(storage)
    storage.jobs()
    calls = 0

    def work(tx: Any) -> str:
        nonlocal calls
        calls += 1
        tx.one("SELECT count(*) FROM ckpt_jobs")
        if calls <= 2:
            raise psycopg.errors.SerializationFailure("injected")
        return "done"

    retries, transactions = backend.retries, backend.transactions
    assert backend._run("x", work) == "done"
    assert calls == 3
    assert backend.retries == retries + 2
    assert backend.transactions == transactions + 1

    calls = 0

    def deadlock(tx: Any) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise psycopg.errors.DeadlockDetected("injected")
        return 7

    assert backend._run("y", deadlock) == 7
    assert backend.retries == retries + 3

    def broken(tx: Any) -> None:
        tx.execute("SELECT * FROM no_such_table")

    with pytest.raises(osp.StorageError, match="no_such_table"):
        backend._run("reading nothing", broken)
    assert backend.retries == retries + 3  # other errors are not retried


def test_retries_give_up_after_max_retries(postgres_url: str) -> None:
    storage = osp.open_storage(f"{postgres_url}&max_retries=3")
    backend = pg(storage)
    assert backend.max_retries == 3
    calls = 0

    def always(tx: Any) -> None:
        nonlocal calls
        calls += 1
        raise psycopg.errors.SerializationFailure("injected")

    started = time.monotonic()
    with pytest.raises(osp.StorageError, match="retries") as err:
        backend._run("committing nothing", always)
    assert "3" in str(err.value) and "committing nothing" in str(err.value)
    assert calls == 4  # the first attempt and 3 retries
    assert backend.retries == 4
    assert time.monotonic() - started < 10
    storage.close()


def test_real_serialization_failure_is_retried(
    postgres_server: PostgresServer, storage: osp.Storage
) -> None:
    """A genuine conflict: the first attempt reads a row, another transaction updates it
    and commits, the first attempt then updates it too and fails with 40001."""
    backend = pg(storage)
    job = storage.job("j")
    job.operator("o", max_key_groups=MAX_KG)
    other = raw(postgres_server, backend.schema)
    calls = 0

    def work(tx: Any) -> int:
        nonlocal calls
        calls += 1
        (last,) = tx.one("SELECT COALESCE(last_checkpoint, 0) FROM ckpt_jobs WHERE name = 'j'")
        if calls == 1:
            other.execute("UPDATE ckpt_jobs SET last_checkpoint = 5 WHERE name = 'j'")
        tx.execute("UPDATE ckpt_jobs SET last_checkpoint = ? WHERE name = 'j'", (last + 1,))
        return int(last)

    retries = backend.retries
    assert backend._run("bumping", work) == 5  # the retry saw the other's update
    assert calls == 2
    assert backend.retries == retries + 1
    assert job.last_checkpoint() == 6
    other.close()


def test_retried_write_keeps_every_row(
    postgres_server: PostgresServer, storage: osp.Storage
) -> None:
    """A write_pending transaction that fails with a real serialization failure after it
    interned new table names is retried; the retried write must still be restorable.

    The first attempt inserts the new table names into ckpt_tables and caches their ids;
    then a concurrent SERIALIZABLE transaction forms a write skew with it (it reads
    ckpt_packs and updates the ckpt_operators row the write read) and commits first, so
    PostgreSQL aborts the write (40001) and ``_run`` retries it.
    """
    backend = pg(storage)
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    other = psycopg.connect(postgres_server.url)
    other.isolation_level = psycopg.IsolationLevel.SERIALIZABLE
    other.execute(
        psycopg.sql.SQL("SET search_path TO {}").format(psycopg.sql.Identifier(backend.schema))
    )
    other.commit()
    conflicts = 0

    def hook(step: str) -> None:
        nonlocal conflicts
        if step == "write:rows" and conflicts == 0:
            conflicts += 1
            other.execute("SELECT count(*) FROM ckpt_packs").fetchone()
            other.execute("UPDATE ckpt_operators SET parallelism = parallelism")
            other.commit()

    backend.fault_hook = hook
    inst = op.instance(0, 1)
    inst.space(0).create_list("buffer").extend([1.5, 2.5, 3.5])
    inst.space(1).create_value("count", 3)
    retries = backend.retries
    receipt = inst.save(1)
    backend.fault_hook = None
    assert conflicts == 1
    assert backend.retries == retries + 1  # a real serialization failure, retried
    assert job.commit(1, [receipt])
    inst.on_saved()
    other.close()

    fresh = osp.open_storage(storage.url)
    try:
        restored = fresh.job("j").operator("o").instance(0, 1)
        assert list(restored.space(0)) == ["buffer"], "the retried write lost its objects"
        assert list(restored.space(0).get_list("buffer")) == [1.5, 2.5, 3.5]
        assert restored.space(1).get_value("count").value == 3
    finally:
        fresh.close()


def test_concurrent_commits_from_many_backends(postgres_url: str) -> None:
    """Several jobs, each committed by its own thread and backend, while other backends
    keep opening the same operators: every call succeeds and the final state is right."""
    jobs, checkpoints = 4, 8
    storages = [osp.open_storage(postgres_url) for _ in range(jobs * 2 + 4)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(jobs * 2)

    def committer(n: int) -> None:
        storage = storages[n]
        try:
            barrier.wait()
            job = storage.job(f"job-{n}")
            ops = [job.operator(f"op-{k}", max_key_groups=MAX_KG) for k in range(2)]
            for cp in range(1, checkpoints + 1):
                receipts = []
                for k, op in enumerate(ops):
                    instances = [op.instance(i, 2) for i in range(2)]
                    for g in range(MAX_KG):
                        inst = instances[op.key_groups.instance_of(g, 2)]
                        space = inst.space(g)
                        if "v" in space:
                            space.get_value("v").value = (n, k, g, cp)
                        else:
                            space.create_value("v", (n, k, g, cp))
                    receipts += [inst.save(cp) for inst in instances]
                assert job.commit(cp, receipts)
        except BaseException as exc:
            errors.append(exc)

    def opener(n: int) -> None:
        storage = storages[n]
        try:
            barrier.wait()
            for _ in range(checkpoints):
                for j in range(jobs):
                    for k in range(2):
                        storage.job(f"job-{j}").operator(f"op-{k}", max_key_groups=MAX_KG)
                storage.job("shared").operator(f"op-{n}", max_key_groups=MAX_KG)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=committer, args=(n,)) for n in range(jobs)]
    threads += [threading.Thread(target=opener, args=(n,)) for n in range(jobs, 2 * jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    retries = [pg(s).retries for s in storages]
    assert all(isinstance(r, int) and r >= 0 for r in retries)
    print(f"retries: {sum(retries)} in {sum(pg(s).transactions for s in storages)} transactions")

    check = storages[-1]
    assert sorted(check.jobs()) == sorted([*(f"job-{n}" for n in range(jobs)), "shared"])
    assert len(check.job("shared").operators()) == jobs
    for n in range(jobs):
        job = check.job(f"job-{n}")
        assert job.checkpoints() == list(range(1, checkpoints + 1))
        for k in range(2):
            op = job.operator(f"op-{k}")
            assert op.parallelism == 2
            inst = op.instance(0, 1)
            for g in range(MAX_KG):
                assert inst.space(g).get_value("v").value == (n, k, g, checkpoints)
            old = op.instance(0, 1, checkpoint=3)
            assert old.space(5).get_value("v").value == (n, k, 5, 3)
    for s in storages:
        s.close()


def test_concurrent_creation_of_one_operator(postgres_url: str) -> None:
    storages = [osp.open_storage(postgres_url) for _ in range(12)]
    for s in storages:
        s.jobs()  # schema ready
    barrier = threading.Barrier(len(storages))
    results: list[Any] = []

    def create(storage: osp.Storage) -> None:
        try:
            barrier.wait()
            results.append(storage.job("new").operator("op", max_key_groups=32).max_key_groups)
        except BaseException as exc:
            results.append(exc)

    threads = [threading.Thread(target=create, args=(s,)) for s in storages]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [32] * len(storages)
    assert [o.name for o in storages[0].job("new").operators()] == ["op"]
    for s in storages:
        s.close()


# -- bulk writes --------------------------------------------------------------------------


def test_bulk_rows_do_not_cost_a_round_trip_each(
    storage: osp.Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    statements = 0
    tx = postgres_backend._PgTx
    for name in ("execute", "one", "all", "executemany"):
        real = getattr(tx, name)

        def counted(self: Any, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            nonlocal statements
            statements += 1
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(tx, name, counted)

    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)

    def save(checkpoint: int, per_group: int) -> int:
        nonlocal statements
        inst = op.instance(0, 1)
        for g in range(MAX_KG):
            d = inst.space(g).create_dict(f"d{checkpoint}")
            d.update({f"key-{i}": i for i in range(per_group)})
        statements = 0
        receipt = inst.save(checkpoint)
        count = statements
        assert job.commit(checkpoint, [receipt])
        assert sum(len(inst.space(g).get_dict(f"d{checkpoint}")) for g in range(MAX_KG)) == (
            MAX_KG * per_group
        )
        return count

    small = save(1, 10)
    big = save(2, 1000)
    assert big <= small + 2, f"{small} statements for 80 rows, {big} for 8000"
    restored = op.instance(0, 1)
    assert dict(restored.space(3).get_dict("d2")) == {f"key-{i}": i for i in range(1000)}


# -- schema versioning and bad URLs -----------------------------------------------------------


def test_newer_schema_version_is_refused(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    storage = osp.open_storage(postgres_url)
    storage.job("j").operator("o", max_key_groups=MAX_KG)
    storage.close()
    conn = raw(postgres_server, schema_of(postgres_url))
    assert conn.execute("SELECT value FROM ckpt_meta WHERE name = 'schema_version'").fetchone() == (
        str(SCHEMA_VERSION),
    )
    conn.execute("UPDATE ckpt_meta SET value = '999' WHERE name = 'schema_version'")
    newer = osp.open_storage(postgres_url)
    with pytest.raises(osp.StorageError, match="999"):
        newer.jobs()
    with pytest.raises(osp.StorageError, match="schema version"):
        newer.job("j").operator("o")
    newer.close()
    conn.execute("UPDATE ckpt_meta SET value = '1' WHERE name = 'schema_version'")
    again = osp.open_storage(postgres_url)
    assert again.jobs() == ["j"]  # an older version opens, and is migrated
    again.close()
    assert conn.execute("SELECT value FROM ckpt_meta WHERE name = 'schema_version'").fetchone() == (
        str(SCHEMA_VERSION),
    )
    conn.close()


def test_bad_options_raise_storage_error(postgres_server: PostgresServer) -> None:
    for option in ("pool_max=many", "pool_max=0", "pool_idle=soon", "max_retries=x"):
        with pytest.raises(osp.StorageError):
            osp.open_storage(f"{postgres_server.url}?{option}")


_UNREACHABLE = """
import sys, time
import objectspace as osp
started = time.monotonic()
try:
    osp.open_storage(sys.argv[1]).jobs()
except osp.StorageError as exc:
    print("StorageError", round(time.monotonic() - started, 1), exc)
else:
    print("no error")
"""


def test_unreachable_server_fails_quickly(postgres_server: PostgresServer) -> None:
    """Nothing listens on the port, or the database does not exist: a StorageError within
    seconds (the URL even sets connect_timeout=2), not a hang for the pool's 120 s."""
    urls = {
        "closed port": f"postgresql://postgres@127.0.0.1:{free_port()}/postgres?connect_timeout=2",
        "no database": postgres_server.url.rsplit("/", 1)[0] + "/no_such_db?connect_timeout=2",
    }
    processes = {
        what: subprocess.Popen(
            [sys.executable, "-c", _UNREACHABLE, url],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for what, url in urls.items()
    }
    deadline = time.monotonic() + 12
    outcome = {}
    for what, process in processes.items():
        try:
            out, _ = process.communicate(timeout=max(0.1, deadline - time.monotonic()))
            outcome[what] = out.strip()
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            outcome[what] = "hung for more than 12 s"
    bad = {what: out for what, out in outcome.items() if not out.startswith("StorageError")}
    assert not bad, f"no quick StorageError: {bad}"

"""Instance snapshots that Spark's Python workers share (``StatefulRunner(snapshot_instances=
True)``, the default).

Which Python worker runs a task is Spark's choice, so most tests drive the task object
(``_InstanceTask``) directly, batch by batch, as ``StatefulRunner.process`` does, and play
the workers themselves: each "worker" is its own in-process set of kept instances, swapped
in for those of the process's cache (``cache.WORKER``). The snapshot files go to a test folder. Every run is compared
with the plain Python reference and the failure-free state; the last test runs a stream on
Spark with a task that fails once after it saved and wrote its snapshots.
"""

# The session fixture `spark` is imported from tests.support.spark and requested by name.
# ruff: noqa: F811

from __future__ import annotations

import os
import pickle
import time
from typing import Any

import pyarrow as pa
import pytest

from objectspace.keyed import KeyState
from objectspace.keygroups import KeyGroups
from objectspace.spark import StatefulRunner, TaskStats
from objectspace.spark import cache as spark_cache
from objectspace.spark.receipts import unpack_receipt
from objectspace.spark.task import _InstanceTask
from tests.support.spark import (
    Row,
    buffer5,
    df_rows,
    dict_rows,
    dump_state,
    keyed_batches,
    ref_buffer5,
    reference_run,
    ship,
    simulate,
    spark,  # noqa: F401
    write_json_files,
)

ship(__name__)

MAX_KG = 16
P = 3
COLUMNS = ("k", "n", "s")
SCHEMA = "k long, n long, s double"
ARROW_SCHEMA = pa.schema(
    [("k", pa.int64()), ("n", pa.int64()), ("s", pa.float64()), ("__os_receipt", pa.binary())]
)
BATCHES = keyed_batches(31, 24, 6, (1, 4))


@pytest.fixture
def snapshot_root(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    root = str(tmp_path / "spark-files")
    os.makedirs(root)
    monkeypatch.setattr(spark_cache, "WORKER", spark_cache.InstanceCache(snapshot_root=root))
    return os.path.join(root, "objectspace-instances")


def make_runner(url: str, job: str = "snap", **options: Any) -> StatefulRunner:
    return StatefulRunner(
        buffer5,
        key="k",
        order_by="ts",
        output_schema=SCHEMA,
        storage=url,
        job=job,
        operator="buffer5",
        max_key_groups=MAX_KG,
        parallelism=P,
        **options,
    )


def run_batch(
    runner: StatefulRunner,
    rows: list[Row],
    checkpoint_id: int,
    worker: dict[Any, Any] | spark_cache.InstanceCache,
    *,
    cache: bool = True,
    snapshots: bool = True,
    commit: bool = True,
) -> tuple[list[tuple[Any, ...]], list[TaskStats]]:
    """One batch as ``StatefulRunner.process`` runs it, every instance in ``worker`` (an
    in-process cache of its own: its kept instances, or a whole ``InstanceCache``).
    Returns the sorted output rows and the task stats."""
    plan = runner._driver.begin(
        checkpoint_id,
        P,
        output_columns=ARROW_SCHEMA.names,
        use_cache=cache,
        use_snapshots=snapshots,
        owner=f"test-app/{runner._token}",
        snapshot_key=runner._snapshot_key,
    )
    replay = plan.replay
    task = _InstanceTask(plan, ARROW_SCHEMA)
    groups = KeyGroups(MAX_KG)
    by_instance: dict[int, list[Row]] = {}
    for row in rows:
        kg = groups.key_group(row["k"])
        index = groups.instance_of(kg, P)
        by_instance.setdefault(index, []).append({**row, "__os_kg": kg, "__os_instance": index})
    saved_cache = spark_cache.WORKER.instances
    saved_worker = spark_cache.WORKER
    if isinstance(worker, spark_cache.InstanceCache):
        spark_cache.WORKER = worker
    else:
        spark_cache.WORKER.instances = worker
    try:
        out: list[Row] = []
        receipts, stats = [], []
        for index in sorted(by_instance):
            produced = task.run_instance(index, by_instance[index])
            receipt, st, _ = unpack_receipt(produced[-1]["__os_receipt"])
            out.extend(produced[:-1])
            stats.append(st)
            if receipt is not None:
                receipts.append(receipt)
    finally:
        spark_cache.WORKER = saved_worker
        spark_cache.WORKER.instances = saved_cache
    if commit and not replay:
        assert runner.job.commit(checkpoint_id, receipts)
        runner.job.retain(2)
    return dict_rows(out, COLUMNS), stats


def expected(batches: list[list[Row]] = BATCHES) -> tuple[list[list[tuple[Any, ...]]], Any]:
    outputs, _ = reference_run(ref_buffer5, batches)
    _, state = simulate(buffer5, batches, max_key_groups=MAX_KG)
    return [dict_rows(rows, COLUMNS) for rows in outputs], state


def sqlite_url(tmp_path: Any, name: str = "state.db") -> str:
    return f"sqlite:///{tmp_path}/{name}"


def test_each_worker_adopts_the_snapshot_the_other_wrote(tmp_path: Any, snapshot_root: str) -> None:
    outputs, state = expected()
    assert sum(map(len, outputs)) > 0
    url = sqlite_url(tmp_path)
    runner = make_runner(url)
    plain = make_runner(sqlite_url(tmp_path, "plain.db"))
    workers: dict[str, dict[Any, Any]] = {"A": {}, "B": {}}
    # A and B alternate as Spark's idle-worker queue makes them; some batches twice in a row.
    order = "ABBAAB"
    kinds = []
    for n, rows in enumerate(BATCHES):
        got, stats = run_batch(runner, rows, n, workers[order[n]])
        plain_got, plain_stats = run_batch(plain, rows, n, {}, cache=False)
        assert got == plain_got == outputs[n], f"batch {n}"
        assert not any(s.cached for s in plain_stats)
        assert len(stats) == P
        kinds.append(
            {("snapshot" if s.snapshot else "memory") if s.cached else "restore" for s in stats}
        )
        if n:
            assert all(s.rows_read == 0 for s in stats)
        assert dump_state(url, "snap", "buffer5") == dump_state(plain.storage, "snap", "buffer5")
    assert kinds == [
        {"restore"},
        {"snapshot"},
        {"memory"},
        {"snapshot"},
        {"memory"},
        {"snapshot"},
    ]
    assert dump_state(url, "snap", "buffer5") == state
    assert len(os.listdir(snapshot_root)) == P  # one file per instance, replaced in place


def test_a_worker_that_keeps_running_an_instance_stops_writing_its_snapshot(
    tmp_path: Any, snapshot_root: str
) -> None:
    """Where Spark keeps giving a worker the same instances, the snapshots go unread: after
    two batches in a row from its memory, the worker writes none (and removes the stale
    one). When another worker gets the instance after all, it restores from storage."""
    outputs, state = expected()
    url = sqlite_url(tmp_path)
    runner = make_runner(url)
    a: dict[Any, Any] = {}
    written = []
    for n in range(4):
        got, stats = run_batch(runner, BATCHES[n], n, a)
        assert got == outputs[n] and all(s.cached == (n > 0) for s in stats)
        written.append([s.snapshot_bytes > 0 for s in stats])
        assert len(os.listdir(snapshot_root)) == (P if n < 2 else 0)
    assert written == [[True] * P, [True] * P, [False] * P, [False] * P]
    got, stats = run_batch(runner, BATCHES[4], 4, {})
    assert got == outputs[4] and not any(s.cached for s in stats)
    got, stats = run_batch(runner, BATCHES[5], 5, a)  # a's memory is behind: the snapshot
    assert got == outputs[5] and all(s.snapshot for s in stats)
    assert dump_state(url, "snap", "buffer5") == state


def test_stale_snapshot_is_not_adopted(tmp_path: Any, snapshot_root: str) -> None:
    outputs, state = expected()
    url = sqlite_url(tmp_path)
    runner = make_runner(url)
    run_batch(runner, BATCHES[0], 0, {})
    # Batch 1 runs where no snapshot is written: the files still hold checkpoint 0.
    run_batch(runner, BATCHES[1], 1, {}, snapshots=False)
    got, stats = run_batch(runner, BATCHES[2], 2, {})
    assert got == outputs[2]
    assert not any(s.cached for s in stats)
    assert sum(s.rows_read for s in stats) > 0
    for n in range(3, len(BATCHES)):
        got, _ = run_batch(runner, BATCHES[n], n, {})
        assert got == outputs[n]
    assert dump_state(url, "snap", "buffer5") == state
    # A replay of the last batch runs on the checkpoint before it: the newest snapshot is
    # newer than that, and is not adopted either.
    last = len(BATCHES) - 1
    got, stats = run_batch(runner, BATCHES[last], last, {})
    assert got == outputs[last] and not any(s.cached for s in stats)
    assert dump_state(url, "snap", "buffer5") == state


def _disturbed(rows: list[Row], how: str) -> list[Row]:
    if how == "other values":
        return [{**r, "v": abs(r["v"]) + 1000.0} for r in rows]
    return [{**r, "v": -abs(r["v"]) - 1.0} for r in rows]  # changes no state: no writes


def test_snapshot_of_the_checkpoint_before_is_not_adopted_even_if_nothing_changed(
    tmp_path: Any, snapshot_root: str
) -> None:
    """Batch 1 changes no state, so checkpoint 0's snapshots still hold the state of
    checkpoint 1; but an instance adopted from them would save on top of checkpoint 0,
    which the commit refuses. Batch 2 restores."""
    batches = [BATCHES[0], _disturbed(BATCHES[1], "no writes"), *BATCHES[2:]]
    outputs, state = expected(batches)
    url = sqlite_url(tmp_path)
    runner = make_runner(url)
    run_batch(runner, batches[0], 0, {})
    _, stats = run_batch(runner, batches[1], 1, {}, snapshots=False)
    assert all(s.rows_read > 0 for s in stats)
    for n in range(2, len(batches)):
        got, stats = run_batch(runner, batches[n], n, {})
        assert got == outputs[n]
        assert all(s.snapshot == (n > 2) for s in stats)
    assert dump_state(url, "snap", "buffer5") == state


@pytest.mark.parametrize("how", ["other values", "no writes"])
def test_snapshot_of_an_attempt_that_was_not_committed_is_not_adopted(
    tmp_path: Any, snapshot_root: str, how: str
) -> None:
    """Checkpoint 1's snapshots come from an attempt that was never committed (it saw other
    rows, as a nondeterministic attempt would); the committed attempt wrote no snapshot.
    The snapshot names checkpoint 1, the base of batch 2, yet its writes are not the
    committed ones: batch 2 must restore. With ``no writes`` the losing attempt saved
    nothing at all, so only the chain heads tell it apart."""
    outputs, state = expected()
    url = sqlite_url(tmp_path)
    runner = make_runner(url)
    run_batch(runner, BATCHES[0], 0, {})
    _, lost = run_batch(runner, _disturbed(BATCHES[1], how), 1, {}, commit=False)
    assert all(s.snapshot_bytes > 0 for s in lost)
    got, _ = run_batch(runner, BATCHES[1], 1, {}, snapshots=False)
    assert got == outputs[1]
    got, stats = run_batch(runner, BATCHES[2], 2, {})
    assert got == outputs[2]
    assert not any(s.cached for s in stats)
    for n in range(3, len(BATCHES)):
        got, _ = run_batch(runner, BATCHES[n], n, {})
        assert got == outputs[n]
    assert dump_state(url, "snap", "buffer5") == state


def test_cached_instance_of_an_attempt_without_writes_that_lost_is_not_adopted(
    tmp_path: Any, snapshot_root: str
) -> None:
    """The same, in one worker's memory: its attempt of batch 1 saved no writes and was not
    committed; another attempt, which wrote, was. Nothing in the save identifies it, so the
    worker checks the chain heads, and restores."""
    outputs, state = expected()
    url = sqlite_url(tmp_path)
    runner = make_runner(url)
    worker: dict[Any, Any] = {}
    run_batch(runner, BATCHES[0], 0, worker)
    run_batch(runner, _disturbed(BATCHES[1], "no writes"), 1, worker, commit=False)
    run_batch(runner, BATCHES[1], 1, {}, snapshots=False)
    got, stats = run_batch(runner, BATCHES[2], 2, worker)
    assert got == outputs[2]
    assert not any(s.cached for s in stats)
    for n in range(3, len(BATCHES)):
        got, stats = run_batch(runner, BATCHES[n], n, worker)
        assert got == outputs[n] and all(s.cached for s in stats)
    assert dump_state(url, "snap", "buffer5") == state


def test_a_store_re_created_at_the_same_url_is_not_mistaken_for_the_old_one(
    tmp_path: Any, snapshot_root: str
) -> None:
    """A store deleted and re-created at the same URL numbers its writes from 1 again: the
    new runner's checkpoint 0 has the very write ids and versions the old one had. Neither
    the worker's memory nor the snapshots of the old runner are adopted."""
    outputs, state = expected()
    url = sqlite_url(tmp_path)
    old = make_runner(url)
    worker: dict[Any, Any] = {}
    run_batch(old, _disturbed(BATCHES[0], "other values"), 0, worker)
    old.storage.close()
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(f"{tmp_path}/state.db{suffix}"):
            os.remove(f"{tmp_path}/state.db{suffix}")
    new = make_runner(url)
    run_batch(new, BATCHES[0], 0, {}, snapshots=False)
    got, stats = run_batch(new, BATCHES[1], 1, worker)
    assert got == outputs[1]
    assert not any(s.cached for s in stats)
    for n in range(2, len(BATCHES)):
        got, stats = run_batch(new, BATCHES[n], n, worker)
        assert got == outputs[n] and all(s.cached for s in stats)
    assert dump_state(url, "snap", "buffer5") == state


def test_snapshot_of_a_batch_that_failed_and_ran_again(tmp_path: Any, snapshot_root: str) -> None:
    """Batch 1 fails after its tasks saved and wrote snapshots (nothing committed); it runs
    again on checkpoint 0 elsewhere: the snapshots of checkpoint 1 are not its base."""
    outputs, state = expected()
    url = sqlite_url(tmp_path)
    runner = make_runner(url)
    run_batch(runner, BATCHES[0], 0, {})
    run_batch(runner, BATCHES[1], 1, {}, commit=False)
    got, stats = run_batch(runner, BATCHES[1], 1, {})
    assert got == outputs[1] and not any(s.cached for s in stats)
    for n in range(2, len(BATCHES)):
        got, stats = run_batch(runner, BATCHES[n], n, {})
        assert got == outputs[n] and all(s.snapshot for s in stats)
    assert dump_state(url, "snap", "buffer5") == state


def _corrupt(path: str, how: str, other: str) -> None:
    with open(path, "rb") as f:
        blob = f.read()
    if how == "truncated":
        blob = blob[: len(blob) // 2]
    elif how == "flipped byte":
        blob = blob[:-10] + bytes([blob[-10] ^ 0xFF]) + blob[-9:]
    elif how == "empty":
        blob = b""
    elif how == "garbage":
        blob = os.urandom(len(blob))
    elif how == "header only":
        blob = blob[: len(spark_cache._SNAPSHOT_MAGIC) + 64]
    elif how == "other instance":
        with open(other, "rb") as f:
            blob = f.read()
    elif how == "a directory":
        os.unlink(path)
        os.mkdir(path)
        return
    with open(path, "wb") as f:
        f.write(blob)


@pytest.mark.parametrize(
    "how",
    [
        "truncated",
        "flipped byte",
        "empty",
        "garbage",
        "header only",
        "other instance",
        "a directory",
    ],
)
def test_unreadable_snapshot_is_a_miss(tmp_path: Any, snapshot_root: str, how: str) -> None:
    outputs, state = expected()
    url = sqlite_url(tmp_path)
    runner = make_runner(url)
    run_batch(runner, BATCHES[0], 0, {})
    paths = sorted(os.path.join(snapshot_root, name) for name in os.listdir(snapshot_root))
    assert len(paths) == P
    for i, path in enumerate(paths):
        _corrupt(path, how, paths[(i + 1) % len(paths)])
    got, stats = run_batch(runner, BATCHES[1], 1, {})
    assert got == outputs[1]
    assert not any(s.cached for s in stats)
    got, stats = run_batch(runner, BATCHES[2], 2, {})
    assert got == outputs[2]
    # Batch 1 replaced the bad files with good snapshots; a directory cannot be replaced.
    assert all(s.snapshot != (how == "a directory") for s in stats)
    for n in range(3, len(BATCHES)):
        got, _ = run_batch(runner, BATCHES[n], n, {})
        assert got == outputs[n]
    assert dump_state(url, "snap", "buffer5") == state


def test_snapshots_off_or_no_private_folder(
    tmp_path: Any, snapshot_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs, state = expected()
    url = sqlite_url(tmp_path)
    runner = make_runner(url)
    run_batch(runner, BATCHES[0], 0, {}, snapshots=False)
    assert not os.path.exists(snapshot_root)
    # A folder others may write to is not used (the files in it are unpickled).
    os.mkdir(snapshot_root)
    os.chmod(snapshot_root, 0o777)
    assert spark_cache.WORKER.snapshot_folder() is None
    run_batch(runner, BATCHES[1], 1, {})
    assert os.listdir(snapshot_root) == []
    os.chmod(snapshot_root, 0o700)
    assert spark_cache.WORKER.snapshot_folder() == snapshot_root

    # A snapshot that cannot be written does not fail the task.
    def broken(path: str, identity: bytes, checkpoint_id: int, data: Any, key: bytes) -> int:
        raise OSError("disk full")

    monkeypatch.setattr(spark_cache, "_write_snapshot", broken)
    got, stats = run_batch(runner, BATCHES[2], 2, {})
    assert got == outputs[2] and all(s.snapshot_bytes == 0 for s in stats)
    monkeypatch.undo()
    monkeypatch.setattr(spark_cache.WORKER, "snapshot_root", os.path.dirname(snapshot_root))
    for n in range(3, len(BATCHES)):
        got, _ = run_batch(runner, BATCHES[n], n, {})
        assert got == outputs[n]
    assert dump_state(url, "snap", "buffer5") == state


class _Payload:
    """Creates a marker file when unpickled: what a planted snapshot would run."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("keep_mac", [False, True])
def test_planted_snapshot_is_never_unpickled(
    tmp_path: Any, snapshot_root: str, keep_mac: bool
) -> None:
    """A snapshot file replaced by someone who can write the folder but does not hold the
    runner's key (a planted pickle, with the right header, identity and checkpoint, and
    with the old file's MAC or a digest of its own) is ignored: nothing is unpickled, and
    the batch restores from storage and gives the right output."""
    outputs, state = expected()
    url = sqlite_url(tmp_path)
    runner = make_runner(url)
    run_batch(runner, BATCHES[0], 0, {})
    marker = tmp_path / "pwned"
    paths = sorted(os.path.join(snapshot_root, name) for name in os.listdir(snapshot_root))
    assert len(paths) == P
    head = len(spark_cache._SNAPSHOT_MAGIC)
    for path in paths:
        with open(path, "rb") as f:
            blob = f.read()
        body = (0).to_bytes(8, "big", signed=True) + pickle.dumps(
            {"payload": _Payload(str(marker))}
        )
        digest = (
            blob[head + 32 : head + 64]
            if keep_mac
            else __import__("hashlib").blake2b(body, digest_size=32).digest()
        )
        with open(path, "wb") as f:
            f.write(blob[: head + 32] + digest + body)
    got, stats = run_batch(runner, BATCHES[1], 1, {})
    assert not marker.exists()
    assert got == outputs[1]
    assert not any(s.snapshot or s.cached for s in stats)
    for n in range(2, len(BATCHES)):
        got, _ = run_batch(runner, BATCHES[n], n, {})
        assert got == outputs[n]
    assert not marker.exists()
    assert dump_state(url, "snap", "buffer5") == state


def test_snapshot_of_another_runner_key_is_not_adopted(tmp_path: Any, snapshot_root: str) -> None:
    """The key, not the folder, decides: a runner with another key adopts nothing."""
    url = sqlite_url(tmp_path)
    runner = make_runner(url)
    run_batch(runner, BATCHES[0], 0, {})
    runner._snapshot_key = os.urandom(32)
    _, stats = run_batch(runner, BATCHES[1], 1, {})
    assert not any(s.snapshot for s in stats)
    _, stats = run_batch(runner, BATCHES[2], 2, {})
    assert all(s.snapshot for s in stats)


# -- on Spark ---------------------------------------------------------------------------------


class FailOnceAfterSaving:
    """buffer5, but on the batch whose ``ts`` fall in ``ts_range`` the task's first attempt
    emits a row that does not fit the output schema: the task fails after an instance saved
    its pending checkpoint and wrote its snapshot, and Spark runs the task again.

    It also empties the worker's in-memory cache at every call, as if each instance ran in
    another worker than last time (which Spark decides): an instance's entry is gone by the
    time the next instance runs, so most instances must come from snapshots."""

    def __init__(self, ts_range: tuple[int, int], markers: str) -> None:
        self.ts_range, self.markers = ts_range, markers

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> Any:
        from pyspark import TaskContext

        spark_cache.WORKER.instances.clear()
        out = list(buffer5(key, rows, state))
        ctx = TaskContext.get()
        lo, hi = self.ts_range
        if ctx is not None and ctx.attemptNumber() == 0 and lo <= rows[0]["ts"] <= hi:
            marker = os.path.join(self.markers, f"{ctx.stageId()}-{ctx.partitionId()}")
            if not os.path.exists(marker):
                with open(marker, "w") as f:
                    f.write(str(ctx.taskAttemptId()))
                out.append({"n": "not a number", "s": 0.0})
        return out


def test_stream_with_snapshots_equals_the_failure_free_run(spark: Any, tmp_path: Any) -> None:
    outputs, state = expected()
    write_json_files(tmp_path / "in", BATCHES, first_mtime=time.time() - 3600)
    markers = tmp_path / "markers"
    os.makedirs(markers)
    failing = [r["ts"] for r in BATCHES[3]]
    url = sqlite_url(tmp_path)
    runner = make_runner(url)
    runner.fn = FailOnceAfterSaving((min(failing), max(failing)), str(markers))
    results: dict[int, list[tuple[Any, ...]]] = {}

    def sink(df: Any, batch_id: int) -> None:
        results[batch_id] = df_rows(df)

    stream = (
        spark.readStream.schema("k long, ts long, v double, c long, src string")
        .option("maxFilesPerTrigger", 1)
        .json(str(tmp_path / "in"))
    )
    query = (
        stream.writeStream.foreachBatch(runner.foreach_batch(sink))
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(timeout=180)
        assert not query.isActive
    finally:
        query.stop()
    runner.close()
    assert os.listdir(markers), "the injected failure did not fire"
    assert results == dict(enumerate(outputs))
    assert all(b.committed for b in runner.history)
    assert dump_state(url, "snap", "buffer5") == state
    # Every batch after the first ran on adopted instances, most from snapshots; except the
    # one whose task failed after saving: there, the instances that had saved checkpoint 3
    # in the failed attempt were restored, neither their cache entries nor their snapshots
    # being checkpoint 2.
    assert [b.instances for b in runner.history] == [P] * len(BATCHES)
    for batch in list(runner.history)[1:]:
        if batch.checkpoint_id != 3:
            assert batch.cached_instances == P, batch
            assert batch.snapshot_instances >= P - 1, batch
    assert runner.history[3].cached_instances < P

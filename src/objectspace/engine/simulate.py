"""A stateful function's batches without Spark: :func:`simulate`, exactly as
:class:`~objectspace.spark.StatefulRunner` runs them (the same :class:`BatchDriver`, routing
and per-instance loop), in this process. :mod:`objectspace.testing` is its public face."""

from __future__ import annotations

import contextlib
import copy
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from objectspace.checkpoint import CompactionPolicy, Job, Operator, Receipt, Storage, open_storage
from objectspace.collector import fewer_collections
from objectspace.engine.columns import (
    KEY_GROUP_COLUMN,
    RECEIPT_COLUMN,
    check_input_columns,
    check_output_columns,
    check_parallelism,
    check_retain,
    column_names,
)
from objectspace.engine.driver import BatchDriver
from objectspace.engine.plan import INLINE_STATE_BYTES, StatefulFunction, TaskPlan
from objectspace.engine.residency import Residency, discard, parse_bytes
from objectspace.engine.routing import route_rows
from objectspace.engine.stats import BatchStats, TaskStats, finish_task
from objectspace.engine.task import Row, group_rows, run_instance
from objectspace.engine.time_driver import TimeOptions
from objectspace.keyed import KeyState, to_ms
from objectspace.keygroups import check_max_key_groups

__all__ = ["Simulation", "simulate"]


@dataclass
class Simulation:
    """What :func:`simulate` ran: per batch its output rows and stats, and the state.

    ``outputs[i]``: the output rows (dicts) of batch ``i``, key columns filled in where the
    function left them out, in the runner's order: instances by index, within an instance
    key groups ascending, within a key group keys by ``repr(key)``, and each key's rows in
    the order the function yielded them. (Under Spark the instances' outputs may arrive in
    another order; within an instance the order is this one.)
    ``first_attempts[i]``: for a batch in ``replay``, the output of its first attempt,
    whose save was never committed. ``stats[i]``: the :class:`BatchStats` of batch ``i``.
    """

    storage: Storage
    job: Job
    operator: Operator
    key_columns: tuple[str, ...]
    outputs: list[list[Row]] = field(default_factory=list)
    stats: list[BatchStats] = field(default_factory=list)
    first_attempts: dict[int, list[Row]] = field(default_factory=dict)

    def state(self, key: Any) -> KeyState:
        """The :class:`KeyState` of ``key`` (a tuple for a multi-column key) as of the last
        committed batch, restored from the storage: read it as the function does (edits
        are not saved anywhere)."""
        instance = self.operator.instance(0, 1)
        return KeyState.for_key(instance.space_for_key(key), key)

    def close(self) -> None:
        """Close the storage."""
        self.storage.close()


def _parallelism_of(parallelism: int | Mapping[int, int], batch: int) -> int:
    if isinstance(parallelism, Mapping):
        starts = [i for i in parallelism if i <= batch]
        return parallelism[max(starts)] if starts else 1
    return parallelism


def simulate(
    fn: StatefulFunction,
    batches: Sequence[Iterable[Mapping[str, Any]]],
    *,
    key: str | Sequence[str],
    order_by: str | Sequence[str],
    max_key_groups: int = 128,
    parallelism: int | Mapping[int, int] = 1,
    replay: Iterable[int] = (),
    storage: str | Storage | None = None,
    job: str = "simulate",
    operator: str = "simulate",
    compaction: CompactionPolicy | None = None,
    retain: int | None = 2,
    output_columns: Sequence[str] | None = None,
    time_mode: str | None = None,
    event_time: str | None = None,
    watermark_delay: str | timedelta | None = None,
    late_rows: str = "drop",
    on_timer: Callable[..., Iterable[Mapping[str, Any]]] | None = None,
    batch_times: Sequence[datetime | int] | None = None,
    memory_budget: int | str | None = None,
    local_dir: str | None = None,
    local_copy_every: int | None = 10,
) -> Simulation:
    """Run ``fn`` over ``batches`` (lists of row dicts; batch ``i`` is checkpoint ``i``)
    exactly as :class:`~objectspace.spark.StatefulRunner` would, without Spark.

    ``key``, ``order_by``, ``max_key_groups``, ``compaction`` and ``retain`` are the
    runner's. ``parallelism``: an int, or ``{batch index: parallelism from that batch on}``
    (batches before the first entry run at 1): a change restores the new instances' key
    groups from the storage, as a restarted query would. ``replay``: batch indexes run
    twice, the first attempt saved but never committed (a failed attempt), the second
    committed; both outputs are kept. ``storage``: a storage URL or object (default: a
    fresh ``memory://`` one); ``job``/``operator`` name the state in it, which must hold
    no later checkpoint than the batches. ``output_columns`` (optional) plays the
    runner's ``output_schema``: an output row with another column is refused, and every
    output row gets every column (``None`` where missing). Saves are staged as the
    runner's tasks' are by default (their blocks travel with the receipts and the commit
    stores them), so a failed attempt leaves nothing behind here either.

    Time, as the runner's: ``time_mode`` (``None``, ``"event"``, ``"processing"``),
    ``event_time``, ``watermark_delay``, ``late_rows`` and ``on_timer``; ``batch_times``:
    the processing time of each batch (datetimes, naive meaning UTC, or epoch ms; default:
    the wall clock when the batch first runs), which a replayed batch keeps.

    ``memory_budget`` (bytes, or a size like ``"64 MiB"``): run as a runner with that
    budget does (:class:`~objectspace.engine.residency.Residency`): the instances are kept
    between batches, each over a local store in ``local_dir`` (default: a temporary folder
    deleted at the end), holding in memory only the objects their batches use, and
    dropping the others beyond the budget after each batch. Outputs are the same as
    without a budget; the stats say what was loaded, evicted and resident.
    ``local_copy_every``: the runner's (copies of the local stores in storage's file area).
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable (key, rows, state), not {type(fn).__name__}")
    key_columns = column_names(key, "key")
    order_columns = column_names(order_by, "order_by")
    check_max_key_groups(max_key_groups)
    if isinstance(parallelism, Mapping):
        for batch_index, p in parallelism.items():
            if type(batch_index) is not int or batch_index < 0:
                raise ValueError(
                    f"parallelism maps batch indexes (ints >= 0) to parallelism, not "
                    f"{batch_index!r}"
                )
            check_parallelism(p, max_key_groups)
    else:
        check_parallelism(parallelism, max_key_groups)
    replays = set(replay)
    options = TimeOptions.of(time_mode, event_time, watermark_delay, late_rows, on_timer)
    times = None if batch_times is None else [to_ms(t, "a batch time") for t in batch_times]
    if times is not None and len(times) < len(batches):
        raise ValueError(
            f"batch_times has {len(times)} times for {len(batches)} batches: give one per batch"
        )
    check_retain(retain)
    budget = None if memory_budget is None else parse_bytes(memory_budget)
    columns = None
    if output_columns is not None:
        columns = column_names(output_columns, "output_columns")
        check_output_columns(columns, "output_columns", operator)
    all_rows = [[dict(r) for r in batch] for batch in batches]
    for rows in all_rows:
        for row in rows:
            check_input_columns(list(row), key_columns, order_columns, operator)
    if storage is None:
        storage = f"memory://simulate-{uuid.uuid4().hex}"
    store = open_storage(storage) if isinstance(storage, str) else storage
    the_job = store.job(job)
    the_operator = the_job.operator(operator, max_key_groups, compaction=compaction)
    the_job.fence()
    sim = Simulation(store, the_job, the_operator, key_columns)
    driver = BatchDriver(
        the_operator,
        fn,
        key_columns=key_columns,
        order_columns=order_columns,
        output_columns=None if columns is None else (*columns, RECEIPT_COLUMN),
        compaction=the_operator.compaction,
        retain=retain,
        time=options,
        memory_budget=budget,
        copy_every=local_copy_every,
    )
    with contextlib.ExitStack() as stack:
        residency = None
        if budget is not None:
            if local_dir is None:
                local_dir = os.path.join(
                    stack.enter_context(tempfile.TemporaryDirectory()), "local"
                )
            residency = Residency(budget, local_dir)
            stack.callback(residency.close)
        stack.enter_context(fewer_collections())  # as a worker runs its tasks
        for i, rows in enumerate(all_rows):
            p = _parallelism_of(parallelism, i)
            at = None if times is None else times[i]
            if i in replays:
                out, _ = _run_batch(driver, rows, i, p, at, residency, commit=False)
                sim.first_attempts[i] = _project(out, columns)
            out, stats = _run_batch(driver, rows, i, p, at, residency, commit=True)
            sim.outputs.append(_project(out, columns))
            sim.stats.append(stats)
    return sim


def _project(out: list[Row], columns: tuple[str, ...] | None) -> list[Row]:
    """Every output row with exactly ``columns`` (``None`` where missing), as the runner's
    output schema gives them."""
    if columns is None:
        return out
    return [{c: row.get(c) for c in columns} for row in out]


# Values a function cannot change in place: a batch's rows holding only these are copied
# row by row, not deeply (most rows).
_IMMUTABLE = frozenset(
    {int, float, str, bytes, bool, type(None), datetime, date, timedelta, Decimal}
)


def _fresh(rows: list[Row]) -> list[Row]:
    """The rows as an attempt gets them: new dicts, and a deep copy of any value a
    function could change in place (a list, a dict, ...), so that neither another attempt
    of the batch (a replay) nor the caller's rows see what an attempt did to its rows."""
    out = []
    for row in rows:
        fresh = dict(row)
        for column, value in row.items():
            if type(value) not in _IMMUTABLE:
                fresh[column] = copy.deepcopy(value)
        out.append(fresh)
    return out


def _run_batch(
    driver: BatchDriver,
    rows: list[Row],
    checkpoint_id: int,
    parallelism: int,
    batch_time: int | None,
    residency: Residency | None,
    *,
    commit: bool,
) -> tuple[list[Row], BatchStats]:
    """One attempt of one batch, as ``StatefulRunner.process`` runs it, its instances one
    after the other in this process; committed when ``commit`` (and not a replay of a
    committed checkpoint)."""
    plan = driver.begin(
        checkpoint_id,
        parallelism,
        batch_time=batch_time,
        stage_bytes=INLINE_STATE_BYTES // parallelism,  # as the runner's tasks
    )
    by_instance = route_rows(
        _fresh(rows),
        plan.key_columns,
        driver.operator.key_groups,
        parallelism,
        plan.due_instances(),
    )
    tasks: list[tuple[Receipt | None, TaskStats]] = []
    out: list[Row] = []
    tasks_started = time.perf_counter()
    for index in sorted(by_instance):
        produced, receipt, stats = _run_task(plan, index, by_instance[index], residency)
        tasks.append((receipt, stats))
        out.extend(produced)
    seconds_tasks = time.perf_counter() - tasks_started
    return out, driver.finish(plan, tasks, commit=commit, seconds_tasks=seconds_tasks)


def _run_task(
    plan: TaskPlan, index: int, rows: list[Row], residency: Residency | None = None
) -> tuple[list[Row], Receipt | None, TaskStats]:
    """Instance ``index`` of ``plan`` restored from storage (or, with ``residency``, kept
    or over its local store) and run over its rows."""
    started = time.perf_counter()
    stats = TaskStats(index=index)
    if residency is None:
        instance = plan.restore(index)
    else:
        instance = residency.instance(plan, index, stats)
    restore = time.perf_counter() - started
    grouped = group_rows(rows, plan.key_columns, KEY_GROUP_COLUMN)
    produced, receipt = run_instance(plan, instance, grouped, stats, restore)
    if residency is not None:
        residency.keep(plan, index, instance, stats)
    else:
        discard(instance)  # restored afresh next batch: freed now, not by a collection
    finish_task(stats, started)
    return produced, receipt, stats

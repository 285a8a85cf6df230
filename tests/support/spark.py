"""Shared pieces of the Spark tests: the one SparkSession, data, references, state dumps.

``spark`` is the suite's single local SparkSession (``local[2,3]``: two threads, up to three
attempts per task). Test modules import it with ``from tests.support.spark import spark``.

Three ways to get "the right answer" for a run of ``StatefulRunner``:

- :func:`reference_run` runs a *plain Python* reference (``ref(key, rows, st)`` with ``st``
  a plain dict per key), written independently of :mod:`objectspace.operators`;
- :func:`simulate` runs the real stateful function on in-memory object spaces, one per key
  group, without Spark and without storage: the failure-free run whose state a Spark run
  must end with (compare with :func:`dump_state`);
- :func:`dump_state` reads what a job committed, as comparable Python data.
"""

from __future__ import annotations

import json
import math
import random
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import pytest
from pyspark import cloudpickle

import objectspace as osp
from objectspace.collections import (
    PersistedDict,
    PersistedSet,
    PersistedSortedDict,
    PersistedSortedSet,
    PersistedValue,
)
from objectspace.keyed import KeyState
from objectspace.keygroups import KeyGroups

Row = dict[str, Any]

INPUT_DDL = "k long, ts long, v double, c long, src string"
INPUT_COLUMNS = ("k", "ts", "v", "c", "src")
SOURCES = ("a", "b", "c")


def ship(module_name: str) -> None:
    """Pickle the functions and classes of ``module_name`` by value, so Spark's Python
    workers (which do not have tests/ on their path) can run them."""
    cloudpickle.register_pickle_by_value(sys.modules[module_name])


ship(__name__)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The one SparkSession of the test suite: 2 threads, 3 attempts per task."""
    from objectspace.spark import local_session

    session = local_session("local[2,3]", app_name="objectspace-tests")
    yield session
    session.stop()


# -- data -----------------------------------------------------------------------------------


def keyed_batches(
    seed: int,
    n_keys: int,
    n_batches: int,
    rows_per_key: tuple[int, int],
    *,
    keys: Sequence[Any] | None = None,
) -> list[list[Row]]:
    """Random batches of rows ``{k, ts, v, c, src}``: per key and batch a random number of
    rows in ``rows_per_key``; ``ts`` increases across batches and is unique; each batch is
    shuffled, so the runner must sort by ``ts`` itself."""
    rng = random.Random(seed)
    keys = list(keys) if keys is not None else rng.sample(range(-(10**12), 10**12), n_keys)
    batches = []
    ts = 0
    for _ in range(n_batches):
        rows = []
        for key in keys:
            for _ in range(rng.randint(*rows_per_key)):
                ts += 1
                rows.append(
                    {
                        "k": key,
                        "ts": ts,
                        "v": round(rng.uniform(-100, 100), 3),
                        "c": rng.randint(0, 3),
                        "src": rng.choice(SOURCES),
                    }
                )
        rng.shuffle(rows)
        batches.append(rows)
    return batches


def to_df(
    spark: Any, rows: list[Row], ddl: str = INPUT_DDL, columns: Sequence[str] = INPUT_COLUMNS
) -> Any:
    return spark.createDataFrame([tuple(r[c] for c in columns) for r in rows], ddl)


def write_json_files(
    folder: Any, batches: list[list[Row]], *, first_mtime: float, start: int = 0
) -> None:
    """One JSON-lines file per batch, with increasing modification times (Spark's file
    source orders files by modification time)."""
    import os

    os.makedirs(folder, exist_ok=True)
    for i, rows in enumerate(batches, start):
        path = os.path.join(folder, f"part-{i:04d}.json")
        tmp = os.path.join(folder, f".part-{i:04d}.tmp")
        with open(tmp, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        os.utime(tmp, (first_mtime + 10 * i, first_mtime + 10 * i))
        os.rename(tmp, path)  # hidden while written: the file source skips dot files


# -- comparing rows -------------------------------------------------------------------------


def norm(value: Any) -> Any:
    """A comparable, hashable form: Spark Rows, lists, tuples and dicts become tuples."""
    if isinstance(value, dict):
        return tuple(norm(v) for v in value.values())
    if isinstance(value, list | tuple):  # pyspark Row is a tuple
        return tuple(norm(v) for v in value)
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return value


def sort_rows(rows: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(rows, key=repr)


def df_rows(df: Any) -> list[tuple[Any, ...]]:
    """A DataFrame's rows as a sorted list of tuples."""
    return sort_rows(norm(r) for r in df.collect())


def dict_rows(rows: Iterable[Row], columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """Rows (dicts) as the sorted tuples a DataFrame with ``columns`` would give
    (fields a row lacks are null)."""
    return sort_rows(tuple(norm(r.get(c)) for c in columns) for r in rows)


# -- references -----------------------------------------------------------------------------


def _key_of(row: Row, key_columns: Sequence[str]) -> Any:
    return row[key_columns[0]] if len(key_columns) == 1 else tuple(row[c] for c in key_columns)


def group_batch(
    rows: list[Row], key_columns: Sequence[str], order_columns: Sequence[str]
) -> dict[Any, list[Row]]:
    """One batch as the runner hands it to a function: per key, rows in order_by order."""
    groups: dict[Any, list[Row]] = {}
    for row in sorted(rows, key=lambda r: tuple(r[c] for c in order_columns)):
        groups.setdefault(_key_of(row, key_columns), []).append(dict(row))
    return groups


def _fill_key(row: Row, key: Any, key_columns: Sequence[str]) -> Row:
    row = dict(row)
    if len(key_columns) == 1:
        row.setdefault(key_columns[0], key)
    else:
        for column, part in zip(key_columns, key, strict=True):
            row.setdefault(column, part)
    return row


def _cols(value: str | Sequence[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def reference_run(
    ref: Callable[[Any, list[Row], dict[str, Any]], Iterable[Row]],
    batches: list[list[Row]],
    key: str | Sequence[str] = "k",
    order_by: str | Sequence[str] = "ts",
) -> tuple[list[list[Row]], dict[Any, dict[str, Any]]]:
    """Run a plain Python reference batch by batch: per-batch output rows (key filled in)
    and the final plain state per key."""
    key_columns, order_columns = _cols(key), _cols(order_by)
    states: dict[Any, dict[str, Any]] = {}
    outputs = []
    for rows in batches:
        out = []
        for k, key_rows in group_batch(rows, key_columns, order_columns).items():
            for produced in ref(k, key_rows, states.setdefault(k, {})):
                out.append(_fill_key(produced, k, key_columns))
        outputs.append(out)
    return outputs, states


def simulate(
    fn: Callable[[Any, list[Row], KeyState], Iterable[Row]],
    batches: list[list[Row]],
    key: str | Sequence[str] = "k",
    order_by: str | Sequence[str] = "ts",
    max_key_groups: int = 16,
) -> tuple[list[list[Row]], dict[str, tuple[int, str, Any]]]:
    """The failure-free run of ``fn`` without Spark or storage: one in-memory object space
    per key group. Returns the per-batch outputs and the final state as :func:`dump_state`
    shows it."""
    key_columns, order_columns = _cols(key), _cols(order_by)
    groups = KeyGroups(max_key_groups)
    spaces: dict[int, osp.ObjectSpace] = {}
    outputs = []
    for rows in batches:
        out = []
        for k, key_rows in group_batch(rows, key_columns, order_columns).items():
            space = spaces.setdefault(groups.key_group(k), osp.ObjectSpace())
            for produced in fn(k, key_rows, KeyState.for_key(space, k)):
                out.append(_fill_key(produced, k, key_columns))
        outputs.append(out)
    return outputs, dump_spaces(spaces.items())


def _content(obj: Any) -> tuple[str, Any]:
    kind = type(obj).__name__
    if isinstance(obj, PersistedValue):
        return kind, norm(obj.value)
    if isinstance(obj, PersistedSortedDict):
        return kind, tuple((norm(k), norm(v)) for k, v in obj.items())
    if isinstance(obj, PersistedDict):
        return kind, tuple(sorted(((norm(k), norm(v)) for k, v in obj.items()), key=repr))
    if isinstance(obj, PersistedSortedSet):
        return kind, tuple(norm(v) for v in obj)
    if isinstance(obj, PersistedSet):
        return kind, tuple(sorted((norm(v) for v in obj), key=repr))
    return kind, tuple(norm(v) for v in obj)


def dump_spaces(spaces: Iterable[tuple[int, osp.ObjectSpace]]) -> dict[str, tuple[int, str, Any]]:
    """Every object of the spaces: id → (key group, kind, content)."""
    out = {}
    for key_group, space in spaces:
        for object_id in space:
            out[object_id] = (key_group, *_content(space.get(object_id)))
    return out


def dump_state(
    storage: str | osp.Storage, job: str, operator: str, checkpoint: int | None = None
) -> dict[str, tuple[int, str, Any]]:
    """The state a job committed (as of ``checkpoint``, default the last), read back through
    a fresh storage connection and one instance owning every key group."""
    if isinstance(storage, str):
        storage = osp.open_storage(storage)
    op = storage.job(job).operator(operator)
    instance = op.instance(0, 1, checkpoint=checkpoint)
    return dump_spaces(instance.spaces())


# -- the example --------------------------------------------------------------------


def buffer5(key: Any, rows: list[Row], state: KeyState) -> Iterator[Row]:
    """Buffers positive values five at a time and keeps their running total; a row with
    ``v <= 0`` changes nothing (so a batch of such rows saves no writes)."""
    buf = state.list("buf")
    total = state.value("total", 0.0)
    for r in rows:
        if r["v"] > 0:
            buf.append(r["v"])
            total.value = round(total.value + r["v"], 6)
            if len(buf) == 5:
                yield {"k": key, "n": 5, "s": round(sum(buf), 6)}
                buf.clear()


def ref_buffer5(key: Any, rows: list[Row], st: dict[str, Any]) -> Iterator[Row]:
    buf = st.setdefault("buf", [])
    for r in rows:
        if r["v"] > 0:
            buf.append(r["v"])
            st["total"] = round(st.get("total", 0.0) + r["v"], 6)
            if len(buf) == 5:
                yield {"k": key, "n": 5, "s": round(sum(buf), 6)}
                buf.clear()


def buffer100(key: Any, rows: list[Row], state: KeyState) -> Iterator[Row]:
    """The issue's example, verbatim."""
    buf = state.list("buf")
    for r in rows:
        buf.append(r["v"])
        if len(buf) == 100:
            yield {"k": key, "n": len(buf), "s": sum(buf)}
            buf.clear()


def ref_buffer100(key: Any, rows: list[Row], st: dict[str, Any]) -> Iterator[Row]:
    buf = st.setdefault("buf", [])
    for r in rows:
        buf.append(r["v"])
        if len(buf) == 100:
            yield {"k": key, "n": 100, "s": sum(buf)}
            buf.clear()


BUFFER100_SCHEMA = "k long, n long, s double"
BUFFER100_COLUMNS = ("k", "n", "s")


def buffer100_state(states: dict[Any, dict[str, Any]], max_key_groups: int) -> dict[str, Any]:
    """What :func:`dump_state` must show after the reference ran: one list per key."""
    from objectspace.keyed import key_prefix

    groups = KeyGroups(max_key_groups)
    return {
        key_prefix(k) + "buf": (groups.key_group(k), "PersistedList", tuple(st["buf"]))
        for k, st in states.items()
    }


# -- plain Python references of the operator library ---------------------------------------
# Written from the operators' documented behaviour, independently of their implementation:
# per key a plain dict of plain Python values.


class RefTake:
    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, key: Any, rows: list[Row], st: dict[str, Any]) -> list[Row]:
        seen = st.get("seen", 0)
        out = rows[: max(0, self.n - seen)]
        st["seen"] = seen + len(out)
        return [dict(r) for r in out]


class RefSkip:
    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, key: Any, rows: list[Row], st: dict[str, Any]) -> list[Row]:
        dropped = st.get("dropped", 0)
        d = min(len(rows), max(0, self.n - dropped))
        st["dropped"] = dropped + d
        return [dict(r) for r in rows[d:]]


def _stat(agg: str, vals: list[Any]) -> Any:
    if agg == "count":
        return len(vals)
    total = 0
    for x in vals:
        total = total + x
    if agg == "sum":
        return total
    if agg == "mean":
        return total / len(vals)
    return min(vals) if agg == "min" else max(vals)


class RefAggregate:
    """``scan`` (running=True: after every row) and ``aggregate`` (once per batch)."""

    def __init__(
        self, agg: str, value: str = "v", out: str | None = None, running: bool = False
    ) -> None:
        self.agg, self.value, self.out, self.running = agg, value, out or agg, running

    def __call__(self, key: Any, rows: list[Row], st: dict[str, Any]) -> list[Row]:
        vals = st.setdefault("vals", [])
        out = []
        for r in rows:
            vals.append(None if self.agg == "count" else r[self.value])
            if self.running:
                out.append({self.out: _stat(self.agg, vals)})
        if rows and not self.running:
            out.append({self.out: _stat(self.agg, vals)})
        return out


class RefBuffer:
    def __init__(self, count: int, skip: int | None = None, value: str | None = None) -> None:
        self.count, self.skip, self.value = count, skip or count, value

    def __call__(self, key: Any, rows: list[Row], st: dict[str, Any]) -> list[Row]:
        hist = st.setdefault("items", [])
        out = []
        for r in rows:
            hist.append(dict(r) if self.value is None else r[self.value])
            first = len(hist) - self.count
            if first >= 0 and first % self.skip == 0:
                out.append({"items": [dict(x) if isinstance(x, dict) else x for x in hist[first:]]})
        return out


class RefWindow:
    def __init__(self, count: int, skip: int | None = None) -> None:
        self.count, self.skip = count, skip or count

    def __call__(self, key: Any, rows: list[Row], st: dict[str, Any]) -> list[Row]:
        n = st.get("n", 0)
        out = []
        for r in rows:
            for w in range(n // self.skip + 1):
                if w * self.skip <= n < w * self.skip + self.count:
                    out.append({**r, "window": w})
            n += 1
        st["n"] = n
        return out


class RefDistinct:
    def __init__(self, by: str) -> None:
        self.by = by

    def __call__(self, key: Any, rows: list[Row], st: dict[str, Any]) -> list[Row]:
        seen = st.setdefault("seen", set())
        out = []
        for r in rows:
            if r[self.by] not in seen:
                seen.add(r[self.by])
                out.append(dict(r))
        return out


class RefDistinctUntilChanged:
    def __init__(self, by: str) -> None:
        self.by = by

    def __call__(self, key: Any, rows: list[Row], st: dict[str, Any]) -> list[Row]:
        out = []
        for r in rows:
            if "last" not in st or r[self.by] != st["last"]:
                out.append(dict(r))
                st["last"] = r[self.by]
        return out


class RefTopK:
    def __init__(self, k: int, by: str) -> None:
        self.k, self.by = k, by

    def _top(self, rows: list[tuple[int, Row]]) -> list[tuple[int, Row]]:
        # Largest value first; among equal values the earlier row ranks higher.
        return sorted(rows, key=lambda sr: (-sr[1][self.by], sr[0]))[: self.k]

    def __call__(self, key: Any, rows: list[Row], st: dict[str, Any]) -> list[Row]:
        everything = st.setdefault("rows", [])
        changed = False
        for r in rows:
            seq = len(everything)
            everything.append((seq, dict(r)))
            if any(s == seq for s, _ in self._top(everything)):
                changed = True
        if not changed:
            return []
        return [{**r, "rank": rank} for rank, (_, r) in enumerate(self._top(everything))]


class RefCombineLatest:
    def __init__(self, sources: Sequence[str], source: str = "src", value: str = "v") -> None:
        self.sources, self.source, self.value = tuple(sources), source, value

    def __call__(self, key: Any, rows: list[Row], st: dict[str, Any]) -> list[Row]:
        latest = st.setdefault("latest", {})
        out = []
        for r in rows:
            latest[r[self.source]] = r[self.value]
            if all(s in latest for s in self.sources):
                out.append({s: latest[s] for s in self.sources})
        return out


class RefZip:
    def __init__(self, sources: Sequence[str], source: str = "src", value: str = "v") -> None:
        self.sources, self.source, self.value = tuple(sources), source, value

    def __call__(self, key: Any, rows: list[Row], st: dict[str, Any]) -> list[Row]:
        queues = st.setdefault("queues", {s: [] for s in self.sources})
        out = []
        for r in rows:
            queues[r[self.source]].append(r[self.value])
            while all(queues[s] for s in self.sources):
                out.append({s: queues[s].pop(0) for s in self.sources})
        return out


class RefChain:
    def __init__(self, *refs: Callable[[Any, list[Row], dict[str, Any]], list[Row]]) -> None:
        self.refs = refs

    def __call__(self, key: Any, rows: list[Row], st: dict[str, Any]) -> list[Row]:
        current = rows
        for i, ref in enumerate(self.refs):
            if not current:
                return []
            current = list(ref(key, current, st.setdefault(str(i), {})))
        return current


def task_result(rows: Iterable[Row]) -> tuple[list[Row], list[tuple[Any, Any]]]:
    """A task's result rows as the runner reads them: the output rows (those that came as
    rows, then each receipt's inline output) and the (receipt, stats) reports."""
    import pyarrow as pa

    from objectspace.spark.receipts import unpack_receipt

    out: list[Row] = []
    reports: list[tuple[Any, Any]] = []
    for row in rows:
        blob = row.pop("__os_receipt")
        if blob is None:
            out.append(row)
            continue
        receipt, stats, inline = unpack_receipt(blob)
        reports.append((receipt, stats))
        if inline:
            out.extend(pa.ipc.open_stream(inline).read_all().to_pylist())
    return out, reports

"""Keyed stateful operators whose state lives in object-space collections.

An operator is a callable ``op(key, rows, state) -> rows``: ``rows`` are this key's rows of
one batch (dicts, in order), ``state`` is the key's :class:`~objectspace.operators.KeyState`,
and the result is the list of output rows (dicts). Output rows do not carry the key; the
runner adds the key column(s) to rows that lack them. Operators are called once per batch
for every key that has rows, so their output over all batches must not depend on where the
batch boundaries fall, except where a docstring says an operator emits "per batch".

Every piece of state is its own persisted object (a value, a queue, a set, ...) under a name
documented in each factory's docstring, so a checkpoint writes only the slots a batch
changed. What goes into state is msgpack-serializable as long as the rows are (dicts, lists,
tuples, numbers, str, bytes, None, datetimes). Operators never hand out an object that
they keep in state: rows kept in state are shallow copies, so a caller that edits an output
row in place (a runner adding the key column, say) cannot change the state behind the
space's back.

Each operator reads its state objects once per call and, where the state is a single value,
keeps the running value in a local variable and stores it once at the end of the call; so
"cost per row" below counts Python work per row, and "writes" counts rows the next
checkpoint writes.

All factories check their arguments and raise :class:`ValueError` with a message naming
the operator and the argument. The operators are plain picklable objects (Spark ships them
to its executors); ``repr`` shows the call that built them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from typing import Any, TypeAlias

from objectspace.operators.state import KeyState

__all__ = [
    "AGGREGATES",
    "KeyedOperator",
    "Row",
    "aggregate",
    "buffer",
    "chain",
    "combine_latest",
    "distinct",
    "distinct_until_changed",
    "scan",
    "skip",
    "take",
    "top_k",
    "window",
    "zip",
]

Row: TypeAlias = dict[str, Any]
"""One row: column name → value."""

KeyedOperator: TypeAlias = Callable[[Any, list[Row], KeyState], Iterable[Row]]
"""``op(key, rows, state) -> output rows``: the shape every operator here has."""

AGGREGATES = ("sum", "count", "mean", "min", "max")
"""The aggregates :func:`scan` and :func:`aggregate` compute."""


# -- argument checks ------------------------------------------------------------------------


def _check_int(op: str, name: str, value: object, minimum: int) -> int:
    if type(value) is not int or value < minimum:
        raise ValueError(f"{op}: {name} must be an int >= {minimum}, got {value!r}")
    return value


def _check_column(op: str, name: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{op}: {name} must be a non-empty column name (str), got {value!r}")
    return value


def _check_optional_column(op: str, name: str, value: object) -> str | None:
    return None if value is None else _check_column(op, name, value)


def _check_sources(op: str, sources: object) -> tuple[str, ...]:
    if isinstance(sources, str | bytes) or not isinstance(sources, Iterable):
        raise ValueError(f"{op}: sources must be a list of source names, got {sources!r}")
    names = tuple(sources)
    if not names:
        raise ValueError(f"{op}: sources must name at least one source")
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{op}: a source name is a non-empty str, got {name!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"{op}: sources must be distinct, got {list(names)!r}")
    return names


def _check_agg(op: str, agg: object) -> str:
    if agg not in AGGREGATES:
        raise ValueError(f"{op}: unknown aggregate {agg!r}; valid ones are {', '.join(AGGREGATES)}")
    return agg


# -- row access -----------------------------------------------------------------------------


def _field(op: _Operator, row: Row, column: str) -> Any:
    """``row[column]``, with an error naming the operator when the column is missing."""
    try:
        return row[column]
    except KeyError:
        raise KeyError(f"{op!r}: input row has no column {column!r}: {row!r}") from None
    except TypeError:
        raise TypeError(f"{op!r}: input rows are dicts, got {type(row).__name__}") from None


_ATOMS = (int, float, str, bytes, bool, type(None))


def _hashable(value: Any) -> Any:
    """``value`` as a hashable, msgpack-serializable equivalent.

    Lists and tuples become tuples (recursively), dicts become tuples of ``(key, value)``
    pairs sorted by key, sets become frozensets; other values are returned as they are.
    """
    if isinstance(value, _ATOMS):
        return value
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, set | frozenset):
        return frozenset(_hashable(v) for v in value)
    return value


class _Operator:
    """Base of the operators: a picklable callable whose ``repr`` is the factory call."""

    __slots__ = ()
    name = ""

    def _args(self) -> Iterable[str]:
        return ()

    def __repr__(self) -> str:
        return f"{self.name}({', '.join(self._args())})"

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        raise NotImplementedError


# -- take / skip ----------------------------------------------------------------------------


class _Take(_Operator):
    __slots__ = ("n",)
    name = "take"

    def __init__(self, n: int) -> None:
        self.n = n

    def _args(self) -> Iterable[str]:
        return (repr(self.n),)

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        n = self.n
        if n == 0:
            return []
        seen = state.value("seen", 0)
        had = seen.value
        if had >= n:
            return []
        out = list(itertools.islice(rows, n - had))
        if out:
            seen.value = had + len(out)
        return out


def take(n: int) -> KeyedOperator:
    """Emit the first ``n`` rows ever seen for the key (across batches), then nothing.

    State: value ``"seen"`` (rows emitted so far, at most ``n``). Cost: O(1) per emitted row,
    O(1) per batch once ``n`` rows were emitted (the rest of the batch is not looked at);
    writes: one row per batch that emitted something. ``take(0)`` emits nothing and keeps
    no state.
    """
    return _Take(_check_int("take", "n", n, 0))


class _Skip(_Operator):
    __slots__ = ("n",)
    name = "skip"

    def __init__(self, n: int) -> None:
        self.n = n

    def _args(self) -> Iterable[str]:
        return (repr(self.n),)

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        n = self.n
        if n == 0:
            return list(rows)
        seen = state.value("seen", 0)
        had = seen.value
        if had >= n:
            return list(rows)
        out = list(rows)
        dropped = min(n - had, len(out))
        if dropped:
            seen.value = had + dropped
        return out[dropped:]


def skip(n: int) -> KeyedOperator:
    """Drop the first ``n`` rows of the key (across batches) and emit every later row.

    State: value ``"seen"`` (rows dropped so far, at most ``n``). Cost: O(1) per row;
    writes: one row per batch that dropped something, none once ``n`` rows were dropped.
    """
    return _Skip(_check_int("skip", "n", n, 0))


# -- scan / aggregate -----------------------------------------------------------------------


class _Aggregate(_Operator):
    """Emits the aggregate once per batch; :class:`_Scan` emits it after every row."""

    __slots__ = ("agg", "out", "value")
    name = "aggregate"
    running = False

    def __init__(self, agg: str, value: str, out: str) -> None:
        self.agg = agg
        self.value = value
        self.out = out

    def _args(self) -> Iterable[str]:
        return (repr(self.agg), f"value={self.value!r}", f"out={self.out!r}")

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        agg, column, name, running = self.agg, self.value, self.out, self.running
        results: list[Any] = []
        emit = results.append
        if agg == "count":
            count_v = state.value("count", 0)
            c = count_v.value
            if running:
                for _row in rows:
                    c += 1
                    emit(c)
            else:
                c0 = c
                c += sum(1 for _row in rows)
                if c > c0:
                    emit(c)
            if results:
                count_v.value = c
        elif agg == "sum" or agg == "mean":
            sum_v = state.value("sum", 0)
            s = sum_v.value
            rows_v = state.value("count", 0) if agg == "mean" else None
            c = 0 if rows_v is None else rows_v.value
            mean = agg == "mean"
            seen = 0
            for row in rows:
                s = s + _field(self, row, column)
                c += 1
                seen += 1
                if running:
                    emit(s / c if mean else s)
            if seen:
                if not running:
                    emit(s / c if mean else s)
                sum_v.value = s
                if rows_v is not None:
                    rows_v.value = c
        else:  # min / max
            best_v = state.value(agg, None)
            best = best_v.value
            old = best
            is_min = agg == "min"
            seen = 0
            for row in rows:
                v = _field(self, row, column)
                if v is None:
                    raise ValueError(f"{self!r}: {column} is None (null) in row {row!r}")
                seen += 1
                if best is None or (v < best if is_min else v > best):
                    best = v
                if running:
                    emit(best)
            if seen:
                if not running:
                    emit(best)
                if best is not old:
                    best_v.value = best
        return [{name: r} for r in results]


class _Scan(_Aggregate):
    __slots__ = ()
    name = "scan"
    running = True


def scan(agg: str, value: str = "v", out: str | None = None) -> KeyedOperator:
    """For every input row emit ``{out: running aggregate of row[value]}``.

    ``agg`` is one of ``"sum"``, ``"count"`` (counts rows; ``value`` is not read), ``"mean"``
    (``sum / count`` as a float), ``"min"``, ``"max"`` (the first of equal extremes wins);
    ``out`` defaults to ``agg``. Values are added and compared as they are, so they must be
    numbers (``min``/``max``: any mutually comparable values, not ``None``); a missing
    column raises ``KeyError``.

    State, one value object per piece: ``"sum"`` (sum, mean), ``"count"`` (count, mean),
    ``"min"`` or ``"max"`` (``None`` until the first row). Cost: O(1) per row; writes: at
    most two rows per batch, whatever the number of rows.
    """
    agg = _check_agg("scan", agg)
    column = _check_column("scan", "value", value)
    name = _check_optional_column("scan", "out", out) or agg
    return _Scan(agg, column, name)


def aggregate(agg: str, value: str = "v", out: str | None = None) -> KeyedOperator:
    """Emit ``{out: aggregate of row[value]}`` once per batch, after the batch's rows.

    The aggregate covers every row of the key so far (all batches), as :func:`scan` computes
    it; a key is emitted for a batch only if it had at least one input row. Unknown ``agg``
    raises ``ValueError`` listing the valid ones (see :data:`AGGREGATES`).

    State: as :func:`scan` (values ``"sum"``, ``"count"``, ``"min"``/``"max"``). Cost: O(1)
    per row; writes: at most two rows per batch.
    """
    agg = _check_agg("aggregate", agg)
    column = _check_column("aggregate", "value", value)
    name = _check_optional_column("aggregate", "out", out) or agg
    return _Aggregate(agg, column, name)


# -- buffer / window ------------------------------------------------------------------------


class _Buffer(_Operator):
    __slots__ = ("count", "skip", "value")
    name = "buffer"

    def __init__(self, count: int, skip: int, value: str | None) -> None:
        self.count = count
        self.skip = skip
        self.value = value

    def _args(self) -> Iterable[str]:
        return (repr(self.count), f"skip={self.skip!r}", f"value={self.value!r}")

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        count, step, column = self.count, self.skip, self.value
        items = state.queue("items")
        n_v = state.value("n", 0)
        n = n_v.value
        out: list[Row] = []
        for row in rows:
            items.enqueue(dict(row) if column is None else _field(self, row, column))
            if len(items) > count:
                items.dequeue()
            n += 1
            first = n - count  # index of the first item of the buffer ending here
            if first >= 0 and first % step == 0:
                if column is None:
                    out.append({"items": [dict(item) for item in items]})
                else:
                    out.append({"items": list(items)})
        if n != n_v.value:
            n_v.value = n
        return out


def buffer(count: int, skip: int | None = None, value: str | None = None) -> KeyedOperator:
    """Rx ``Buffer(count, skip)``: emit ``{"items": [...]}`` whenever a buffer is full.

    Buffers start at the key's items 0, ``skip``, 2·``skip``, … (``skip`` defaults to
    ``count``: back-to-back buffers; ``skip < count`` overlaps them, ``skip > count`` leaves
    gaps) and each holds ``count`` consecutive items, so the buffer starting at item
    ``s·skip`` is emitted with the row of item ``s·skip + count - 1``. An item is
    ``row[value]``, or (``value=None``) a copy of the whole row. A partly filled buffer is
    never emitted (the stream does not end).

    State: queue ``"items"`` holding the last ``count`` items (each row enqueues its item
    and, once the queue is longer than ``count``, dequeues the oldest) and value ``"n"``
    (items seen). Cost: O(1) per row plus O(count) per emitted buffer; writes: per row one
    queue item and one delete, plus per batch the queue's head/tail and ``"n"`` — never
    the whole buffer. ``count >= 1`` and ``skip >= 1``, else ``ValueError``.
    """
    count = _check_int("buffer", "count", count, 1)
    step = count if skip is None else _check_int("buffer", "skip", skip, 1)
    return _Buffer(count, step, _check_optional_column("buffer", "value", value))


class _Window(_Operator):
    __slots__ = ("count", "skip")
    name = "window"

    def __init__(self, count: int, skip: int) -> None:
        self.count = count
        self.skip = skip

    def _args(self) -> Iterable[str]:
        return (repr(self.count), f"skip={self.skip!r}")

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        count, step = self.count, self.skip
        n_v = state.value("n", 0)
        n = n_v.value
        out: list[Row] = []
        for row in rows:
            # Window w covers items w*step .. w*step + count - 1.
            lowest = max(0, -((count - 1 - n) // step))  # ceil((n - count + 1) / step)
            for w in range(lowest, n // step + 1):
                out.append({**row, "window": w})
            n += 1
        if n != n_v.value:
            n_v.value = n
        return out


def window(count: int, skip: int | None = None) -> KeyedOperator:
    """Count-based windows: emit each row once per window that contains it.

    Windows start at the key's items 0, ``skip``, 2·``skip``, … (``skip`` defaults to
    ``count``) and each covers ``count`` consecutive items. Item ``j`` is emitted as
    ``{**row, "window": w}`` for every ``w`` with ``w·skip <= j < w·skip + count``, in
    increasing ``w`` (none if it falls in a gap, ``skip > count``); a ``"window"`` column of
    the input is replaced.

    State: value ``"n"`` (items seen). Cost: O(1) plus O(ceil(count / skip)) output rows per
    row; writes: one row per batch.
    """
    count = _check_int("window", "count", count, 1)
    step = count if skip is None else _check_int("window", "skip", skip, 1)
    return _Window(count, step)


# -- distinct -------------------------------------------------------------------------------


class _Distinct(_Operator):
    __slots__ = ("by",)
    name = "distinct"

    def __init__(self, by: str | None) -> None:
        self.by = by

    def _args(self) -> Iterable[str]:
        return () if self.by is None else (f"by={self.by!r}",)

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        by = self.by
        seen = state.set("seen")
        out: list[Row] = []
        for row in rows:
            if by is None:
                if not isinstance(row, dict):
                    raise TypeError(f"{self!r}: input rows are dicts, got {type(row).__name__}")
                v = tuple(sorted((k, _hashable(x)) for k, x in row.items()))
            else:
                v = _hashable(_field(self, row, by))
            if v not in seen:
                seen.add(v)
                out.append(row)
        return out


def distinct(by: str | None = None) -> KeyedOperator:
    """Emit a row if its value was never seen before for this key.

    The value is ``row[by]``, or (``by=None``) the whole row as
    ``tuple(sorted(row.items()))``; nested lists and tuples become tuples, nested dicts
    sorted tuples of pairs, sets frozensets, so equal values (``==``) count as the same.

    State: set ``"seen"`` of every distinct value. Cost: O(1) per row (O(row size) to make
    the value hashable); writes: one set element per new value. The set grows with the
    number of distinct values and is never pruned.
    """
    return _Distinct(_check_optional_column("distinct", "by", by))


class _DistinctUntilChanged(_Operator):
    __slots__ = ("by",)
    name = "distinct_until_changed"

    def __init__(self, by: str | None) -> None:
        self.by = by

    def _args(self) -> Iterable[str]:
        return () if self.by is None else (f"by={self.by!r}",)

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        by = self.by
        last = state.value("last", None)
        box = last.value
        has = box is not None
        previous: Any = box[0] if has else None
        out: list[Row] = []
        for row in rows:
            v = row if by is None else _field(self, row, by)
            if not has or v != previous:
                out.append(row)
                previous = v
                has = True
        if out:
            last.value = [dict(previous) if by is None else previous]
        return out


def distinct_until_changed(by: str | None = None) -> KeyedOperator:
    """Emit a row if its value differs (``!=``) from the value of the key's previous row.

    The value is ``row[by]``, or (``by=None``) the whole row. The key's first row is always
    emitted.

    State: value ``"last"``: ``None`` before the first row, then ``[v]``, a one-element list
    around the last value, so that a value ``None`` survives serialization. Cost: O(1) per
    row (O(row size) for whole rows); writes: one row per batch that emitted something.
    """
    return _DistinctUntilChanged(_check_optional_column("distinct_until_changed", "by", by))


# -- top_k ----------------------------------------------------------------------------------


class _TopK(_Operator):
    __slots__ = ("by", "k")
    name = "top_k"

    def __init__(self, k: int, by: str) -> None:
        self.k = k
        self.by = by

    def _args(self) -> Iterable[str]:
        return (repr(self.k), repr(self.by))

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        k, by = self.k, self.by
        order = state.sorted_set("order")
        kept = state.dict("rows")
        seq_v = state.value("seq", 0)
        seq = seq_v.value
        start = seq
        changed = False
        for row in rows:
            score = _field(self, row, by)
            if score is None or (isinstance(score, float) and math.isnan(score)):
                raise ValueError(f"{self!r}: cannot rank {by}={score!r}: {row!r}")
            seq += 1
            entry = (score, -seq)
            if len(order) >= k:
                lowest = order[0]
                if entry < lowest:
                    continue
                order.discard(lowest)
                del kept[-lowest[1]]
            order.add(entry)
            kept[seq] = dict(row)
            changed = True
        if seq != start:
            seq_v.value = seq
        if not changed:
            return []
        return [{**kept[-entry[1]], "rank": r} for r, entry in enumerate(reversed(order))]


def top_k(k: int, by: str) -> KeyedOperator:
    """Keep the ``k`` rows of the key with the largest ``row[by]``; emit them when they change.

    Ties rank the earlier row higher. After a batch that changed the key's top ``k`` (a row
    entered it), emit the whole current top ``k`` (fewer while the key has fewer rows) as
    ``{**row, "rank": r}``, ``r = 0 .. k-1`` by descending value. Values must be mutually
    comparable; ``None`` and NaN raise ``ValueError``.

    State: sorted set ``"order"`` of ``(value, -seq)`` pairs (the smallest is the first to
    go), dict ``"rows"`` from ``seq`` to a copy of the row, and value ``"seq"`` (rows seen).
    Cost: O(log k) per row, plus O(k) per batch that changed the top ``k``; writes: per row
    that enters the top ``k`` one set element and one dict slot (and the deletes of the
    row it pushes out), plus ``"seq"`` once per batch. Rows that do not enter cost no
    state writes beyond ``"seq"``.
    """
    return _TopK(_check_int("top_k", "k", k, 1), _check_column("top_k", "by", by))


# -- combine_latest / zip -------------------------------------------------------------------


class _Sourced(_Operator):
    __slots__ = ("source", "sources", "valid", "value")

    def __init__(self, sources: tuple[str, ...], source: str, value: str) -> None:
        self.sources = sources
        self.valid = frozenset(sources)
        self.source = source
        self.value = value

    def _args(self) -> Iterable[str]:
        return (repr(list(self.sources)), f"source={self.source!r}", f"value={self.value!r}")

    def _check_rows(self, rows: list[Row]) -> list[tuple[str, Any]]:
        """Every row's ``(source, value)``, checked before any state changes."""
        valid = self.valid
        pairs = []
        for row in rows:
            src = _field(self, row, self.source)
            if not isinstance(src, str) or src not in valid:
                raise ValueError(
                    f"{self!r}: row source {src!r} is not one of {list(self.sources)!r}: {row!r}"
                )
            pairs.append((src, _field(self, row, self.value)))
        return pairs


class _CombineLatest(_Sourced):
    __slots__ = ()
    name = "combine_latest"

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        pairs = self._check_rows(rows)
        sources = self.sources
        latest = state.dict("latest")
        complete = len(latest) == len(sources)
        out: list[Row] = []
        for src, v in pairs:
            latest[src] = v
            if not complete:
                complete = len(latest) == len(sources)
            if complete:
                out.append({s: latest[s] for s in sources})
        return out


def combine_latest(
    sources: Iterable[str], source: str = "source", value: str = "v"
) -> KeyedOperator:
    """Rx ``CombineLatest`` over rows tagged with their source.

    Each row carries ``row[source]``, one of ``sources`` (another raises ``ValueError``
    naming it, before any state changes), and ``row[value]``. Once every source has had a
    value for the key, emit ``{s: latest value of s for s in sources}`` for every incoming
    row (including the row that completed the set).

    State: dict ``"latest"`` from source to its latest value, one slot per source, so a
    row writes one slot. Cost: O(len(sources)) per emitted row, O(1) otherwise; writes: at
    most one slot per source per batch.
    """
    names = _check_sources("combine_latest", sources)
    return _CombineLatest(
        names,
        _check_column("combine_latest", "source", source),
        _check_column("combine_latest", "value", value),
    )


class _Zip(_Sourced):
    __slots__ = ()
    name = "zip"

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        pairs = self._check_rows(rows)
        sources = self.sources
        space = state.namespace("queues")
        queues = {s: space.queue(s) for s in sources}
        out: list[Row] = []
        for src, v in pairs:
            q = queues[src]
            was_empty = not q
            q.enqueue(v)
            # Before this row some queue was empty (else they would have been zipped), so
            # only a row that fills an empty queue can complete a tuple.
            if was_empty and all(queues.values()):
                out.append({s: queues[s].dequeue() for s in sources})
        return out


def zip(sources: Iterable[str], source: str = "source", value: str = "v") -> KeyedOperator:
    """Rx ``Zip`` over rows tagged with their source: pair the n-th value of every source.

    Each row carries ``row[source]``, one of ``sources`` (another raises ``ValueError``
    naming it, before any state changes), and ``row[value]``, which is appended to its
    source's queue; whenever every queue is non-empty, one value is taken from each and
    ``{s: v_s for s in sources}`` is emitted.

    State: one queue per source, ``"queues/<source>"`` (the namespace ``"queues"``). A
    source that runs ahead of the others grows its queue without bound. Cost: O(1) per row,
    plus O(len(sources)) when a row fills an empty queue; writes: per row one queue item,
    per emitted row one delete per source, plus each touched queue's head/tail per batch.
    """
    names = _check_sources("zip", sources)
    return _Zip(names, _check_column("zip", "source", source), _check_column("zip", "value", value))


# -- chain ----------------------------------------------------------------------------------


class _Chain(_Operator):
    __slots__ = ("ops",)
    name = "chain"

    def __init__(self, ops: tuple[KeyedOperator, ...]) -> None:
        self.ops = ops

    def _args(self) -> Iterable[str]:
        return (repr(op) for op in self.ops)

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        current = rows if isinstance(rows, list) else list(rows)
        for i, op in enumerate(self.ops):
            if not current:
                return []
            current = list(op(key, current, state.namespace(str(i))))
        return current


def chain(*ops: KeyedOperator) -> KeyedOperator:
    """Feed each operator's output rows into the next; emit the last one's output.

    Operator ``i`` keeps its state in ``state.namespace(str(i))`` (ids
    ``<key>/<i>/<name>``), so two operators of one kind never share state. As with the
    runner, an operator is called only with rows: once one emits nothing for a batch, the
    operators after it are not called. ``chain(take(5), aggregate("mean"))`` is the mean
    of the key's first five values, emitted per batch while they arrive.

    State: that of the operators, each in its namespace. Cost: the sum of the operators'
    costs, plus one list per stage per batch.
    """
    if not ops:
        raise ValueError("chain: needs at least one operator")
    for i, op in enumerate(ops):
        if not callable(op):
            raise ValueError(f"chain: operator {i} is not callable: {op!r}")
    return _Chain(tuple(ops))

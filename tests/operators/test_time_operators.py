"""The time-based operators against plain Python references, through ``simulate``.

Each operator runs over random keyed streams with event times (out of order within the
watermark delay, plus late rows) split into batches, through
:func:`objectspace.testing.simulate` with the runner's time options; its output per batch
must equal a reference computed by plain Python from Spark's semantics (batch N evicts
and fires timers with the watermark max(0, largest event time of the batches before N
minus the delay), never decreasing; it drops the rows late by the watermark of batch N-1,
0 for the first: a row is late when the end of what it joins, its own time for a plain
function, is at or below it; rows first, then the timers due). Every case runs at parallelism 1, 3 and 8,
with a restart at another parallelism, and with a replayed batch (a first attempt that
fails after its save), and must give the same output each time.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from objectspace import operators as ops
from objectspace.testing import simulate

Row = dict[str, Any]
Batches = list[list[Row]]
Expected = list[list[tuple[Any, ...]]]
SEC = 1000
KEYS = [1, 2, 3, "a", "b", (7, "x")]

# -- inputs ---------------------------------------------------------------------------------


def event_batches(seed: int, n_batches: int = 7, delay: int = 5 * SEC) -> Batches:
    """Rows ``{k, ts, seq, v, x}``: batch b's rows lie around 10 s * b, some of them out of
    order by up to ``delay``, some later than that (late rows), ``seq`` unique."""
    rng = random.Random(seed)
    batches: Batches = []
    seq = 0
    top = 0
    for b in range(n_batches):
        rows = []
        for _ in range(rng.randint(0, 12)):
            roll = rng.random()
            if roll < 0.15 and top:
                ts = top - delay - rng.randint(1, 20) * SEC  # late (or nearly)
            elif roll < 0.45 and top:
                ts = top - rng.randint(0, delay // SEC) * SEC  # out of order, within the delay
            else:
                ts = b * 10 * SEC + rng.randint(0, 14) * SEC
            seq += 1
            rows.append(
                {
                    "k": rng.choice(KEYS),
                    "ts": ts,
                    "seq": seq,
                    "v": rng.randint(-5, 20),
                    "x": rng.randint(0, 3),
                }
            )
        batches.append(rows)
        top = max([top, *(r["ts"] for r in rows)])
    # A batch far in the future closes every window and session; one more fires them.
    batches.append([{"k": 1, "ts": 10**6 * SEC, "seq": seq + 1, "v": 0, "x": 0}])
    batches.append([])
    return batches


def watermarks(batches: Batches, delay: int) -> list[tuple[int, int]]:
    """Spark's two watermarks of each batch: ``(late, eviction)``. Eviction: the largest
    event time before it minus ``delay``, never below 0 nor below the previous batch's;
    late: the previous batch's eviction watermark (0 for the first)."""
    out: list[tuple[int, int]] = []
    top: int | None = None
    previous = 0
    for rows in batches:
        evict = previous if top is None else max(previous, top - delay)
        out.append((previous, evict))
        previous = evict
        for r in rows:
            top = r["ts"] if top is None else max(top, r["ts"])
    return out


def on_time(
    batches: Batches, delay: int, late_time: Callable[[int], int] = lambda t: t
) -> list[list[Row]]:
    """Each batch's rows that are not late (``late_time(ts) > late watermark``), in (ts,
    seq) order."""
    return [
        sorted((r for r in rows if late_time(r["ts"]) > late), key=lambda r: (r["ts"], r["seq"]))
        for rows, (late, _) in zip(batches, watermarks(batches, delay), strict=True)
    ]


def ms(value: datetime) -> int:
    return int((value - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() * 1000)


def agg_values(aggs: Iterable[str], values: list[int]) -> tuple[Any, ...]:
    out: list[Any] = []
    for agg in aggs:
        if agg == "count":
            out.append(len(values))
        elif agg == "sum":
            out.append(sum(values))
        elif agg == "mean":
            out.append(sum(values) / len(values))
        else:
            out.append(min(values) if agg == "min" else max(values))
    return tuple(out)


# -- references -----------------------------------------------------------------------------


def ref_sessions(batches: Batches, delay: int, gap: int, aggs: tuple[str, ...]) -> Expected:
    """Per batch, the sessions the watermark closed: the pending (not yet emitted) events of
    each key split where two consecutive events are more than ``gap`` apart."""
    pending: dict[Any, list[Row]] = {}
    out: Expected = []
    rows_on_time = on_time(batches, delay, lambda t: t + gap)
    for rows, (_, wm) in zip(rows_on_time, watermarks(batches, delay), strict=True):
        for r in rows:
            pending.setdefault(r["k"], []).append(r)
        emitted = []
        for k, evs in pending.items():
            evs.sort(key=lambda r: r["ts"])
            sessions: list[list[Row]] = []
            for r in evs:
                if sessions and r["ts"] <= sessions[-1][-1]["ts"] + gap:
                    sessions[-1].append(r)
                else:
                    sessions.append([r])
            keep: list[Row] = []
            for s in sessions:
                end = s[-1]["ts"] + gap
                if end <= wm:
                    emitted.append((k, s[0]["ts"], end, *agg_values(aggs, [r["v"] for r in s])))
                else:
                    keep += s
            pending[k] = keep
        out.append(sorted(emitted, key=repr))
    return out


def ref_windows(
    batches: Batches, delay: int, size: int, slide: int, aggs: tuple[str, ...]
) -> Expected:
    """Per batch, the windows ``[k * slide, k * slide + size)`` the watermark closed."""
    pending: dict[tuple[Any, int], list[int]] = {}
    out: Expected = []
    every = on_time(batches, delay, lambda t: 1 << 62)  # all rows; late by window below
    for rows, (late, wm) in zip(every, watermarks(batches, delay), strict=True):
        for r in rows:
            t = r["ts"]
            for k in range((t - size) // slide - 1, t // slide + 2):
                # A row counts in each of its windows that is not late (end > late).
                if k * slide <= t < k * slide + size and k * slide + size > late:
                    pending.setdefault((r["k"], k * slide), []).append(r["v"])
        emitted = []
        for (key, start), values in list(pending.items()):
            if start + size <= wm:
                emitted.append((key, start, start + size, *agg_values(aggs, values)))
                del pending[(key, start)]
        out.append(sorted(emitted, key=repr))
    return out


def ref_dedup_event(batches: Batches, delay: int, ttl: int, by: str | None) -> Expected:
    """Spark's ``dropDuplicatesWithinWatermark``: a row is dropped while its value has an
    entry (the first row's time + ``ttl``), whatever its own time; an entry goes after the
    batch whose eviction watermark reaches it."""
    expires: dict[tuple[Any, Any], int] = {}
    out: Expected = []
    for rows, (_, wm) in zip(on_time(batches, delay), watermarks(batches, delay), strict=True):
        kept = []
        for r in rows:
            v = (r["k"], repr(sorted(r.items())) if by is None else r[by])
            if v in expires:
                continue
            expires[v] = r["ts"] + ttl
            kept.append((r["k"], r["seq"]))
        for v in [v for v, e in expires.items() if e <= wm]:
            del expires[v]
        out.append(sorted(kept, key=repr))
    return out


def ref_dedup_processing(batches: Batches, times: list[int], ttl: int, by: str) -> Expected:
    emitted_at: dict[tuple[Any, Any], int] = {}
    out: Expected = []
    for rows, now in zip(batches, times, strict=True):
        kept = []
        for r in sorted(rows, key=lambda r: (r["ts"], r["seq"])):
            v = (r["k"], r[by])
            e = emitted_at.get(v)
            if e is not None and now < e + ttl:
                continue
            emitted_at[v] = now
            kept.append((r["k"], r["seq"]))
        out.append(sorted(kept, key=repr))
    return out


def ref_expire_count(batches: Batches, delay: int, ttl: int) -> Expected:
    """``expire_after(ttl, aggregate("count"))``: the count restarts once the watermark
    reached ``ttl`` after the key's latest event."""
    count: dict[Any, int] = {}
    expires: dict[Any, int] = {}
    out: Expected = []
    for rows, (_, wm) in zip(on_time(batches, delay), watermarks(batches, delay), strict=True):
        by_key: dict[Any, list[Row]] = {}
        for r in rows:
            by_key.setdefault(r["k"], []).append(r)
        emitted = []
        for k, krows in by_key.items():
            if k in expires and expires[k] <= wm:
                del count[k], expires[k]
            count[k] = count.get(k, 0) + len(krows)
            expires[k] = max(expires.get(k, 0), max(r["ts"] for r in krows) + ttl)
            emitted.append((k, count[k]))
        for k in [k for k, e in expires.items() if e <= wm]:
            del count[k], expires[k]
        out.append(sorted(emitted, key=repr))
    return out


# -- running --------------------------------------------------------------------------------

RUNS: list[dict[str, Any]] = [
    {"parallelism": 1},
    {"parallelism": 3},
    {"parallelism": 8},
    {"parallelism": {0: 3, 4: 8}},  # a restart at another parallelism
    {"parallelism": {0: 8, 3: 1}, "replay": (2, 5)},  # failed first attempts
]


def run(
    op: ops.KeyedOperator,
    batches: Batches,
    shape: Callable[[Row], tuple[Any, ...]],
    **options: Any,
) -> list[Expected]:
    """The output of every configuration of :data:`RUNS`, each batch sorted."""
    results = []
    for conf in RUNS:
        sim = simulate(
            op, batches, key="k", order_by=("ts", "seq"), max_key_groups=16, **conf, **options
        )
        results.append([sorted((shape(r) for r in out), key=repr) for out in sim.outputs])
        for i in conf.get("replay", ()):
            assert sorted((shape(r) for r in sim.first_attempts[i]), key=repr) == results[-1][i]
        sim.close()
    return results


def window_shape(aggs: tuple[str, ...]) -> Callable[[Row], tuple[Any, ...]]:
    def shape(r: Row) -> tuple[Any, ...]:
        assert r["start"].tzinfo is not None and r["end"].tzinfo is not None
        return (r["k"], ms(r["start"]), ms(r["end"]), *(r[a] for a in aggs))

    return shape


def seq_shape(r: Row) -> tuple[Any, ...]:
    return (r["k"], r["seq"])


DELAY = 5 * SEC
EVENT = {"time_mode": "event", "event_time": "ts", "watermark_delay": timedelta(seconds=5)}


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("gap_s", [3, 10])
def test_session_window_matches_the_reference(seed: int, gap_s: int) -> None:
    aggs = ("count", "sum", "min", "max", "mean")
    batches = event_batches(seed)
    expected = ref_sessions(batches, DELAY, gap_s * SEC, aggs)
    op = ops.session_window(timedelta(seconds=gap_s), aggs=aggs, time="ts")
    for got in run(op, batches, window_shape(aggs), **EVENT):
        assert got == expected
    assert sum(map(len, expected)) > 5


@pytest.mark.parametrize("seed", [1, 2])
def test_batch_form_equals_a_static_sessionization_and_windowing(seed: int) -> None:
    # The whole input in one batch (no watermark yet, so nothing is late), then a far
    # event and an empty batch that close everything: Spark's batch session_window/window().
    events = [r for rows in event_batches(seed)[:-2] for r in rows]
    batches = [events, [{"k": 1, "ts": 10**7 * SEC, "seq": 0, "v": 0, "x": 0}], []]
    aggs = ("count", "sum")
    sessions = []
    for k in {r["k"] for r in events}:
        evs = sorted(r["ts"] for r in events if r["k"] == k)
        groups = [[evs[0]]]
        for t in evs[1:]:
            if t <= groups[-1][-1] + 4 * SEC:
                groups[-1].append(t)
            else:
                groups.append([t])
        for g in groups:
            vs = [r["v"] for r in events if r["k"] == k and g[0] <= r["ts"] <= g[-1]]
            sessions.append((k, g[0], g[-1] + 4 * SEC, len(vs), sum(vs)))
    sim = simulate(
        ops.session_window("4 seconds", aggs=aggs, time="ts"),
        batches,
        key="k",
        order_by=("ts", "seq"),
        parallelism=3,
        **EVENT,
    )
    shape = window_shape(aggs)
    got = [shape(r) for out in sim.outputs for r in out]
    assert sorted(got, key=repr) == sorted(sessions, key=repr)
    assert sim.outputs[0] == []
    windows = [
        (k, s, s + 10 * SEC, len(vs), sum(vs))
        for k in {r["k"] for r in events}
        for s in sorted({r["ts"] - r["ts"] % (10 * SEC) for r in events if r["k"] == k})
        for vs in [[r["v"] for r in events if r["k"] == k and s <= r["ts"] < s + 10 * SEC]]
    ]
    sim = simulate(
        ops.tumbling_window("10 seconds", aggs=aggs, time="ts"),
        batches,
        key="k",
        order_by=("ts", "seq"),
        parallelism=3,
        **EVENT,
    )
    got = [shape(r) for out in sim.outputs for r in out]
    assert sorted(got, key=repr) == sorted(windows, key=repr)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize(("size_s", "slide_s"), [(10, 10), (7, 7), (10, 5), (10, 3), (4, 6)])
def test_tumbling_and_sliding_windows_match_the_reference(
    seed: int, size_s: int, slide_s: int
) -> None:
    aggs = ("count", "sum", "max")
    batches = event_batches(seed)
    expected = ref_windows(batches, DELAY, size_s * SEC, slide_s * SEC, aggs)
    if size_s == slide_s:
        op = ops.tumbling_window(f"{size_s} seconds", aggs=aggs, time="ts")
    else:
        op = ops.sliding_window(f"{size_s} seconds", f"{slide_s} seconds", aggs=aggs, time="ts")
    for got in run(op, batches, window_shape(aggs), **EVENT):
        assert got == expected
    assert sum(map(len, expected)) > 5


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_dedup_in_event_time_matches_the_reference(seed: int) -> None:
    batches = event_batches(seed)
    expected = ref_dedup_event(batches, DELAY, 8 * SEC, "x")
    for got in run(ops.dedup("8 seconds", by="x", time="ts"), batches, seq_shape, **EVENT):
        assert got == expected


@pytest.mark.parametrize("seed", [1, 2])
def test_dedup_of_whole_rows_matches_the_reference(seed: int) -> None:
    # Rows {k, ts, x} only, so that equal rows occur; the output is compared as rows.
    batches = [
        [{"k": r["k"], "ts": r["ts"], "x": r["x"] % 2} for r in rows]
        for rows in event_batches(seed)
    ]
    numbered = [[{**r, "seq": 0} for r in rows] for rows in batches]
    expected = [
        sorted(((k, r["ts"], r["x"]) for k, r in _kept(rows)), key=repr)
        for rows in _dedup_rows(numbered, DELAY, 8 * SEC)
    ]
    for conf in RUNS:
        sim = simulate(
            ops.dedup("8 seconds", time="ts"),
            batches,
            key="k",
            order_by="ts",
            max_key_groups=16,
            **conf,
            **EVENT,
        )
        got = [sorted(((r["k"], r["ts"], r["x"]) for r in out), key=repr) for out in sim.outputs]
        assert got == expected
        sim.close()


def _dedup_rows(batches: Batches, delay: int, ttl: int) -> list[list[Row]]:
    expires: dict[str, int] = {}
    out = []
    for rows, (_, wm) in zip(on_time(batches, delay), watermarks(batches, delay), strict=True):
        kept = []
        for r in rows:
            v = repr(sorted(r.items()))
            if v in expires:
                continue
            expires[v] = r["ts"] + ttl
            kept.append(r)
        for v in [v for v, e in expires.items() if e <= wm]:
            del expires[v]
        out.append(kept)
    return out


def _kept(rows: list[Row]) -> list[tuple[Any, Row]]:
    return [(r["k"], r) for r in rows]


@pytest.mark.parametrize("seed", [1, 2])
def test_dedup_in_processing_time_matches_the_reference(seed: int) -> None:
    batches = event_batches(seed)[:-2]
    rng = random.Random(seed)
    times, now = [], 1_700_000_000_000
    for _ in batches:
        now += rng.randint(1, 6) * SEC
        times.append(now)
    batch_times = [datetime.fromtimestamp(t / 1000, UTC) for t in times]
    expected = ref_dedup_processing(batches, times, 7 * SEC, "x")
    got_all = run(
        ops.dedup("7 seconds", by="x"),
        batches,
        seq_shape,
        time_mode="processing",
        batch_times=batch_times,
    )
    for got in got_all:
        assert got == expected


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_expire_after_restarts_a_quiet_key(seed: int) -> None:
    batches = event_batches(seed)
    ttl = 12 * SEC
    expected = ref_expire_count(batches, DELAY, ttl)
    op = ops.expire_after("12 seconds", ops.aggregate("count"), time="ts")
    for got in run(op, batches, lambda r: (r["k"], r["count"]), **EVENT):
        assert got == expected


@pytest.mark.parametrize("seed", [1, 2])
def test_expire_after_passes_its_operators_timers_on(seed: int) -> None:
    aggs = ("count", "sum")
    batches = event_batches(seed)
    expected = ref_sessions(batches, DELAY, 3 * SEC, aggs)
    inner = ops.session_window("3 seconds", aggs=aggs, time="ts")
    for op in (ops.expire_after("1 day", inner, time="ts"), ops.chain(ops.take(10**6), inner)):
        for got in run(op, batches, window_shape(aggs), **EVENT):
            assert got == expected


def test_state_is_gone_once_every_window_closed() -> None:
    batches = event_batches(4)
    for op in (
        ops.session_window("4 seconds", time="ts"),
        ops.tumbling_window("10 seconds", time="ts"),
        ops.sliding_window("10 seconds", "5 seconds", time="ts"),
        ops.dedup("3 seconds", by="x", time="ts"),
        ops.expire_after("5 seconds", ops.take(2), time="ts"),
        ops.expire_after("5 seconds", ops.session_window("3 seconds", time="ts"), time="ts"),
    ):
        sim = simulate(
            op,
            [*batches[:-2], [{"k": 9, "ts": 10**7 * SEC, "seq": 0, "v": 0, "x": 0}], []],
            key="k",
            order_by=("ts", "seq"),
            **EVENT,
        )
        for key in KEYS:
            state = sim.state(key)
            assert list(state.ids()) == [], (op, key)
            assert state.timers.list() == [], (op, key)
        sim.close()


def test_session_window_gap_boundary_is_inclusive_and_merges_out_of_order() -> None:
    rows = [
        [{"k": 1, "ts": 0, "seq": 1, "v": 1}, {"k": 1, "ts": 10 * SEC, "seq": 2, "v": 2}],
        # 20 s is exactly last + gap: same session; 5 s arrives late-ish but on time.
        [{"k": 1, "ts": 20 * SEC, "seq": 3, "v": 4}],
        [{"k": 1, "ts": 100 * SEC, "seq": 4, "v": 8}],
        [{"k": 1, "ts": 200 * SEC, "seq": 5, "v": 16}],
        [],
    ]
    sim = simulate(
        ops.session_window("10 seconds", time="ts"),
        rows,
        key="k",
        order_by=("ts", "seq"),
        time_mode="event",
        event_time="ts",
    )
    got = [
        [(ms(r["start"]), ms(r["end"]), r["count"], r["sum"]) for r in out] for out in sim.outputs
    ]
    assert got == [[], [], [], [(0, 30 * SEC, 3, 7)], [(100 * SEC, 110 * SEC, 1, 8)]]


def test_windows_align_to_the_epoch_like_spark() -> None:
    base = datetime(2026, 1, 1, 0, 0, 7, tzinfo=UTC)
    rows = [
        [{"k": 1, "ts": base, "seq": 1, "v": 1}],
        [{"k": 1, "ts": base + timedelta(hours=1), "seq": 2, "v": 1}],
        [],
    ]
    sim = simulate(
        ops.sliding_window("10 minutes", "5 minutes", time="ts"),
        rows,
        key="k",
        order_by=("ts", "seq"),
        time_mode="event",
        event_time="ts",
    )
    starts = sorted(r["start"] for r in sim.outputs[2])
    assert starts == [datetime(2025, 12, 31, 23, 55, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC)]


def test_distinct_with_ttl_forgets_after_the_ttl() -> None:
    rows = [[{"k": 1, "ts": i, "seq": i, "x": x}] for i, x in enumerate([1, 1, 2, 1, 1, 2])]
    start = datetime(2026, 1, 1, tzinfo=UTC)
    times = [start + timedelta(seconds=s) for s in (0, 5, 6, 11, 12, 20)]
    sim = simulate(
        ops.distinct(by="x", ttl="10 seconds"),
        rows,
        key="k",
        order_by="ts",
        time_mode="processing",
        batch_times=times,
    )
    # x=1 seen at 0 s expires at 10 s: emitted again at 11 s; x=2 at 6 s expires at 16 s.
    assert [[r["seq"] for r in out] for out in sim.outputs] == [[0], [], [2], [3], [], [5]]
    assert ops.distinct(by="x")  # the old call still works


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        (lambda: ops.session_window(0), "gap"),
        (lambda: ops.session_window("2 fortnights"), "gap"),
        (lambda: ops.session_window(timedelta(seconds=-1)), "gap"),
        (lambda: ops.session_window("1 minute", aggs=("median",)), "median"),
        (lambda: ops.session_window("1 minute", aggs="count"), "aggs"),
        (lambda: ops.tumbling_window("1 minute", value=""), "value"),
        (lambda: ops.sliding_window("1 minute", None), "slide"),
        (lambda: ops.dedup("soon"), "ttl"),
        (lambda: ops.dedup("1 hour", by=3), "by"),
        (lambda: ops.distinct(ttl=5), "ttl"),
        (lambda: ops.expire_after("1 hour", "take"), "op"),
    ],
)
def test_bad_arguments_are_refused(factory: Callable[[], Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        factory()


def test_reprs_show_the_call_and_operators_pickle() -> None:
    import pickle

    op = ops.expire_after("1 day", ops.session_window(timedelta(minutes=2), aggs=("count",)))
    assert (
        repr(op) == "expire_after('1 day', session_window('2 minutes', value='v', aggs=('count',)))"
    )
    assert repr(pickle.loads(pickle.dumps(op))) == repr(op)


def test_event_time_column_comes_from_the_runner() -> None:
    """In event mode the operators read the runner's ``event_time`` column (the clock's)
    without ``time=``; ``time=`` still overrides it."""
    batches = [[{**r, "when": r["ts"]} for r in rows] for rows in event_batches(21, delay=5 * SEC)]
    for make in (
        lambda **kw: ops.session_window("4 seconds", **kw),
        lambda **kw: ops.tumbling_window("10 seconds", **kw),
        lambda **kw: ops.sliding_window("10 seconds", "5 seconds", **kw),
        lambda **kw: ops.dedup("3 seconds", by="x", **kw),
        lambda **kw: ops.expire_after("5 seconds", ops.take(2), **kw),
    ):
        outs = [
            simulate(
                op,
                batches,
                key="k",
                order_by=("ts", "seq"),
                time_mode="event",
                event_time="ts",
                watermark_delay="5 seconds",
            ).outputs
            for op in (make(), make(time="when"))
        ]
        assert outs[0] == outs[1]
        assert any(outs[0])


def test_session_window_writes_one_row_per_session_update_and_no_object_per_key() -> None:
    """A session opened writes its entry and its timer (2 rows), extended in a later batch
    its entry only (1 row), emitted its entry deleted and its timer fired (2 rows): the
    sessions of a key group's keys share one dict, so no object is created or deleted per
    key (which wrote an index row and deleted three tables' rows each)."""
    n = 100
    batches = [
        [{"k": k, "ts": 0, "v": 1.0} for k in range(n)],  # n sessions [0, 120 s]
        [{"k": k, "ts": 60 * SEC, "v": 2.0} for k in range(n)],  # extended to 180 s
        [{"k": -1, "ts": 1000 * SEC, "v": 0.0}],  # watermark 60 s: nothing due
        [],  # watermark 1000 s: the n sessions close
    ]
    sim = simulate(
        ops.session_window("2 minutes"),
        batches,
        key="k",
        order_by="ts",
        max_key_groups=4,
        time_mode="event",
        event_time="ts",
    )
    assert sum(len(out) for out in sim.outputs) == n
    assert sim.stats[0].rows_written <= 2 * n + 12
    assert sim.stats[1].rows_written <= n + 8
    assert sim.stats[3].timers_fired == n
    assert sim.stats[3].rows_written <= 2 * n + 8


def test_session_window_takes_over_sessions_kept_per_key_by_an_earlier_version() -> None:
    """State written by an earlier version (a dict ``sessions`` per key, start -> [end,
    count, sum, min, max], and the key's timer) is moved into the shared dict when the
    key is next used, and the session goes on as if it had never moved."""
    from objectspace.keyed import Clock, KeyState
    from objectspace.space import ObjectSpace

    space = ObjectSpace()
    op = ops.session_window("2 minutes", aggs=("count", "sum", "max"))
    old = KeyState.for_key(space, "u", Clock("event", 0, event_time="ts"))
    old.dict("sessions")[0] = [120 * SEC, 1, 5.0, None, 5.0]
    old.timers.register(120 * SEC)
    state = KeyState.for_key(space, "u", Clock("event", 30 * SEC, event_time="ts"))
    assert op("u", [{"ts": 60 * SEC, "v": 7.0}], state) == []
    assert "sessions" not in state
    later = KeyState.for_key(space, "u", Clock("event", 500 * SEC, event_time="ts"))
    out = list(op.on_timer("u", datetime.fromtimestamp(120, UTC), later))
    assert out == [
        {
            "start": datetime.fromtimestamp(0, UTC),
            "end": datetime.fromtimestamp(180, UTC),
            "count": 2,
            "sum": 12.0,
            "max": 7.0,
        }
    ]


def test_clearing_a_key_state_drops_its_entries_in_shared_dicts_only() -> None:
    """``KeyState.clear`` (``expire_after``'s expiry) drops the namespace's sessions from
    the shared dict, nested namespaces too, and leaves other keys' sessions alone."""
    from objectspace.keyed import Clock, KeyState
    from objectspace.space import ObjectSpace

    space = ObjectSpace()
    op = ops.session_window("2 minutes")
    clock = Clock("event", 0, event_time="ts")
    a, b = (KeyState.for_key(space, k, clock) for k in ("a", "b"))
    op("a", [{"ts": 0, "v": 1.0}], a.namespace("op"))
    op("b", [{"ts": 0, "v": 2.0}], b.namespace("op"))
    a.clear()
    assert a.namespace("op").timers.list() == []
    later = Clock("event", 500 * SEC, event_time="ts")
    when = datetime.fromtimestamp(120, UTC)
    assert list(op.on_timer("a", when, KeyState.for_key(space, "a", later).namespace("op"))) == []
    out = list(op.on_timer("b", when, KeyState.for_key(space, "b", later).namespace("op")))
    assert [(r["count"], r["sum"]) for r in out] == [(1, 2.0)]

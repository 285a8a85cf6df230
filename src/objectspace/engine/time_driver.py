"""The driver's side of time: a runner's time options, a batch's time plan, and the
:class:`TimeDriver` that keeps the watermark, batch times and per-key-group deadlines
between batches as the state of a one-key-group operator committed with each checkpoint.

Per-key time (the clock a function sees, timers, TTL) is :mod:`objectspace.keyed`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from objectspace.checkpoint import EMPTY, Instance, Job, Receipt
from objectspace.engine.stats import NO_TIME, BatchStats
from objectspace.errors import CorruptStateError, TimeError
from objectspace.keyed import TIME_MODES, Clock, parse_duration

__all__ = ["TIME_OPERATOR_SUFFIX", "TimeDriver", "TimeOptions", "TimePlan"]


@dataclass(frozen=True, slots=True)
class TimeOptions:
    """The time options of a runner (or of ``simulate``), checked."""

    mode: str | None = None
    event_time: str | None = None
    watermark_delay: int = 0
    late_rows: str = "drop"
    on_timer: Callable[..., Iterable[Mapping[str, Any]]] | None = None

    @classmethod
    def of(
        cls,
        time_mode: str | None,
        event_time: str | None,
        watermark_delay: Any,
        late_rows: str,
        on_timer: Any,
    ) -> TimeOptions:
        if time_mode not in TIME_MODES:
            raise TimeError(f"time_mode is None, 'event' or 'processing', not {time_mode!r}")
        if time_mode == "event" and not (isinstance(event_time, str) and event_time):
            raise TimeError("time_mode='event' needs event_time, the event-time column's name")
        if event_time is not None and time_mode != "event":
            raise TimeError(f"event_time={event_time!r} is only used with time_mode='event'")
        if late_rows not in ("drop", "keep"):
            raise TimeError(f"late_rows is 'drop' or 'keep', not {late_rows!r}")
        if on_timer is not None and not callable(on_timer):
            raise TypeError(f"on_timer must be callable (key, when, state), not {on_timer!r}")
        delay = parse_duration(
            timedelta(0) if watermark_delay is None else watermark_delay, "watermark_delay"
        )
        return cls(time_mode, event_time, delay, late_rows, on_timer)


@dataclass(frozen=True, slots=True)
class TimePlan:
    """The time part of a batch's plan: its clock, the key groups with something due
    (``due``: key group -> earliest time), and the options."""

    clock: Clock
    options: TimeOptions
    due: frozenset[int] = frozenset()


TIME_OPERATOR_SUFFIX = "#time"
"""The driver's time state of operator ``op`` is the one-key-group operator
``op#time`` of the same job, committed with every checkpoint (see :class:`TimeDriver`)."""
_BATCH_TIMES_KEPT = 64
# The job mark (``<operator>#time`` + this) holding "<checkpoint> <epoch ms>": the batch time
# of the last batch started, recorded before it runs.
_BATCH_TIME_MARK = "/batch_time"


class TimeDriver:
    """The driver's side of time: what it keeps between batches, as object-space state.

    The state lives in operator ``<operator>#time`` of the job (one key group), saved and
    committed with each checkpoint, so it is exactly-once like the operator's own state:
    ``max_event`` (the largest event time of the batches committed so far, for the next
    watermark), ``batch_time`` (checkpoint id -> processing time, the last 64, so a
    replay runs with its first attempt's time) and ``deadlines`` (key group -> the
    earliest time anything is due in it, as the tasks reported). The driver runs exactly
    the instances with rows or with a key group whose deadline has come.

    A runner that uses no time (``time_mode=None``) and whose state has no TTL'd entry
    nor timer never creates that operator and reads nothing.
    """

    def __init__(self, job: Job, operator: str, options: TimeOptions) -> None:
        self.job = job
        self.name = operator + TIME_OPERATOR_SUFFIX
        self.options = options
        self._exists = any(o.name == self.name for o in job.operators())
        self._instance: Instance | None = None
        # The instance as of the last checkpoint it committed (``_kept_at``): a batch run
        # on that checkpoint uses it instead of reading it back from storage.
        self._kept: Instance | None = None
        self._kept_at: int | None = None
        self._base: int | None = None
        # Batch times of attempts not committed yet: a retry by this driver keeps its time.
        self._attempted: dict[int, int] = {}

    def _restore(self, checkpoint: int | None) -> Instance | None:
        if not self._exists:
            return None
        if self._kept is not None and checkpoint == self._kept_at:
            return self._kept
        op = self.job.operator(self.name, 1)
        return op.instance(0, 1, checkpoint=EMPTY if checkpoint is None else checkpoint)

    def _marked(self, checkpoint_id: int) -> int | None:
        """The batch time recorded for ``checkpoint_id`` by an attempt of it that did not
        commit (this driver's before a restart, or another's), if any."""
        mark = self.job.read_mark(self.name + _BATCH_TIME_MARK)
        if mark is None:
            return None
        checkpoint, _, when = mark.partition(" ")
        if checkpoint != str(checkpoint_id):
            return None
        try:
            return int(when)
        except ValueError as exc:
            raise CorruptStateError(
                f"job {self.job.name!r}: the batch time mark of {self.name!r} is {mark!r}, "
                "not '<checkpoint> <epoch ms>'"
            ) from exc

    def plan(
        self, checkpoint_id: int, base: int | None, replay: bool, batch_time: int | None
    ) -> TimePlan:
        """The time of batch ``checkpoint_id`` run on ``base``; ``batch_time`` (epoch ms,
        ``None``: now) is used unless the batch was committed before (a replay), which
        runs with its recorded time."""
        options = self.options
        self._base = base
        self._instance = instance = self._restore(base)
        max_event = None
        previous = 0  # the watermark the batch before ran with (Spark's: 0 before any)
        deadlines: dict[int, int] = {}
        if instance is not None:
            space = instance.space(0)
            if "max_event" in space:
                max_event = space.get_value("max_event").value
            if "watermark" in space:
                previous = space.get_value("watermark").value
            if "deadlines" in space:
                deadlines = dict(space.get_dict("deadlines").items())
        if replay and self._exists:
            done = self._restore(checkpoint_id)
            assert done is not None
            space = done.space(0)
            recorded = (
                space.get_dict("batch_time").get(checkpoint_id) if "batch_time" in space else None
            )
            if recorded is not None:
                batch_time = recorded
        if batch_time is None:
            batch_time = self._attempted.get(checkpoint_id)
        # A runner without time (no time mode, no TTL'd entry nor timer yet) records none.
        uses_time = options.mode is not None or self._exists
        if batch_time is None and not replay and uses_time:
            batch_time = self._marked(checkpoint_id)
        if batch_time is None:
            batch_time = time.time_ns() // 1_000_000
        if not replay and uses_time and checkpoint_id not in self._attempted:
            # Recorded before the batch runs: a driver restarted before the batch commits
            # runs it again with this time (as Spark keeps a batch's timestamp in its
            # offset log), where this driver's retries find it in ``_attempted``.
            self.job.write_mark(self.name + _BATCH_TIME_MARK, f"{checkpoint_id} {batch_time}")
        if not replay:
            self._attempted = {checkpoint_id: batch_time}
        watermark = late = None
        if options.mode == "event":
            # Spark's two watermarks: late rows against the previous batch's, eviction and
            # timers against this one, which never decreases and starts at 0.
            late = previous
            watermark = previous
            if max_event is not None:
                watermark = max(watermark, max_event - options.watermark_delay)
        clock = Clock(
            options.mode,
            watermark,
            batch_time,
            options.event_time,
            late_watermark=late,
            started=max_event is not None,
        )
        now = clock.now
        due = frozenset(g for g, d in deadlines.items() if now is not None and d <= now)
        return TimePlan(clock, options, due)

    def save(self, plan: TimePlan, batch: BatchStats) -> Receipt | None:
        """Record what batch ``batch`` (not a replay) leaves for the next ones and save it
        as pending checkpoint ``batch.checkpoint_id``; the receipt to commit with the
        operator's (``None``: nothing to record)."""
        batch.watermark = plan.clock.watermark
        batch.late_watermark = plan.clock.late_watermark
        batch.batch_time = plan.clock.batch_time
        if batch.replay:
            return None
        if self._instance is self._kept:
            self._kept = self._kept_at = None  # edited now: no longer that checkpoint's state
        reported = [d for t in batch.tasks for d in t.deadlines]
        largest = max((t.max_event_time for t in batch.tasks), default=NO_TIME)
        if not self._exists:
            if self.options.mode is None and not any(len(d) == 2 for d in reported):
                return None
            op = self.job.operator(self.name, 1)
            self._exists = True
            # A new operator has no state yet: start empty, on the batch's base (receipts
            # of one commit share their base).
            self._instance = op.instance(0, 1, checkpoint=EMPTY)
            self._instance.base = self._base
        instance = self._instance
        assert instance is not None
        space = instance.space(0)
        if largest != NO_TIME:
            old = space.get_value("max_event").value if "max_event" in space else None
            if old is None or largest > old:
                if "max_event" in space:
                    space.get_value("max_event").value = largest
                else:
                    space.create_value("max_event", largest)
        watermark = plan.clock.watermark
        if watermark is not None:
            if "watermark" not in space:
                space.create_value("watermark", watermark)
            elif space.get_value("watermark").value != watermark:
                space.get_value("watermark").value = watermark
        times = (
            space.get_dict("batch_time")
            if "batch_time" in space
            else space.create_dict("batch_time")
        )
        times[batch.checkpoint_id] = plan.clock.batch_time
        for old_id in [c for c in times if c < batch.checkpoint_id - _BATCH_TIMES_KEPT]:
            del times[old_id]
        deadlines = (
            space.get_dict("deadlines") if "deadlines" in space else space.create_dict("deadlines")
        )
        for entry in reported:
            if len(entry) == 2:
                if deadlines.get(entry[0]) != entry[1]:
                    deadlines[entry[0]] = entry[1]
            elif entry[0] in deadlines:
                del deadlines[entry[0]]
        return instance.save(batch.checkpoint_id)

    def acknowledge(self, committed: bool) -> None:
        """After the batch's commit: a committed save is acknowledged and its instance kept
        for the next batch (which reads it from storage otherwise)."""
        instance = self._instance
        if committed and instance is not None and instance.pending_save is not None:
            instance.on_saved()
            self._kept, self._kept_at = instance, instance.base
        self._instance = None

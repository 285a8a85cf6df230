"""``from_ms`` (epoch milliseconds to an aware UTC datetime) in C and in Python: the same
datetime for every int within datetime's range (random ones, day, leap year and century
boundaries, negative times), the same error beyond it and for what is not an int."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from objectspace.collections._impl import IMPLEMENTATION
from objectspace.errors import TimeError
from objectspace.keyed import clock
from objectspace.keyed.clock import EPOCH, MAX_MS, MIN_MS
from tests.support.twins import CORE


def both(ms: Any) -> list[Any]:
    """What the Python function and the C one give (or raise) for ``ms``."""
    out = []
    for fn in (clock._from_ms, clock.from_ms):
        try:
            out.append(fn(ms))
        except TimeError as exc:
            out.append(("TimeError", str(exc)))
    return out


def test_the_c_function_is_used_when_built() -> None:
    if CORE is None or IMPLEMENTATION != "c":
        pytest.skip("the C extension is not built or not used")
    assert clock.from_ms is not clock._from_ms
    assert clock.from_ms.func is CORE.datetime_from_ms  # type: ignore[attr-defined]


def test_from_ms_is_epoch_plus_milliseconds_across_the_range() -> None:
    rng = random.Random(3)
    day = 86_400_000
    values = [rng.randint(MIN_MS, MAX_MS) for _ in range(20_000)]
    values += [rng.randint(-3 * day, 3 * day) for _ in range(2_000)]
    edges = [MIN_MS, MIN_MS + 1, MAX_MS - 1, MAX_MS, 0, -1, 1, day - 1, day, -day, -day - 1]
    for year in (1, 4, 100, 400, 1582, 1900, 1969, 1970, 2000, 2024, 2100, 9999):
        for month, dom in ((1, 1), (2, 28), (2, 29), (3, 1), (12, 31)):
            try:
                at = datetime(year, month, dom, tzinfo=UTC)
            except ValueError:  # no 29 February that year
                continue
            ms = (at - EPOCH) // timedelta(milliseconds=1)
            edges += [ms - 1, ms, ms + 1, ms + day - 1]
    for ms in values + [e for e in edges if MIN_MS <= e <= MAX_MS]:
        python, c = both(ms)
        assert c == python == EPOCH + timedelta(milliseconds=ms), ms
        assert c.tzinfo is UTC


@pytest.mark.parametrize(
    "ms", [MIN_MS - 1, MAX_MS + 1, -(10**30), 10**30, 1.5, True, -0.0, float("nan"), "1"]
)
def test_what_the_c_path_does_not_take_goes_through_the_python_function(ms: Any) -> None:
    try:
        python = clock._from_ms(ms)
    except (TimeError, TypeError, ValueError) as exc:
        with pytest.raises(type(exc)):
            clock.from_ms(ms)
    else:
        assert clock.from_ms(ms) == python

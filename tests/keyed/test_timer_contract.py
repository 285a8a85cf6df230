"""The timer contract: which handler :func:`fire_timer` hands a timer to."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from objectspace import operators as ops
from objectspace.errors import ObjectSpaceError
from objectspace.keyed import (
    Clock,
    KeyRef,
    KeyState,
    Timers,
    fire_timer,
    from_ms,
    timer_handler,
)
from objectspace.space import ObjectSpace

CLOCK = Clock("event", 0, event_time="ts")


def root() -> KeyState:
    return KeyState.for_key(ObjectSpace(), "k", CLOCK)


@pytest.mark.parametrize(
    "op",
    [
        ops.session_window("1 minute"),
        ops.tumbling_window("1 minute"),
        ops.sliding_window("2 minutes", "1 minute"),
        ops.dedup("1 minute"),
        ops.chain(ops.take(1), ops.session_window("1 minute")),
        ops.expire_after("1 minute", ops.take(1)),
    ],
)
def test_every_operator_with_timers_implements_handle_timer(op: Any) -> None:
    assert callable(op.handle_timer)


def test_on_timer_argument_comes_first_with_a_datetime_and_the_registering_namespace() -> None:
    seen: list[Any] = []

    class Both:
        def handle_timer(self, *args: Any) -> list[Any]:
            raise AssertionError("on_timer= comes first")

    def on_timer(key: Any, when: datetime, state: KeyState) -> list[dict[str, Any]]:
        seen.append((key, when, state.names))
        return [{"fired": True}]

    out = fire_timer(Both(), on_timer, "k", ("0",), 1000, root())
    assert list(out) == [{"fired": True}]
    assert seen == [("k", from_ms(1000), ("0",))]


def test_handle_timer_gets_the_root_state_and_the_path() -> None:
    class Handler:
        def handle_timer(
            self, key: Any, names: tuple[str, ...], when_ms: int, state: KeyState
        ) -> list[dict[str, Any]]:
            return [{"key": key, "names": names, "when": when_ms, "at": state.names}]

        def on_timer(self, *args: Any) -> list[Any]:
            raise AssertionError("handle_timer comes before on_timer")

    out = fire_timer(Handler(), None, "k", ("0", "op"), 5, root())
    assert list(out) == [{"key": "k", "names": ("0", "op"), "when": 5, "at": ()}]


def test_a_users_on_timer_method_gets_a_datetime_and_the_registering_namespace() -> None:
    class Delay:
        def __call__(self, key: Any, rows: list[Any], state: KeyState) -> list[Any]:
            return []

        def on_timer(self, key: Any, when: datetime, state: KeyState) -> list[dict[str, Any]]:
            return [{"when": when, "at": state.names}]

    out = fire_timer(Delay(), None, "k", ("1",), 2000, root())
    assert list(out) == [{"when": from_ms(2000), "at": ("1",)}]


def test_a_function_without_a_handler_is_an_error_naming_key_namespace_and_time() -> None:
    def fn(key: Any, rows: list[Any], state: KeyState) -> list[Any]:
        return []

    with pytest.raises(ObjectSpaceError, match=r"key 'k' \(namespace a/b\) fired at 1970"):
        fire_timer(fn, None, "k", ("a", "b"), 0, root())


def test_a_key_ref_is_all_timers_need() -> None:
    space = ObjectSpace()
    state = KeyState.for_key(space, "k", CLOCK)
    ref = KeyRef(space, state.prefix, "k", (), CLOCK)
    Timers(ref).register(10)
    assert state.timers.list() == [from_ms(10)]


def test_a_handler_looked_up_once_fires_as_fire_timer_does() -> None:
    """``timer_handler`` (what a batch uses for its timers) picks the handler once: the
    same outputs as ``fire_timer`` for each form, the root state itself for the root
    namespace, and the error only when a timer fires."""

    class Delay:
        def on_timer(self, key: Any, when: datetime, state: KeyState) -> list[dict[str, Any]]:
            return [{"when": when, "at": state.names, "same": state is state_root}]

    class Handler:
        def handle_timer(
            self, key: Any, names: tuple[str, ...], when_ms: int, state: KeyState
        ) -> list[dict[str, Any]]:
            return [{"names": names, "when": when_ms}]

    def given(key: Any, when: datetime, state: KeyState) -> list[dict[str, Any]]:
        return [{"key": key, "at": state.names}]

    state_root = root()
    for fn, on_timer in ((Delay(), None), (Handler(), None), (Delay(), given)):
        handle = timer_handler(fn, on_timer)
        for names in ((), ("0",), ("0", "op")):
            assert list(handle("k", names, 7, state_root)) == list(
                fire_timer(fn, on_timer, "k", names, 7, state_root)
            )
    assert next(iter(timer_handler(Delay(), None)("k", (), 7, state_root)))["same"] is True

    def no_handler(key: Any, rows: list[Any], state: KeyState) -> list[Any]:
        return []

    handle = timer_handler(no_handler, None)  # no error until a timer fires
    with pytest.raises(ObjectSpaceError, match=r"key 'k' \(namespace \(root\)\) fired at 1970"):
        handle("k", (), 0, state_root)

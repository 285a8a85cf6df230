"""The state one key sees: a namespace of persisted objects in its key group's space.

A stateful function ``fn(key, rows, state)`` gets a :class:`KeyState` whose objects are
created on first use and live in the object space of the key's key group, under ids
``<key>/<name>``, so every key's state is checkpointed by what changed, slot by slot.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any, TypeVar

from objectspace.collections import (
    PersistedArray,
    PersistedDict,
    PersistedLinkedList,
    PersistedList,
    PersistedObject,
    PersistedQueue,
    PersistedSet,
    PersistedSortedDict,
    PersistedSortedSet,
    PersistedStack,
    PersistedValue,
)
from objectspace.keyed.timers import (
    UNORDERED,
    Clock,
    Timers,
    TtlDict,
    TtlList,
    TtlQueue,
    TtlSet,
    TtlValue,
    drop_timers,
    from_ms,
    parse_duration,
)
from objectspace.space import ObjectSpace

__all__ = ["KeyState", "key_prefix", "prefix_of_repr", "shared_dict"]

_T = TypeVar("_T", bound=PersistedObject)

_SHARED = "#shared/"
"""Id prefix of the key group's shared dicts (``#`` never starts a key's id prefix)."""


_SHARED_IDS: dict[str, str] = {}
"""The id of each shared dict name (see :func:`shared_dict`)."""


def shared_dict(state: KeyState, name: str) -> tuple[PersistedSortedDict, str]:
    """The key group's shared sorted dict ``name`` and this namespace's prefix: an
    operator whose keys each hold a few small entries keeps them there under keys
    ``(prefix, ...)`` (this key's entries are the range ``(prefix,)``..``(prefix +
    "\\x00",)``) instead of in an object per key, so a key's first entry or its last one
    deleted writes one row, not an object created or deleted (its index row and its
    tables), and a batch's edits of many keys go to one table. :meth:`KeyState.clear`
    drops the namespace's entries."""
    object_id = _SHARED_IDS.get(name)
    if object_id is None:
        object_id = _SHARED + _escape(name)
        if len(_SHARED_IDS) < 256:  # operators' own names: a handful
            _SHARED_IDS[name] = object_id
    space = state._space
    found = space.find(object_id)
    if type(found) is PersistedSortedDict:
        return found, state._prefix
    if found is None:
        return space.create_sorted_dict(object_id), state._prefix
    return space.get_sorted_dict(object_id), state._prefix  # raises WrongKindError


def _escape(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"a state name is a non-empty str, not {name!r}")
    if "%" in name or "/" in name:
        return name.replace("%", "%25").replace("/", "%2F")
    return name


def key_prefix(key: Any) -> str:
    """The id prefix of a key's objects: its ``repr``, escaped, and a slash.

    ``repr`` tells ``1`` from ``"1"`` and ``(1, "a")`` from ``"(1, 'a')"``, so distinct keys
    of the types Spark hands to Python never share a namespace. Keys must be plain Python
    values (``int``, ``str``, ``bytes``, tuples of them), as Arrow's ``to_pylist`` gives:
    a NumPy ``int64(5)`` would name another namespace than ``5``.
    """
    return _escape(repr(key)) + "/"


def prefix_of_repr(text: str) -> str:
    """:func:`key_prefix` of a key whose ``repr`` is ``text`` (a caller that has it)."""
    return _escape(text) + "/"


class KeyState:
    """Persisted objects of one key (or of one operator's namespace within it).

    ``key`` and ``names`` (the namespace path) are what a timer registered here fires
    with; ``clock`` is the batch's time (:class:`~objectspace.keyed.Clock`;
    ``None``: no time, so TTL'd entries count from the first time the operator has and
    timers fire only when a time comes).
    """

    __slots__ = ("_clock", "_key", "_names", "_prefix", "_space")

    def __init__(
        self,
        space: ObjectSpace,
        prefix: str,
        key: Any = None,
        names: tuple[str, ...] = (),
        clock: Clock | None = None,
    ) -> None:
        self._space = space
        self._prefix = prefix
        self._key = key
        self._names = names
        self._clock = clock

    @classmethod
    def for_key(cls, space: ObjectSpace, key: Any, clock: Clock | None = None) -> KeyState:
        return cls(space, key_prefix(key), key, (), clock)

    @property
    def key(self) -> Any:
        """The key this state belongs to."""
        return self._key

    @property
    def clock(self) -> Clock | None:
        """The time this batch runs with (``None``: none)."""
        return self._clock

    @property
    def timers(self) -> Timers:
        """This key's timers (per namespace): ``register(when)``, ``delete(when)``,
        ``list()``."""
        return Timers(self)

    @property
    def watermark(self) -> datetime | None:
        """The watermark this batch runs with (aware UTC), ``None`` before the first one
        or outside event time."""
        clock = self._clock
        return None if clock is None or clock.watermark is None else from_ms(clock.watermark)

    @property
    def batch_time(self) -> datetime | None:
        """This batch's processing time (aware UTC; the same when the batch is replayed)."""
        clock = self._clock
        return None if clock is None or clock.batch_time is None else from_ms(clock.batch_time)

    def _raw_id(self, suffix: str) -> str:
        return self._prefix + suffix

    @property
    def space(self) -> ObjectSpace:
        """The key group's object space that holds this state."""
        return self._space

    def namespace(self, name: str) -> KeyState:
        """A nested namespace (used by ``operators.chain`` to keep operators apart)."""
        return KeyState(
            self._space,
            f"{self._prefix}{_escape(name)}/",
            self._key,
            (*self._names, name),
            self._clock,
        )

    def path(self, names: tuple[str, ...]) -> KeyState:
        """The nested namespace ``names`` (``()``: this one)."""
        state = self
        for name in names:
            state = state.namespace(name)
        return state

    def _id(self, name: str) -> str:
        return self._prefix + _escape(name)

    def _get(self, name: str, cls: type[_T], create: Any) -> _T:
        object_id = self._prefix + _escape(name)
        space = self._space
        if object_id in space:
            obj = space.get(object_id)
            if type(obj) is not cls:
                return space.get_as(object_id, cls)  # raises WrongKindError
            return obj
        return create(object_id)  # type: ignore[no-any-return]

    def value(self, name: str, default: Any = None, ttl: Any = None) -> PersistedValue:
        """A persisted single value, created holding ``default``. With ``ttl`` (a
        timedelta or a str like ``"1 hour"``) a view whose value reads ``default`` again
        ``ttl`` after its last write."""
        if ttl is not None:
            return TtlValue(self, name, default, parse_duration(ttl, "ttl"))  # type: ignore[return-value]
        return self._get(name, PersistedValue, lambda i: self._space.create_value(i, default))

    def array(self, name: str, length: int, fill: Any = None) -> PersistedArray:
        """A fixed-length array, created with every slot ``fill``."""
        return self._get(name, PersistedArray, lambda i: self._space.create_array(i, length, fill))

    def list(self, name: str, ttl: Any = None) -> PersistedList:
        """A persisted list (``ttl``: each element expires ``ttl`` after its last write)."""
        obj = self._get(name, PersistedList, self._space.create_list)
        if ttl is not None:
            return TtlList(self, obj, parse_duration(ttl, "ttl"))  # type: ignore[return-value]
        return obj

    def queue(self, name: str, ttl: Any = None) -> PersistedQueue:
        """A persisted queue (``ttl``: elements expire ``ttl`` after they were enqueued,
        from the front)."""
        obj = self._get(name, PersistedQueue, self._space.create_queue)
        if ttl is not None:
            return TtlQueue(self, obj, parse_duration(ttl, "ttl"))  # type: ignore[return-value]
        return obj

    def stack(self, name: str) -> PersistedStack:
        return self._get(name, PersistedStack, self._space.create_stack)

    def linked_list(self, name: str) -> PersistedLinkedList:
        return self._get(name, PersistedLinkedList, self._space.create_linked_list)

    def set(self, name: str, ttl: Any = None) -> PersistedSet:
        """A persisted set (``ttl``: each element expires ``ttl`` after it was last added)."""
        obj = self._get(name, PersistedSet, self._space.create_set)
        if ttl is not None:
            return TtlSet(self, obj, parse_duration(ttl, "ttl"))  # type: ignore[return-value]
        return obj

    def sorted_set(self, name: str, ttl: Any = None) -> PersistedSortedSet:
        """A persisted sorted set (``ttl``: per element, as :meth:`set`)."""
        obj = self._get(name, PersistedSortedSet, self._space.create_sorted_set)
        if ttl is not None:
            return TtlSet(self, obj, parse_duration(ttl, "ttl"))  # type: ignore[return-value]
        return obj

    def dict(self, name: str, ttl: Any = None) -> PersistedDict:
        """A persisted dict (``ttl``: each entry expires ``ttl`` after its last write)."""
        obj = self._get(name, PersistedDict, self._space.create_dict)
        if ttl is not None:
            return TtlDict(self, obj, parse_duration(ttl, "ttl"))  # type: ignore[return-value]
        return obj

    def sorted_dict(self, name: str, ttl: Any = None) -> PersistedSortedDict:
        """A persisted sorted dict (``ttl``: per entry, as :meth:`dict`)."""
        obj = self._get(name, PersistedSortedDict, self._space.create_sorted_dict)
        if ttl is not None:
            return TtlDict(self, obj, parse_duration(ttl, "ttl"))  # type: ignore[return-value]
        return obj

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and bool(name) and self._id(name) in self._space

    def delete(self, name: str) -> None:
        """Delete one object (``KeyError`` if it does not exist), and its TTL record."""
        object_id = self._id(name)
        self._space.delete(object_id)
        for suffix in ("%ttl", UNORDERED):
            if object_id + suffix in self._space:
                self._space.delete(object_id + suffix)

    def ids(self) -> Iterator[str]:
        """Ids of every object of this namespace, nested ones included. O(objects in space)."""
        prefix = self._prefix
        return (i for i in self._space if i.startswith(prefix))

    def clear(self) -> None:
        """Delete every object of this namespace (nested namespaces too), its timers and its
        entries in the key group's shared dicts (see :func:`shared_dict`)."""
        space = self._space
        prefix = self._prefix
        for object_id in list(space):
            if object_id.startswith(prefix):
                space.delete(object_id)
            elif object_id.startswith(_SHARED):
                shared = space.get_sorted_dict(object_id)
                for at in list(shared.irange((prefix,), (prefix + "\U0010ffff",))):
                    del shared[at]
        drop_timers(space, prefix)

    def __repr__(self) -> str:
        return f"<KeyState {self._prefix!r}>"

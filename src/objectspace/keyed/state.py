"""The state one key sees: a namespace of persisted objects in its key group's space.

A stateful function ``fn(key, rows, state)`` gets a :class:`KeyState` whose objects are
created on first use and live in the object space of the key's key group, under ids
``<key>/<name>``, so every key's state is checkpointed by what changed, slot by slot.
A :class:`KeyRef` is where such a namespace lives (space, id prefix, key, namespace path,
clock): what the timers and the TTL'd views of the namespace work with.
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
from objectspace.keyed.clock import Clock, from_ms, parse_duration
from objectspace.keyed.timers import Timers, drop_timers
from objectspace.keyed.ttl import UNORDERED, TtlDict, TtlList, TtlQueue, TtlSet, TtlValue
from objectspace.space import ObjectSpace

__all__ = ["KeyRef", "KeyState", "key_prefix", "prefix_of_repr", "shared_dict"]

_T = TypeVar("_T", bound=PersistedObject)

_SHARED = "#shared/"
"""Id prefix of the key group's shared dicts (``#`` never starts a key's id prefix)."""


_SHARED_IDS: dict[str, str] = {}
"""The id of each shared dict name (see :func:`shared_dict`)."""


def shared_dict(ref: KeyRef, name: str) -> tuple[PersistedSortedDict, str]:
    """The key group's shared sorted dict ``name`` and the prefix of the namespace ``ref``:
    an operator whose keys each hold a few small entries keeps them there under keys
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
    space = ref.space
    found = space.find(object_id)
    if type(found) is PersistedSortedDict:
        return found, ref.prefix
    if found is None:
        return space.create_sorted_dict(object_id), ref.prefix
    return space.get_sorted_dict(object_id), ref.prefix  # raises WrongKindError


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


class KeyRef:
    """Where one key's state namespace lives, and what its timers fire with.

    ``space``: the key group's object space; ``prefix``: the id prefix of the namespace's
    objects (:func:`key_prefix` of the key, then one ``<name>/`` per nested namespace);
    ``key`` and ``names`` (the namespace path from the key's root): what a timer
    registered here fires with; ``clock``: the batch's time (``None``: no time, so TTL'd
    entries count from the first time the operator has and timers fire only when a time
    comes). :class:`Timers` and the TTL'd views work with these public fields only; a
    :class:`KeyState` is a ``KeyRef``, so it costs no second object per key. The fields are
    fixed for the reference's life: do not assign them.
    """

    __slots__ = ("clock", "key", "names", "prefix", "space")

    space: ObjectSpace
    prefix: str
    key: Any
    names: tuple[str, ...]
    clock: Clock | None

    def __init__(
        self,
        space: ObjectSpace,
        prefix: str,
        key: Any = None,
        names: tuple[str, ...] = (),
        clock: Clock | None = None,
    ) -> None:
        self.space = space
        self.prefix = prefix
        self.key = key
        self.names = names
        self.clock = clock

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.prefix!r}>"


class KeyState(KeyRef):
    """Persisted objects of one key (or of one operator's namespace within it).

    Its :class:`KeyRef` fields say where they live: ``space`` (the key group's object
    space), ``key``, ``names`` (the namespace path), ``clock`` (the batch's
    :class:`~objectspace.keyed.Clock`, or ``None``).
    """

    __slots__ = ()

    @classmethod
    def for_key(cls, space: ObjectSpace, key: Any, clock: Clock | None = None) -> KeyState:
        return cls(space, key_prefix(key), key, (), clock)

    @property
    def timers(self) -> Timers:
        """This key's timers (per namespace): ``register(when)``, ``delete(when)``,
        ``list()``."""
        return Timers(self)

    @property
    def watermark(self) -> datetime | None:
        """The watermark this batch runs with (aware UTC), ``None`` before the first one
        or outside event time."""
        clock = self.clock
        return None if clock is None or clock.watermark is None else from_ms(clock.watermark)

    @property
    def batch_time(self) -> datetime | None:
        """This batch's processing time (aware UTC; the same when the batch is replayed)."""
        clock = self.clock
        return None if clock is None or clock.batch_time is None else from_ms(clock.batch_time)

    def namespace(self, name: str) -> KeyState:
        """A nested namespace (used by ``operators.chain`` to keep operators apart)."""
        return KeyState(
            self.space,
            f"{self.prefix}{_escape(name)}/",
            self.key,
            (*self.names, name),
            self.clock,
        )

    def path(self, names: tuple[str, ...]) -> KeyState:
        """The nested namespace ``names`` (``()``: this one)."""
        state = self
        for name in names:
            state = state.namespace(name)
        return state

    def _id(self, name: str) -> str:
        return self.prefix + _escape(name)

    def _get(self, name: str, cls: type[_T], create: Any) -> _T:
        object_id = self.prefix + _escape(name)
        obj = self.space.find(object_id)  # one lookup (with a backing: loaded if kept)
        if obj is None:
            return create(object_id)  # type: ignore[no-any-return]
        if type(obj) is not cls:
            return self.space.get_as(object_id, cls)  # raises WrongKindError
        return obj

    def value(self, name: str, default: Any = None, ttl: Any = None) -> PersistedValue:
        """A persisted single value, created holding ``default``. With ``ttl`` (a
        timedelta or a str like ``"1 hour"``) a view whose value reads ``default`` again
        ``ttl`` after its last write."""
        if ttl is not None:
            ms = parse_duration(ttl, "ttl")
            return TtlValue(self, self._id(name), default, ms)  # type: ignore[return-value]
        # _get, in this frame (a function calls it for every key and timer).
        object_id = self.prefix + _escape(name)
        space = self.space
        obj = space.find(object_id)
        if type(obj) is PersistedValue:
            return obj
        if obj is None:
            return space.create_value(object_id, default)
        return space.get_as(object_id, PersistedValue)  # raises WrongKindError

    def array(self, name: str, length: int, fill: Any = None) -> PersistedArray:
        """A fixed-length array, created with every slot ``fill``."""
        return self._get(name, PersistedArray, lambda i: self.space.create_array(i, length, fill))

    def list(self, name: str, ttl: Any = None) -> PersistedList:
        """A persisted list (``ttl``: each element expires ``ttl`` after its last write)."""
        obj = self._get(name, PersistedList, self.space.create_list)
        if ttl is not None:
            return TtlList(self, obj, parse_duration(ttl, "ttl"))  # type: ignore[return-value]
        return obj

    def queue(self, name: str, ttl: Any = None) -> PersistedQueue:
        """A persisted queue (``ttl``: elements expire ``ttl`` after they were enqueued,
        from the front)."""
        obj = self._get(name, PersistedQueue, self.space.create_queue)
        if ttl is not None:
            return TtlQueue(self, obj, parse_duration(ttl, "ttl"))  # type: ignore[return-value]
        return obj

    def stack(self, name: str) -> PersistedStack:
        return self._get(name, PersistedStack, self.space.create_stack)

    def linked_list(self, name: str) -> PersistedLinkedList:
        return self._get(name, PersistedLinkedList, self.space.create_linked_list)

    def set(self, name: str, ttl: Any = None) -> PersistedSet:
        """A persisted set (``ttl``: each element expires ``ttl`` after it was last added)."""
        obj = self._get(name, PersistedSet, self.space.create_set)
        if ttl is not None:
            return TtlSet(self, obj, parse_duration(ttl, "ttl"))  # type: ignore[return-value]
        return obj

    def sorted_set(self, name: str, ttl: Any = None) -> PersistedSortedSet:
        """A persisted sorted set (``ttl``: per element, as :meth:`set`)."""
        obj = self._get(name, PersistedSortedSet, self.space.create_sorted_set)
        if ttl is not None:
            return TtlSet(self, obj, parse_duration(ttl, "ttl"))  # type: ignore[return-value]
        return obj

    def dict(self, name: str, ttl: Any = None) -> PersistedDict:
        """A persisted dict (``ttl``: each entry expires ``ttl`` after its last write)."""
        obj = self._get(name, PersistedDict, self.space.create_dict)
        if ttl is not None:
            return TtlDict(self, obj, parse_duration(ttl, "ttl"))  # type: ignore[return-value]
        return obj

    def sorted_dict(self, name: str, ttl: Any = None) -> PersistedSortedDict:
        """A persisted sorted dict (``ttl``: per entry, as :meth:`dict`)."""
        obj = self._get(name, PersistedSortedDict, self.space.create_sorted_dict)
        if ttl is not None:
            return TtlDict(self, obj, parse_duration(ttl, "ttl"))  # type: ignore[return-value]
        return obj

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and bool(name) and self._id(name) in self.space

    def delete(self, name: str) -> None:
        """Delete one object (``KeyError`` if it does not exist), and its TTL record."""
        object_id = self._id(name)
        self.space.delete(object_id)
        for suffix in ("%ttl", UNORDERED):
            if object_id + suffix in self.space:
                self.space.delete(object_id + suffix)

    def ids(self) -> Iterator[str]:
        """Ids of every object of this namespace, nested ones included. O(objects in space)
        (with a local store: O(objects held in memory + the namespace's))."""
        return self.space.ids(self.prefix)

    def clear(self) -> None:
        """Delete every object of this namespace (nested namespaces too), its timers and its
        entries in the key group's shared dicts (see :func:`shared_dict`)."""
        space = self.space
        prefix = self.prefix
        ids = [*space.ids(prefix), *space.ids(_SHARED)] if space.residents else list(space)
        for object_id in ids:
            if object_id.startswith(prefix):
                space.delete(object_id)
            elif object_id.startswith(_SHARED):
                shared = space.get_sorted_dict(object_id)
                for at in list(shared.irange((prefix,), (prefix + "\U0010ffff",))):
                    del shared[at]
        drop_timers(space, prefix)

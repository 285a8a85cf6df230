"""State values as JSON, the exported entry rows, and the constants the views share."""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

from objectspace.collections import (
    PersistedDict,
    PersistedObject,
    PersistedSet,
    PersistedSortedDict,
    PersistedSortedSet,
    PersistedValue,
)
from objectspace.serialization import to_tagged_json

__all__ = [
    "DEFAULT_LIMIT",
    "ENTRY_COLUMNS",
    "KEY_TYPES",
    "MAX_MATCHED",
    "SLICE_KEY_GROUPS",
    "Progress",
    "compact_json",
    "dumps",
    "entries",
    "format_time",
    "json_text",
    "to_json",
]


ENTRY_COLUMNS = ("key_group", "object_id", "kind", "slot", "value")
"""The columns of ``export`` and ``read_state``, in order."""

DEFAULT_LIMIT = 20
"""Items shown per collection (``show``), slots per changed object (``diff``)."""

MAX_MATCHED = 20_000
"""Sequences with more items than this (old and new together) are diffed index by index."""

SLICE_KEY_GROUPS = 64
"""Key groups restored at a time by ``export`` and ``read_state`` (memory bound)."""

KEY_TYPES = ("auto", "int", "str", "json")
"""How ``--key`` text becomes a key (see :func:`parse_key`)."""

Progress = Callable[[int, int], None]
"""A progress callback: ``(done, total)``."""

_SEQUENCE_KINDS = frozenset({"Array", "List", "Queue", "Stack", "LinkedList"})
# -- values as JSON -------------------------------------------------------------------------


def to_json(value: Any) -> Any:
    """``value`` as JSON-able data, with the tags of the module docstring."""
    return to_tagged_json(value, lenient=True)


def compact_json(data: Any) -> str:
    """``data`` (JSON-ready) as compact JSON text: no spaces, non-ASCII kept, NaN refused."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def json_text(value: Any) -> str:
    """The compact JSON text of :func:`to_json` of ``value``."""
    return compact_json(to_json(value))


def dumps(data: Any) -> str:
    """The ``--json`` text of a command's data: indented, keys sorted."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)


def format_time(epoch: float) -> str:
    """A commit time as ISO 8601 in UTC, to the microsecond."""
    return _dt.datetime.fromtimestamp(epoch, _dt.UTC).isoformat(timespec="microseconds")


def _sort_pairs(pairs: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """Pairs by their key: natural order when the keys compare, else by JSON text."""
    try:
        return sorted(pairs, key=lambda kv: kv[0])
    except TypeError:
        return sorted(pairs, key=lambda kv: json_text(kv[0]))


def _pairs(obj: PersistedObject) -> list[tuple[Any, Any]]:
    """A collection's entries as (slot, value): index/key/element; sorted for Dict and Set."""
    if isinstance(obj, PersistedSortedDict):
        return list(obj.items())
    if isinstance(obj, PersistedDict):
        return _sort_pairs(list(obj.items()))
    if isinstance(obj, PersistedSortedSet):
        return [(v, v) for v in obj]
    if isinstance(obj, PersistedSet):
        return _sort_pairs([(v, v) for v in obj])
    return list(enumerate(cast(Iterable[Any], obj)))


def entries(obj: PersistedObject) -> Iterator[tuple[str | None, str | None]]:
    """The (slot, value) texts of one object's exported rows (see the module docstring)."""
    if isinstance(obj, PersistedValue):
        yield None, json_text(obj.value)
        return
    pairs = _pairs(obj)
    if not pairs:
        yield None, None
        return
    sequence = obj.kind in _SEQUENCE_KINDS
    for slot, value in pairs:
        yield (str(slot) if sequence else json_text(slot)), json_text(value)

"""The ten persisted collection types of an object space."""

from __future__ import annotations

from objectspace.collections.array import PersistedArray
from objectspace.collections.base import PersistedObject
from objectspace.collections.dicts import PersistedDict, PersistedSortedDict
from objectspace.collections.linked import LinkedListNode, PersistedLinkedList
from objectspace.collections.lists import PersistedList
from objectspace.collections.queues import PersistedQueue, PersistedStack
from objectspace.collections.sets import PersistedSet, PersistedSortedSet
from objectspace.collections.value import PersistedValue

__all__ = [
    "KINDS",
    "LinkedListNode",
    "PersistedArray",
    "PersistedDict",
    "PersistedLinkedList",
    "PersistedList",
    "PersistedObject",
    "PersistedQueue",
    "PersistedSet",
    "PersistedSortedDict",
    "PersistedSortedSet",
    "PersistedStack",
    "PersistedValue",
]

KINDS: dict[str, type[PersistedObject]] = {
    cls.KIND: cls
    for cls in (
        PersistedValue,
        PersistedArray,
        PersistedList,
        PersistedQueue,
        PersistedStack,
        PersistedLinkedList,
        PersistedSet,
        PersistedSortedSet,
        PersistedDict,
        PersistedSortedDict,
    )
}
"""Stored kind name (``state/index``) → class."""

"""Layer 1: the ten persisted collection types of an object space, one module per type.

The fields and hot methods live in the C extension ``_core`` (``_core.c``) or its pure-Python
twin ``_pycore``, chosen by ``_impl``; ``base`` holds what every type shares.
"""

from __future__ import annotations

from objectspace.collections._impl import (
    columns_from_rows,
    grouped_tables,
    key_encoder,
    numbered_folders,
    row_columns,
    rows_from_columns,
    table_heads,
    untrack,
    utc_from_ms,
    utc_micros,
)
from objectspace.collections.array import PersistedArray
from objectspace.collections.base import PersistedObject
from objectspace.collections.dict import PersistedDict
from objectspace.collections.linked_list import LinkedListNode, PersistedLinkedList
from objectspace.collections.list import PersistedList
from objectspace.collections.queue import PersistedQueue
from objectspace.collections.set import PersistedSet
from objectspace.collections.sorted_dict import PersistedSortedDict
from objectspace.collections.sorted_set import PersistedSortedSet
from objectspace.collections.stack import PersistedStack
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
    "columns_from_rows",
    "grouped_tables",
    "key_encoder",
    "numbered_folders",
    "row_columns",
    "rows_from_columns",
    "table_heads",
    "untrack",
    "utc_from_ms",
    "utc_micros",
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

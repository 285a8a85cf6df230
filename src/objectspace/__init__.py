"""objectspace: fine-grained, checkpointed operator state for Python stream processing.

An :class:`ObjectSpace` holds named persisted collections whose edits are tracked per slot,
so a checkpoint writes what changed, not what exists::

    import objectspace as osp

    space = osp.ObjectSpace()
    buf = space.create_list("buffer")
    buf.append(1.5)
    store = osp.SQLiteStore("state.db")
    stats = space.checkpoint(store)           # writes one item and the length
    restored = osp.ObjectSpace.load(store.reader())
"""

from __future__ import annotations

from objectspace.checkpoint import (
    CompactionPolicy,
    Instance,
    Job,
    Operator,
    Receipt,
    Storage,
    open_storage,
)
from objectspace.collections import (
    LinkedListNode,
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
from objectspace.errors import (
    CheckpointConflictError,
    CheckpointError,
    CorruptStateError,
    DeploymentError,
    ObjectDeletedError,
    ObjectExistsError,
    ObjectSpaceError,
    ReservedColumnError,
    SerializationError,
    StorageError,
    StorageNotSharedError,
    TimeError,
    WrongKindError,
)
from objectspace.inspection.stats import read_stats
from objectspace.keygroups import KeyGroups, key_group_hash
from objectspace.serialization import (
    JsonSerializer,
    MsgpackSerializer,
    PickleSerializer,
    Serializer,
)
from objectspace.space import ObjectSpace
from objectspace.storage.stores import MemoryStore, SQLiteStore, Store
from objectspace.tables import CheckpointKind, StateReader, StateWriter, WriteStats

__version__ = "0.1.0"

__all__ = [
    "CheckpointConflictError",
    "CheckpointError",
    "CheckpointKind",
    "CompactionPolicy",
    "CorruptStateError",
    "DeploymentError",
    "Instance",
    "Job",
    "JsonSerializer",
    "KeyGroups",
    "LinkedListNode",
    "MemoryStore",
    "MsgpackSerializer",
    "ObjectDeletedError",
    "ObjectExistsError",
    "ObjectSpace",
    "ObjectSpaceError",
    "Operator",
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
    "PickleSerializer",
    "Receipt",
    "ReservedColumnError",
    "SQLiteStore",
    "SerializationError",
    "Serializer",
    "StateReader",
    "StateWriter",
    "Storage",
    "StorageError",
    "StorageNotSharedError",
    "Store",
    "TimeError",
    "WriteStats",
    "WrongKindError",
    "__version__",
    "key_group_hash",
    "open_storage",
    "read_stats",
]

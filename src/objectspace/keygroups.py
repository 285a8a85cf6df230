"""Key groups: the layer that maps a key to a key group, and a key group to an instance.

State is partitioned in two steps (layer 5 of the design)::

    key --(key_group_hash, pmod max_key_groups)--> key group --(contiguous ranges)--> instance

The number of key groups (``max_key_groups``) is fixed for the lifetime of a job; it is the unit
of state redistribution and the upper bound of the parallelism.  Rescaling only changes which
contiguous range of key groups each instance owns, so state moves between instances as whole key
groups and never has to be rehashed.

Why xxhash64 and not Python's ``hash()``: the key group of a key must be stable across processes,
interpreter runs (``PYTHONHASHSEED``), machines and languages.  :func:`key_group_hash` reproduces
Spark SQL's built-in ``xxhash64`` bit for bit, so a Spark job can compute the same key groups in
the JVM as a plain column expression (see :mod:`objectspace.spark.routing`) instead of calling
back into Python.

Key-to-Spark-type correspondence (the hash only matches when the Spark column has this type):

============  ==============================  =======================================
Python key    Spark column type               bytes hashed
============  ==============================  =======================================
``str``       ``string``                      UTF-8 bytes
``int``       ``bigint`` (cast ``int`` to it) 8-byte little-endian signed long
``bytes``     ``binary``                      the bytes as they are
``bool``      ``boolean``                     4-byte little-endian int (1 or 0)
``None``      null of any type                nothing: the seed is passed on unchanged
``tuple``     several columns / a struct      fields chained, each hash seeds the next
============  ==============================  =======================================

The instance assignment is the contiguous one of the Heron reference document: with
``per = max_key_groups // parallelism`` and ``overflow = max_key_groups - per * parallelism``,
instances ``0 .. overflow - 1`` own ``per + 1`` key groups each and the others own ``per``.
Every lookup is O(1) arithmetic; nothing is precomputed or cached.
"""

from __future__ import annotations

import struct
from typing import TypeAlias

import xxhash

__all__ = [
    "MAX_KEY_GROUPS",
    "SPARK_XXHASH64_SEED",
    "Key",
    "KeyGroups",
    "check_max_key_groups",
    "key_group_hash",
]

SPARK_XXHASH64_SEED = 42
"""Seed of Spark SQL's ``xxhash64`` function (``XxHash64`` expression)."""

MAX_KEY_GROUPS = 32768
"""The largest ``max_key_groups`` (Flink's bound): every key group is an object space, a
catalog row per write and a slot in each restore, so far more key groups than tasks only
costs; and Spark computes key groups as ``int``."""

Key: TypeAlias = "str | int | bytes | bool | tuple[Key, ...] | None"
"""A key that :func:`key_group_hash` accepts; tuples (multi-column keys) may nest."""

_U64 = 1 << 64
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1
_pack_long = struct.Struct("<q").pack
_INT_TRUE = struct.pack("<i", 1)
_INT_FALSE = struct.pack("<i", 0)
_xxh64 = xxhash.xxh64_intdigest

_SUPPORTED = "str, int (signed 64-bit), bytes, bool, None, or a tuple of those"
# Spark keys are columns and structs of columns; far deeper nesting is a bug, not a key.
_MAX_KEY_DEPTH = 32


def _hash_unsigned(key: object, seed: int, depth: int = 0) -> int:
    """Spark's ``XxHash64`` of one value with ``seed``, as an unsigned 64-bit int.

    ``seed`` is unsigned (0 .. 2**64 - 1), as the ``xxhash`` package expects.  Cost: one
    xxh64 over the encoded bytes (O(len) for ``str``/``bytes``), one per field for a tuple.
    """
    # isinstance chain, most common key types first; bool before int (bool is an int).
    # Subclasses (IntEnum, str enums, NamedTuple, ...) hash like their base type.
    if isinstance(key, str):
        try:
            return _xxh64(key.encode("utf-8"), seed)
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"str key {key!r} is not valid UTF-8 (it holds a lone surrogate at "
                f"{exc.start}) and cannot be hashed as Spark hashes strings"
            ) from exc
    if isinstance(key, bool):
        return _xxh64(_INT_TRUE if key else _INT_FALSE, seed)
    if isinstance(key, int):
        return _xxh64(_encode_long(key), seed)
    if isinstance(key, bytes):
        return _xxh64(key, seed)
    if key is None:
        return seed
    if isinstance(key, tuple):
        if depth >= _MAX_KEY_DEPTH:
            raise ValueError(
                f"key tuples nest more than {_MAX_KEY_DEPTH} levels deep; a key is a value "
                "or a tuple of key columns"
            )
        for field in key:
            seed = _hash_unsigned(field, seed, depth + 1)
        return seed
    raise TypeError(
        f"unsupported key type {type(key).__qualname__!r} for key_group_hash; "
        f"supported key types are {_SUPPORTED}"
    )


def _encode_long(value: int) -> bytes:
    """``value`` as Spark's ``bigint``: 8 bytes little-endian, signed; TypeError if it overflows."""
    if not _I64_MIN <= value <= _I64_MAX:
        raise TypeError(
            f"int key {value} is outside the signed 64-bit range (Spark bigint) and cannot be "
            f"hashed; supported key types are {_SUPPORTED}"
        )
    return _pack_long(value)


def key_group_hash(key: Key) -> int:
    """Stable signed 64-bit hash of ``key``, equal bit for bit to Spark SQL's ``xxhash64``.

    ``key_group_hash(k)`` is ``xxhash64(k)`` in Spark SQL for a single-column key and
    ``xxhash64(c1, c2, ...)`` for a tuple ``(c1, c2, ...)``: seed 42, each field's hash (as an
    unsigned 64-bit number) is the seed of the next, null fields are skipped.  See the module
    docstring for the encoding of each type and the Spark column type it corresponds to.

    Independent of ``PYTHONHASHSEED``, the process and the platform; never uses ``hash()``.

    Cost: O(size of the encoded key), one xxh64 call per non-null field.

    Raises:
        TypeError: for a float, an int outside the signed 64-bit range, or any other type.
        ValueError: for a ``str`` with lone surrogates (not valid UTF-8; Spark strings
            cannot hold them).
    """
    h = _hash_unsigned(key, SPARK_XXHASH64_SEED)
    return h - _U64 if h > _I64_MAX else h


def check_max_key_groups(value: object) -> int:
    """``value`` if it is a valid ``max_key_groups`` (an int in 1..:data:`MAX_KEY_GROUPS`),
    else ValueError naming it and the bound."""
    if type(value) is not int or not 1 <= value <= MAX_KEY_GROUPS:
        raise ValueError(
            f"max_key_groups must be an int in 1..{MAX_KEY_GROUPS} (MAX_KEY_GROUPS), got {value!r}"
        )
    return value


class KeyGroups:
    """A fixed key space of ``max_key_groups`` key groups and its assignment to instances.

    Immutable, hashable, comparable by ``max_key_groups`` and picklable.  Every method is O(1)
    except :meth:`ranges` (O(parallelism)) and the key hashing in :meth:`key_group`.
    """

    __slots__ = ("_max_key_groups",)

    def __init__(self, max_key_groups: int) -> None:
        """Create the key space; ``max_key_groups`` must be an int in 1..:data:`MAX_KEY_GROUPS`
        (else ValueError)."""
        self._max_key_groups: int = check_max_key_groups(max_key_groups)

    @property
    def max_key_groups(self) -> int:
        """Number of key groups; fixed for the job, and the upper bound of the parallelism."""
        return self._max_key_groups

    # -- key -> key group ---------------------------------------------------------------

    def key_group(self, key: Key) -> int:
        """Key group of ``key``: ``pmod(xxhash64(key), max_key_groups)`` as in Spark SQL.

        Python's ``%`` with a positive divisor is exactly Spark's ``pmod`` on the signed hash.
        Cost: one :func:`key_group_hash`.
        """
        return key_group_hash(key) % self._max_key_groups

    # -- key group -> instance ----------------------------------------------------------

    def _split(self, parallelism: int) -> tuple[int, int]:
        """Validate ``parallelism`` and return ``(per, overflow)``."""
        if type(parallelism) is not int or not 1 <= parallelism <= self._max_key_groups:
            raise ValueError(
                f"parallelism must be an int in 1..max_key_groups, got parallelism="
                f"{parallelism!r} with max_key_groups={self._max_key_groups} "
                f"(the key space is the upper bound of the parallelism)"
            )
        per = self._max_key_groups // parallelism
        return per, self._max_key_groups - per * parallelism

    def ranges(self, parallelism: int) -> list[range]:
        """The key-group ranges of all instances, in instance order.

        Contiguous, disjoint and covering ``range(max_key_groups)``; the first
        ``max_key_groups % parallelism`` instances own one key group more than the others.
        Cost: O(parallelism).
        """
        per, overflow = self._split(parallelism)
        out: list[range] = []
        start = 0
        for instance in range(parallelism):
            stop = start + (per + 1 if instance < overflow else per)
            out.append(range(start, stop))
            start = stop
        return out

    def range_of(self, instance: int, parallelism: int) -> range:
        """The key-group range owned by ``instance`` (0-based) at ``parallelism``.  O(1).

        Raises:
            ValueError: bad parallelism.
            IndexError: ``instance`` not in ``0 .. parallelism - 1``.
        """
        per, overflow = self._split(parallelism)
        if type(instance) is not int or not 0 <= instance < parallelism:
            raise IndexError(
                f"instance index {instance!r} out of range 0..{parallelism - 1} "
                f"for parallelism={parallelism}"
            )
        if instance < overflow:
            first = instance * (per + 1)
            return range(first, first + per + 1)
        first = overflow * (per + 1) + (instance - overflow) * per
        return range(first, first + per)

    def instance_of(self, key_group: int, parallelism: int) -> int:
        """The instance that owns ``key_group`` at ``parallelism``.  O(1).

        Raises:
            ValueError: bad parallelism, or ``key_group`` not in ``0 .. max_key_groups - 1``.
        """
        per, overflow = self._split(parallelism)
        if type(key_group) is not int or not 0 <= key_group < self._max_key_groups:
            raise ValueError(
                f"key group {key_group!r} out of range 0..{self._max_key_groups - 1} "
                f"(max_key_groups={self._max_key_groups})"
            )
        first_non_overflow = overflow * (per + 1)
        if key_group < first_non_overflow:
            return key_group // (per + 1)
        return overflow + (key_group - first_non_overflow) // per

    def instance_of_key(self, key: Key, parallelism: int) -> int:
        """The instance that owns ``key`` at ``parallelism``.  Cost: one hash plus O(1)."""
        return self.instance_of(self.key_group(key), parallelism)

    # -- value semantics ----------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KeyGroups):
            return NotImplemented
        return self._max_key_groups == other._max_key_groups

    def __hash__(self) -> int:
        return hash((KeyGroups, self._max_key_groups))

    def __repr__(self) -> str:
        return f"KeyGroups(max_key_groups={self._max_key_groups})"

    def __reduce__(self) -> tuple[type[KeyGroups], tuple[int]]:
        # Pickle through the constructor so an unpickled instance is validated like a new one.
        return (KeyGroups, (self._max_key_groups,))

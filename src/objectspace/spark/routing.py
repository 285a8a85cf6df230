"""Key-group routing as Spark SQL: each row's key group and instance computed in the JVM as
plain column expressions, so rows reach their instance's task without a Python pass.

:func:`spark_key_group_expr` is ``pmod(xxhash64(key columns), max_key_groups)``, equal bit
for bit to :func:`objectspace.key_group_hash` modulo ``max_key_groups`` for the column types
listed in :mod:`objectspace.keygroups`; :func:`spark_instance_expr` is
:meth:`objectspace.KeyGroups.instance_of` as a ``CASE WHEN``. The same routing in Python
(for an input in one partition, and for ``simulate``) is
:func:`objectspace.engine.route_rows`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from objectspace.engine import INSTANCE_COLUMN, KEY_GROUP_COLUMN
from objectspace.keygroups import KeyGroups, check_max_key_groups, key_group_hash

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

__all__ = [
    "DUE_MARK",
    "due_marker_rows",
    "hashes_alike",
    "quote",
    "route_table",
    "spark_instance_expr",
    "spark_key_group_expr",
    "with_routing",
]


def quote(name: str) -> str:
    """``name`` as a Spark SQL backtick-quoted identifier (a backtick is escaped by doubling)."""
    return "`" + name.replace("`", "``") + "`"


def spark_key_group_expr(columns: list[str], max_key_groups: int) -> str:
    """Spark SQL expression computing a row's key group from its key columns.

    ``pmod(xxhash64(`c1`, `c2`, ...), max_key_groups)``; equal to :meth:`KeyGroups.key_group`
    of the tuple of column values (or of the single value for one column), provided the columns
    have the Spark types listed in :mod:`objectspace.keygroups` (Python ``int`` keys need
    ``bigint``). Column names are quoted with backticks, so any name is safe.
    """
    if not columns:
        raise ValueError("spark_key_group_expr needs at least one key column")
    check_max_key_groups(max_key_groups)
    cols = ", ".join(quote(c) for c in columns)
    return f"pmod(xxhash64({cols}), {max_key_groups})"


def spark_instance_expr(key_group_col: str, max_key_groups: int, parallelism: int) -> str:
    """Spark SQL expression mapping an integer key-group column to its instance.

    The same formula as :meth:`KeyGroups.instance_of`, as a ``CASE WHEN`` using Spark's integer
    division ``div``; for example ``spark_instance_expr("kg", 10, 4)`` is::

        CASE WHEN `kg` < 6 THEN `kg` div 3 ELSE 2 + ((`kg` - 6) div 2) END
    """
    KeyGroups(max_key_groups).range_of(0, parallelism)  # checks both (ValueError)
    per = max_key_groups // parallelism
    overflow = max_key_groups - per * parallelism
    kg = quote(key_group_col)
    first_non_overflow = overflow * (per + 1)
    return (
        f"CASE WHEN {kg} < {first_non_overflow} THEN {kg} div {per + 1} "
        f"ELSE {overflow} + (({kg} - {first_non_overflow}) div {per}) END"
    )


def hashes_alike(dtype: Any) -> bool:
    """Whether a key column of Spark type ``dtype`` reaches Python as a value that
    :func:`~objectspace.key_group_hash` hashes exactly as :func:`with_routing`'s
    ``xxhash64`` expression hashes the column (integers are cast to BIGINT there): strings
    of the default collation, integers, binary and booleans."""
    from pyspark.sql import types as T

    if isinstance(dtype, T.StringType):
        return bool(dtype == T.StringType())
    return isinstance(
        dtype, T.ByteType | T.ShortType | T.IntegerType | T.LongType | T.BinaryType | T.BooleanType
    )


def with_routing(
    df: DataFrame, key_columns: Sequence[str], max_key_groups: int, parallelism: int
) -> DataFrame:
    """``df`` with each row's key group and instance (the reserved columns), computed in
    the JVM."""
    from pyspark.sql import types as T

    # Integer keys hash as 8-byte longs, exactly as objectspace.key_group_hash does.
    key_exprs = []
    for name in key_columns:
        dtype = df.schema[name].dataType
        cast = isinstance(dtype, T.ByteType | T.ShortType | T.IntegerType | T.LongType)
        key_exprs.append(f"CAST({quote(name)} AS BIGINT)" if cast else quote(name))
    # Both helper columns in one projection (each DataFrame call is a JVM round trip per
    # batch): the instance expression reads the key group's expression.
    kg_sql = f"CAST(pmod(xxhash64({', '.join(key_exprs)}), {max_key_groups}) AS INT)"
    instance_sql = spark_instance_expr(KEY_GROUP_COLUMN, max_key_groups, parallelism).replace(
        quote(KEY_GROUP_COLUMN), f"({kg_sql})"
    )
    return df.selectExpr(
        "*",
        f"{kg_sql} AS {quote(KEY_GROUP_COLUMN)}",
        f"CAST({instance_sql} AS INT) AS {quote(INSTANCE_COLUMN)}",
    )


DUE_MARK = -1
"""The key group of a marker row: an instance with timers or TTL'd entries due but no rows
gets one such row, so that its task runs; the task drops it."""


def due_marker_rows(spark: Any, routed: DataFrame, instances: Sequence[int]) -> DataFrame:
    """``routed`` with one marker row per instance of ``instances`` (key group
    :data:`DUE_MARK`, every other column null)."""
    from pyspark.sql import types as T

    nullable = T.StructType([T.StructField(f.name, f.dataType, True) for f in routed.schema.fields])
    marks = [
        tuple(
            DUE_MARK if f.name == KEY_GROUP_COLUMN else i if f.name == INSTANCE_COLUMN else None
            for f in nullable.fields
        )
        for i in sorted(instances)
    ]
    return routed.unionByName(spark.createDataFrame(marks, nullable))


# XXH64's primes, as Spark's XxHash64 uses them.
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5
_U64 = (1 << 64) - 1


def long_key_groups(values: pa.Array, max_key_groups: int) -> pa.Array:
    """The key group of each of ``values`` (an Arrow array of integers, nulls allowed, each
    taken as a signed 64-bit long, as Spark casts integer key columns to ``bigint``), as
    an int32 array: ``key_group_hash(value) % max_key_groups`` for every value at once,
    Spark's ``XxHash64.hashLong`` (seed 42) in Arrow's wrapping unsigned arithmetic."""
    import pyarrow as pa
    import pyarrow.compute as pc

    u64 = pa.uint64()
    x = pc.cast(pc.cast(values, pa.int64()), u64, safe=False)  # the long's bits

    def c(n: int) -> pa.Scalar:
        return pa.scalar(n & _U64, u64)

    def rotl(v: pa.Array, r: int) -> pa.Array:
        return pc.bit_wise_or(pc.shift_left(v, c(r)), pc.shift_right(v, c(64 - r)))

    k1 = pc.multiply(rotl(pc.multiply(x, c(_P2)), 31), c(_P1))
    h = pc.bit_wise_xor(k1, c(42 + _P5 + 8))
    h = pc.add(pc.multiply(rotl(h, 27), c(_P1)), c(_P4))
    h = pc.multiply(pc.bit_wise_xor(h, pc.shift_right(h, c(33))), c(_P2))
    h = pc.multiply(pc.bit_wise_xor(h, pc.shift_right(h, c(29))), c(_P3))
    h = pc.bit_wise_xor(h, pc.shift_right(h, c(32)))
    # The signed hash's floor modulo: the unsigned one, less 2**64's for a negative hash.
    m = max_key_groups
    r = pc.modulo(h, c(m))
    negative = pc.greater_equal(h, c(1 << 63))
    r = pc.if_else(negative, pc.modulo(pc.add(r, c(m - (1 << 64) % m)), c(m)), r)
    r = pc.fill_null(r, c(key_group_hash(None) % m))  # a null key: the seed itself
    return pc.cast(r, pa.int32())


def route_table(
    batches: Iterable[pa.RecordBatch],
    key_column: str,
    key_groups: KeyGroups,
    parallelism: int,
    instances: Iterable[int] = (),
) -> dict[int, pa.Table]:
    """The rows of ``batches`` by the instance that owns their key at ``parallelism``, each
    with its key group in :data:`~objectspace.engine.KEY_GROUP_COLUMN`, as Arrow tables (in
    their order): :func:`objectspace.engine.route_rows` without a Python pass per row. Each
    distinct key is hashed once (:func:`~objectspace.keygroups.key_group_hash`, on the
    value Arrow gives Python: for the key types :func:`hashes_alike` accepts, one value per
    distinct Arrow value, null included). ``instances`` are present even without rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    chunks = list(batches)
    by_instance: dict[int, pa.Table] = {}
    if chunks:
        table = pa.Table.from_batches(chunks)
        if table.num_rows:
            max_kg = key_groups.max_key_groups
            keys = table.column(key_column)
            distinct = pc.unique(keys)
            if pa.types.is_integer(distinct.type) and distinct.type != pa.uint64():
                groups = long_key_groups(distinct, max_kg)
            else:
                groups = pa.array(
                    [key_group_hash(value) % max_kg for value in distinct.to_pylist()], pa.int32()
                )
            row_groups = groups.take(pc.index_in(keys, value_set=distinct))
            owner = pa.array(
                [key_groups.instance_of(g, parallelism) for g in range(max_kg)], pa.int32()
            )
            row_instances = owner.take(row_groups)
            table = table.append_column(KEY_GROUP_COLUMN, row_groups)
            for index in pc.unique(row_instances).to_pylist():
                by_instance[index] = table.filter(pc.equal(row_instances, index))
        empty = table.schema.empty_table().append_column(KEY_GROUP_COLUMN, pa.array([], pa.int32()))
    else:
        empty = None
    for index in instances:
        if index not in by_instance:
            by_instance[index] = empty if empty is not None else pa.table({})
    return by_instance

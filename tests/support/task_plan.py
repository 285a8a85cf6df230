"""One task's plan as a driver makes it, as lines of a script for a process of its own (an
executor's task without a JVM): ``storage``, ``job``, ``plan`` and the output ``schema``
of an aggregate by ``k`` ordered by ``ts``, on the storage URL ``sys.argv[1]``."""

TASK_PLAN = r"""
import sys
import pyarrow as pa
from objectspace import operators as ops
from objectspace.checkpoint import open_storage
from objectspace.engine import BatchDriver

storage = open_storage(sys.argv[1])
job = storage.job("j")
operator = job.operator("op", 8)
job.fence()
driver = BatchDriver(operator, ops.aggregate("sum"), key_columns=("k",), order_columns=("ts",))
plan = driver.begin(0, 1)
schema = pa.schema([("k", pa.int64()), ("sum", pa.float64()), ("__os_receipt", pa.binary())])
"""

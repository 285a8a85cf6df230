"""Layer 3: versioned checkpoints of many object spaces: jobs, operators, key groups, instances.

A job has operators; each operator's state is split into ``max_key_groups`` key groups,
one :class:`~objectspace.ObjectSpace` each. An :class:`Instance` owns the contiguous range
of key groups that its index gets at a given parallelism, restores them lazily as of a
checkpoint, and saves their edits as pending writes; :meth:`Job.commit` makes a checkpoint
visible for every operator of the job at once::

    storage = objectspace.open_storage("sqlite:///state.db")
    job = storage.job("clicks")
    op = job.operator("sessions", max_key_groups=128)
    instance = op.instance(index=0, parallelism=4)
    instance.space_for_key("user-42").create_list("buffer").append(1.5)
    receipt = instance.save(checkpoint_id=1)      # pending: invisible to readers
    job.commit(1, [receipt])                      # visible, atomically
    instance.on_saved()

Because state is stored by key group, not by instance, the job can restart at any
parallelism: each new instance restores exactly the key groups of its new range.

Modules: ``jobs`` (:class:`Storage`, :class:`Job`, :func:`open_storage`), ``operator``
(:class:`Operator`), ``instance`` (:class:`Instance`), ``compaction`` (:class:`CompactionPolicy`
and the chains it judges), ``receipts`` (:class:`Receipt`, :class:`SaveStats`,
:class:`CompactionStats`).
"""

from __future__ import annotations

from objectspace.checkpoint._checks import EMPTY
from objectspace.checkpoint.compaction import CompactionPolicy
from objectspace.checkpoint.instance import Instance, PendingSave
from objectspace.checkpoint.jobs import Job, Storage, open_storage
from objectspace.checkpoint.operator import Operator
from objectspace.checkpoint.receipts import CompactionStats, Receipt, SaveStats
from objectspace.storage import open_backend

__all__ = [
    "EMPTY",
    "CompactionPolicy",
    "CompactionStats",
    "Instance",
    "Job",
    "Operator",
    "PendingSave",
    "Receipt",
    "SaveStats",
    "Storage",
    "open_backend",
    "open_storage",
]

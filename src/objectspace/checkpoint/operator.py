"""An operator of a job: its metadata, compaction policy and instances."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from objectspace.checkpoint._checks import _check_count
from objectspace.checkpoint.compaction import CompactionPolicy
from objectspace.checkpoint.instance import Instance
from objectspace.checkpoint.receipts import CompactionStats
from objectspace.keygroups import KeyGroups
from objectspace.serialization import Serializer
from objectspace.storage.contract import OperatorInfo

if TYPE_CHECKING:
    from objectspace.checkpoint.jobs import Job

__all__ = ["Operator"]

logger = logging.getLogger(__name__)


class Operator:
    """One stateful operator of a job: its metadata and its instances."""

    def __init__(
        self,
        job: Job,
        info: OperatorInfo,
        compaction: CompactionPolicy,
        serializer: Serializer | None,
    ) -> None:
        self.job = job
        self.name = info.name
        self.info = info
        self.key_groups = KeyGroups(info.max_key_groups)
        self.compaction = compaction
        self.serializer = serializer

    @property
    def max_key_groups(self) -> int:
        return self.info.max_key_groups

    @property
    def schema_version(self) -> int:
        return self.info.schema_version

    @property
    def parallelism(self) -> int | None:
        """The parallelism of the last committed checkpoint (``None`` before the first)."""
        info = self.job.backend.operator_info(self.job.name, self.name)
        return None if info is None else info.parallelism

    def compact(self, min_chain_length: int = 1) -> CompactionStats:
        """Rewrite each key group whose chain as of the last checkpoint has at least
        ``min_chain_length`` differential writes as one full write, committed in one catalog
        transaction per key group. Older writes stay until :meth:`Job.retain` drops them."""
        _check_count("min_chain_length", min_chain_length, 0)
        job = self.job
        stats = CompactionStats()
        last = job.last_checkpoint()
        if last is None:
            return stats
        backend = job.backend
        chains = backend.chains(job.name, self.name, range(self.max_key_groups), last)
        for key_group, writes in sorted(chains.items()):
            if len(writes) - 1 < min_chain_length:
                continue
            # Chain and rows from one snapshot: a concurrent retention cannot hand us a
            # chain whose writes it has just removed.
            loaded = backend.load(job.name, self.name, range(key_group, key_group + 1), last)
            if key_group not in loaded:
                continue
            writes, tables = loaded[key_group]
            info = backend.write_compacted(job.name, self.name, key_group, last, tables)
            stats.key_groups += 1
            stats.bytes_read += sum(w.bytes for w in writes)
            stats.bytes_written += info.bytes
        logger.info(
            "job %r operator %r: compaction as of checkpoint %s rewrote %s key groups "
            "(%s bytes read, %s bytes written)",
            job.name,
            self.name,
            last,
            stats.key_groups,
            stats.bytes_read,
            stats.bytes_written,
        )
        return stats

    def instance(self, index: int, parallelism: int, checkpoint: int | None = None) -> Instance:
        """Instance ``index`` of ``parallelism``, restoring lazily as of ``checkpoint``
        (default: the last committed one; :data:`EMPTY`: no state at all)."""
        return Instance(self, index, parallelism, checkpoint)

    def __repr__(self) -> str:
        return f"Operator({self.job.name!r}/{self.name!r}, max_key_groups={self.max_key_groups})"

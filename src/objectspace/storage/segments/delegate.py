"""The operations of the :class:`~objectspace.storage.contract.Backend` contract that segment
storage leaves to its catalog as they are: jobs, operators, marks, fencing, checkpoints and
retention live in the catalog alone (segment files hold only blocks).
"""

from __future__ import annotations

from collections.abc import Sequence

from objectspace.storage.contract import (
    Backend,
    CheckpointInfo,
    OperatorInfo,
    RetentionStats,
    WriteSummary,
)
from objectspace.storage.sql.catalog import SegmentCatalog

__all__ = ["CatalogDelegate"]


class CatalogDelegate(Backend):
    """A backend whose catalog records everything but the blocks (:attr:`catalog`)."""

    catalog: SegmentCatalog

    def close(self) -> None:
        self.catalog.close()

    def ensure_operator(
        self, job: str, operator: str, max_key_groups: int | None, schema_version: int | None
    ) -> OperatorInfo:
        return self.catalog.ensure_operator(job, operator, max_key_groups, schema_version)

    def operator_info(self, job: str, operator: str) -> OperatorInfo | None:
        return self.catalog.operator_info(job, operator)

    def jobs(self) -> list[str]:
        return self.catalog.jobs()

    def operators(self, job: str) -> list[OperatorInfo]:
        return self.catalog.operators(job)

    def fence(self, job: str) -> int:
        return self.catalog.fence(job)

    def epoch(self, job: str) -> int:
        return self.catalog.epoch(job)

    def writes_committed(self, write_ids: Sequence[int]) -> bool:
        return self.catalog.writes_committed(write_ids)

    def read_mark(self, job: str, name: str) -> str | None:
        return self.catalog.read_mark(job, name)

    def write_mark(self, job: str, name: str, value: str) -> None:
        self.catalog.write_mark(job, name, value)

    def write_summary(self, job: str) -> list[WriteSummary]:
        return self.catalog.write_summary(job)

    def last_checkpoint(self, job: str) -> int | None:
        return self.catalog.last_checkpoint(job)

    def checkpoints(self, job: str) -> list[CheckpointInfo]:
        return self.catalog.checkpoints(job)

    def retain(self, job: str, keep_last: int) -> RetentionStats:
        return self.catalog.retain(job, keep_last)

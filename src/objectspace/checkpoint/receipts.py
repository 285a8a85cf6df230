"""What a save returns (the receipt a commit needs) and the statistics of saves and compactions."""

from __future__ import annotations

from dataclasses import dataclass

from objectspace.storage.contract import StagedWrite

__all__ = ["CompactionStats", "Receipt", "SaveStats"]


@dataclass(frozen=True)
class Receipt:
    """What an instance wrote for a checkpoint: small, picklable, handed to :meth:`Job.commit`."""

    job: str
    operator: str
    index: int
    parallelism: int
    checkpoint_id: int
    base: int | None
    attempt: str
    writes: tuple[tuple[int, int], ...]  # (key group, write id)
    bytes_written: int
    rows_written: int
    # writes encoded but not stored: the commit stores them (Instance.save(stage_bytes=))
    staged: tuple[StagedWrite, ...] = ()


@dataclass
class CompactionStats:
    """What an offline compaction rewrote."""

    key_groups: int = 0
    bytes_read: int = 0
    bytes_written: int = 0

    def __iadd__(self, other: CompactionStats) -> CompactionStats:
        self.key_groups += other.key_groups
        self.bytes_read += other.bytes_read
        self.bytes_written += other.bytes_written
        return self


@dataclass
class SaveStats:
    """What an instance's last save wrote."""

    key_groups: int = 0
    full: int = 0
    bytes_written: int = 0
    rows_written: int = 0

"""When a key group's chain of differential writes is compacted into a full write."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from objectspace.storage.contract import WriteInfo

if TYPE_CHECKING:
    from objectspace.space import ObjectSpace

__all__ = ["CompactionPolicy"]


@dataclass(frozen=True)
class CompactionPolicy:
    """When a key group's differential chain is rewritten as a full version.

    A key group is compacted when the bytes of its differential writes since its last full
    version exceed both ``max_chain_ratio`` times the bytes of that full version (its live
    state when it was last measured) and ``min_chain_bytes``, or when the chain reaches
    ``max_chain_length`` writes. So a restore reads at most ``1 + max_chain_ratio`` times
    the state as last measured (or ``min_chain_bytes`` more, a cheap read), and compaction
    adds at most about ``1 / max_chain_ratio`` to the bytes written — where a rewrite every
    K checkpoints would rewrite large, slowly changing state again and again. The floor
    keeps a small key group from being rewritten at every few checkpoints while it grows.

    ``full_when_smaller``: a key group whose chain is at least half ``min_chain_bytes``
    (near its compaction) and whose whole state would take no more rows than its changes
    (after a clear, or when most of it was deleted) is written as a full version instead:
    it costs about what the differential write costs (as many rows; an object's kind row
    instead of a table delete), and the chain starts again from nearly nothing, where the
    ratio would soon rewrite state that has grown again. The
    rows are estimated from the edit pages (:meth:`~objectspace.ObjectSpace.change_rows`,
    :meth:`~objectspace.ObjectSpace.whole_rows`), at a cost bounded by the changes.
    """

    max_chain_ratio: float = 3.0
    max_chain_length: int = 64
    min_chain_bytes: int = 64 * 1024
    full_when_smaller: bool = True

    def __post_init__(self) -> None:
        if not self.max_chain_ratio > 0:
            raise ValueError(f"max_chain_ratio must be > 0, not {self.max_chain_ratio!r}")
        if self.max_chain_length < 1:
            raise ValueError(f"max_chain_length must be >= 1, not {self.max_chain_length!r}")
        if self.min_chain_bytes < 0:
            raise ValueError(f"min_chain_bytes must be >= 0, not {self.min_chain_bytes!r}")

    def full_instead(self, chain: _Chain, space: ObjectSpace) -> bool:
        """Whether a key group with a chain, due a differential write, is written full
        instead because its whole state is no larger than its changes (see
        ``full_when_smaller``)."""
        if (
            not self.full_when_smaller
            or 2 * chain.diff_bytes < self.min_chain_bytes
            or space.residents is not None  # its size is not known without reading what it keeps
        ):
            return False
        changes = space.change_rows()
        # A full write holds at least two rows per object: skip the count when it cannot win.
        return 2 * len(space) <= changes and space.whole_rows(changes) <= changes

    def needs_full(self, chain: _Chain) -> bool:
        if chain.full_bytes is None:
            return True
        return chain.length + 1 > self.max_chain_length or (
            chain.diff_bytes > self.max_chain_ratio * max(chain.full_bytes, 1)
            and chain.diff_bytes > self.min_chain_bytes
        )


@dataclass
class _Chain:
    """What a key group's restore chain costs: its full version and the writes after it."""

    full_bytes: int | None = None
    diff_bytes: int = 0
    length: int = 0

    @classmethod
    def of(cls, writes: Sequence[WriteInfo]) -> _Chain:
        if not writes:
            return cls()
        return cls(writes[0].bytes, sum(w.bytes for w in writes[1:]), len(writes) - 1)

    def after(self, write: WriteInfo) -> _Chain:
        if write.full:
            return _Chain(write.bytes, 0, 0)
        return _Chain(self.full_bytes, self.diff_bytes + write.bytes, self.length + 1)

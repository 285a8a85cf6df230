"""The catalog interface that segment storage needs on top of the :class:`Backend` contract.

Segment files keep their blocks in files and their references in a catalog: the catalog is
a versioned backend that also records segment files (reserve, register, read, two-phase
garbage collection). :class:`~objectspace.storage.sql.SQLBackend` implements it for SQLite
and PostgreSQL; the segment backend uses a catalog only through this interface.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence

from objectspace.storage.blocks import Block, Dictionary, block_digest, encode_block
from objectspace.storage.contract import Backend, PendingPart, StagedWrite, WriteInfo

__all__ = ["SegmentCatalog", "SegmentEntry", "SegmentPlacement", "stage_parts"]

SegmentEntry = tuple[int, bool, int, int, int, int, int]
"""A key group's block in a segment file: (key group, full, bytes, rows, offset, length,
digest: the block's checksum)."""


SegmentPlacement = tuple[tuple[int, str], int, Sequence[tuple[int, int]]]
"""Where a commit's staged writes of one operator were published: the reserved segment's
(id, path), the file's size, and each write's (offset, length) in the order they were
staged."""


class SegmentCatalog(Backend):
    """A versioned backend that also records the segment files of a segment storage."""

    url: str
    fault_hook: Callable[[str], None] | None

    @abstractmethod
    def reserve_segment(self, path: str) -> int:
        """Record a segment path before its file is written, so no file escapes the GC;
        returns the segment's id."""

    @abstractmethod
    def commit(
        self,
        job: str,
        checkpoint_id: int,
        base: int | None,
        write_ids: Sequence[int],
        parallelism: Mapping[str, int],
        epoch: int = 0,
        staged: Sequence[StagedWrite] = (),
        *,
        segments: Mapping[str, SegmentPlacement] | None = None,
    ) -> bool:
        """:meth:`Backend.commit`; ``segments``: per operator, the reserved segment file its
        staged writes' blocks were published in (recorded there, not in the catalog)."""

    @abstractmethod
    def table_names(self, ids: Sequence[int]) -> dict[int, str]:
        """Names of interned table ids (ids never change once committed: cached)."""

    @abstractmethod
    def register_segment(
        self,
        job: str,
        operator: str,
        version: int,
        attempt: str,
        segment: tuple[int, str],
        size: int,
        entries: Sequence[SegmentEntry],
        *,
        committed: bool = False,
        parents: Sequence[int | None] | None = None,
    ) -> list[WriteInfo]:
        """Record a published segment's blocks as writes (pending unless ``committed``);
        ``segment`` is the (id, path) :meth:`reserve_segment` gave; ``parents``, per entry,
        the write its edits were made on top of (see :class:`PendingPart`)."""

    @abstractmethod
    def read_blocks(self, writes: Sequence[WriteInfo], where: str = "") -> list[Block]:
        """Each write's block (its bytes when the catalog holds them, else ``None``) and the
        catalog's record of it (digest, row count), in order."""

    @abstractmethod
    def load_blocks(
        self, job: str, operator: str, key_groups: range, as_of: int
    ) -> dict[int, tuple[list[WriteInfo], list[Block]]]:
        """Chains of ``key_groups`` as of ``as_of`` and their blocks (as
        :meth:`read_blocks`), from one snapshot of the catalog, checked for gaps."""

    @abstractmethod
    def operator_dictionary(self, job: str, operator: str) -> Dictionary | None:
        """The trained dictionary of the operator's blocks, if it has one yet."""

    @abstractmethod
    def offer_dictionary(self, job: str, operator: str, payloads: Sequence[bytes]) -> None:
        """Sample block payloads encoded without a trained dictionary; once there are
        enough, train the operator's dictionary and store it (unless one is stored)."""

    @abstractmethod
    def dictionary(self, dict_id: int) -> bytes | None:
        """The bytes of trained dictionary ``dict_id`` (``None``: not in the catalog)."""

    @abstractmethod
    def stamp_unreferenced(self, now: float | None = None) -> int:
        """GC phase one: stamp segment files that no write references any more."""

    @abstractmethod
    def collectable_segments(self, grace_seconds: float, now: float | None = None) -> list[str]:
        """GC phase two: segments stamped more than ``grace_seconds`` ago and still
        unreferenced."""

    @abstractmethod
    def forget_segments(self, paths: Sequence[str]) -> list[str]:
        """Move collectable segments from the catalog to the GC's trash, unless a write
        references one again (that file stays); the paths forgotten."""

    @abstractmethod
    def trashed_segments(self) -> list[tuple[str, int]]:
        """Segments forgotten by a GC pass whose file may not be deleted yet: (path, bytes)."""

    @abstractmethod
    def segment_deleted(self, path: str) -> None:
        """The GC deleted the file of a forgotten segment: drop it from the trash."""

    @abstractmethod
    def relative_segment_paths(self, relative: Callable[[str], str]) -> int:
        """Rewrite segment paths stored by older versions (absolute) with ``relative``, once
        per catalog (marked in ``ckpt_meta``); returns how many paths changed."""

    @abstractmethod
    def segments_of(self, write_ids: Sequence[int]) -> set[str]:
        """Paths of the segment files that hold the blocks of ``write_ids`` (of those that
        exist)."""

    @abstractmethod
    def referenced_segments(self) -> set[str]:
        """Paths of segments that at least one write references."""

    @abstractmethod
    def segments(self) -> list[tuple[str, int, float | None]]:
        """Every known segment file: (path, bytes, stamped time or None)."""


def stage_parts(
    catalog: SegmentCatalog,
    job: str,
    operator: str,
    version: int,
    attempt: str,
    parts: Sequence[PendingPart],
    levels: tuple[int, int] = (3, 3),
) -> list[StagedWrite]:
    """:meth:`Backend.stage_pending` against ``catalog``'s trained dictionary, shared by SQL
    and segment storage: each part encoded as one block (zstd ``levels``: differential,
    full) that carries its table names, payloads offered for training."""
    if not parts:
        return []
    dictionary = catalog.operator_dictionary(job, operator)
    payloads: list[bytes] | None = [] if dictionary is None else None
    staged = []
    for part in parts:
        block, rows = encode_block(
            part.changes, part.full, levels[part.full], None, dictionary, payloads, compact=True
        )
        staged.append(
            StagedWrite(
                operator,
                part.key_group,
                version,
                attempt,
                part.full,
                block,
                rows,
                part.parent,
                block_digest(block),
            )
        )
    if payloads:
        catalog.offer_dictionary(job, operator, payloads)
    return staged

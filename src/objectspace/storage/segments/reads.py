"""A restore's reads of segment files: blocks coalesced into few ranged reads, fetched in
parallel.

A cold restore needs, per key group, the blocks of its chain: its newest full write and the
differential writes after it, each a range of a segment file, and an instance's save puts
the blocks of all its key groups side by side in one file per checkpoint. Read one block at
a time, a restore costs a request per key group per checkpoint of its chain, and on an
object store every request is a round trip. :func:`plan_reads` instead groups the blocks by
file, sorts them by offset and merges neighbours whose gap is at most
:attr:`ReadPolicy.gap_bytes` into one read of at most :attr:`ReadPolicy.max_read_bytes`
(a single larger block is still one read); :func:`fetch_reads` fetches the reads
:attr:`ReadPolicy.workers` at a time: through ``cat_ranges`` on an asynchronous filesystem
(s3fs, gcsfs: one event loop, no threads), through a bounded thread pool on the others
(local files, HDFS). So a restore costs about one request per segment file its chains
span, whatever the number of key groups.

The bytes are the same as reading each block alone: each block is cut out of its read and
verified as before (:func:`objectspace.storage.blocks.replay`: its checksum, the catalog's
digest and row count); the gap bytes between blocks are read and dropped, never decoded.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

__all__ = ["Read", "ReadPolicy", "fetch_reads", "plan_reads"]


@dataclass(frozen=True)
class ReadPolicy:
    """How a restore reads blocks from segment files.

    ``gap_bytes``: two blocks of one file at most this far apart are read together (the
    bytes between them are read and dropped; a negative value reads each block alone).
    ``max_read_bytes``: a read grows by further blocks only while it stays within this size
    (a block larger than it is read alone). ``workers``: how many reads are in flight at
    once (``1``: one after the other).
    """

    gap_bytes: int = 1 << 20
    max_read_bytes: int = 8 << 20
    workers: int = 8

    def __post_init__(self) -> None:
        if self.max_read_bytes < 1:
            raise ValueError(f"max_read_bytes must be >= 1, not {self.max_read_bytes!r}")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, not {self.workers!r}")

    @classmethod
    def per_block(cls) -> ReadPolicy:
        """One read per block, one at a time: what a restore did before reads were
        coalesced (for comparisons)."""
        return cls(gap_bytes=-1, workers=1)


@dataclass(frozen=True)
class Read:
    """One ranged read of a segment file: bytes ``start`` to ``end`` (exclusive) of
    ``path``, which hold the wanted blocks ``blocks`` (their indices in the list given to
    :func:`plan_reads`, in offset order)."""

    path: str
    start: int
    end: int
    blocks: tuple[int, ...]

    @property
    def size(self) -> int:
        """The bytes this read asks for."""
        return self.end - self.start


def plan_reads(wanted: Sequence[tuple[str, int, int]], policy: ReadPolicy) -> list[Read]:
    """The reads that fetch ``wanted`` blocks, each ``(path, offset, length)``: per file,
    in offset order, a block joins the read before it when the gap between them is at most
    ``policy.gap_bytes`` and the read stays within ``policy.max_read_bytes``. Every block
    is in exactly one read. Cost: O(b log b) for b blocks."""
    order = sorted(range(len(wanted)), key=lambda i: wanted[i])
    reads: list[Read] = []
    path: str | None = None
    start = end = 0
    members: list[int] = []
    for i in order:
        where, offset, length = wanted[i]
        stop = offset + length
        if (
            where == path
            and offset - end <= policy.gap_bytes
            and max(end, stop) - start <= policy.max_read_bytes
        ):
            end = max(end, stop)
            members.append(i)
            continue
        if path is not None:
            reads.append(Read(path, start, end, tuple(members)))
        path, start, end, members = where, offset, stop, [i]
    if path is not None:
        reads.append(Read(path, start, end, tuple(members)))
    return reads


def fetch_reads(fs: Any, reads: Sequence[Read], workers: int) -> list[bytes | Exception]:
    """The bytes of each read of ``fs`` (an fsspec filesystem), in order, or the exception
    that read raised (a file that is not there, a range the server refuses), so the caller
    can name the blocks it held. At most ``workers`` reads are in flight at once. The bytes
    of a read may be fewer than it asked for (a truncated file)."""
    if not reads:
        return []
    if workers > 1 and len(reads) > 1 and getattr(fs, "async_impl", False):
        results = fs.cat_ranges(
            [r.path for r in reads],
            [r.start for r in reads],
            [r.end for r in reads],
            batch_size=workers,
            on_error="return",
        )
        return [r if isinstance(r, Exception) else bytes(r) for r in results]

    def one(read: Read) -> bytes | Exception:
        try:
            return bytes(fs.cat_file(read.path, start=read.start, end=read.end))
        except Exception as exc:  # handed to the caller, which names the blocks
            return exc

    if workers == 1 or len(reads) == 1:
        return [one(r) for r in reads]
    with ThreadPoolExecutor(
        max_workers=min(workers, len(reads)), thread_name_prefix="objectspace-read"
    ) as pool:
        return list(pool.map(one, reads))

"""zstd compression of block payloads: the built-in dictionary, the operator's trained ones
and how they are trained (samples of an operator's payloads), the compressors (cached per
thread), and frames that code each byte plane of a payload's widest column as a zstd block
of its own.

A frame is stored without its magic number, checksum and dictionary id (the block's frame
has its own checksum, and the kind byte or the body names the dictionary).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

try:
    import xxhash
    import zstandard
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("checkpoint storage needs xxhash and zstandard") from exc

__all__ = [
    "DICTIONARY",
    "DICTIONARY_BYTES",
    "PLANE_BLOCK_ROWS",
    "SAMPLES_TO_TRAIN",
    "SAMPLE_BYTES_TO_TRAIN",
    "Dictionary",
    "sample",
]

# The built-in zstd dictionary: strings every block of an object space repeats (the tables'
# last components, msgpack headers of stored values). Small blocks compress against it
# instead of against nothing; changing it changes the format (a new kind byte).
DICTIONARY = (
    b"itemsmetadatalengthstateindexitemheadtailnextprevkeysvaluessizeorder"
    b"\x81\xa4kind\xa4List\x81\xa4kind\xa4Dict\x81\xa4kind\xa5Value\x81\xa4kind\xa3Set"
    b"\x81\xa4kind\xa5Queue\x81\xa4kind\xa5Stack\x81\xa4kind\xaaSortedDict"
    b"\xcb?\xe0\xcb?\xd0\xcb?\xc0\xcb@\x00\xcb@\x10"
)

_local = threading.local()


@dataclass(frozen=True)
class Dictionary:
    """A zstd dictionary trained on an operator's blocks, stored once in the catalog under
    ``id`` (blocks compressed with it name that id)."""

    id: int
    data: bytes
    key: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", xxhash.xxh64_intdigest(self.data))


def _strategy(level: int, lazy: bool) -> int:
    """zstd's match finder for ``level``; with ``lazy`` (full blocks, and frames of byte
    planes: :func:`_compress_planes`) at least the lazy one.

    Below it (levels 1 to 5), zstd codes a block's literals of 1 KiB or less with the
    previous block's Huffman table whenever that table is valid, without comparing it with
    a table of their own (``preferRepeat`` in ``ZSTD_compressLiterals``); a trained
    dictionary's table is valid from the frame's first block, so the top byte plane of a
    column of uniform floats would be coded with a table made for other bytes. The lazy
    strategy compares the two tables, in the same time, and also finds more of a full
    block's repeated structure (first writes, compactions). Small differential blocks of
    one zstd block keep the level's own strategy: there the lazy one saves little and
    costs time."""
    default = int(zstandard.ZstdCompressionParameters.from_level(level).strategy)
    return max(default, zstandard.STRATEGY_LAZY) if lazy else default


def _compressor(level: int, dictionary: Dictionary | None = None, lazy: bool = False) -> Any:
    cache = getattr(_local, "compressors", None)
    if cache is None:
        cache = _local.compressors = {}
    key = (level, None if dictionary is None else dictionary.key, lazy)
    compressor = cache.get(key)
    if compressor is None:
        if len(cache) > 64:
            cache.clear()
        compressor = cache[key] = zstandard.ZstdCompressor(
            dict_data=_dictionary() if dictionary is None else _zdict(dictionary.data),
            compression_params=zstandard.ZstdCompressionParameters.from_level(
                level,
                strategy=_strategy(level, lazy),
                format=zstandard.FORMAT_ZSTD1_MAGICLESS,
                write_checksum=0,
                write_dict_id=0,
                write_content_size=1,
            ),
        )
    return compressor


def _decompressor(dictionary: bytes | None = None) -> Any:
    cache = getattr(_local, "decompressors", None)
    if cache is None:
        cache = _local.decompressors = {}
    key = None if dictionary is None else xxhash.xxh64_intdigest(dictionary)
    decompressor = cache.get(key)
    if decompressor is None:
        if len(cache) > 64:
            cache.clear()
        decompressor = cache[key] = zstandard.ZstdDecompressor(
            dict_data=_dictionary() if dictionary is None else _zdict(dictionary),
            format=zstandard.FORMAT_ZSTD1_MAGICLESS,
        )
    return decompressor


def _zdict(data: bytes) -> Any:
    return zstandard.ZstdCompressionDict(data)


SAMPLES_TO_TRAIN = 128
"""Differential blocks a writer encodes with the built-in dictionary before it trains the
operator's own (full blocks, first writes and compactions, are not typical: not sampled)."""

SAMPLE_BYTES_TO_TRAIN = 24 * 1024
"""... and the bytes of their payloads it needs at least (zstd needs enough to train on)."""

SAMPLE_BYTES = 8 * 1024
"""The most of one payload kept as a sample (its head): the samples a process holds, and
what training reads, stay under ``4 * SAMPLES_TO_TRAIN * SAMPLE_BYTES`` (4 MiB) whatever
the size of the blocks (a key group of large values writes blocks of megabytes)."""

DICTIONARY_BYTES = 16 * 1024
"""The size of a trained dictionary (stored once per operator)."""

_SAMPLES: dict[str, list[bytes]] = {}
_SAMPLES_LOCK = threading.Lock()


def sample(scope: str, payloads: Sequence[bytes]) -> bytes | None:
    """Collect ``payloads`` (of blocks encoded without a trained dictionary) for ``scope``
    (a storage and operator); once there are enough, return a dictionary trained on them
    (``None`` until then, or when zstd cannot train on them). Samples are per process:
    any of them trains a valid dictionary, and the catalog keeps the first one stored."""
    with _SAMPLES_LOCK:
        samples = _SAMPLES.setdefault(scope, [])
        samples.extend(p[:SAMPLE_BYTES] for p in payloads if len(p) > 16)
        del samples[: -4 * SAMPLES_TO_TRAIN]
        if len(samples) < SAMPLES_TO_TRAIN or sum(map(len, samples)) < SAMPLE_BYTES_TO_TRAIN:
            return None
        taken: list[bytes | bytearray | memoryview] = list(samples)
        samples.clear()
    try:
        return bytes(zstandard.train_dictionary(DICTIONARY_BYTES, taken, level=3).as_bytes())
    except zstandard.ZstdError:
        return None


_DICT: Any = None


def _dictionary() -> Any:
    global _DICT
    if _DICT is None:
        _DICT = zstandard.ZstdCompressionDict(DICTIONARY, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    return _DICT


PLANE_BLOCK_ROWS = 512
"""A block whose widest fixed-width column holds at least this many values compresses each
of that column's byte planes as a zstd block of its own (see :func:`_compress_planes`).
Below it, the blocks' own headers and Huffman tables cost more than they save (for uniform
floats, break-even is near 300 values)."""


def _compress_planes(compressor: Any, payload: bytes, width: int, count: int) -> bytes:
    """``payload`` as one zstd frame (the same frame format: readers are unchanged) that
    ends a zstd block before and after each byte plane of its last column, the planes of
    ``count`` values of ``width`` bytes.

    zstd codes the literals of a block with one Huffman table. Mixed in one block, the
    planes of random low mantissa bytes flatten it, and the few bytes that carry a float's
    exponent and top mantissa bits (~6 bits of 8 for uniform floats) cost a whole byte;
    block by block, each plane gets its own table, and a plane of random bytes is stored as
    is (no Huffman table, no search for matches)."""
    view = memoryview(payload)
    start = len(payload) - width * count
    frame = compressor.compressobj(size=len(payload))
    parts = []
    previous = 0
    for cut in range(start, len(payload), count):
        parts.append(frame.compress(view[previous:cut]))
        parts.append(frame.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK))
        previous = cut
    parts.append(frame.compress(view[previous:]))
    parts.append(frame.flush())
    return b"".join(parts)


def _compress(
    payload: bytes,
    level: int,
    dictionary: Dictionary | None,
    full: bool,
    count: int,
    plane_bytes: int,
) -> bytes:
    """``payload`` compressed at ``level`` against ``dictionary`` (``None``: the built-in
    one): the planes of its widest fixed-width column (``count`` values, ``plane_bytes`` in
    all, at the payload's end) as zstd blocks of their own when there are
    :data:`PLANE_BLOCK_ROWS` values or more; the lazy match finder for full blocks
    (:func:`_strategy`)."""
    if count >= PLANE_BLOCK_ROWS:
        planes = plane_bytes // count  # the width of the widest group's values
        return bytes(
            _compress_planes(_compressor(level, dictionary, lazy=True), payload, planes, count)
        )
    return bytes(_compressor(level, dictionary, lazy=full).compress(payload))

"""The one block format of versioned storage: a key group's changes in one write, encoded
once, whatever backend stores the bytes (a row of ``ckpt_blocks`` in SQLite or PostgreSQL, a
range of a segment file).

A block is ``kind (u8) | xxh64 of the body (u64, little-endian) | body``; the body is the
payload, zstd-compressed (a frame without its magic number and checksum: kind ``0x22``
against the built-in dictionary :data:`DICTIONARY`; against the operator's trained
dictionary, kind ``0x40 + id`` for a dictionary id (in the catalog) below 64, its xxh64
seeded with the kind, else kind ``0x23`` with the id before the frame: one byte, or 255 and
a u32) or stored as is when
compression does not pay (kind ``0x21``). The payload is columnar (a
msgpack array of columns): the table folders (their names; blocks that storage wrote
before it stopped interning folders name them by ids in the catalog's ``ckpt_tables``,
in increasing order, delta-encoded, and are still read), how many tables each
folder has, the tables' last path components (each once) and each table's index into them,
each table's row count, the deleted tables; per table how its keys are stored (``None``:
all as bytes), the keys stored as delta-encoded integers (a table whose keys are all
decimal integers: list indices), the lengths and bytes of the other keys; per table the
width of its values (``None``: none has one), the lengths (``-1``: a delete) and bytes of
the values of tables without one, and the values of the tables of each width as byte
planes (as Parquet's BYTE_STREAM_SPLIT does for floats: their exponents and constant bytes
line up and compress; in a block of :data:`PLANE_BLOCK_ROWS` values or more, each plane of
the widest column is a zstd block of its own, in the same frame).

Blocks written by segment storage before this format (``u32 length | u64 xxh64 | zstd``,
:data:`LEGACY`) are still read.

Every block is verified on read: its checksum, then the catalog's record of it (its digest,
the block's own checksum; its row count). A mismatch, or a block that is not where the
catalog says, raises :class:`~objectspace.CorruptStateError` naming the job, operator, key
group, checkpoint and where the block lives.
"""

from __future__ import annotations

import bisect
import math
import re
import struct
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, chain, repeat
from operator import itemgetter
from typing import Any, cast
from urllib.parse import quote

import msgpack

from objectspace.errors import CorruptStateError
from objectspace.storage.contract import WriteInfo
from objectspace.tables import DELETED, TableChanges

try:
    import xxhash
    import zstandard
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("checkpoint storage needs xxhash and zstandard") from exc

__all__ = [
    "CHUNK_ROWS",
    "DICTIONARY",
    "DICTIONARY_BYTES",
    "LEGACY",
    "PLANE_BLOCK_ROWS",
    "SAMPLES_TO_TRAIN",
    "SAMPLE_BYTES_TO_TRAIN",
    "Block",
    "Dictionary",
    "DictionaryLookup",
    "Tables",
    "block_digest",
    "block_heads",
    "block_intact",
    "decode_block",
    "dictionary_id",
    "encode_block",
    "lookup",
    "path_component",
    "replay",
    "sample",
]

Tables = dict[str, dict[bytes, bytes]]
_Rows = list[tuple[str, bytes, bytes | None]]
_FIRST = itemgetter(0)
_SECOND = itemgetter(1)

_HEAD = struct.Struct("<BQ")
_LEGACY_HEAD = struct.Struct("<IQ")
_ZSTD = 0x22
_RAW = 0x21
_TRAINED = 0x23  # zstd with a trained dictionary, whose u32 id follows the header
# zstd with trained dictionary ``kind - _TRAINED_IN_KIND`` (ids below 64: the common case),
# which the kind byte names (a byte less per block than _TRAINED)
_TRAINED_IN_KIND = 0x40
_IDS_IN_KIND = 64
_DICT_ID = struct.Struct("<I")
LEGACY = "u32 length | u64 xxh64 | zstd(msgpack columns)"
"""The block layout segment storage wrote before this format (still read)."""

_F64 = 0xCB  # msgpack's float 64 marker
_FLOAT = -2  # value length code: an 8-byte float from the float column
_DELETE = -1  # value length code: a delete
_FLOAT_MARKER = bytes((_F64,))

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
    dictionary's table is valid from the frame's first block. The top byte plane of a
    column of uniform floats (5 bits of entropy in 8) then cost 681 bytes for 770 floats
    where a table of its own costs 506: the throughput workload's differential blocks were
    2% larger with the operator's trained dictionary than without (5,583 against 5,454
    bytes). The lazy strategy compares the two tables: 5,395 bytes, in the same time. It
    also finds more of a full block's repeated structure (first writes, compactions: the
    throughput workload's 3.9% smaller, the Buffer workload's 1.9%, in the same time).
    Small differential blocks of one zstd block keep the level's own strategy: the lazy
    one saved 0.3% of the PostgreSQL workload's bytes (dict entries, ~3 kB blocks) for 6%
    more time."""
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
        samples.extend(p for p in payloads if len(p) > 16)
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


def _shuffle(data: bytes, width: int) -> bytes:
    """Byte planes of fixed-width items: byte 0 of every item, then byte 1, ...
    Exponent and high mantissa bytes of floats line up, and zstd compresses them."""
    return b"".join(data[i::width] for i in range(width))


def _unshuffle(data: bytes, width: int) -> bytes:
    n = len(data) // width
    out = bytearray(len(data))
    for i in range(width):
        out[i::width] = data[i * n : (i + 1) * n]
    return bytes(out)


def path_component(name: str) -> str:
    """A user name as one path component: percent-encoded, dots too (no ``..``); a long
    one is cut and made unique by a hash of the whole name (file systems cap a component
    at 255 bytes)."""
    encoded = quote(name, safe="").replace(".", "%2E")
    if len(encoded) > 96:
        encoded = f"{encoded[:80]}-{xxhash.xxh64_hexdigest(name.encode('utf-8'))}"
    return encoded


def _split(name: str) -> tuple[str, str]:
    head, _, tail = name.rpartition("/")
    return head, tail


def block_heads(changes: Mapping[str, TableChanges]) -> list[str]:
    """The table folders of a block (each once, in first-seen order)."""
    return list(dict.fromkeys(map(_FIRST, _splits(changes))))


_SPLITS: dict[str, tuple[str, str]] = {}
_SPLITS_MAX = 1 << 16


def _splits(names: Iterable[str]) -> list[tuple[str, str]]:
    """Each table name's (folder, last component). A save names the same tables as the
    last one (an object's tables keep their names), so the splits of up to
    :data:`_SPLITS_MAX` names are kept: found in one C-level pass."""
    names = list(names)
    found: list[tuple[str, str] | None] = list(map(_SPLITS.get, names))
    if None not in found:
        return found  # type: ignore[return-value]
    keep = len(names) <= _SPLITS_MAX
    if keep and len(_SPLITS) + len(names) > _SPLITS_MAX:
        _SPLITS.clear()
    for i, name in enumerate(names):
        if found[i] is None:
            head, _, tail = name.rpartition("/")
            found[i] = (head, tail)
            if keep:
                _SPLITS[name] = (head, tail)
    return found  # type: ignore[return-value]


# a folder name around its first decimal number (no leading zero, at most 18 digits)
_NUMBERED = re.compile(r"(\D*)(0|[1-9][0-9]{0,17})(\D.*)?\Z", re.DOTALL)
_PLAIN: tuple[()] = ()  # a folder that is not numbered (cached as such)
_NUMBERS: dict[str, tuple[str, int] | tuple[()]] = {}


def _numbered(folder: str) -> tuple[str, int] | tuple[()]:
    """``folder`` as (template, number): the template is ``prefix NUL suffix`` around its
    first decimal number, if that number has no leading zero (so that the number between
    the template's parts is ``folder``) and the folder has no NUL; else ``()``."""
    found = _NUMBERS.get(folder)
    if found is None:
        match = None if "\x00" in folder else _NUMBERED.match(folder)
        found = _PLAIN if match is None else (f"{match[1]}\x00{match[3] or ''}", int(match[2]))
        if len(_NUMBERS) >= _SPLITS_MAX:
            _NUMBERS.clear()
        _NUMBERS[folder] = found
    return found


def _name_templates(folders: Sequence[str]) -> tuple[list[int], list[str], list[list[Any]]] | None:
    """Folders that differ by their first decimal number only (a key's objects with integer
    keys: ``state/item/17/buf``, ``state/item/203/buf``) as templates: the new order of
    ``folders`` (the others first, as they were, then each template's folders by number),
    the other folders' names, and per template ``[prefix NUL suffix, numbers]``, the numbers
    delta-encoded as unsigned LEB128 varints. ``None`` when no two folders share a
    template. The numbers cost a byte or two each where the names cost what zstd makes of
    their digits and the repeated text."""
    found = list(map(_NUMBERS.get, folders))
    if None in found:
        found = [_numbered(f) if t is None else t for f, t in zip(folders, found, strict=True)]
    if _PLAIN not in found:
        # The common case in C-level passes: every folder numbered, by one template.
        pairs = cast("list[tuple[str, int]]", found)
        templates = set(map(_FIRST, pairs))
        if len(templates) == 1 and len(pairs) > 1:
            numbers: list[int] = list(map(_SECOND, pairs))
            ranked = sorted(range(len(numbers)), key=numbers.__getitem__)
            return ranked, [], [[templates.pop(), _uvarints(_deltas(sorted(numbers)))]]
    groups: dict[str, dict[int, int]] = {}  # template -> number -> index in folders
    for i, numbered in enumerate(found):
        if numbered:
            members = groups.get(numbered[0])
            if members is None:
                groups[numbered[0]] = {numbered[1]: i}
            else:
                members[numbered[1]] = i
    shared = {template: members for template, members in groups.items() if len(members) > 1}
    if not shared:
        return None
    if len(shared) == len(groups):
        order = [i for i, numbered in enumerate(found) if not numbered]
    else:
        order = [i for i, numbered in enumerate(found) if not numbered or numbered[0] not in shared]
    others = [folders[i] for i in order]
    column: list[list[Any]] = []
    for template, members in shared.items():
        numbers = sorted(members)
        order.extend(map(members.__getitem__, numbers))
        column.append([template, _uvarints(_deltas(numbers))])
    return order, others, column


_FLOAT_WIDTH = 9  # a msgpack float 64: its marker byte and 8 bytes


_FIXED_POINT = -16  # the code of fixed-point floats with shift s: -16 - s


def _plane_group(width: int, values: Sequence[bytes], floats: bool) -> list[Any]:
    """A fixed-width group of the planes column: ``[width, planes]``; ``floats`` (schema
    version 6): msgpack floats as ``[-9, planes of their 8 bytes]``, without the plane of
    their marker bytes, or (schema version 7) as binary fixed-point numbers,
    ``[-16 - s, planes]`` (:func:`_fixed_point`)."""
    planes = _shuffle(b"".join(values), width)
    count = len(values)
    if floats and width == _FLOAT_WIDTH and planes[:count] == _FLOAT_MARKER * count:
        fixed = _fixed_point(planes[count:], count)
        if fixed is not None:
            shift, fixed_planes = fixed
            return [_FIXED_POINT - shift, fixed_planes]
        return [-width, planes[count:]]
    return [width, planes]


_MAX_SHIFT = 1074  # 2**-1074: the smallest double


def _integral(floats: Sequence[float], shift: int) -> bool:
    return all(map(float.is_integer, map(math.ldexp, floats, repeat(shift))))


def _fixed_point(planes: bytes, count: int) -> tuple[int, bytes] | None:
    """Doubles (the byte planes of ``count`` big-endian doubles) as ``k * 2**-s`` for one
    shift ``s``: the byte planes of the ``k`` (little-endian, as many bytes as the largest
    needs, at most 7), when every double is finite and not negative (nor -0.0) and such
    ``s`` exists; else ``None``.

    A double holds 53 significant bits in whichever binade it falls; numbers with a common
    binary point (``random.random()``: ``k * 2**-53``; integers: ``s = 0``; readings of a
    fixed-point sensor) then cost the bits of ``k`` alone, where their byte planes spent a
    plane on sign and exponent and the low bits the smaller binades leave zero: uniform
    ``random()`` floats 6.96 -> 6.74 bytes each (6.625 of entropy), integers as floats a
    byte or two."""
    if max(planes[:count], default=0) >= 0x80:  # a negative number or -0.0
        return None
    floats = struct.unpack(f">{count}d", _unshuffle(planes, 8))
    if not all(map(math.isfinite, floats)):
        return None
    largest = max(floats, default=0.0)
    if largest >= 2.0**56:
        # k = x * 2**s >= x needs more than 7 bytes, whatever s >= 0; and scaling a float
        # near the top of the range (1e300 * 2**53) would overflow
        return None
    # the smallest shift that makes every number an integer (integral at s: at s + 1 too),
    # given up once the largest number would need more than 7 bytes
    if _integral(floats, 0):
        shift = 0
    elif _integral(floats, 53) and not _integral(floats, 52):
        shift = 53  # random.random()'s
    else:
        low, high = 0, 1
        while not _integral(floats, high):
            if high >= _MAX_SHIFT or math.ldexp(largest, high) >= 2.0**56:
                return None
            low, high = high, min(2 * high, _MAX_SHIFT)
        while high - low > 1:
            middle = (low + high) // 2
            if _integral(floats, middle):
                high = middle
            else:
                low = middle
        shift = high
    numbers = list(map(int, map(math.ldexp, floats, repeat(shift))))
    width = max(1, (max(numbers, default=0).bit_length() + 7) // 8)
    if width > 7:
        return None
    return shift, _shuffle(struct.pack(f"<{count}Q", *numbers), 8)[: width * count]


def _from_fixed_point(planes: bytes, shift: int, count: int) -> list[bytes]:
    """The msgpack floats (marker and 8 big-endian bytes) that :func:`_fixed_point` made
    ``planes`` of."""
    if count == 0:
        return []
    width = len(planes) // count
    if width * count != len(planes) or not 1 <= width <= 7 or not 0 <= shift <= _MAX_SHIFT:
        raise ValueError(f"fixed-point planes of {len(planes)} bytes for {count} values")
    numbers = struct.unpack(f"<{count}Q", _unshuffle(planes + bytes((8 - width) * count), 8))
    doubles = struct.pack(f">{count}d", *map(math.ldexp, map(float, numbers), repeat(-shift)))
    return [_FLOAT_MARKER + doubles[i : i + 8] for i in range(0, 8 * count, 8)]


def _deltas(numbers: Sequence[int]) -> list[int]:
    """Each number less the one before it (the first less 0): what ``accumulate`` undoes."""
    return [b - a for a, b in zip([0, *numbers], numbers, strict=False)]


def _uvarints(numbers: Sequence[int]) -> bytes:
    """Unsigned LEB128 of each number."""
    if max(numbers, default=0) < 0x80:
        return bytes(numbers)
    out = bytearray()
    for n in numbers:
        while n >= 0x80:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
    return bytes(out)


def _read_uvarints(data: bytes) -> list[int]:
    out = []
    n = shift = 0
    for byte in data:
        n |= (byte & 0x7F) << shift
        if byte & 0x80:
            shift += 7
        else:
            out.append(n)
            n = shift = 0
    return out


def _signed(digest: int) -> int:
    return digest - (1 << 64) if digest >= 1 << 63 else digest


def _table_keys(keys: list[bytes]) -> list[int] | None:
    """A table's keys as delta-encoded integers when each is a canonical decimal integer
    (list indices), else ``None``."""
    if not keys:
        return None
    if len(keys) <= 4:  # a few slots of one list (appends between two saves): per key
        ints = []
        prev = 0
        for key in keys:
            if not (len(key) <= 18 and key.isdigit() and b"%d" % int(key) == key):
                return None
            i = int(key)
            ints.append(i - prev)
            prev = i
        return ints
    joined = b"".join(keys)
    if not joined.isdigit() or max(map(len, keys)) > 18:  # deltas must fit 64 bits
        return None
    try:
        ints = list(map(int, keys))
    except ValueError:
        return None
    if b"".join([b"%d" % i for i in ints]) != joined:  # a leading zero, or an empty key
        return None
    return _deltas(ints)


def encode_block(
    changes: Mapping[str, TableChanges],
    full: bool,
    level: int = 3,
    head_ids: Mapping[str, int] | None = None,
    dictionary: Dictionary | None = None,
    payloads: list[bytes] | None = None,
    *,
    compact: bool = False,
) -> tuple[bytes, int]:
    """One key group's edits as a block; returns the block and its number of rows. A full
    block of more than :data:`CHUNK_ROWS` rows is chunked (see :func:`lookup`).
    ``compact``: the forms only readers of checkpoint storage's schema version 6 read
    (versioned storage writes them; :class:`~objectspace.SQLiteStore` files do not):
    folders whose names differ by one decimal number (a key's objects with integer keys:
    ``state/item/17/buf``) as a template and the numbers, delta-encoded as varints (see
    :func:`_name_templates`), and msgpack floats without the plane of their marker bytes."""
    if full and sum(len(c.rows) for c in changes.values()) > CHUNK_ROWS:
        return _encode_chunked(changes, level, head_ids, dictionary, compact)
    return _encode_plain(changes, full, level, head_ids, dictionary, payloads, compact)


CHUNK_ROWS = 2048
"""Full blocks of more rows are written as sorted chunks of at most this many rows."""

_CHUNKED = 0x24  # a full block as sorted chunks with an index
_INDEX = struct.Struct("<IQ")  # the index's length and xxh64


def _encode_chunked(
    changes: Mapping[str, TableChanges],
    level: int,
    head_ids: Mapping[str, int] | None,
    dictionary: Dictionary | None,
    compact: bool = False,
) -> tuple[bytes, int]:
    """A full block as an SSTable does it: rows sorted by (table, key), cut into chunks of
    :data:`CHUNK_ROWS` rows, each a plain block of its own (compressed and checksummed),
    behind an index of each chunk's first (table, key) and length, so that :func:`lookup`
    decodes only the chunks a range of rows can be in."""
    chunks: list[bytes] = []
    index: list[list[Any]] = []
    current: dict[str, TableChanges] = {}
    count = total = 0
    first: list[Any] = []
    for name in sorted(changes):
        rows = changes[name].rows
        for key in sorted(rows):
            value = rows[key]
            if value is DELETED:
                continue
            if not first:
                first = [name, key]
            table = current.get(name)
            if table is None:
                table = current[name] = TableChanges()
            table.rows[key] = value
            count += 1
            total += 1
            if count >= CHUNK_ROWS:
                block, _ = _encode_plain(
                    current, True, level, head_ids, dictionary, compact=compact
                )
                index.append([*first, len(block)])
                chunks.append(block)
                current, count, first = {}, 0, []
    if current:
        block, _ = _encode_plain(current, True, level, head_ids, dictionary, compact=compact)
        index.append([*first, len(block)])
        chunks.append(block)
    packed = msgpack.packb(index, use_bin_type=True)
    body = _INDEX.pack(len(packed), xxhash.xxh64_intdigest(packed)) + packed + b"".join(chunks)
    return _HEAD.pack(_CHUNKED, xxhash.xxh64_intdigest(body)) + body, total


def _chunks(block: bytes, where: str) -> tuple[list[tuple[str, bytes]], list[bytes]]:
    """A chunked block's index (each chunk's first table and key) and its chunks; the
    index is checked against its checksum (each chunk carries its own)."""
    body = block[_HEAD.size :]
    try:
        length, digest = _INDEX.unpack_from(body)
        packed = body[_INDEX.size : _INDEX.size + length]
        if xxhash.xxh64_intdigest(packed) != digest:
            raise ValueError("the chunk index fails its checksum")
        firsts, chunks = [], []
        pos = _INDEX.size + length
        for name, key, size in msgpack.unpackb(packed, raw=False):
            firsts.append((name, key))
            chunks.append(body[pos : pos + size])
            pos += size
        if pos != len(body):
            raise ValueError(f"the chunks end at {pos}, the block at {len(body)}")
    except (ValueError, TypeError, struct.error, msgpack.UnpackException) as exc:
        raise CorruptStateError(f"{where} is corrupt: {exc}") from exc
    return firsts, chunks


def lookup(
    block: bytes,
    where: str,
    start: tuple[str, bytes],
    stop: tuple[str, bytes],
    resolve: Callable[[Sequence[int]], Mapping[int, str]] | None = None,
    dictionaries: DictionaryLookup | None = None,
) -> Tables:
    """The rows ``(table, key)`` of a full block with ``start <= (table, key) < stop``,
    decoding only the chunks they can be in (a block that is not chunked is decoded whole).
    One key's objects are such ranges: their tables share a name prefix."""
    if len(block) > _HEAD.size and block[0] == _CHUNKED and not _is_legacy(block):
        firsts, chunks = _chunks(block, where)
        at = max(bisect.bisect_right(firsts, start) - 1, 0)
        wanted = []
        while at < len(chunks) and firsts[at] < stop:
            wanted.append(chunks[at])
            at += 1
    else:
        wanted = [block]
    found: Tables = {}
    for chunk in wanted:
        decoded = _decode(chunk, where, resolve, dictionaries)
        row = 0
        for name, count in zip(decoded.names, decoded.counts, strict=True):
            for i in range(row, row + count):
                value = decoded.values[i]
                if value is not None and start <= (name, decoded.keys[i]) < stop:
                    found.setdefault(name, {})[decoded.keys[i]] = value
            row += count
    return found


def _encode_plain(
    changes: Mapping[str, TableChanges],
    full: bool,
    level: int = 3,
    head_ids: Mapping[str, int] | None = None,
    dictionary: Dictionary | None = None,
    payloads: list[bytes] | None = None,
    compact: bool = False,
) -> tuple[bytes, int]:
    """One key group's edits as a block;
    returns the block and its number of rows (row
       edits and deleted tables). A full block holds no deletes (it starts from nothing).
       ``dictionary``: the operator's trained dictionary, if it has one; ``payloads``
       collects the uncompressed payload of a differential block (samples to train one on).

       Keys are stored per table as delta-encoded integers (when all are decimal integers) or
       as bytes with their lengths. Values are stored as byte planes when they all have one
       width (floats, fixed-width records), else with their lengths (``-1``: a delete; ``-2``:
       a msgpack float, whose 8 bytes go to a column of byte planes). A table with no
       row and no truncation changes nothing on replay and is left out.
    """
    empty = [name for name, c in changes.items() if not c.rows and not c.truncated]
    if empty:
        changes = dict(changes)
        for name in empty:
            del changes[name]
    tails: dict[str, int] = {}
    tail_id = tails.setdefault
    split = _splits(changes)
    folders: list[str] = list(map(_FIRST, split))
    truncated: list[int]
    named: tuple[list[int], list[str], list[list[Any]]] | None = None
    if len(set(folders)) == len(folders):  # a folder per table (one object each): no grouping
        order: Sequence[int] = range(len(folders))
        if head_ids is not None:  # interned folders in id order: their ids delta-encode
            order = sorted(order, key=list(map(head_ids.__getitem__, folders)).__getitem__)
        elif compact:
            named = _name_templates(folders)
            if named is not None:
                order = named[0]
        edits = list(changes.values())
        ordered = [edits[i] for i in order]
        heads: list[Any] = [folders[i] for i in order]
        head_tables = [1] * len(heads)
        table_tails = [tail_id(split[i][1], len(tails)) for i in order]
        truncated = [] if full else [i for i, c in enumerate(ordered) if c.truncated]
        table_rows: list[dict[bytes, Any]] = [c.rows for c in ordered]
    else:
        by_head: dict[str, list[tuple[str, TableChanges]]] = {}
        for (head, tail), change in zip(split, changes.values(), strict=True):
            group = by_head.get(head)
            if group is None:
                by_head[head] = [(tail, change)]
            else:
                group.append((tail, change))
        if head_ids is not None:  # interned folders in id order: their ids delta-encode
            by_head = {h: by_head[h] for h in sorted(by_head, key=head_ids.__getitem__)}
        elif compact:
            grouped = list(by_head)
            named = _name_templates(grouped)
            if named is not None:
                by_head = {grouped[i]: by_head[grouped[i]] for i in named[0]}
        heads = list(by_head)
        head_tables = list(map(len, by_head.values()))
        table_tails = []
        truncated = []
        table_rows = []
        index = 0
        for group in by_head.values():
            for tail, change in group:
                table_tails.append(tail_id(tail, len(tails)))
                if change.truncated and not full:
                    truncated.append(index)
                index += 1
                table_rows.append(change.rows)
    counts: list[int] = []
    key_modes: list[int] = []
    int_keys: list[int] = []
    key_lens: list[int] = []
    keys: list[bytes] = []
    widths: list[int] = []
    fixed: dict[int, list[bytes]] = {}  # width → the values of the tables of that width
    value_lens: list[int] = []
    values: list[bytes] = []
    # Bound once: the loop below runs once per table (most hold one row).
    add_count = counts.append
    add_mode = key_modes.append
    add_int_key = int_keys.append
    add_key_len = key_lens.append
    add_key = keys.append
    add_width = widths.append
    add_value_len = value_lens.append
    add_value = values.append
    get_fixed = fixed.get
    rows_total = 0
    flat_keys = list(chain.from_iterable(table_rows))
    flat_values = list(chain.from_iterable(map(dict.values, table_rows)))
    lens = list(map(len, flat_values)) if DELETED not in flat_values else []
    width = lens[0] if lens else 0
    if (
        0 < width <= 64
        and lens.count(width) == len(lens)
        and not any(map(bytes.isdigit, flat_keys))
    ):
        # Every key stored as bytes and every value a put of one width (a float dict's
        # entries): the columns the loop below would build, in C-level passes.
        counts = list(map(len, table_rows))
        key_modes = [0] * len(counts)
        key_lens = list(map(len, flat_keys))
        keys = flat_keys
        widths = [width if n else 0 for n in counts]
        fixed = {width: cast("list[bytes]", flat_values)}
        rows_total = len(flat_keys)
        table_rows = []
    for rows in table_rows:
        if len(rows) == 1:  # the common case (one entry of an object changed), inline
            ((key, value),) = rows.items()
            if value is DELETED:
                if full:
                    add_count(0)
                    add_mode(0)
                    add_width(0)
                    continue
                add_count(1)
                rows_total += 1
                if len(key) <= 18 and key.isdigit() and b"%d" % int(key) == key:
                    add_mode(1)
                    add_int_key(int(key))
                else:
                    add_mode(0)
                    add_key_len(len(key))
                    add_key(key)
                add_width(0)
                add_value_len(_DELETE)
                continue
            add_count(1)
            rows_total += 1
            if len(key) <= 18 and key.isdigit() and b"%d" % int(key) == key:
                add_mode(1)
                add_int_key(int(key))
            else:
                add_mode(0)
                add_key_len(len(key))
                add_key(key)
            put = cast("bytes", value)
            width = len(put)
            if 0 < width <= 64:
                add_width(width)
                same = get_fixed(width)
                if same is None:
                    fixed[width] = [put]
                else:
                    same.append(put)
            else:
                add_width(0)
                add_value_len(width)
                add_value(put)
            continue
        table_keys = list(rows)
        table_values = list(rows.values())
        if full and table_values.count(DELETED):
            table_keys = [k for k, v in rows.items() if v is not DELETED]
            table_values = [v for v in table_values if v is not DELETED]
        add_count(len(table_keys))
        rows_total += len(table_keys)
        as_ints = _table_keys(table_keys)
        if as_ints is None:
            add_mode(0)
            key_lens.extend(map(len, table_keys))
            keys.extend(table_keys)
        else:
            add_mode(1)
            int_keys.extend(as_ints)
        if table_values and not table_values.count(DELETED):
            puts = cast("list[bytes]", table_values)
            lens = list(map(len, puts))
            width = lens[0]
            if lens.count(width) == len(lens) and 0 < width <= 64:
                add_width(width)
                fixed.setdefault(width, []).extend(puts)
                continue
        add_width(0)
        for value in table_values:
            if value is DELETED:
                add_value_len(_DELETE)
            else:
                add_value_len(len(value))
                add_value(value)
    if head_ids is not None:
        heads = _deltas([head_ids[h] for h in heads])
    elif named is not None:
        heads = [[named[1], named[2]]]
    groups = [_plane_group(w, fixed[w], compact) for w in sorted(fixed)]
    payload = msgpack.packb(
        [
            heads,
            head_tables,
            list(tails),
            table_tails,
            counts,
            truncated,
            key_modes if any(key_modes) else None,
            int_keys,
            key_lens,
            b"".join(keys),
            widths if any(widths) else None,
            value_lens,
            b"".join(values),
            groups,
        ],
        use_bin_type=True,
    )
    if payloads is not None and not full:
        payloads.append(payload)
    count = len(fixed[max(fixed)]) if fixed else 0
    if count >= PLANE_BLOCK_ROWS:
        planes = len(groups[-1][1]) // count  # of the widest group (the last)
        compressed = _compress_planes(
            _compressor(level, dictionary, lazy=True), payload, planes, count
        )
    else:
        compressed = _compressor(level, dictionary, lazy=full).compress(payload)
    if len(compressed) >= len(payload):
        kind, body = _RAW, payload
    elif dictionary is None:
        kind, body = _ZSTD, compressed
    else:
        if dictionary.id < _IDS_IN_KIND:
            kind, body = _TRAINED_IN_KIND + dictionary.id, compressed
        else:
            kind, body = _TRAINED, _dict_ref(dictionary.id) + compressed
    return _HEAD.pack(kind, _checksum(kind, body)) + body, rows_total + len(truncated)


PLANE_BLOCK_ROWS = 512
"""A block whose widest fixed-width column holds at least this many values compresses each
of that column's byte planes as a zstd block of its own (see :func:`_compress_planes`).
Below it, the blocks' own headers and Huffman tables cost more than they save: uniform
floats at zstd level 3 (9) save 0.08 (0.13) bytes each at 512 values, 0.17 at 770, 0.25 at
2,000, and lose 0.16 (0.18) at 128; break-even is near 300."""


def _compress_planes(compressor: Any, payload: bytes, width: int, count: int) -> bytes:
    """``payload`` as one zstd frame (the same frame format: readers are unchanged) that
    ends a zstd block before and after each byte plane of its last column, the planes of
    ``count`` values of ``width`` bytes.

    zstd codes the literals of a block with one Huffman table. Mixed in one block, the
    planes of random low mantissa bytes flatten it, and the few bytes that carry a float's
    exponent and top mantissa bits (~6 bits of 8 for uniform floats) cost a whole byte;
    block by block, each plane gets its own table, and a plane of random bytes is stored as
    is (no Huffman table, no search for matches). The throughput workload's differential
    blocks: 5,854 -> 5,661 bytes for 770 floats (6.625 bytes of entropy each)."""
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


def _checksum(kind: int, body: bytes) -> int:
    """A block's xxh64: of its body, seeded with the kind byte where that names the trained
    dictionary (so the checksum verifies the dictionary's id, as it does where the id is
    part of the body)."""
    if _TRAINED_IN_KIND <= kind < _TRAINED_IN_KIND + _IDS_IN_KIND:
        return int(xxhash.xxh64_intdigest(body, seed=kind))
    return int(xxhash.xxh64_intdigest(body))


def _is_trained_in_kind(block: bytes) -> bool:
    return len(block) > _HEAD.size and 0 <= block[0] - _TRAINED_IN_KIND < _IDS_IN_KIND


def _dict_ref(dict_id: int) -> bytes:
    """A dictionary id as it precedes the frame: one byte below 255, else 255 and a u32."""
    return bytes((dict_id,)) if dict_id < 255 else b"\xff" + _DICT_ID.pack(dict_id)


def _read_dict_ref(body: bytes) -> tuple[int, int]:
    """The dictionary id at the start of ``body`` and the frame's offset."""
    if body[0] < 255:
        return body[0], 1
    return int(_DICT_ID.unpack_from(body, 1)[0]), 1 + _DICT_ID.size


def dictionary_id(block: bytes) -> int | None:
    """The id of the trained dictionary a block was compressed with, or ``None``."""
    if len(block) > _HEAD.size and block[0] == _CHUNKED and not _is_legacy(block):
        return dictionary_id(_chunks(block, "a chunked block")[1][0])
    if len(block) > _HEAD.size and block[0] == _TRAINED and not _is_legacy(block):
        return _read_dict_ref(block[_HEAD.size :])[0]
    if _is_trained_in_kind(block) and not _is_legacy(block):
        return block[0] - _TRAINED_IN_KIND
    return None


def block_digest(block: bytes) -> int:
    """The checksum a block carries (a signed 64-bit integer: it fits a BIGINT), which the
    catalog records as the write's digest."""
    if _is_legacy(block):
        return _signed(_LEGACY_HEAD.unpack_from(block)[1])
    return _signed(_HEAD.unpack_from(block)[1])


def block_intact(block: bytes) -> bool:
    """Whether ``block`` matches the checksum it carries (every byte read, nothing decoded)."""
    if _is_legacy(block):
        _, digest = _LEGACY_HEAD.unpack_from(block)
        return bool(int(xxhash.xxh64_intdigest(block[_LEGACY_HEAD.size :])) == digest)
    if len(block) < _HEAD.size:
        return False
    kind, digest = _HEAD.unpack_from(block)
    return bool(_checksum(kind, block[_HEAD.size :]) == digest)


def _is_legacy(block: bytes) -> bool:
    return (
        len(block) >= _LEGACY_HEAD.size
        and _LEGACY_HEAD.unpack_from(block)[0] == len(block) - _LEGACY_HEAD.size
    )


DictionaryLookup = Callable[[int], "bytes | None"]
"""The bytes of a trained dictionary by id (``None``: unknown), from the catalog."""


def _payload(block: bytes, where: str, dictionaries: DictionaryLookup | None = None) -> bytes:
    """The block's payload, checked against its checksum."""
    if _is_legacy(block):
        _, digest = _LEGACY_HEAD.unpack_from(block)
        body = block[_LEGACY_HEAD.size :]
        kind = _ZSTD
        legacy = True
    else:
        if len(block) < _HEAD.size:
            raise CorruptStateError(
                f"{where} is corrupt: the block is truncated ({len(block)} bytes)"
            )
        kind, digest = _HEAD.unpack_from(block)
        body = block[_HEAD.size :]
        legacy = False
    if (xxhash.xxh64_intdigest(body) if legacy else _checksum(kind, body)) != digest:
        raise CorruptStateError(f"{where} is corrupt: the block fails its checksum")
    try:
        if legacy:
            return bytes(zstandard.ZstdDecompressor().decompress(body))
        if kind == _ZSTD:
            return bytes(_decompressor().decompress(body))
        if kind == _RAW:
            return bytes(body)
        if kind == _TRAINED or _TRAINED_IN_KIND <= kind < _TRAINED_IN_KIND + _IDS_IN_KIND:
            if kind == _TRAINED:
                dict_id, start = _read_dict_ref(body)
            else:
                dict_id, start = kind - _TRAINED_IN_KIND, 0
            data = None if dictionaries is None else dictionaries(dict_id)
            if data is None:
                raise CorruptStateError(
                    f"{where}: the block was compressed with dictionary {dict_id}, which is not "
                    "in the catalog (ckpt_dictionaries)"
                )
            return bytes(_decompressor(data).decompress(body[start:]))
    except zstandard.ZstdError as exc:
        raise CorruptStateError(
            f"{where} is corrupt: the block does not decompress: {exc}"
        ) from exc
    raise CorruptStateError(f"{where} is corrupt: unknown block kind {kind:#x}")


@dataclass
class _Decoded:
    """A block's columns, ready to apply."""

    names: list[str]
    counts: list[int]
    truncated: list[int]
    keys: list[bytes]
    values: list[bytes | None]


def _slices(data: bytes, lens: Sequence[int]) -> list[bytes]:
    ends = list(accumulate(lens))
    starts = [0, *ends[:-1]] if ends else []
    return [data[a:b] for a, b in zip(starts, ends, strict=True)]


def _legacy(columns: list[Any]) -> tuple[list[Any], list[bytes | None]]:
    """The columns of a legacy segment block in this format's order, and its values."""
    (heads, head_tables, tails, table_tails, counts, truncated, key_lens, keys, value_lens,
     values, floats) = columns  # fmt: skip
    return [heads, head_tables, tails, table_tails, counts, truncated, None, [], key_lens,
            keys, None, [], b"", []], _mixed_values(value_lens, values, _unshuffle(floats, 8))  # fmt: skip


def _table_values(
    widths: list[int] | None,
    counts: list[int],
    value_lens: list[int],
    data: bytes,
    planes: list[list[Any]],
) -> list[bytes | None]:
    """Each row's value (``None``: a delete), table by table: from the byte planes of the
    tables' width, or bytes with their lengths."""
    if widths is None:  # no table of fixed width
        if _DELETE not in value_lens:
            return _slices(data, value_lens)  # type: ignore[return-value]
        return _mixed_values(value_lens, data, b"")
    fixed: dict[int, list[bytes]] = {}
    for width, shuffled in planes:
        if width <= _FIXED_POINT:  # floats as fixed-point numbers (schema version 7)
            count = sum(c for w, c in zip(widths, counts, strict=True) if w == _FLOAT_WIDTH)
            fixed[_FLOAT_WIDTH] = _from_fixed_point(shuffled, _FIXED_POINT - width, count)
            continue
        if width < 0:  # msgpack floats without their marker byte (schema version 6)
            plain = _unshuffle(shuffled, -width - 1)
            fixed[-width] = [_FLOAT_MARKER + plain[i : i + 8] for i in range(0, len(plain), 8)]
            continue
        plain = _unshuffle(shuffled, width)
        fixed[width] = [plain[i : i + width] for i in range(0, len(plain), width)]
    taken = dict.fromkeys(fixed, 0)
    values: list[bytes | None] = []
    pos = lpos = 0
    for width, count in zip(widths, counts, strict=True):
        if width:
            start = taken[width]
            values.extend(fixed[width][start : start + count])
            taken[width] = start + count
        else:
            lens = value_lens[lpos : lpos + count]
            lpos += count
            if min(lens, default=0) < 0:  # a delete among them
                size = sum(n for n in lens if n > 0)
                values.extend(_mixed_values(lens, data[pos : pos + size], b""))
            else:  # puts only
                size = sum(lens)
                values.extend(_slices(data[pos : pos + size], lens))
            pos += size
    return values


def _decode(
    block: bytes,
    where: str,
    resolve: Callable[[Sequence[int]], Mapping[int, str]] | None,
    dictionaries: DictionaryLookup | None = None,
) -> _Decoded:
    payload = _payload(block, where, dictionaries)
    try:
        columns = msgpack.unpackb(payload, raw=False)
        legacy_values = None
        if len(columns) == 11:
            columns, legacy_values = _legacy(columns)
        (
            heads,
            head_tables,
            tails,
            table_tails,
            counts,
            truncated,
            key_modes,
            int_keys,
            key_lens,
            key_bytes,
            widths,
            value_lens,
            value_bytes,
            planes,
        ) = columns
        if heads and isinstance(heads[0], list):  # templated (schema version 6)
            ((others, templated),) = heads
            heads = list(others)
            for template, numbers in templated:
                prefix, _, suffix = template.partition("\x00")
                heads.extend([f"{prefix}{n}{suffix}" for n in accumulate(_read_uvarints(numbers))])
        elif heads and isinstance(heads[0], int):
            if legacy_values is None:
                heads = list(accumulate(heads))
            if resolve is None:
                raise CorruptStateError("its table folders are interned and no catalog was given")
            known = resolve(heads)
            missing = [h for h in heads if h not in known]
            if missing:
                raise CorruptStateError(
                    f"table folder ids {missing[:5]} have no name in the catalog (ckpt_tables)"
                )
            heads = [known[h] for h in heads]
        table_heads = [h for h, n in zip(heads, head_tables, strict=True) for _ in range(n)]
        names = [
            f"{head}/{tails[t]}" if head else tails[t]
            for head, t in zip(table_heads, table_tails, strict=True)
        ]
        if key_modes is None:
            keys = _slices(key_bytes, key_lens)
        else:
            keys = []
            ipos = kpos = bpos = 0
            for mode, count in zip(key_modes, counts, strict=True):
                if mode:
                    deltas = int_keys[ipos : ipos + count]
                    ipos += count
                    keys.extend([b"%d" % k for k in accumulate(deltas)])
                else:
                    lens = key_lens[kpos : kpos + count]
                    kpos += count
                    size = sum(lens)
                    keys.extend(_slices(key_bytes[bpos : bpos + size], lens))
                    bpos += size
        if legacy_values is None:
            values = _table_values(widths, counts, value_lens, value_bytes, planes)
        else:
            values = legacy_values
        if sum(counts) != len(keys) or len(keys) != len(values):
            raise ValueError(f"{sum(counts)} rows counted, {len(keys)} keys, {len(values)} values")
        return _Decoded(names, counts, truncated, keys, values)
    except CorruptStateError as exc:
        raise CorruptStateError(f"{where}: {exc}") from exc
    except Exception as exc:
        raise CorruptStateError(f"{where} is corrupt: {exc}") from exc


def _mixed_values(value_lens: list[int], values: bytes, floats: bytes) -> list[bytes | None]:
    """Each row's value (``None``: a delete) from lengths, bytes and floats."""
    out: list[bytes | None] = []
    vpos = fpos = 0
    for vlen in value_lens:
        if vlen == _FLOAT:
            out.append(_FLOAT_MARKER + floats[fpos : fpos + 8])
            fpos += 8
        elif vlen == _DELETE:
            out.append(None)
        else:
            out.append(values[vpos : vpos + vlen])
            vpos += vlen
    return out


def _decode_all(
    block: bytes,
    where: str,
    resolve: Callable[[Sequence[int]], Mapping[int, str]] | None,
    dictionaries: DictionaryLookup | None,
) -> list[_Decoded]:
    """A block's decoded parts: one, or one per chunk of a chunked full block (whose
    checksum covers the whole block: every byte is verified)."""
    if len(block) > _HEAD.size and block[0] == _CHUNKED and not _is_legacy(block):
        _, digest = _HEAD.unpack_from(block)
        if xxhash.xxh64_intdigest(block[_HEAD.size :]) != digest:
            raise CorruptStateError(f"{where} is corrupt: the block fails its checksum")
        return [_decode(c, where, resolve, dictionaries) for c in _chunks(block, where)[1]]
    return [_decode(block, where, resolve, dictionaries)]


def decode_block(
    block: bytes,
    where: str,
    resolve: Callable[[Sequence[int]], Mapping[int, str]] | None = None,
    dictionaries: DictionaryLookup | None = None,
) -> tuple[dict[str, bool], _Rows]:
    """A block's deleted tables and rows (``None`` value: a delete);
    :class:`CorruptStateError` naming ``where``. ``resolve`` maps interned table-folder ids
    to names (the catalog's ``table_names``)."""
    rows: _Rows = []
    truncated: dict[str, bool] = {}
    for decoded in _decode_all(block, where, resolve, dictionaries):
        try:
            values = decoded.values
            row = 0
            for name, count in zip(decoded.names, decoded.counts, strict=True):
                for _ in range(count):
                    rows.append((name, decoded.keys[row], values[row]))
                    row += 1
        except (IndexError, ValueError) as exc:
            raise CorruptStateError(f"{where} is corrupt: {exc}") from exc
        truncated.update({decoded.names[i]: True for i in decoded.truncated})
    return truncated, rows


def _apply(tables: Tables, decoded: _Decoded) -> int:
    """Apply a decoded block to ``tables``; returns its number of rows."""
    for i in decoded.truncated:
        tables.pop(decoded.names[i], None)
    values = decoded.values
    keys = decoded.keys
    row = 0
    for name, count in zip(decoded.names, decoded.counts, strict=True):
        if not count:
            continue
        end = row + count
        table_values = values[row:end]
        table = tables.get(name)
        if table is None:
            table = tables[name] = {}
        if None in table_values:
            for key, value in zip(keys[row:end], table_values, strict=True):
                if value is None:
                    table.pop(key, None)
                else:
                    table[key] = value
        else:
            table.update(zip(keys[row:end], table_values, strict=True))  # type: ignore[arg-type]
        row = end
    return len(keys) + len(decoded.truncated)


@dataclass(frozen=True)
class Block:
    """A write's block as read from where it lives, with the catalog's record of it."""

    write: WriteInfo
    data: bytes | None  # None: not found where the catalog says it is
    digest: int | None  # the catalog's digest (None: written before digests, unchecked)
    rows: int  # the catalog's row count
    where: str  # where the block lives, for errors


def replay(
    blocks: Iterable[Block],
    where: str,
    resolve: Callable[[Sequence[int]], Mapping[int, str]] | None = None,
    dictionaries: DictionaryLookup | None = None,
) -> Tables:
    """The tables of one key group after applying ``blocks`` (its chain) in order, each
    verified: present, its checksum, the catalog's digest and row count. ``where`` names
    the job and operator in errors."""
    tables: Tables = {}
    for block in blocks:
        w = block.write
        what = (
            f"{where}key group {w.key_group} checkpoint {w.version} (write {w.write_id}) "
            f"in {block.where}"
        )
        if block.data is None:
            raise CorruptStateError(f"{what}: the block is missing")
        if block.digest is not None and block_digest(block.data) != block.digest:
            raise CorruptStateError(
                f"{what}: the block is not the one the catalog recorded (digest mismatch: "
                "rows missing or added)"
            )
        rows = 0
        for decoded in _decode_all(block.data, what, resolve, dictionaries):
            try:
                rows += _apply(tables, decoded)
            except (IndexError, ValueError) as exc:
                raise CorruptStateError(f"{what}: the block is corrupt: {exc}") from exc
        if rows != block.rows:
            raise CorruptStateError(
                f"{what}: the write has {block.rows} rows but its block holds {rows} "
                "(rows missing or added)"
            )
    return {name: rows for name, rows in tables.items() if rows}

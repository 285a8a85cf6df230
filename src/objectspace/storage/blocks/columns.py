"""The columns of a block's payload: byte planes of fixed-width values (as Parquet's
BYTE_STREAM_SPLIT does for floats: their exponents and constant bytes line up and
compress), floats as binary fixed-point numbers, keys as delta-encoded integers, unsigned
LEB128 varints, and the values of lengths and bytes.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from itertools import accumulate, repeat
from typing import Any

_F64 = 0xCB  # msgpack's float 64 marker
_FLOAT = -2  # value length code: an 8-byte float from the float column (legacy blocks)
_DELETE = -1  # value length code: a delete
_FLOAT_MARKER = bytes((_F64,))


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


_FLOAT_WIDTH = 9  # a msgpack float 64: its marker byte and 8 bytes


_FIXED_POINT = -16  # the code of fixed-point floats with shift s: -16 - s


def _plane_group(width: int, values: Sequence[bytes], floats: bool) -> list[Any]:
    """A fixed-width group of the planes column: ``[width, planes]``; with ``floats``,
    msgpack floats as binary fixed-point numbers, ``[-16 - s, planes]``
    (:func:`_fixed_point`), or where they are not, as ``[-9, planes of their 8 bytes]``
    without the plane of their marker bytes (``docs/formats.md``: the forms only catalog
    readers read)."""
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
    plane on sign and exponent and the low bits the smaller binades leave zero."""
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


def _slices(data: bytes, lens: Sequence[int]) -> list[bytes]:
    ends = list(accumulate(lens))
    starts = [0, *ends[:-1]] if ends else []
    return [data[a:b] for a, b in zip(starts, ends, strict=True)]


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

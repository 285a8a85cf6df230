"""How a Python value becomes bytes and back.

Three serializers share one small interface, :class:`Serializer`:

* :class:`MsgpackSerializer` — the default: compact and fast; ``tuple``, ``bytes``,
  ``datetime``, ``date``, ``set`` and ``frozenset`` round-trip with their type.
* :class:`JsonSerializer` — readable text (the layout of the reference document's examples);
  the same types round-trip through small tagged objects such as ``{"$tuple": [...]}``.
* :class:`PickleSerializer` — any picklable value; opt-in only, never the default, because
  unpickling state that someone else wrote executes their code.

Dict keys and set elements are stored under their *canonical* encoding
(:meth:`Serializer.encode_key`), which is equal for keys that Python treats as equal: ``1``,
``1.0`` and ``True``; ``0.0`` and ``-0.0``; aware datetimes of one instant in any time zone;
equal frozensets whatever their iteration order; tuples of such. A NaN key is refused
(NaN is not equal to itself, so it could never be found again after a restore).
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import fractions
import functools
import io
import json
import math
import numbers
import pickle
import threading
from collections.abc import Callable
from typing import Any, ClassVar

import msgpack

from objectspace.errors import SerializationError

__all__ = [
    "PLAIN_KEY_TYPES",
    "JsonSerializer",
    "MsgpackSerializer",
    "PickleSerializer",
    "Serializer",
    "canonical_key",
    "encode_key_with",
    "serializer_by_name",
    "to_tagged_json",
]


class Serializer:
    """Encodes values to bytes (:meth:`dumps`) and back (:meth:`loads`).

    Subclasses raise :class:`~objectspace.errors.SerializationError` for a value they cannot
    encode or bytes they cannot decode. A serializer is immutable and picklable.
    """

    name: ClassVar[str] = ""

    def dumps(self, value: Any) -> bytes:
        raise NotImplementedError

    def loads(self, data: bytes) -> Any:
        raise NotImplementedError

    @property
    def raw_dumps(self) -> Callable[[Any], bytes]:
        """:meth:`dumps` without the error translation, for bulk encoding in the calling
        thread: it may raise any exception for a value it cannot encode (``TypeError``,
        ``ValueError``, ``OverflowError``, or what the value's own methods raise); the caller then calls :meth:`dumps` on it for the explained
        :class:`~objectspace.errors.SerializationError` (a save does, naming the object)."""
        return self.dumps

    @property
    def raw_loads(self) -> Callable[[bytes], Any]:
        """:meth:`loads` without the error translation, for bulk decoding: it may raise any
        exception on bad bytes, which the caller must translate (restore does, naming the
        object)."""
        return self.loads

    @property
    def raw_loads_many(self) -> Callable[[list[bytes]], list[Any]]:
        """:attr:`raw_loads` of each of a list of encodings, in bulk (msgpack: one pass of
        a streaming unpacker over them, where a call per value costs three times more); it
        may raise any exception on bad bytes, as :attr:`raw_loads` does."""
        loads = self.raw_loads
        return lambda datas: list(map(loads, datas))

    @property
    def raw_key_dumps(self) -> Callable[[Any], bytes]:
        """A key of a type in :data:`PLAIN_KEY_TYPES` as :meth:`encode_key` stores it, one
        C-level call where it can be; like :attr:`raw_dumps` it may raise ``TypeError``,
        ``ValueError`` or ``OverflowError`` (msgpack: an int beyond 64 bits, which
        :meth:`encode_key` stores). Equal keys give equal bytes (pickle overrides it: its
        memo would not)."""
        return self.raw_dumps

    @property
    def _canonical_dumps(self) -> Callable[[Any], bytes]:
        """How :meth:`encode_key` turns a canonical key into bytes."""
        return self.raw_key_dumps

    @property
    def raw_encode_key(self) -> Callable[[Any], tuple[bytes, bool]]:
        """:meth:`encode_key` without the error translation (raises ``TypeError``,
        ``ValueError`` or ``OverflowError``), for bulk encoding by a save."""
        return functools.partial(_encode_key, dumps=self._canonical_dumps)

    @property
    def flat_tuple_code(self) -> int | None:
        """The msgpack ext type :attr:`raw_encode_key` stores a tuple of str, int (64 bits),
        bytes and None as (its elements packed one after the other, as msgpack-python
        packs them), so a save may pack those in C (``objectspace.collections.key_encoder``);
        ``None``: stored otherwise."""
        return None

    def encode_key(self, key: Any) -> tuple[bytes, bool]:
        """The stored key of a dict key or set element, and whether it is *exact*.

        The bytes are the encoding of :func:`canonical_key` (equal for Python-equal keys).
        Exact means that decoding them gives ``key`` back with its types (``"a"``, ``1``,
        ``(1, "a")``); otherwise (``True``, ``1.0``, a frozenset, an aware datetime not in
        UTC) the collection stores the key's own encoding beside it. Raises
        :class:`~objectspace.errors.SerializationError` for a key that cannot be encoded
        (or a NaN key).
        """
        try:
            return _encode_key(key, self._canonical_dumps)
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:
            raise SerializationError(
                f"{self.name} cannot encode the key {_describe(key)}: {exc}"
            ) from exc

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


# msgpack extension type codes; part of the stored format, never renumber them.
_EXT_TUPLE = 1
_EXT_DATETIME = 2
_EXT_DATE = 3
_EXT_SET = 4
_EXT_FROZENSET = 5
_EXT_BIGINT = 6  # an int beyond 64 bits, as decimal digits: only in stored keys


_SHARED = threading.local()


class MsgpackSerializer(Serializer):
    """The default serializer: msgpack with extension types for the Python types it lacks.

    ``int`` must fit in 64 bits; floats are stored as 64-bit doubles (exact round-trip).
    Cost: one C-level pack or unpack per value, plus a Python call per extension value.
    """

    name = "msgpack"

    def __init__(self) -> None:
        # Top-level values go through one Packer per thread (a Packer is not thread-safe);
        # extension values pack their elements with a fresh packer, because the default
        # hook runs inside the outer Packer's pack() and must not re-enter it. Every
        # MsgpackSerializer (one per space) shares the thread's packers: a packer keeps a
        # buffer of its own (128 KiB), which a worker's spaces would otherwise each hold.
        self._local = _SHARED if type(self) is MsgpackSerializer else threading.local()
        self._pack: Callable[[Any], bytes] = functools.partial(
            msgpack.packb, default=self._default, use_bin_type=True, strict_types=True
        )

    def _packer(self) -> msgpack.Packer:
        """The calling thread's packer, made on first use."""
        try:
            packer: msgpack.Packer = self._local.packer
        except AttributeError:
            packer = self._local.packer = msgpack.Packer(
                default=self._default, use_bin_type=True, strict_types=True, autoreset=True
            )
        return packer

    @property
    def raw_encode_key(self) -> Callable[[Any], tuple[bytes, bool]]:
        # A flat tuple key (the common composite key) is packed here, as the extension
        # value the general path builds, without building it.
        # The calling thread's element packer, fetched once: the function is used by the
        # save that asked for it, in this thread.
        canonical = self._canonical_dumps
        pack = self._inner_pack()
        pack_array = self._array_pack()
        plain = PLAIN_KEY_TYPES

        def encode(key: Any) -> tuple[bytes, bool]:
            if type(key) is tuple and plain.issuperset(map(type, key)):
                try:
                    if len(key) < 16:
                        # The elements packed in one call: a fixarray's bytes after its
                        # one-byte header (exact plain types pack alike either way).
                        body = pack_array(key)[1:]
                    else:
                        body = b"".join(map(pack, key))
                except OverflowError:  # an int beyond 64 bits: the general path's encoding
                    return _encode_key(key, canonical)
                n = len(body)
                return (_EXT_TUPLE_HEADS[n] if n < 256 else _ext_tuple_head(n)) + body, True
            return _encode_key(key, canonical)

        return encode

    @property
    def flat_tuple_code(self) -> int | None:  # (a subclass may store tuples its own way)
        return _EXT_TUPLE if type(self) is MsgpackSerializer else None

    def _inner_pack(self) -> Callable[[Any], bytes]:
        """The calling thread's packer for the elements of an extension value that holds
        only values of :data:`_FLAT_TYPES` (which never call the default hook, so this
        packer is never re-entered): the bytes ``self._pack`` gives, without a new packer
        per element."""
        try:
            pack: Callable[[Any], bytes] = self._local.inner
        except AttributeError:
            pack = self._local.inner = msgpack.Packer(
                use_bin_type=True, strict_types=True, autoreset=True
            ).pack
        return pack

    def _array_pack(self) -> Callable[[Any], bytes]:
        """The calling thread's packer of a tuple of :data:`PLAIN_KEY_TYPES` values as a
        msgpack array (without ``strict_types``, which packs a tuple through the default
        hook; the values' exact types pack as under it)."""
        try:
            pack: Callable[[Any], bytes] = self._local.array
        except AttributeError:
            pack = self._local.array = msgpack.Packer(use_bin_type=True, autoreset=True).pack
        return pack

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # What pickles made before __reduce__ existed call.
        self.__init__()  # type: ignore[misc]

    def __reduce__(self) -> tuple[Any, ...]:
        # A new serializer (its packers are per thread): with every pickle protocol, where
        # protocols 0 and 1 would skip __setstate__ for the empty state.
        return (type(self), ())

    def _default(self, obj: Any) -> Any:
        # strict_types sends tuples and subclasses of builtins here instead of packing
        # them as their base type, so each keeps its identity or is normalised explicitly.
        if isinstance(obj, tuple):
            if set(map(type, obj)) <= _FLAT_TYPES:  # no extension value inside: one packer
                return msgpack.ExtType(_EXT_TUPLE, b"".join(map(self._inner_pack(), obj)))
            pack = self._pack
            return msgpack.ExtType(_EXT_TUPLE, b"".join(pack(v) for v in obj))
        pack = self._pack
        if isinstance(obj, _dt.datetime):
            return msgpack.ExtType(_EXT_DATETIME, obj.isoformat().encode("ascii"))
        if isinstance(obj, _dt.date):
            return msgpack.ExtType(_EXT_DATE, obj.isoformat().encode("ascii"))
        if isinstance(obj, frozenset | set):
            code = _EXT_FROZENSET if isinstance(obj, frozenset) else _EXT_SET
            return msgpack.ExtType(code, pack(list(obj)))
        if isinstance(obj, bool):
            return bool(obj)
        if isinstance(obj, int):
            return int(obj)
        if isinstance(obj, float):
            return float(obj)
        if isinstance(obj, str):
            return str(obj)
        if isinstance(obj, bytes | bytearray | memoryview):
            return bytes(obj)
        if isinstance(obj, dict):
            return dict(obj)
        if isinstance(obj, list):
            return list(obj)
        raise TypeError(f"cannot serialize an object of type {type(obj).__name__}")

    def dumps(self, value: Any) -> bytes:
        packer = self._packer()
        try:
            data: bytes = packer.pack(value)
            return data
        except Exception as exc:  # also what a value's own methods raise, and RecursionError
            packer.reset()
            raise SerializationError(f"msgpack cannot encode {_describe(value)}: {exc}") from exc

    @property
    def raw_key_dumps(self) -> Callable[[Any], bytes]:
        pack: Callable[[Any], bytes] = self._packer().pack
        return pack

    @property
    def _canonical_dumps(self) -> Callable[[Any], bytes]:
        # A canonical key may hold an int beyond 64 bits (the canonical form of 1e300).
        return self._key_dumps

    def _key_dumps(self, key: Any) -> bytes:
        packer = self._packer()
        try:
            data: bytes = packer.pack(key)
        except OverflowError:
            packer.reset()
            data = packer.pack(_bigints_as_ext(key))
        return data

    @property
    def raw_dumps(self) -> Callable[[Any], bytes]:
        # The calling thread's packer (it resets itself after a failed pack): one C-level
        # call per value, no Python frame.
        pack: Callable[[Any], bytes] = self._packer().pack
        return pack

    def loads(self, data: bytes) -> Any:
        try:
            return _unpackb(data)
        except Exception as exc:
            raise SerializationError(f"msgpack cannot decode {len(data)} bytes: {exc}") from exc

    @property
    def raw_loads(self) -> Callable[[bytes], Any]:
        return _RAW_UNPACKB

    @property
    def raw_loads_many(self) -> Callable[[list[bytes]], list[Any]]:
        return _raw_unpack_many


def _ext_tuple_head(n: int) -> bytes:
    """msgpack's header of a tuple extension value of ``n`` bytes (fixext 1/2/4/8/16,
    else ext 8/16/32)."""
    fixed = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}.get(n)
    if fixed is not None:
        return bytes((fixed, _EXT_TUPLE))
    if n < 1 << 8:
        return bytes((0xC7, n, _EXT_TUPLE))
    if n < 1 << 16:
        return b"\xc8" + n.to_bytes(2, "big") + bytes((_EXT_TUPLE,))
    return b"\xc9" + n.to_bytes(4, "big") + bytes((_EXT_TUPLE,))


_EXT_TUPLE_HEADS = tuple(_ext_tuple_head(n) for n in range(256))


def _bigints_as_ext(key: Any) -> Any:
    """A canonical key with its ints beyond 64 bits as extension values."""
    if type(key) is int:
        if -(1 << 63) <= key < 1 << 64:
            return key
        return msgpack.ExtType(_EXT_BIGINT, str(key).encode("ascii"))
    if type(key) is tuple:
        return tuple(_bigints_as_ext(part) for part in key)
    if isinstance(key, _SortedFrozenset):
        return _SortedFrozenset._make(tuple(_bigints_as_ext(part) for part in key))
    return key


def _unpack_all(data: bytes) -> list[Any]:
    unpacker = msgpack.Unpacker(**_UNPACK_OPTIONS)
    unpacker.feed(data)
    return list(unpacker)


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _EXT_TUPLE:
        return tuple(_unpack_all(data))
    if code == _EXT_DATETIME:
        return _dt.datetime.fromisoformat(data.decode("ascii"))
    if code == _EXT_DATE:
        return _dt.date.fromisoformat(data.decode("ascii"))
    if code == _EXT_SET:
        return set(_unpackb(data))
    if code == _EXT_FROZENSET:
        return frozenset(_unpackb(data))
    if code == _EXT_BIGINT:
        return int(data.decode("ascii"))
    return msgpack.ExtType(code, data)


_UNPACK_OPTIONS: dict[str, Any] = {
    "ext_hook": _ext_hook,
    "raw": False,
    "strict_map_key": False,
    "use_list": True,
}


def _unpackb(data: bytes) -> Any:
    return msgpack.unpackb(data, **_UNPACK_OPTIONS)


# One C-level call per value (no Python frame): what bulk restores use.
_RAW_UNPACKB: Callable[[bytes], Any] = functools.partial(msgpack.unpackb, **_UNPACK_OPTIONS)


def _raw_unpack_many(datas: list[bytes]) -> list[Any]:
    """Each of ``datas`` decoded: one streaming unpacker over their concatenation (the
    keyword arguments of ``unpackb`` cost more than decoding a small value). Each encoding
    is one msgpack object; when the stream does not hold exactly one object per encoding
    (a damaged one), each is decoded alone, which raises for the damaged one."""
    if len(datas) < 16:
        return list(map(_RAW_UNPACKB, datas))
    joined = b"".join(datas)
    unpacker = msgpack.Unpacker(max_buffer_size=max(len(joined), 1), **_UNPACK_OPTIONS)
    unpacker.feed(joined)
    try:
        values = list(unpacker)
    except Exception:  # a damaged encoding: found and raised below
        values = []
    if len(values) != len(datas):
        return list(map(_RAW_UNPACKB, datas))
    return values


class JsonSerializer(Serializer):
    """Compact JSON text (``{"kind":"Array"}``), readable when inspecting a store.

    Types JSON lacks are tagged: ``{"$tuple": [...]}``, ``{"$bytes": "<base64>"}``,
    ``{"$datetime": "<iso>"}``, ``{"$date": "<iso>"}``, ``{"$set": [...]}``,
    ``{"$frozenset": [...]}``, and a dict whose keys are not all strings (or whose only key
    starts with ``$``) as ``{"$dict": [[k, v], ...]}``. Floats that JSON cannot express
    (NaN, infinities) are refused.
    """

    name = "json"

    def dumps(self, value: Any) -> bytes:
        try:
            return json.dumps(
                to_tagged_json(value), separators=(",", ":"), ensure_ascii=False, allow_nan=False
            ).encode("utf-8")
        except Exception as exc:  # also what a value's own methods raise, and RecursionError
            raise SerializationError(f"JSON cannot encode {_describe(value)}: {exc}") from exc

    def loads(self, data: bytes) -> Any:
        try:
            return json.loads(data, object_hook=_from_json)
        except Exception as exc:  # ValueError, TypeError, RecursionError on deep nesting
            raise SerializationError(f"JSON cannot decode {len(data)} bytes: {exc}") from exc


def to_tagged_json(value: Any, *, lenient: bool = False) -> Any:
    """``value`` as JSON-able data, with the tags of :class:`JsonSerializer`.

    Set elements are sorted by their JSON text, so equal sets give equal JSON. With
    ``lenient`` (for display and export, not storage), non-finite floats become
    ``{"$float": "nan" | "inf" | "-inf"}`` and any other type ``{"$repr": "<repr>"}``
    instead of a ``TypeError``/``ValueError``.
    """

    def enc(v: Any) -> Any:
        if v is None or isinstance(v, bool | int | str):
            return v
        if isinstance(v, float):
            if lenient and not math.isfinite(v):
                return {"$float": "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
            return v
        if isinstance(v, list):
            return [enc(x) for x in v]
        if isinstance(v, tuple):
            return {"$tuple": [enc(x) for x in v]}
        if isinstance(v, dict):
            if all(isinstance(k, str) for k in v) and not (
                len(v) == 1 and next(iter(v)).startswith("$")
            ):
                return {k: enc(x) for k, x in v.items()}
            return {"$dict": [[enc(k), enc(x)] for k, x in v.items()]}
        if isinstance(v, bytes | bytearray | memoryview):
            return {"$bytes": base64.b64encode(bytes(v)).decode("ascii")}
        if isinstance(v, _dt.datetime):
            return {"$datetime": v.isoformat()}
        if isinstance(v, _dt.date):
            return {"$date": v.isoformat()}
        if isinstance(v, set | frozenset):
            tag = "$frozenset" if isinstance(v, frozenset) else "$set"
            return {tag: sorted((enc(x) for x in v), key=_canonical_text)}
        if lenient:
            try:
                text = repr(v)
            except Exception as exc:  # a broken __repr__: name the type instead
                text = f"<{type(v).__name__} object, whose repr raised {type(exc).__name__}>"
            return {"$repr": text}
        raise TypeError(f"cannot serialize an object of type {type(v).__name__}")

    return enc(value)


def _canonical_text(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=True)


def _from_json(obj: dict[str, Any]) -> Any:
    if len(obj) != 1:
        return obj
    ((tag, payload),) = obj.items()
    if tag == "$tuple":
        return tuple(payload)
    if tag == "$bytes":
        return base64.b64decode(payload)
    if tag == "$datetime":
        return _dt.datetime.fromisoformat(payload)
    if tag == "$date":
        return _dt.date.fromisoformat(payload)
    if tag == "$set":
        return set(payload)
    if tag == "$frozenset":
        return frozenset(payload)
    if tag == "$dict":
        return {k: v for k, v in payload}
    return obj


class PickleSerializer(Serializer):
    """Any picklable value, with pickle protocol 5.

    Opt-in only: loading pickled state executes code chosen by whoever wrote the store, so
    use it only for stores that nobody else can write.
    """

    name = "pickle"

    def dumps(self, value: Any) -> bytes:
        try:
            return pickle.dumps(value, protocol=5)
        except Exception as exc:
            raise SerializationError(f"pickle cannot encode {_describe(value)}: {exc}") from exc

    @property
    def raw_key_dumps(self) -> Callable[[Any], bytes]:
        return _pickle_without_memo

    def loads(self, data: bytes) -> Any:
        try:
            return pickle.loads(data)
        except Exception as exc:
            raise SerializationError(f"pickle cannot decode {len(data)} bytes: {exc}") from exc


def _pickle_without_memo(value: Any) -> bytes:
    # Without the memo, equal keys pickle equal whether or not they share sub-objects
    # (``("ab", "ab")`` with one string object or two); keys are never recursive.
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=5)
    pickler.fast = True
    try:
        pickler.dump(value)
    except (TypeError, ValueError, OverflowError):
        raise
    except Exception as exc:  # pickle raises whatever the value's reduction raises
        raise TypeError(f"pickle cannot encode it: {exc}") from exc
    return buffer.getvalue()


# Keys of these exact types are their own canonical form, and decode back unchanged.
PLAIN_KEY_TYPES: frozenset[type] = frozenset({str, int, bytes, type(None)})
# The types msgpack packs itself (strict_types: exactly these), never through the default
# hook.
_FLAT_TYPES: frozenset[type] = frozenset({str, int, bytes, type(None), float, bool})


class _SortedFrozenset(frozenset[Any]):
    """A frozenset that iterates in the order given: the canonical form of a frozenset key.

    With pickle, stored keys name ``_SortedFrozenset._make``: part of the stored format.
    """

    __slots__ = ("_order",)
    _order: tuple[Any, ...]

    def __iter__(self) -> Any:
        return iter(self._order)

    def __reduce__(self) -> Any:
        return (_SortedFrozenset._make, (self._order,))

    @staticmethod
    def _make(order: tuple[Any, ...]) -> _SortedFrozenset:
        made = _SortedFrozenset(order)
        made._order = order
        return made


def _canonical_number(key: Any) -> tuple[Any, bool]:
    if isinstance(key, bool):
        return int(key), False
    if isinstance(key, int):
        return int(key), type(key) is int
    if isinstance(key, float):
        if math.isnan(key):
            raise ValueError("a NaN key is not equal to itself and could never be found again")
        if key.is_integer():
            return int(key), False
        return float(key), type(key) is float
    if isinstance(key, complex):
        if key.imag == 0:
            return _canonical_number(key.real)[0], False
        if math.isnan(key.real) or math.isnan(key.imag):
            raise ValueError("a NaN key is not equal to itself and could never be found again")
        return key, True
    if isinstance(key, decimal.Decimal | fractions.Fraction):
        if isinstance(key, decimal.Decimal) and not key.is_finite():
            return _canonical_number(float(key))[0], False
        exact = fractions.Fraction(key)
        if exact.denominator == 1:
            return exact.numerator, False
        if float(exact) == exact:
            return float(exact), False
        return exact, type(key) is fractions.Fraction
    return key, True


def canonical_key(key: Any, dumps: Callable[[Any], bytes]) -> tuple[Any, bool]:
    """``key`` in a form that is equal for Python-equal keys, and whether that is ``key``
    itself (exact).

    Integral floats, bools (and Decimal/Fraction/complex numbers equal to one) become
    ``int``; ``-0.0`` becomes ``0``; aware datetimes become UTC; frozensets iterate in the
    order of their canonical elements' encodings (``dumps``); tuples are canonical element by
    element. Other values are their own canonical form (with pickle, a key of another type is
    stored under its pickle: give such keys equal pickles when they are equal). Raises
    ``ValueError`` for a NaN anywhere in the key. Cost: O(size of the key).
    """
    kind = type(key)
    if kind in PLAIN_KEY_TYPES:
        return key, True
    if kind is tuple:
        if set(map(type, key)) <= PLAIN_KEY_TYPES:  # the common flat key: one C-level pass
            return key, True
        parts = [canonical_key(part, dumps) for part in key]
        if all(exact for _, exact in parts):
            return key, True
        return tuple(part for part, _ in parts), False
    if isinstance(key, numbers.Number):
        return _canonical_number(key)
    if isinstance(key, _dt.datetime):
        if key.tzinfo is not None and key.utcoffset() is not None:
            utc = key.astimezone(_dt.UTC)
            return utc, key.tzinfo is _dt.UTC and kind is _dt.datetime
        return key, kind is _dt.datetime
    if isinstance(key, frozenset):
        pairs = sorted(
            ((dumps(canon), canon) for canon, _ in (canonical_key(e, dumps) for e in key)),
            key=lambda pair: pair[0],
        )
        return _SortedFrozenset._make(tuple(canon for _, canon in pairs)), False
    if isinstance(key, tuple):
        return canonical_key(tuple(key), dumps)[0], False
    return key, True


def encode_key_with(key: Any, dumps: Callable[[Any], bytes]) -> tuple[bytes, bool]:
    """:meth:`Serializer.encode_key` with the canonical key encoded by ``dumps`` (which may
    raise ``TypeError``, ``ValueError`` or ``OverflowError``)."""
    return _encode_key(key, dumps)


def _encode_key(key: Any, dumps: Callable[[Any], bytes]) -> tuple[bytes, bool]:
    if type(key) in PLAIN_KEY_TYPES:
        return dumps(key), True
    canon, exact = canonical_key(key, dumps)
    return dumps(canon), exact


def _describe(value: Any) -> str:
    """``value``'s type and the start of its repr, for an error message.

    Never raises: a repr that raises (or recurses too deep) is named instead of shown.
    """
    try:
        text = repr(value)
    except Exception as exc:  # a broken __repr__, or RecursionError on deep nesting
        return f"a {type(value).__name__} (whose repr raised {type(exc).__name__})"
    if not isinstance(text, str):
        return f"a {type(value).__name__}"
    if len(text) > 60:
        text = text[:57] + "..."
    return f"a {type(value).__name__} ({text})"


_BY_NAME: dict[str, type[Serializer]] = {
    cls.name: cls for cls in (MsgpackSerializer, JsonSerializer, PickleSerializer)
}


def serializer_by_name(name: str) -> Serializer:
    """Return a new serializer by its short name: ``msgpack``, ``json`` or ``pickle``."""
    try:
        return _BY_NAME[name]()
    except KeyError:
        raise ValueError(
            f"unknown serializer {name!r}; expected one of {', '.join(sorted(_BY_NAME))}"
        ) from None

"""How a Python value becomes bytes and back.

Three serializers share one small interface, :class:`Serializer`:

* :class:`MsgpackSerializer` — the default: compact and fast; ``tuple``, ``bytes``,
  ``datetime``, ``date``, ``set`` and ``frozenset`` round-trip with their type.
* :class:`JsonSerializer` — readable text (the layout of the reference document's examples);
  the same types round-trip through small tagged objects such as ``{"$tuple": [...]}``.
* :class:`PickleSerializer` — any picklable value; opt-in only, never the default, because
  unpickling state that someone else wrote executes their code.

Equal values encode to equal bytes within one serializer (dict keys and set elements are
stored under their encoding), except across types that Python itself treats as equal
(``1``, ``1.0`` and ``True``), which should not be mixed as keys of one collection.
"""

from __future__ import annotations

import base64
import datetime as _dt
import functools
import json
import math
import pickle
import threading
from collections.abc import Callable
from typing import Any, ClassVar

import msgpack

from objectspace.errors import SerializationError

__all__ = [
    "JsonSerializer",
    "MsgpackSerializer",
    "PickleSerializer",
    "Serializer",
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


class MsgpackSerializer(Serializer):
    """The default serializer: msgpack with extension types for the Python types it lacks.

    ``int`` must fit in 64 bits; floats are stored as 64-bit doubles (exact round-trip).
    Cost: one C-level pack or unpack per value, plus a Python call per extension value.
    """

    name = "msgpack"

    def __init__(self) -> None:
        # Top-level values go through one Packer per thread (a Packer is not thread-safe);
        # extension values pack their elements with a fresh packer, because the default
        # hook runs inside the outer Packer's pack() and must not re-enter it.
        self._local = threading.local()
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
        pack = self._pack
        if isinstance(obj, tuple):
            return msgpack.ExtType(_EXT_TUPLE, b"".join(pack(v) for v in obj))
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

    def loads(self, data: bytes) -> Any:
        try:
            return pickle.loads(data)
        except Exception as exc:
            raise SerializationError(f"pickle cannot decode {len(data)} bytes: {exc}") from exc


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

"""Stub of the C extension ``objectspace.collections._core`` (src/objectspace/collections/_core.c).

The same classes as :mod:`objectspace.collections._pycore`, which the rest of the package
is type-checked against (see :mod:`objectspace.collections._impl`).
"""

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from collections.abc import Set as AbstractSet
from typing import Any, TypeVar, overload

from objectspace.collections.base import Page
from objectspace.space import ObjectSpace

_T = TypeVar("_T")

class ObjectBase:
    __slots__ = (
        "_cleared",
        "_dirty",
        "_id",
        "_meta",
        "_new",
        "_pending",
        "_registered",
        "_space",
    )
    _cleared: bool
    _dirty: set[Any] | None
    _id: str
    _meta: bool
    _new: bool
    _pending: Page | None
    _registered: bool
    _space: ObjectSpace | None
    def __getstate__(self) -> tuple[dict[str, Any] | None, dict[str, Any]]: ...
    def __setstate__(self, state: Any, /) -> None: ...
    def __reduce__(self) -> tuple[Any, ...]: ...

class ValueBase(ObjectBase):
    __slots__ = ("_value",)
    _value: Any
    @property
    def value(self) -> Any: ...
    @value.setter
    def value(self, value: Any) -> None: ...
    def _save_value(self, out: Any, full: bool, /) -> Any: ...
    def _freeze_value(self, page: Any, /) -> None: ...

def rows_from_columns(
    names: tuple[str, ...], columns: list[list[Any]], /
) -> list[dict[str, Any]]: ...
def table_heads(names: list[str], /) -> tuple[list[str], list[int], list[str]]: ...
def grouped_tables(
    edits: list[Any],
    table_head: list[int],
    table_tail: list[str],
    order: list[int] | None,
    full: bool,
    /,
) -> tuple[list[int], dict[str, int], list[int], list[int], list[dict[bytes, Any]]]: ...
def value_setup(pages: tuple[tuple[Any, ...], ...], table_changes: type, /) -> None: ...

class ArrayBase(ObjectBase):
    __slots__ = ("_data",)
    _data: list[Any]
    def __len__(self) -> int: ...
    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __setitem__(self, index: int, value: Any) -> None: ...
    def __iter__(self) -> Iterator[Any]: ...

class ListBase(ObjectBase):
    __slots__ = ("_data", "_from")
    _data: list[Any]
    _from: int
    def __len__(self) -> int: ...
    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def append(self, value: Any, /) -> None: ...

class QueueBase(ObjectBase):
    __slots__ = ("_data", "_head")
    _data: deque[Any]
    _head: int
    def enqueue(self, value: Any, /) -> None: ...
    def dequeue(self) -> Any: ...
    def peek(self) -> Any: ...
    def __len__(self) -> int: ...

class StackBase(ObjectBase):
    __slots__ = ("_data",)
    _data: list[Any]
    def push(self, value: Any, /) -> None: ...
    def pop(self) -> Any: ...
    def peek(self) -> Any: ...
    def __len__(self) -> int: ...

def emit_rows(
    rows: dict[bytes, Any],
    slots: Iterable[Any],
    data: dict[Any, Any],
    order: dict[Any, int],
    key_dumps: Callable[[Any], bytes],
    dumps: Callable[[Any], bytes],
    pack_uint: Callable[[int], bytes],
    plain: AbstractSet[type],
    prefixes: tuple[bytes, ...],
    entry_mark: bytes,
    deleted: object,
    encode_key: Callable[[Any], tuple[bytes, bool]],
    unencodable: tuple[type[BaseException], ...],
    /,
) -> bool: ...
def untracked_set() -> set[Any]: ...
def emit_sorted_rows(
    rows: dict[bytes, Any],
    slots: Iterable[Any],
    data: dict[Any, Any],
    sorted_list: Any,
    cleared: bool,
    dumps: Callable[[Any], bytes],
    encode_key: Callable[[Any], tuple[bytes, bool]],
    prefix: bytes,
    pack_entry: Callable[[int, bytes | None, bytes], bytes],
    deleted: object,
    unencodable: tuple[type[BaseException], ...],
    /,
) -> None: ...
def emit_set_rows(
    rows: dict[bytes, Any],
    slots: Iterable[Any],
    members: AbstractSet[Any],
    spell: dict[Any, Any],
    cleared: bool,
    key_dumps: Callable[[Any], bytes],
    encode_key: Callable[[Any], tuple[bytes, bool]],
    plain: AbstractSet[type],
    entry_mark: bytes,
    spelled: bytes,
    dumps: Callable[[Any], bytes],
    deleted: object,
    unencodable: tuple[type[BaseException], ...],
    /,
) -> None: ...

class KeyEncoder:
    def __init__(self, code: int, fallback: Callable[[Any], tuple[bytes, bool]]) -> None: ...
    def __call__(self, key: Any, /) -> tuple[bytes, bool]: ...

def datetime_from_ms(fallback: Callable[[int], Any], ms: int, /) -> Any: ...
def numbered_folders(folders: Iterable[str], /) -> list[tuple[str, int] | tuple[()]]: ...
def row_columns(
    table_rows: list[dict[bytes, Any]], full: bool, deleted: Any, /
) -> tuple[
    list[int],
    list[int],
    list[int],
    list[int],
    list[bytes],
    list[int],
    dict[int, list[bytes]],
    list[int],
    list[bytes],
    int,
]: ...
def sorted_between(sorted_list: Any, low: Any, high: Any, /) -> list[Any]: ...
def sorted_insert(sorted_list: Any, value: Any, /) -> None: ...
def sorted_remove(sorted_list: Any, value: Any, /) -> None: ...
def untrack(obj: _T, /) -> _T: ...

"""Files a storage keeps beside its checkpoints.

A :class:`FileArea` is a flat folder of named files that a storage offers for what is not
a checkpoint but helps a restore: the copies of instances' local stores
(:mod:`objectspace.engine.copies`). Nothing in it is ever the source of truth, and nothing
read from it is trusted: its user verifies what it reads. ``sqlite:///path`` keeps it in
the folder ``path.files`` beside the database, segment storage under ``files/`` of its root
(on its filesystem: local disk, S3, HDFS); PostgreSQL and ``memory://`` storage keep none.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any

from objectspace.errors import StorageError

__all__ = ["FileArea", "FsspecArea", "LocalArea", "check_name"]


def check_name(name: str) -> str:
    """``name`` if it is a plain file name (letters, digits, ``.``, ``-``, ``_``, not
    starting with a dot), else ``ValueError``."""
    if (
        not name
        or name.startswith(".")
        or not all(c.isascii() and (c.isalnum() or c in ".-_") for c in name)
    ):
        raise ValueError(f"a file area's names are plain file names, not {name!r}")
    return name


class FileArea(ABC):
    """A flat folder of named files (see the module docstring). A file is put whole or
    not at all: a reader never sees half of one."""

    @abstractmethod
    def put(self, name: str, source: str) -> int:
        """Store the local file ``source`` as ``name`` (replacing one of that name); its
        size in bytes."""

    @abstractmethod
    def get(self, name: str, target: str) -> int | None:
        """Copy ``name`` to the local file ``target``; its size, or ``None`` if there is
        no such file."""

    @abstractmethod
    def read(self, name: str, ranges: Sequence[tuple[int, int | None]]) -> list[bytes] | None:
        """The bytes of each ``(start, stop)`` range of ``name`` (``stop`` ``None``: to its
        end; fewer where the file is shorter), or ``None`` if there is no such file."""

    @abstractmethod
    def names(self) -> list[str]:
        """The names of the files held."""

    @abstractmethod
    def delete(self, names: Iterable[str]) -> None:
        """Delete ``names`` (those missing are skipped)."""


class LocalArea(FileArea):
    """A file area in a folder of the local filesystem, created on the first put."""

    def __init__(self, root: str) -> None:
        self.root = root

    def __repr__(self) -> str:
        return f"LocalArea({self.root!r})"

    def put(self, name: str, source: str) -> int:
        target = os.path.join(self.root, check_name(name))
        part = f"{target}.{uuid.uuid4().hex}.part"
        try:
            os.makedirs(self.root, exist_ok=True)
            shutil.copyfile(source, part)
            os.replace(part, target)  # whole or not at all
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(part)
            raise StorageError(f"cannot store {name!r} in {self.root!r}: {exc}") from exc
        return os.path.getsize(target)

    def get(self, name: str, target: str) -> int | None:
        source = os.path.join(self.root, check_name(name))
        try:
            shutil.copyfile(source, target)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read {name!r} from {self.root!r}: {exc}") from exc
        return os.path.getsize(target)

    def read(self, name: str, ranges: Sequence[tuple[int, int | None]]) -> list[bytes] | None:
        source = os.path.join(self.root, check_name(name))
        try:
            with open(source, "rb") as f:
                found = []
                for start, stop in ranges:
                    f.seek(start)
                    found.append(f.read() if stop is None else f.read(max(stop - start, 0)))
                return found
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read {name!r} from {self.root!r}: {exc}") from exc

    def names(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.root) if not n.endswith(".part"))
        except FileNotFoundError:
            return []

    def delete(self, names: Iterable[str]) -> None:
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.root, check_name(name)))


class FsspecArea(FileArea):
    """A file area in folder ``base`` of an fsspec filesystem ``fs`` (S3, HDFS, ...). A put
    writes a temporary name and moves it (object stores write an object whole anyway)."""

    def __init__(self, fs: Any, base: str) -> None:
        self.fs = fs
        self.base = base.rstrip("/")

    def __repr__(self) -> str:
        return f"FsspecArea({type(self.fs).__name__}, {self.base!r})"

    def _path(self, name: str) -> str:
        return f"{self.base}/{check_name(name)}"

    def put(self, name: str, source: str) -> int:
        target = self._path(name)
        try:
            self.fs.makedirs(self.base, exist_ok=True)
            self.fs.put_file(source, target)
        except Exception as exc:  # fsspec raises what its backend raises
            raise StorageError(f"cannot store {name!r} in {self.base!r}: {exc}") from exc
        return os.path.getsize(source)

    def get(self, name: str, target: str) -> int | None:
        source = self._path(name)
        try:
            self.fs.get_file(source, target)
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise StorageError(f"cannot read {name!r} from {self.base!r}: {exc}") from exc
        return os.path.getsize(target)

    def read(self, name: str, ranges: Sequence[tuple[int, int | None]]) -> list[bytes] | None:
        source = self._path(name)
        try:
            if len(ranges) > 1 and getattr(self.fs, "async_impl", False):  # (S3: concurrent)
                found = self.fs.cat_ranges(
                    [source] * len(ranges),
                    [a for a, _ in ranges],
                    [b for _, b in ranges],
                    on_error="return",
                )
                for result in found:
                    if isinstance(result, Exception):
                        raise result
                return [bytes(r) for r in found]
            return [bytes(self.fs.cat_file(source, start=a, end=b)) for a, b in ranges]
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise StorageError(f"cannot read {name!r} from {self.base!r}: {exc}") from exc

    def names(self) -> list[str]:
        try:
            self.fs.invalidate_cache(self.base)
            found = self.fs.ls(self.base, detail=False)
        except FileNotFoundError:
            return []
        except Exception as exc:
            raise StorageError(f"cannot list {self.base!r}: {exc}") from exc
        return sorted(str(p).rstrip("/").rsplit("/", 1)[-1] for p in found)

    def delete(self, names: Iterable[str]) -> None:
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(self._path(name))

"""Files on the local disk, written and synced so that a crash never leaves a committed
checkpoint naming a file that did not reach the disk: a new file is created (never
replacing one), written, synced, and its folder synced; a folder made for it is synced into
its parent. ``start_write_back`` lets the writes of many files start together, so that one
file-system journal commit covers them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Sequence
from typing import Any

__all__ = ["fsync_path", "plain", "start_write_back", "write_new_file"]


def _libc_sync_file_range() -> Any:
    """Linux's ``sync_file_range`` through ctypes, or ``None`` where there is none."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_SYNC_FILE_RANGE = _libc_sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2


def start_write_back(path: str) -> None:
    """Start writing ``path``'s cached pages to the disk, without waiting (a hint: where
    ``sync_file_range`` is missing, nothing)."""
    if _SYNC_FILE_RANGE is None:
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        _SYNC_FILE_RANGE(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)
    finally:
        os.close(fd)


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_folders(folder: str, sync: bool) -> None:
    """``os.makedirs(folder, exist_ok=True)``; with ``sync``, each folder it creates is
    synced into its parent (a new folder's name is in the parent's entries)."""
    missing = []
    while folder and not os.path.isdir(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    for created in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another writer made it meanwhile
            os.mkdir(created)
        if sync:
            fsync_path(os.path.dirname(created))


def write_new_file(path: str, data: bytes, sync: bool, sync_folders: bool) -> None:
    """Create ``path`` (never replacing a file already there) holding ``data``; with
    ``sync``, the file and then its folder are synced to the disk before this returns; with
    ``sync_folders``, each folder made for it is synced into its parent."""
    folder = os.path.dirname(path)
    _make_folders(folder, sync_folders)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        if sync:
            fsync_path(folder)
    except BaseException:
        with contextlib.suppress(OSError):  # a partial file: the GC would delete it, later
            os.unlink(path)
        raise


def plain(parts: Sequence[str]) -> bool:
    """Whether path components are plain names (no empty, ``.`` or ``..`` component)."""
    return all(part not in ("", ".", "..") for part in parts)

"""Bytes that reach the disk: a loop-mounted volume per run, or the process's I/O counters.

:func:`volume` gives a run its own ext4 file system on a loop device and measures the bytes
written to that block device (``/sys/block/loopN/stat`` field 7, sectors of 512 bytes),
everything the run causes there: file data, SQLite's WAL and its copy back, file-system
metadata and the ext4 journal. ``sync`` (and ``syncfs`` of the volume) runs before each
reading, so what the run left in the page cache is counted too. The volume is made with its
inode tables and journal initialised up front (no lazy-init writes in the background) and
mounted ``noatime``. It needs root and a free loop device; without them it says why and
falls back to a temporary folder measured with :func:`process_written`.

:func:`process_written` reads ``/proc/self/io``: ``write_bytes`` (bytes this process, and
its children once reaped, sent to the page cache of a block-backed file system, counted
when a page is first dirtied) minus ``cancelled_write_bytes`` (dirty pages of files
truncated or deleted before they were written back).

    with volume() as vol:
        run(vol.path)
    print(vol.written, vol.method)
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

__all__ = ["Volume", "process_written", "tree_size", "volume"]

_SECTOR = 512


def process_written() -> int:
    """Bytes this process (and its reaped children) caused to be written to block devices."""
    counters: dict[str, int] = {}
    with open("/proc/self/io", encoding="ascii") as f:
        for line in f:
            name, _, value = line.partition(":")
            counters[name.strip()] = int(value)
    return counters["write_bytes"] - counters.get("cancelled_write_bytes", 0)


def _syncfs(path: str) -> None:
    os.sync()
    with suppress(OSError, AttributeError):
        fd = os.open(path, os.O_RDONLY)
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.syncfs(fd)
        finally:
            os.close(fd)


def _sectors_written(device: str) -> int:
    name = os.path.basename(device)
    with open(f"/sys/block/{name}/stat", encoding="ascii") as f:
        return int(f.read().split()[6])


def tree_size(path: str) -> int:
    """Bytes of the files under ``path`` (apparent sizes), lost+found aside."""
    total = 0
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != "lost+found"]
        for name in files:
            with suppress(OSError):
                total += os.path.getsize(os.path.join(root, name))
    return total


@dataclass
class Volume:
    """Where a run writes (``path``) and, after the ``with`` block, what it wrote."""

    path: str
    method: str
    device: str | None = None
    written: int = 0
    files_at_end: int = 0
    _start: int = field(default=0, repr=False)

    def measure(self) -> int:
        """Bytes written so far (syncing first)."""
        _syncfs(self.path)
        if self.device is not None:
            return (_sectors_written(self.device) - self._start) * _SECTOR
        return process_written() - self._start


def _run(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


@contextmanager
def volume(size_mb: int = 1024, *, label: str = "bench") -> Iterator[Volume]:
    """A fresh ext4 volume mounted at a temporary folder, its written bytes measured.

    The image is a sparse file of ``size_mb`` under the system's temporary folder. A file
    still open when the block ends (a Spark Python worker's cached connection) leaves the
    volume busy: it is then unmounted lazily, after the measurement.

    Falls back (with a message on stderr) to a temporary folder and :func:`process_written`
    when not root or when the loop device cannot be set up; ``Volume.method`` says which.
    """
    work = tempfile.mkdtemp(prefix=f"osp-vol-{label}-")
    image = os.path.join(work, "volume.img")
    mount = os.path.join(work, "mnt")
    os.mkdir(mount)
    device: str | None = None
    mounted = False
    try:
        reason = ""
        if os.geteuid() != 0:
            reason = "not root"
        elif shutil.which("losetup") is None or shutil.which("mkfs.ext4") is None:
            reason = "losetup or mkfs.ext4 not found"
        else:
            try:
                with open(image, "wb") as f:
                    f.truncate(size_mb * 1024 * 1024)
                _run(
                    "mkfs.ext4",
                    "-q",
                    "-F",
                    "-i",
                    "65536",  # one inode per 64 KiB: small inode tables to initialise
                    "-E",
                    "lazy_itable_init=0,lazy_journal_init=0",
                    image,
                )
                device = _run("losetup", "--find", "--show", image)
                _run("mount", "-o", "noatime", device, mount)
                mounted = True
            except (subprocess.CalledProcessError, OSError) as exc:
                detail = getattr(exc, "stderr", "") or str(exc)
                reason = f"cannot set up a loop volume: {detail.strip()}"
        if reason:
            print(
                f"[diskbytes] {reason}: measuring /proc/self/io write_bytes in a temporary "
                "folder instead (the page cache's count, not the device's)",
                file=sys.stderr,
            )
            vol = Volume(path=mount, method="/proc/self/io write_bytes")
        else:
            vol = Volume(path=mount, method=f"sectors written to {device}", device=device)
        vol._start = 0
        vol._start = vol.measure() if device is None else _start_sectors(vol)
        yield vol
        vol.written = vol.measure()
        vol.files_at_end = tree_size(mount)
    finally:
        if mounted:
            for _attempt in range(30):
                try:
                    _run("umount", mount)
                    break
                except subprocess.CalledProcessError:  # busy: a process still holds a file
                    time.sleep(0.1)
            else:  # detach it now; the kernel unmounts once the last file is closed
                with suppress(subprocess.CalledProcessError):
                    _run("umount", "-l", mount)
                print(f"[diskbytes] {mount} was busy: unmounted lazily", file=sys.stderr)
        if device is not None:
            with suppress(subprocess.CalledProcessError):
                _run("losetup", "-d", device)
        shutil.rmtree(work, ignore_errors=True)


def _start_sectors(vol: Volume) -> int:
    _syncfs(vol.path)
    assert vol.device is not None
    return _sectors_written(vol.device)

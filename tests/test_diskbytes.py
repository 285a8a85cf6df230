"""The benchmarks' measure of bytes that reach the disk (``benchmarks.diskbytes``)."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from benchmarks import diskbytes


def _write(folder: str, size: int) -> None:
    with open(os.path.join(folder, "data"), "wb") as f:
        f.write(os.urandom(size))
        f.flush()
        os.fsync(f.fileno())


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("losetup") is None or not os.path.exists("/dev/loop-control"),
    reason="needs root and loop devices",
)
def test_volume_counts_the_bytes_written_to_its_device() -> None:
    with diskbytes.volume(64, label="test") as vol:
        assert vol.device is not None and os.path.ismount(vol.path)
        _write(vol.path, 2_000_000)
    assert vol.method.startswith("sectors written to /dev/loop")
    assert 2_000_000 <= vol.written < 2_500_000
    assert vol.files_at_end == 2_000_000
    assert not os.path.exists(vol.path)  # unmounted, detached and removed


@pytest.mark.skipif(
    os.major(os.stat(tempfile.gettempdir()).st_dev) == 0,
    reason="the temporary folder is not on a block device (tmpfs): nothing to count",
)
def test_volume_falls_back_to_the_process_counters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with diskbytes.volume(64, label="test") as vol:
        assert vol.device is None
        _write(vol.path, 1_000_000)
    assert vol.method == "/proc/self/io write_bytes"
    assert vol.written >= 1_000_000
    assert not os.path.exists(vol.path)


def test_volume_cleans_up_after_an_error() -> None:
    with pytest.raises(RuntimeError), diskbytes.volume(64, label="test") as vol:
        raise RuntimeError("boom")
    assert not os.path.exists(vol.path)

"""Log lines an operator of a job wants to see: commit, compaction, retention and gc."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import objectspace as osp
from objectspace.storage.segments import SegmentBackend
from tests.support.storage import segment_url

MAX_KG = 4


def _committed(storage: osp.Storage, checkpoints: int) -> osp.Job:
    """Job ``j`` whose operator ``o`` (one instance) committed ``checkpoints`` checkpoints."""
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    inst = op.instance(0, 1)
    for cp in range(1, checkpoints + 1):
        for g in inst.key_groups:
            space = inst.space(g)
            lst = space.get_list("l") if "l" in space else space.create_list("l")
            lst.append(f"{g}/{cp}")
        assert job.commit(cp, [inst.save(cp)]) is True
        inst.on_saved()
    return job


def _messages(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger]


@pytest.fixture
def seg_storage(tmp_path: Path) -> osp.Storage:
    url = segment_url(f"file://{tmp_path}/segments", f"sqlite:///{tmp_path}/catalog.db")
    return osp.open_storage(url)


def test_commit_is_logged(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    storage = osp.open_storage(f"sqlite:///{tmp_path}/state.db")
    with caplog.at_level(logging.INFO, logger="objectspace.checkpoint.jobs"):
        _committed(storage, 2)
    lines = _messages(caplog, "objectspace.checkpoint.jobs")
    assert len(lines) == 2
    assert lines[1].startswith("job 'j': checkpoint 2 committed (4 writes, ")
    assert "bytes written" in lines[1]
    storage.close()


def test_compaction_and_retention_are_logged(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    storage = osp.open_storage(f"sqlite:///{tmp_path}/state.db")
    job = _committed(storage, 4)
    with caplog.at_level(logging.INFO, logger="objectspace.checkpoint"):
        stats = job.compact()
        kept = job.retain(keep_last=2)
    assert stats.key_groups == MAX_KG
    (compaction,) = _messages(caplog, "objectspace.checkpoint.operator")
    assert compaction.startswith(
        "job 'j' operator 'o': compaction as of checkpoint 4 rewrote 4 key groups"
    )
    (retention,) = _messages(caplog, "objectspace.checkpoint.jobs")
    assert retention == (
        f"job 'j': retention kept checkpoints {kept.kept}, dropped "
        f"{kept.checkpoints_dropped} checkpoints, {kept.writes_removed} writes "
        f"({kept.rows_removed} rows) and {kept.pending_removed} pending writes"
    )
    assert kept.checkpoints_dropped == 2
    storage.close()


def test_gc_is_logged(caplog: pytest.LogCaptureFixture, seg_storage: osp.Storage) -> None:
    job = _committed(seg_storage, 3)
    job.compact()
    job.retain(keep_last=1)  # the writes before the compaction are no longer needed
    backend = seg_storage.backend
    assert isinstance(backend, SegmentBackend)
    with caplog.at_level(logging.INFO, logger="objectspace.storage.segments.backend"):
        stats = backend.gc(grace_seconds=0)
    assert stats.deleted
    (line,) = _messages(caplog, "objectspace.storage.segments.backend")
    assert line.startswith("gc of file://")
    assert f": {len(stats.deleted)} files deleted ({stats.bytes_deleted} bytes), 0 refused" in line
    seg_storage.close()

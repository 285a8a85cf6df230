"""``StatefulRunner.history`` keeps the last ``history`` batches, not every batch ever run."""

from __future__ import annotations

from pathlib import Path

import pytest

from objectspace.spark import BatchStats, StatefulRunner


def _runner(tmp_path: Path, **options: object) -> StatefulRunner:
    def fn(key: object, rows: object, state: object) -> list[dict[str, object]]:
        return []

    return StatefulRunner(
        fn,
        key="k",
        order_by="ts",
        output_schema="k long",
        storage=f"sqlite:///{tmp_path / 'state.db'}",
        job="job",
        operator="op",
        **options,  # type: ignore[arg-type]
    )


def test_history_is_bounded_by_default(tmp_path: Path) -> None:
    runner = _runner(tmp_path)
    assert runner.history.maxlen == 100
    for i in range(150):
        runner.history.append(BatchStats(checkpoint_id=i, parallelism=1))
    assert len(runner.history) == 100
    assert [b.checkpoint_id for b in runner.history] == list(range(50, 150))


def test_history_is_configurable(tmp_path: Path) -> None:
    assert _runner(tmp_path, history=3).history.maxlen == 3
    assert _runner(tmp_path, history=None).history.maxlen is None


@pytest.mark.parametrize("bad", [-1, 1.5, "10"])
def test_history_rejects_a_bad_bound(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ValueError, match="history"):
        _runner(tmp_path, history=bad)

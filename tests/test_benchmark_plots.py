"""The benchmark plots (``benchmarks/plots.py``, dev tooling outside the package): drawn
from a results file, a missing file draws nothing, a malformed one is a clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmarks import plots

RESULTS = {
    "buffer": {
        "designs": [
            {
                "name": "object space",
                "bytes_per_checkpoint": [41000, 40000, 39000],
                "wall_seconds": 1.9,
            },
            {
                "name": "baseline",
                "bytes_per_checkpoint": [400000, 400000, 400000],
                "wall_seconds": 0.6,
            },
        ]
    }
}


def test_plots_are_drawn_from_the_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results.json"
    docs = tmp_path / "docs"
    assert plots.main([str(results), str(docs)]) == 0
    assert "no plots drawn" in capsys.readouterr().out and not docs.exists()
    results.write_text(json.dumps(RESULTS))
    assert plots.main([str(results), str(docs)]) == 0
    png = docs / "bench-buffer.png"
    assert f"drew {png}" in capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    results.write_text("{not json")
    with pytest.raises(ValueError, match="cannot read benchmark results"):
        plots.main([str(results), str(docs)])

"""Contention: 8 writer processes, each with its own job, commit as fast as they can
against one PostgreSQL catalog while a 9th process compacts, retains and collects
garbage over all of them (tests/support/contention_worker.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest

import objectspace as osp
from objectspace.storage.segments import SegmentBackend
from tests.support.contention_worker import reference, restore
from tests.support.storage import segment_url

WORKER = os.path.join(os.path.dirname(os.path.dirname(__file__)), "support", "contention_worker.py")
WRITERS = 8
TIMEOUT = 120


def _spawn(args: list[str], log: str) -> subprocess.Popen[str]:
    with open(log, "w") as stderr:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, WORKER, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )


def _report(process: subprocess.Popen[str], log: str, out: str) -> dict[str, Any]:
    lines = out.strip().splitlines()
    if process.returncode != 0 or not lines:
        with open(log) as f:
            pytest.fail(f"worker exited with {process.returncode}:\n{out}\n{f.read()[-3000:]}")
    return dict(json.loads(lines[-1]))


def _files(root: str) -> set[str]:
    return {os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "checkpoints"), [("segments", 20), ("postgresql", 12)], ids=["segments", "postgresql"]
)
def test_contention(postgres_url: str, tmp_path: Any, kind: str, checkpoints: int) -> None:
    root = os.path.join(tmp_path, "seg")
    url = segment_url(f"file://{root}", postgres_url) if kind == "segments" else postgres_url
    setup = osp.open_storage(url)
    setup.jobs()  # the schema, created once
    setup.close()

    logs = [os.path.join(tmp_path, f"worker-{n}.log") for n in range(WRITERS + 1)]
    writers = [
        _spawn(["writer", url, str(seed), str(checkpoints)], logs[seed]) for seed in range(WRITERS)
    ]
    maintainer = _spawn(["maintainer", url], logs[WRITERS])
    processes = [*writers, maintainer]
    try:
        for process, log in zip(processes, logs, strict=True):
            line = process.stdout.readline()  # type: ignore[union-attr]
            if line != "ready\n":
                process.wait(10)
                _report(process, log, line)
        for process in processes:
            process.stdin.write("go\n")  # type: ignore[union-attr]
            process.stdin.flush()  # type: ignore[union-attr]
        reports = []
        for process, log in zip(writers, logs[:WRITERS], strict=True):
            out, _ = process.communicate(timeout=TIMEOUT)
            reports.append(_report(process, log, out))
        out, _ = maintainer.communicate(timeout=TIMEOUT)  # closing stdin stops it
        maintenance = _report(maintainer, logs[WRITERS], out)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()

    # every commit succeeded, and retries were counted
    for seed, report in enumerate(reports):
        assert report["job"] == f"job-{seed}"
        assert report["committed"] == list(range(1, checkpoints + 1)), report
        assert report["mismatch"] is None, report
        assert isinstance(report["retries"], int) and report["retries"] >= 0
        assert report["transactions"] > checkpoints
    assert maintenance["errors"] == [], maintenance["errors"][:5]
    assert maintenance["passes"] >= 2
    assert isinstance(maintenance["retries"], int) and maintenance["retries"] >= 0
    retries = sum(r["retries"] for r in reports) + maintenance["retries"]
    commits = sum(len(r["committed"]) for r in reports)
    elapsed = max(r["finished"] for r in reports) - min(r["started"] for r in reports)
    print(
        f"\n{kind}: {commits} commits by {WRITERS} writers in {elapsed:.1f} s = "
        f"{commits / elapsed:.1f} commits/s; catalog retries: writers "
        f"{sum(r['retries'] for r in reports)}, maintainer {maintenance['retries']} "
        f"(total {retries}); save retries {sum(r['save_retries'] for r in reports)}, "
        f"commit retries {sum(r['commit_retries'] for r in reports)}; maintenance: "
        f"{maintenance['passes']} passes, {maintenance['compacted']} key groups compacted, "
        f"{maintenance['retained_writes']} writes retained away, {maintenance['stamped']} "
        f"stamped, {maintenance['deleted']} deleted"
    )

    # no reference lost, no referenced file deleted: every restore equals the reference
    storage = osp.open_storage(url)
    try:
        assert sorted(storage.jobs()) == sorted(f"job-{seed}" for seed in range(WRITERS))

        def check_all() -> None:
            for seed in range(WRITERS):
                job = storage.job(f"job-{seed}")
                op = job.operator("op")
                assert job.last_checkpoint() == checkpoints
                assert op.parallelism == 2
                expected = reference(seed, checkpoints)
                assert expected
                assert restore(op, 1) == expected, f"job-{seed}"
                assert restore(op, 4) == expected, f"job-{seed}"
                retained = job.checkpoints()
                assert retained[-1] == checkpoints and len(retained) >= 2
                for cp in retained:
                    assert restore(op, 3, cp) == reference(seed, cp), f"job-{seed} @ {cp}"

        check_all()
        backend = storage.backend
        if isinstance(backend, SegmentBackend):
            referenced = backend.referenced_segments()
            missing = referenced - _files(root)
            assert not missing, f"referenced segments were deleted: {sorted(missing)[:5]}"
            for seed in range(WRITERS):
                storage.job(f"job-{seed}").retain(keep_last=2)
            for _ in range(2):
                backend.gc(grace_seconds=0, now=time.time() + 10**9)
            assert backend.referenced_segments() <= _files(root)
            check_all()  # nothing a restore needs was collected
            leftover = _files(root) - backend.referenced_segments()
            print(f"unreferenced files left after a final GC: {len(leftover)}")
    finally:
        storage.close()

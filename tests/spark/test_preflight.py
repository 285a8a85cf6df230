"""The checks of :mod:`objectspace.spark.preflight`: storage every executor sees, and the C
extension where the driver asked for it.

The storage probe runs for real on a ``local-cluster[2,1,1024]`` master (in a subprocess, as
``test_spark_cluster.py`` does), whose two executors are processes of their own. One of
them is made not to see a folder the driver writes to, honestly: its JVM starts in a mount
namespace of its own (``unshare -m``) with an empty tmpfs mounted over that folder, as a
machine without the driver's disk would have. That executor is picked by its
``--executor-id``: the test puts a ``java`` wrapper first in the ``JAVA_HOME`` the Spark
worker launches executors with.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from objectspace.errors import StorageError
from objectspace.spark import preflight
from objectspace.spark.preflight import (
    DeploymentError,
    ProbeResult,
    StorageNotSharedError,
    check_storage,
    is_local_master,
    local_paths,
    require_c_check,
    resolve_require_c,
)
from tests.support.spark import spark  # noqa: F401
from tests.support.storage import segment_url

ROOT = Path(__file__).resolve().parents[2]


# -- pure functions ----------------------------------------------------------------------------


def test_local_masters() -> None:
    assert is_local_master("local")
    assert is_local_master("local[2]")
    assert is_local_master("local[*, 3]")
    assert not is_local_master("local-cluster[2,1,1024]")
    assert not is_local_master("spark://10.0.0.1:7077")
    assert not is_local_master("yarn")
    assert not is_local_master("k8s://https://api:6443")


def test_local_paths_name_every_local_folder_of_a_store() -> None:
    assert local_paths("sqlite:////data/state/s.db") == ["/data/state"]
    assert local_paths("sqlite:///s.db") == ["."]
    assert local_paths("sqlite:///sub/s.db") == ["sub"]
    assert local_paths(segment_url("file:///data/seg", "sqlite:////data/cat/c.db")) == [
        "/data/seg",
        "/data/cat",
    ]
    assert local_paths(segment_url("file:///data/seg", "postgresql://u:pw@h/db")) == ["/data/seg"]
    assert local_paths(segment_url("s3://bucket/x", "postgresql://u:pw@h/db")) == []
    assert local_paths("postgresql://u:pw@h/db") == []


def test_probe_task_reads_and_never_creates(tmp_path: Path) -> None:
    """The task run on executors: a folder without the token is reported and left as it
    was (no store, no file created); the right token passes; another token is reported."""
    empty = tmp_path / "empty"
    empty.mkdir()
    good = tmp_path / "good"
    good.mkdir()
    (good / "tok").write_bytes(b"0123456789abcdef")
    other = tmp_path / "other"
    other.mkdir()
    (other / "tok").write_bytes(b"fedcba9876543210")
    probe = preflight._Probe(
        (
            (str(empty), "tok", b"0123456789abcdef"),
            (str(good), "tok", b"0123456789abcdef"),
            (str(other), "tok", b"0123456789abcdef"),
        )
    )
    (out,) = list(probe(iter([])))
    rows = out.to_pylist()
    assert [r["folder"] for r in rows] == [str(empty), str(other)]
    assert "no such file" in rows[0]["reason"]
    assert "another token" in rows[1]["reason"]
    assert list(empty.iterdir()) == []
    assert all(r["process"] > 0 and r["host"] for r in rows)


class _ClusterConf:
    """The one thing check_storage reads of a session besides the probe (which tests of the
    checker replace with a reader): its master."""

    def __init__(self, master: str) -> None:
        self.master = master

    def get(self, name: str, default: Any = None) -> Any:
        return self.master if name == "spark.master" else default


class _Session:
    def __init__(self, master: str) -> None:
        self.conf = _ClusterConf(master)


def test_checker_names_the_executor_and_redacts(tmp_path: Path) -> None:
    """The checker's decision, with the executors' answers injected at the boundary (the
    probe job itself runs on a real cluster below)."""
    url = segment_url(f"file://{tmp_path}/seg", "postgresql://me:hunter2@db/x", secret="s3cr3t")
    written: list[str] = []

    def reader(session: Any, tokens: list[tuple[str, str, bytes]], tasks: int) -> list[ProbeResult]:
        ((folder, name, token),) = tokens
        assert Path(folder, name).read_bytes() == token  # the driver wrote it
        written.append(os.path.join(folder, name))
        return [
            ProbeResult("node-a", 11, ()),
            ProbeResult("node-b", 12, ((folder, "no such file on this executor"),)),
        ]

    with pytest.raises(StorageNotSharedError) as caught:
        check_storage(_Session("spark://master:7077"), url, reader=reader)
    text = str(caught.value)
    assert "node-b" in text and "no such file" in text and f"{tmp_path}/seg" in text
    assert "PostgreSQL" in text and "S3" in text
    assert "hunter2" not in text and "s3cr3t" not in text and "***" in text
    assert isinstance(caught.value, StorageError)
    assert written and not os.path.exists(written[0])  # the token file is removed


def test_memory_refused_and_local_master_unchecked(spark: Any) -> None:  # noqa: F811
    with pytest.raises(StorageNotSharedError, match="memory://x"):
        check_storage(_Session("yarn"), "memory://x")
    calls: list[int] = []

    def reader(*args: Any) -> list[ProbeResult]:
        calls.append(1)
        return []

    # The suite's session is local[2,3]: the same process tree sees the same files.
    check_storage(spark, "memory://x", reader=reader)
    check_storage(spark, "sqlite:///nowhere/x.db", reader=reader)
    assert calls == []


# -- the C check -------------------------------------------------------------------------------


def test_require_c_resolution() -> None:
    assert resolve_require_c(True) is True
    assert resolve_require_c(False) is False
    assert resolve_require_c(None) is preflight.c_extension_in_use()
    with pytest.raises(TypeError):
        resolve_require_c("yes")  # type: ignore[arg-type]
    require_c_check(False)
    if preflight.c_extension_in_use():
        require_c_check(True)


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


CHECK = (
    "from objectspace.spark.preflight import require_c_check, c_extension_in_use\n"
    "import objectspace; print(objectspace.__file__, c_extension_in_use())\n"
    "require_c_check(True)\n"
)


def test_pure_python_executor_fails_naming_the_cause() -> None:
    if not preflight.c_extension_in_use():
        pytest.skip("this interpreter has no C extension to compare with")
    done = _run(CHECK, OBJECTSPACE_PURE_PYTHON="1")
    assert done.returncode != 0
    assert "DeploymentError" in done.stderr
    assert "OBJECTSPACE_PURE_PYTHON is set" in done.stderr


def test_objectspace_from_a_zip_fails_naming_the_zip(tmp_path: Path) -> None:
    """What ``--py-files objectspace.zip`` gives an executor: the package, extension file
    included, imported from a zip, where Python cannot load the extension."""
    if not preflight.c_extension_in_use():
        pytest.skip("this interpreter has no C extension to compare with")
    package = ROOT / "src" / "objectspace"
    archive = tmp_path / "deps.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in package.rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                zf.write(path, path.relative_to(package.parent).as_posix())
    assert any(n.endswith(".so") for n in zipfile.ZipFile(archive).namelist())
    done = _run(CHECK, PYTHONPATH=str(archive))
    assert f"{archive}/objectspace/__init__.py False" in done.stdout, done.stdout + done.stderr
    assert done.returncode != 0
    assert "DeploymentError" in done.stderr
    assert str(archive) in done.stderr and "cannot load a C extension from a zip" in done.stderr


# -- the probe on a cluster --------------------------------------------------------------------

CLUSTER_SCRIPT = r"""
import json, os, sys, time

cfg = json.load(open(sys.argv[1]))
import pyspark

os.environ["SPARK_HOME"] = os.path.dirname(pyspark.__file__)
os.environ["PYSPARK_PYTHON"] = sys.executable

from objectspace.spark import local_session
from objectspace.spark.preflight import check_storage

spark = local_session("local-cluster[2,1,1024]", app_name="objectspace-preflight-test")
jsc = spark.sparkContext._jsc.sc()
deadline = time.time() + 120
while time.time() < deadline and jsc.getExecutorIds().size() < 2:
    time.sleep(0.5)
report = {"executors": int(jsc.getExecutorIds().size())}
for name, url in cfg["cases"]:
    started = time.time()
    try:
        check_storage(spark, url)
        report[name] = {"ok": True}
    except Exception as exc:
        report[name] = {"ok": False, "type": type(exc).__name__, "message": str(exc)}
    report[name]["seconds"] = round(time.time() - started, 2)
json.dump(report, open(cfg["report"], "w"))
spark.stop()
"""

JAVA_WRAPPER = """#!/bin/sh
# Executor {executor}: a mount namespace of its own, with an empty tmpfs over the hidden
# folder, as on a machine that lacks the driver's disk.
for arg in "$@"; do
  if [ "$prev" = "--executor-id" ] && [ "$arg" = "{executor}" ]; then
    exec unshare -m --propagation private sh -c 'mount -t tmpfs tmpfs "$0" && exec "$@"' \\
      "{hidden}" "{java}" "$@"
  fi
  prev="$arg"
done
exec "{java}" "$@"
"""


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "true"], capture_output=True, check=False
    )
    return done.returncode == 0


@pytest.mark.slow
def test_probe_on_local_cluster(tmp_path: Path) -> None:
    import pyspark

    if not _can_unshare():
        pytest.skip("unshare -m is not permitted here (needs CAP_SYS_ADMIN)")
    java = shutil.which("java")
    assert java is not None
    java = os.path.realpath(java)
    shared = tmp_path / "shared"
    hidden = tmp_path / "hidden"
    driver_cwd = tmp_path / "driver"
    for folder in (shared, hidden, driver_cwd):
        folder.mkdir()
    fake_home = tmp_path / "jdk"
    (fake_home / "bin").mkdir(parents=True)
    wrapper = fake_home / "bin" / "java"
    wrapper.write_text(JAVA_WRAPPER.format(executor="1", hidden=hidden, java=java))
    wrapper.chmod(0o755)
    cases = [
        ["shared_sqlite", f"sqlite:///{shared}/state.db"],
        ["shared_segments", segment_url(f"file://{shared}/seg", f"sqlite:///{shared}/c.db")],
        ["memory", "memory://here"],
        [
            "hidden_segments",
            segment_url(
                f"file://{hidden}/seg", "postgresql://me:hunter2@127.0.0.1:9/x", secret="s3cr3t"
            ),
        ],
        ["relative_sqlite", "sqlite:///state.db"],
    ]
    config = {"cases": cases, "report": str(tmp_path / "report.json")}
    (tmp_path / "config.json").write_text(json.dumps(config))
    script = tmp_path / "probe_job.py"
    script.write_text(CLUSTER_SCRIPT)
    env = dict(
        os.environ,
        SPARK_HOME=os.path.dirname(pyspark.__file__),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        JAVA_HOME=str(fake_home),
    )
    log = tmp_path / "cluster.log"
    with open(log, "w") as out:
        proc = subprocess.run(
            [sys.executable, str(script), str(tmp_path / "config.json")],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=driver_cwd,
            timeout=240,
        )
    tail = "\n".join(log.read_text().splitlines()[-40:])
    assert proc.returncode == 0, f"the local-cluster job failed:\n{tail}"
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["executors"] == 2

    assert report["shared_sqlite"]["ok"], report["shared_sqlite"]
    assert report["shared_segments"]["ok"], report["shared_segments"]

    memory = report["memory"]
    assert memory["type"] == "StorageNotSharedError" and "memory://here" in memory["message"]

    hidden_case = report["hidden_segments"]
    assert hidden_case["type"] == "StorageNotSharedError", hidden_case
    message = hidden_case["message"]
    assert f"{hidden}/seg" in message and "no such file" in message
    assert "hunter2" not in message and "s3cr3t" not in message and "***" in message
    assert "PostgreSQL" in message

    relative = report["relative_sqlite"]
    assert relative["type"] == "StorageNotSharedError", relative
    assert "relative" in relative["message"]

    # The driver's token files are gone; nothing else was written next to the stores.
    assert sorted(p.name for p in shared.iterdir()) == ["seg"]
    assert list((shared / "seg").iterdir()) == []
    assert list(hidden.iterdir()) == [] or all(
        not p.name.startswith(".objectspace-probe-") for p in hidden.iterdir()
    )
    assert not any(p.name.startswith(".objectspace-probe-") for p in driver_cwd.iterdir())


def test_deployment_error_is_an_objectspace_error() -> None:
    from objectspace.errors import ObjectSpaceError

    assert issubclass(DeploymentError, ObjectSpaceError)
    assert issubclass(StorageNotSharedError, StorageError)

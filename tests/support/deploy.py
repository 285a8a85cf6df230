"""What the deployment tests build and start: the dists, a packed environment, a standalone
Spark cluster of separate processes, and the tested blocks of docs/deploy.md.

- :func:`build_dists` builds the sdist and, from it, the wheel (``python -m build``);
  :func:`repair_wheel` makes the wheel a ``manylinux`` one with ``auditwheel``.
- :func:`packed_env` runs the documented packing recipe on that wheel and caches the
  archive under the temporary directory, keyed by a digest of the sources, the recipe and
  the pinned dependency versions, so a second run of the suite reuses it.
- :class:`StandaloneCluster` starts a master and workers from pyspark's ``bin/spark-class``
  as processes of their own (each in a session of its own, so :meth:`StandaloneCluster.stop`
  ends them and the executors and Python workers they started).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "deploy.md"
CACHE_ENV = "OBJECTSPACE_DEPLOY_CACHE"
# How many packed environments the cache keeps (each is ~150 MB).
_CACHE_KEEP = 2
REQUIRE_C_ENV = "OBJECTSPACE_REQUIRE_C"


# -- docs/deploy.md ------------------------------------------------------------------------------


def doc_blocks(path: Path = DOC) -> dict[str, str]:
    """The fenced code blocks of ``path`` marked ``<!-- tested: NAME -->``, by name."""
    text = path.read_text()
    found = re.findall(r"<!-- tested: (\S+) -->\n```[a-z]*\n(.*?)\n```", text, flags=re.S)
    return {name: body + "\n" for name, body in found}


# -- dists ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dists:
    sdist: Path
    wheel: Path


def build_dists(outdir: Path) -> Dists:
    """``python -m build``: the sdist, then the wheel built from the unpacked sdist (so the
    wheel proves the sdist builds), with the C extension required."""
    outdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, **{REQUIRE_C_ENV: "1"})
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(outdir), str(ROOT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"python -m build failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    (sdist,) = outdir.glob("objectspace-*.tar.gz")
    (wheel,) = outdir.glob("objectspace-*.whl")
    return Dists(sdist, wheel)


def repair_wheel(wheel: Path, outdir: Path) -> Path:
    """``auditwheel repair``: the wheel with a ``manylinux`` platform tag."""
    outdir.mkdir(parents=True, exist_ok=True)
    bin_dir = os.path.dirname(sys.executable)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(
        [os.path.join(bin_dir, "auditwheel"), "repair", "--wheel-dir", str(outdir), str(wheel)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"auditwheel repair failed:\n{done.stdout}\n{done.stderr}")
    (repaired,) = outdir.glob("objectspace-*manylinux*.whl")
    return repaired


# -- the packed environment ----------------------------------------------------------------------


def constraints() -> str:
    """Pins of every distribution installed here but objectspace (``name==version`` lines):
    the executors get the driver's versions, which the local pip cache holds."""
    pins = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name and name.lower() != "objectspace":
            pins[name.lower()] = f"{name}=={dist.version}"
    return "".join(line + "\n" for _, line in sorted(pins.items()))


def source_digest(*extra: str) -> str:
    """A digest of what the wheel is built from (setup.py, pyproject.toml, src/objectspace
    without built files), the interpreter, and ``extra``."""
    digest = hashlib.sha256()
    digest.update(sys.version.encode())
    for name in ("setup.py", "pyproject.toml"):
        digest.update((ROOT / name).read_bytes())
    for path in sorted((ROOT / "src" / "objectspace").rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts or path.suffix in (".so", ".pyd"):
            continue
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    for item in extra:
        digest.update(item.encode())
    return digest.hexdigest()[:24]


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path(tempfile.gettempdir()) / "objectspace-deploy")


def base_python() -> str:
    """The interpreter this venv was made from (a packed venv links to it)."""
    return str(getattr(sys, "_base_executable", None) or sys.executable)


def packed_env() -> Path:
    """``env.tar.gz`` made by the documented recipe (block ``pack``) from the repaired wheel,
    cached by :func:`source_digest`; built under a lock, so concurrent runs build it once."""
    recipe = doc_blocks()["pack"]
    pins = constraints()
    root = cache_root()
    entry = root / source_digest(recipe, pins)
    archive = entry / "env.tar.gz"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if archive.exists():
            os.utime(entry)
            return archive
        work = Path(tempfile.mkdtemp(prefix="build-", dir=root))
        try:
            wheel = repair_wheel(build_dists(work / "dist").wheel, work / "wheelhouse")
            (work / "constraints.txt").write_text(pins)
            # `python3` is the interpreter this venv was made from; venv-pack is this venv's.
            links = work / "bin"
            links.mkdir()
            # A script, not a link: venv records the path it was started as.
            (links / "python3").write_text(f'#!/bin/sh\nexec "{base_python()}" "$@"\n')
            (links / "python3").chmod(0o755)
            path = os.pathsep.join(
                [str(links), os.path.dirname(sys.executable), os.environ.get("PATH", "")]
            )
            env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
            env.update(
                PATH=path,
                OBJECTSPACE=str(wheel),
                PIP_CONSTRAINT=str(work / "constraints.txt"),
                PIP_DISABLE_PIP_VERSION_CHECK="1",
            )
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", recipe],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
            )
            if done.returncode != 0:
                raise RuntimeError(
                    f"the pack recipe failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
                )
            entry.mkdir(exist_ok=True)
            os.replace(work / "env.tar.gz", archive)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        _prune(root, keep=entry)
        return archive


def _prune(root: Path, keep: Path) -> None:
    """Drop the least recently used cache entries beyond :data:`_CACHE_KEEP`."""
    entries = sorted(
        (p for p in root.iterdir() if p.is_dir() and (p / "env.tar.gz").exists()),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in entries[_CACHE_KEEP:]:
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)


# -- a standalone cluster ------------------------------------------------------------------------


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def spark_env(conf_dir: Path) -> dict[str, str]:
    """An environment for Spark's scripts: this pyspark as SPARK_HOME, an empty conf
    folder, 127.0.0.1, and nothing of this venv (no PYTHONPATH, no PYSPARK_* overrides)."""
    home = spark_home()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PYSPARK_") and k not in ("PYTHONPATH", "VIRTUAL_ENV", "SPARK_HOME")
    }
    env.update(
        SPARK_HOME=home,
        SPARK_CONF_DIR=str(conf_dir),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOCAL_HOSTNAME="127.0.0.1",
        PATH=os.pathsep.join([os.path.join(home, "bin"), "/usr/local/bin", "/usr/bin", "/bin"]),
    )
    return env


@dataclass
class Executor:
    pid: int
    executor_id: str
    app_id: str
    cwd: str


@dataclass
class StandaloneCluster:
    """A standalone master and ``workers`` workers on 127.0.0.1 (``cores`` and ``memory``
    each), started as separate processes with their logs and work folders under ``base``."""

    base: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    master_url: str = ""
    ui_port: int = 0
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def _start(self, name: str, *args: str) -> None:
        log = open(self.base / f"{name}.log", "wb")  # noqa: SIM115 - the process owns it
        cmd = [os.path.join(spark_home(), "bin", "spark-class"), *args]
        self.processes.append(
            subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=spark_env(self.base / "conf"),
                start_new_session=True,
            )
        )
        log.close()

    def start(self, timeout: float = 120) -> str:
        (self.base / "conf").mkdir(parents=True, exist_ok=True)
        port, self.ui_port = free_port(), free_port()
        self.master_url = f"spark://127.0.0.1:{port}"
        self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1",
            "--port", str(port),
            "--webui-port", str(self.ui_port),
        )  # fmt: skip
        for i in range(self.workers):
            work = self.base / f"worker-{i}"
            work.mkdir(exist_ok=True)
            self._start(
                f"worker-{i}",
                "org.apache.spark.deploy.worker.Worker",
                "--host", "127.0.0.1",
                "--port", str(free_port()),
                "--webui-port", str(free_port()),
                "--cores", str(self.cores),
                "--memory", self.memory,
                "--work-dir", str(work),
                self.master_url,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self.processes:
                if proc.poll() is not None:
                    raise RuntimeError(f"a Spark daemon exited at start; logs in {self.base}")
            if self.alive_workers() == self.workers:
                return self.master_url
            time.sleep(0.5)
        raise RuntimeError(f"the workers did not register in {timeout} s; logs in {self.base}")

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as r:
                return int(json.load(r).get("aliveworkers", 0))
        except (OSError, ValueError):
            return 0

    def executors(self) -> list[Executor]:
        """The executor JVMs this cluster's workers run (found in /proc by their working
        folder, which lies in a worker's work folder)."""
        found = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    args = f.read().decode(errors="replace").split("\0")
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                continue
            if "org.apache.spark.executor.CoarseGrainedExecutorBackend" not in args:
                continue
            if not cwd.startswith(str(self.base) + os.sep):
                continue
            opts = dict(itertools.pairwise(args))
            found.append(
                Executor(int(pid), opts.get("--executor-id", ""), opts.get("--app-id", ""), cwd)
            )
        return sorted(found, key=lambda e: e.pid)

    def stop(self) -> None:
        """End every process started here, and what they started (their sessions):
        SIGTERM, then SIGKILL what is left after 15 s."""
        for proc in reversed(self.processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
        for proc in self.processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        # Python workers that left their executor's process group: by their working folder.
        for pid in _pids_working_under(self.base):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _pids_working_under(base: Path) -> list[int]:
    """The processes whose working folder lies under ``base``."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                continue
            if cwd == str(base) or cwd.startswith(str(base) + os.sep):
                found.append(int(pid))
    return found


@contextlib.contextmanager
def standalone_cluster(base: Path, **options: object) -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(base, **options)  # type: ignore[arg-type]
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()

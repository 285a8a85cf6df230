"""Throwaway servers on 127.0.0.1 for the test suite: PostgreSQL and an S3-compatible one.

PostgreSQL is started from the machine's own binaries (``initdb`` + ``pg_ctl``); as root,
as the ``postgres`` system user, because the server refuses to run as root. The S3 server
is moto's server mode. Both are stopped by the caller.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pg_bin() -> str:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if candidates:
        return os.path.dirname(candidates[-1])
    found = shutil.which("initdb")
    if found:
        return os.path.dirname(found)
    raise RuntimeError(
        "PostgreSQL server binaries (initdb, pg_ctl) are missing: apt-get install postgresql"
    )


@dataclass
class PostgresServer:
    url: str
    base: str
    bin_dir: str
    as_postgres: bool

    def _cmd(self, *args: str) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *args] if self.as_postgres else list(args)

    def stop(self) -> None:
        subprocess.run(
            self._cmd(
                os.path.join(self.bin_dir, "pg_ctl"),
                "-D",
                f"{self.base}/data",
                "-m",
                "immediate",
                "stop",
            ),
            capture_output=True,
            check=False,
        )
        shutil.rmtree(self.base, ignore_errors=True)


def start_postgres() -> PostgresServer:
    bin_dir = _pg_bin()
    as_postgres = os.geteuid() == 0
    base = tempfile.mkdtemp(prefix="objectspace-pg-")
    os.chmod(base, 0o755)
    if as_postgres:
        shutil.chown(base, "postgres", "postgres")
    server = PostgresServer("", base, bin_dir, as_postgres)
    port = free_port()
    subprocess.run(
        server._cmd(
            os.path.join(bin_dir, "initdb"),
            "-D",
            f"{base}/data",
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-sync",
        ),
        capture_output=True,
        check=True,
    )
    options = (
        f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off "
        "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
    )
    subprocess.run(
        server._cmd(
            os.path.join(bin_dir, "pg_ctl"),
            "-D",
            f"{base}/data",
            "-o",
            options,
            "-l",
            f"{base}/log",
            "-w",
            "-t",
            "60",
            "start",
        ),
        capture_output=True,
        check=True,
    )
    server.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    return server


@dataclass
class S3Server:
    endpoint: str
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def start_s3() -> S3Server:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return S3Server(f"http://127.0.0.1:{port}", process)
        except OSError:
            if process.poll() is not None:
                raise RuntimeError("moto server exited at start") from None
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("moto server did not start within 30 s")

"""Which embedded engine holds an instance's local store (state larger than memory).

One process under a 1 GiB address-space limit (what ``spark.executor.pyspark.memory=1g``
sets on a Python worker), N keys of one float stored as two rows each (the kind row and
the value row of ``checkpoint/local.py``'s layout), in batches of 100,000 keys; then 1% of
the keys read back by a range read each (what loading one object is), by a point read,
updated in one transaction, and every row read in 256 ranges (by first byte). SQLite is the standard
library's; ``rocksdict`` and ``lmdb`` are measured when installed (``pip install rocksdict
lmdb``), each in a process of its own.

    .venv/bin/python -m benchmarks.bench_local_engines [--keys 2500000]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time

LIMIT = 1 << 30


def _vm() -> tuple[int, int]:
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["VmRSS"].split()[0]) >> 10, int(fields["VmSize"].split()[0]) >> 10


def _key(i: int, tag: bytes) -> bytes:
    return b"%d/v" % i + b"\x00\x00" + tag


def run(engine: str, keys: int, folder: str) -> str:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))
    import msgpack

    path = os.path.join(folder, engine)
    if engine == "rocksdict":
        from rocksdict import Options, Rdict, WriteBatch

        options = Options(raw_mode=True)
        db = Rdict(path, options)

        def put_many(items: list[tuple[bytes, bytes]]) -> None:
            batch = WriteBatch(raw_mode=True)
            for k, v in items:
                batch.put(k, v)
            db.write(batch)

        def get(k: bytes) -> object:
            return db.get(k)

        def scan(low: bytes, high: bytes) -> int:
            it = db.iter()
            it.seek(low)
            n = 0
            while it.valid() and it.key() < high:
                n += 1
                it.next()
            return n

    elif engine == "lmdb":
        import lmdb

        env = lmdb.open(path, map_size=512 << 20, sync=False)

        def put_many(items: list[tuple[bytes, bytes]]) -> None:
            with env.begin(write=True) as tx:
                tx.cursor().putmulti(items)

        def get(k: bytes) -> object:
            with env.begin() as tx:
                return tx.get(k)

        def scan(low: bytes, high: bytes) -> int:
            with env.begin() as tx:
                cursor = tx.cursor()
                n = 0
                if cursor.set_range(low):
                    for k, _ in cursor:
                        if k >= high:
                            break
                        n += 1
                return n

    else:
        import sqlite3

        con = sqlite3.connect(path, isolation_level=None)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=OFF")
        con.execute("PRAGMA cache_size=-8192")
        con.execute("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")

        def put_many(items: list[tuple[bytes, bytes]]) -> None:
            con.execute("BEGIN")
            con.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", items)
            con.execute("COMMIT")

        def get(k: bytes) -> object:
            return con.execute("SELECT v FROM kv WHERE k = ?", (k,)).fetchone()

        def scan(low: bytes, high: bytes) -> int:
            return len(
                con.execute("SELECT k, v FROM kv WHERE k >= ? AND k < ?", (low, high)).fetchall()
            )

    kind = msgpack.packb({"kind": "Value"})
    try:
        started = time.perf_counter()
        for start in range(0, keys, 100_000):
            put_many(
                [
                    row
                    for i in range(start, min(keys, start + 100_000))
                    for row in ((_key(i, b"K"), kind), (_key(i, b"Ivalue"), msgpack.packb(i * 0.5)))
                ]
            )
        load = time.perf_counter() - started
        after_load = _vm()
        touched = random.Random(1).sample(range(keys), keys // 100)
        started = time.perf_counter()
        for i in touched:
            low = b"%d/v" % i + b"\x00\x00"
            assert scan(low, low + b"\xff") == 2
        ranges = time.perf_counter() - started
        started = time.perf_counter()
        for i in touched:
            get(_key(i, b"Ivalue"))
        gets = time.perf_counter() - started
        started = time.perf_counter()
        put_many([(_key(i, b"Ivalue"), msgpack.packb(i * 1.5)) for i in touched])
        update = time.perf_counter() - started
        started = time.perf_counter()
        rows = sum(scan(bytes([b]), bytes([b]) + b"\xff") for b in range(256))
        whole = time.perf_counter() - started
    except Exception as exc:  # an engine that cannot run under the limit
        return f"{engine:9}  failed under the 1 GiB limit: {type(exc).__name__}: {exc}"[:200]
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs)
    return (
        f"{engine:9}  load {load / keys / 2 * 1e6:5.2f} us/row   range read {ranges / len(touched) * 1e6:5.1f} us"
        f"   point read {gets / len(touched) * 1e6:5.1f} us   update {len(touched):,} keys {update:5.2f} s"
        f"   read all {rows:,} rows {whole:5.2f} s   disk {size >> 20} MiB"
        f"   RSS/VmSize after load {after_load[0]}/{after_load[1]} MiB, at the end {_vm()[0]}/{_vm()[1]} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=2_500_000)
    parser.add_argument("--engine", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.engine:
        print(run(args.engine, args.keys, args.folder), flush=True)
        return
    print(f"{' '.join(sys.argv)}; load average {os.getloadavg()}; {args.keys:,} keys, 1 GiB limit")
    for engine in ("sqlite", "rocksdict", "lmdb"):
        if engine != "sqlite":
            try:
                __import__(engine)
            except ImportError:
                print(f"{engine:9}  not installed")
                continue
        folder = tempfile.mkdtemp(prefix=f"bench-local-{engine}-")
        try:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.bench_local_engines",
                    "--engine",
                    engine,
                    "--keys",
                    str(args.keys),
                    "--folder",
                    folder,
                ],
                check=False,
            )
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    print(f"load average at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()

"""Cold restores from segment files: a local ``file://`` folder against an S3 server.

One state, written once through the versioned checkpoint API to
``file://<tmp>/segments?catalog=sqlite:///<tmp>/catalog.db`` by 4 instances and then copied
(its files and its catalog) to a bucket of moto's S3 server on 127.0.0.1: 200,000 keys of
one float (``PersistedValue``) and 20,000 keys of a 10-entry dict (``PersistedDict``),
64 key groups; checkpoint 1 writes everything, checkpoints 2..17 each change 2,000 floats
and one entry of 400 dicts, so every key group's chain is its full write and 16
differential ones (17 blocks, in 17 segment files per instance).

Each measured restore runs in a fresh Python process (no fsspec filesystem, S3 client,
catalog or page of state cached in the process; the moto server and the page cache keep
the files): open the storage, then time

- **instance**: ``op.instance(0, 4).load_all()``, the 16 key groups of instance 0, every
  object materialized;
- **1% batch**: a batch of 1% of the keys (those instance 0 owns): ``preload`` of their key
  groups (with 64 key groups it touches all 16) and each key's object read.

Reported per storage and workload: the median seconds of 5 processes, the segment reads
(``GET`` requests counted on the S3 client's ``before-send`` event; on ``file://`` the
``cat_file`` / ``cat_ranges`` calls of the filesystem, counted by a wrapper) and the bytes
they asked for. With ``--before-src DIR`` the same restores also run against another
checkout's ``src`` (``PYTHONPATH=DIR``), e.g. a ``git worktree`` of the commit before reads
were coalesced. Every process prints a digest of what it restored: they must all agree.

    .venv/bin/python -m benchmarks.bench_cold_restore [--before-src DIR] [--quick] [--no-record]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import (
    BENCHMARKS_MD,
    fmt_bytes,
    machine,
    markdown_table,
    median,
    print_table,
    temp_dir,
)

FLOATS = 200_000
DICTS = 20_000
DICT_ENTRIES = 10
MAX_KEY_GROUPS = 64
PARALLELISM = 4
DIFFS = 16
FLOATS_PER_DIFF = 2_000
DICTS_PER_DIFF = 400
BATCH_SHARE = 0.01
RUNS = 5
CLUSTER_KEYS = 20_000
CLUSTER_ROWS = 2_000
CLUSTER_BATCHES = 15
JOB, OPERATOR = "cold", "state"
BEGIN, END = "<!-- cold-restore -->", "<!-- /cold-restore -->"
ROOT = Path(__file__).resolve().parent.parent


# -- the state ------------------------------------------------------------------------------


def build(folder: str, floats: int, dicts: int, diffs: int) -> str:
    """Write the state to ``file://<folder>/segments``; return its URL."""
    import objectspace as osp

    catalog = f"sqlite:///{folder}/catalog.db"
    url = f"file://{folder}/segments?" + urllib.parse.urlencode({"catalog": catalog})
    storage = osp.open_storage(url)
    job = storage.job(JOB)
    op = job.operator(OPERATOR, max_key_groups=MAX_KEY_GROUPS)
    instances = [op.instance(i, PARALLELISM) for i in range(PARALLELISM)]
    owner = {g: inst for inst in instances for g in inst.key_groups}
    rng = random.Random(27)

    def space(key: str) -> osp.ObjectSpace:
        return owner[op.key_groups.key_group(key)].space(op.key_groups.key_group(key))

    for i in range(floats):
        key = f"f{i}"
        space(key).create_value(key, rng.random())
    for i in range(dicts):
        key = f"d{i}"
        space(key).create_dict(key).update({n: rng.random() for n in range(DICT_ENTRIES)})

    def commit(checkpoint: int) -> None:
        receipts = [inst.save(checkpoint) for inst in instances]
        assert job.commit(checkpoint, receipts)
        for inst in instances:
            inst.on_saved()

    commit(1)
    for checkpoint in range(2, diffs + 2):
        for i in rng.sample(range(floats), min(FLOATS_PER_DIFF, floats)):
            key = f"f{i}"
            space(key).get_value(key).value = rng.random()
        for i in rng.sample(range(dicts), min(DICTS_PER_DIFF, dicts)):
            key = f"d{i}"
            space(key).get_dict(key)[rng.randrange(DICT_ENTRIES)] = rng.random()
        commit(checkpoint)
    storage.close()
    return url


def copy_to_s3(folder: str, endpoint: str) -> str:
    """Copy the segment files and the catalog to a new bucket; return the S3 URL."""
    import s3fs

    fs = s3fs.S3FileSystem(
        key="testing", secret="testing", client_kwargs={"endpoint_url": endpoint}
    )
    bucket = "cold-restore"
    fs.mkdir(bucket)
    base = os.path.join(folder, "segments")
    for here, _, names in os.walk(base):
        for name in names:
            local = os.path.join(here, name)
            fs.put_file(local, f"{bucket}/state/{os.path.relpath(local, base)}")
    shutil.copyfile(f"{folder}/catalog.db", f"{folder}/catalog-s3.db")
    query = {
        "catalog": f"sqlite:///{folder}/catalog-s3.db",
        "endpoint_url": endpoint,
        "key": "testing",
        "secret": "testing",
    }
    return f"s3://{bucket}/state?" + urllib.parse.urlencode(query)


# -- one restore, in a fresh process ----------------------------------------------------------


class _Counting:
    """An fsspec filesystem that counts its ranged reads (``cat_file``, ``cat_ranges``) and
    the bytes they ask for."""

    def __init__(self, fs: Any, counts: dict[str, int]) -> None:
        self._fs = fs
        self._counts = counts

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kw: Any):
        self._counts["reads"] += 1
        self._counts["bytes"] += (end or 0) - (start or 0)
        return self._fs.cat_file(path, start=start, end=end, **kw)

    def cat_ranges(self, paths: list[str], starts: list[int], ends: list[int], **kw: Any):
        self._counts["reads"] += len(paths)
        self._counts["bytes"] += sum(e - s for s, e in zip(starts, ends, strict=True))
        return self._fs.cat_ranges(paths, starts, ends, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)


def _count_s3(fs: Any, counts: dict[str, int]) -> None:
    """Count the GET requests the S3 client sends and the bytes their ranges ask for."""

    def before_send(request: Any, **_: Any) -> None:
        if request.method == "GET" and "range" in {k.lower() for k in request.headers}:
            counts["reads"] += 1
            spec = request.headers["Range"]
            spec = spec.decode() if isinstance(spec, bytes) else spec
            first, last = spec.split("=", 1)[1].split("-")
            counts["bytes"] += int(last) - int(first) + 1
        else:
            counts["other requests"] += 1

    fs.connect()
    fs.s3.meta.events.register("before-send.s3", before_send)


def restore(url: str, workload: str, batch: Sequence[str]) -> dict[str, Any]:
    """One timed restore (see the module docstring) in this process."""
    import objectspace as osp

    opened = time.perf_counter()
    storage = osp.open_storage(url)
    backend: Any = storage.backend
    counts = {"reads": 0, "bytes": 0, "other requests": 0}
    if url.startswith("s3://"):
        _count_s3(backend.fs, counts)
    else:
        backend._fs = _Counting(backend.fs, counts)
    op = storage.job(JOB).operator(OPERATOR)
    start = time.perf_counter()
    inst = op.instance(0, PARALLELISM)
    digest = hashlib.sha256()
    if workload == "instance":
        inst.load_all()
        seconds = time.perf_counter() - start
        for g in inst.key_groups:
            space = inst.space(g)
            for key in sorted(space):
                digest.update(f"{g} {key} {_value(space.get(key))}\n".encode())
    else:
        inst.preload(sorted({inst.key_group(k) for k in batch}))
        values = [_value(inst.space_for_key(k).get(k)) for k in batch]
        seconds = time.perf_counter() - start
        for key, value in zip(batch, values, strict=True):
            digest.update(f"{key} {value}\n".encode())
    total = time.perf_counter() - opened
    storage.close()
    return {
        "seconds": seconds,
        "with_open": total,
        "reads": counts["reads"],
        "bytes": counts["bytes"],
        "other_requests": counts["other requests"],
        "digest": digest.hexdigest()[:16],
        "key_groups": len(inst.loaded()),
        "objectspace": osp.__file__,
    }


def _value(obj: Any) -> Any:
    return sorted(obj.items()) if hasattr(obj, "items") else obj.value


def batch_keys(floats: int, dicts: int) -> list[str]:
    """1% of the keys, those instance 0 owns (key groups 0..15)."""
    from objectspace.keygroups import KeyGroups

    groups = KeyGroups(MAX_KEY_GROUPS)
    owned = groups.range_of(0, PARALLELISM)
    rng = random.Random(1)
    keys = [f"f{i}" for i in rng.sample(range(floats), int(floats * BATCH_SHARE))]
    keys += [f"d{i}" for i in rng.sample(range(dicts), int(dicts * BATCH_SHARE))]
    return sorted(k for k in keys if groups.key_group(k) in owned)


def run_process(src: str, url: str, workload: str, batch: Sequence[str]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=src)
    job = json.dumps({"url": url, "workload": workload, "batch": list(batch)})
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_cold_restore", "--worker"],
        input=job,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    if out.returncode:
        raise RuntimeError(f"restore process failed:\n{out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if not result["objectspace"].startswith(src):
        raise RuntimeError(f"the process imported {result['objectspace']}, not from {src}")
    return result


# -- on local-cluster[2,1,1024]: how often is an instance restored cold? ----------------------

CLUSTER_SCRIPT = r"""
import json, os, random, sys, time

cfg = json.load(open(sys.argv[1]))

import pyspark

os.environ["SPARK_HOME"] = os.path.dirname(pyspark.__file__)
os.environ["PYSPARK_PYTHON"] = sys.executable

from objectspace import operators as ops
from objectspace.spark import StatefulRunner, local_session

spark = local_session("local-cluster[2,1,1024]", app_name="objectspace-cold-restore")
jsc = spark.sparkContext._jsc.sc()
deadline = time.time() + 120
while time.time() < deadline and len([i for i in jsc.getExecutorIds().mkString(",").split(",") if i]) < 2:
    time.sleep(0.5)
report = {"runs": {}}
probe = spark.sparkContext.parallelize(range(8), 8).map(
    lambda _: (os.environ.get("SPARK_LOCAL_DIRS", ""), os.getpid())
).collect()
report["local_dirs"] = sorted({d for d, _ in probe})
report["python_workers"] = len({p for _, p in probe})
for name, options in cfg["runs"].items():
    runner = StatefulRunner(
        ops.aggregate("sum"),
        key="k",
        order_by="ts",
        output_schema="k long, sum double",
        storage=cfg["urls"][name],
        job="cold",
        operator="sum",
        max_key_groups=cfg["max_key_groups"],
        parallelism=cfg["parallelism"],
        **options,
    )
    rng = random.Random(7)
    batches = []
    for batch in range(cfg["batches"]):
        keys = range(cfg["keys"]) if batch == 0 else rng.sample(range(cfg["keys"]), cfg["rows"])
        rows = [(k, batch * 1_000_000 + n, rng.random()) for n, k in enumerate(keys)]
        df = spark.createDataFrame(rows, "k long, ts long, v double")
        started = time.time()
        runner.process(df, batch).count()
        stats = runner.last_batch
        batches.append({
            "batch": batch,
            "seconds": time.time() - started,
            "tasks": [
                {"index": t.index, "cached": t.cached, "snapshot": t.snapshot,
                 "seconds_restore": t.seconds_restore, "bytes_read": t.bytes_read,
                 "rows_read": t.rows_read}
                for t in sorted(stats.tasks, key=lambda t: t.index)
            ],
        })
    report["runs"][name] = batches
    runner.close()
with open(cfg["report"], "w") as f:
    json.dump(report, f)
spark.stop()
"""

CLUSTER_RUNS = {
    "cache and snapshots (default)": {},
    "memory_budget='64 MiB' (local store)": {"memory_budget": "64 MiB"},
}


def run_cluster(folder: str, endpoint: str, keys: int, rows: int, batches: int) -> dict[str, Any]:
    """Run the cluster script in a subprocess: one query per run of :data:`CLUSTER_RUNS`,
    state on S3 (moto) with a SQLite catalog; return its report."""
    import pyspark
    import s3fs

    fs = s3fs.S3FileSystem(
        key="testing", secret="testing", client_kwargs={"endpoint_url": endpoint}
    )
    urls = {}
    for n, name in enumerate(CLUSTER_RUNS):
        fs.mkdir(f"cluster-{n}")
        query = {
            "catalog": f"sqlite:///{folder}/cluster-{n}.db",
            "endpoint_url": endpoint,
            "key": "testing",
            "secret": "testing",
        }
        urls[name] = f"s3://cluster-{n}/state?" + urllib.parse.urlencode(query)
    config = {
        "urls": urls,
        "runs": CLUSTER_RUNS,
        "keys": keys,
        "rows": rows,
        "batches": batches,
        "max_key_groups": MAX_KEY_GROUPS,
        "parallelism": PARALLELISM,
        "report": f"{folder}/cluster.json",
    }
    Path(f"{folder}/cluster-config.json").write_text(json.dumps(config))
    Path(f"{folder}/cluster.py").write_text(CLUSTER_SCRIPT)
    env = dict(
        os.environ,
        SPARK_HOME=os.path.dirname(pyspark.__file__),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    with open(f"{folder}/cluster.log", "w") as log:
        done = subprocess.run(
            [sys.executable, f"{folder}/cluster.py", f"{folder}/cluster-config.json"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=folder,
            timeout=1200,
            check=False,
        )
    if done.returncode:
        tail = "\n".join(Path(f"{folder}/cluster.log").read_text().splitlines()[-30:])
        raise RuntimeError(f"the local-cluster run failed:\n{tail}")
    report: dict[str, Any] = json.loads(Path(f"{folder}/cluster.json").read_text())
    return report


def cluster_rows(report: dict[str, Any]) -> list[list[str]]:
    """Per run: over the batches after the first (which creates every instance), how many
    instance-batches were adopted from a worker's memory, from a snapshot, served by the
    local store (read nothing from storage) or restored cold, and the restore seconds."""
    rows = []
    for name, batches in report["runs"].items():
        later = [t for b in batches[1:] for t in b["tasks"]]
        memory = sum(1 for t in later if t["cached"] and not t["snapshot"])
        snapshot = sum(1 for t in later if t["snapshot"])
        local = sum(
            1 for t in later if not t["cached"] and t["bytes_read"] == 0 and "budget" in name
        )
        cold = len(later) - memory - snapshot - local
        cold_seconds = [
            t["seconds_restore"]
            for t in later
            if not t["cached"] and (t["bytes_read"] or "budget" not in name)
        ]
        warm_seconds = [
            t["seconds_restore"]
            for t in later
            if t["cached"] or (t["bytes_read"] == 0 and "budget" in name)
        ]
        per_batch = " ".join("".join(_letter(t, name) for t in b["tasks"]) for b in batches[1:])
        rows.append(
            [
                name,
                str(len(later)),
                str(memory),
                str(snapshot),
                str(local),
                str(cold),
                f"{median(cold_seconds):.3f}" if cold_seconds else "-",
                f"{median(warm_seconds):.3f}" if warm_seconds else "-",
                f"{median([b['seconds'] for b in batches[1:]]):.2f}",
                per_batch,
            ]
        )
    return rows


def _letter(task: dict[str, Any], run: str) -> str:
    if task["snapshot"]:
        return "s"
    if task["cached"]:
        return "m"
    if "budget" in run and task["bytes_read"] == 0:
        return "l"
    return "C"


CLUSTER_HEADERS = [
    "run",
    "instance-batches after batch 0",
    "from a worker's memory",
    "from a snapshot",
    "from the local store",
    "restored cold",
    "restore s, cold (median)",
    "restore s, reused (median)",
    "batch s (median)",
    "per batch, instances 0-3 (m memory, s snapshot, l local store, C cold)",
]


# -- the run -------------------------------------------------------------------------------


def git_rev(path: str) -> str:
    out = subprocess.run(
        ["git", "-C", path, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return out.stdout.strip() or "unknown"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--before-src", help="also restore with this src folder (PYTHONPATH)")
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--quick", action="store_true", help="smaller state, not recorded")
    parser.add_argument("--no-record", action="store_true", help="leave BENCHMARKS.md alone")
    parser.add_argument(
        "--no-cluster", action="store_true", help="skip the local-cluster[2,1,1024] part"
    )
    args = parser.parse_args(argv)
    if args.worker:
        job = json.loads(sys.stdin.read())
        print(json.dumps(restore(job["url"], job["workload"], job["batch"])))
        return

    from tests.support.servers import start_s3

    floats, dicts, diffs = (FLOATS, DICTS, DIFFS) if not args.quick else (20_000, 2_000, 4)
    sources = [("after", str(ROOT / "src"))]
    if args.before_src:
        sources.insert(0, ("before", os.path.abspath(args.before_src)))
    batch = batch_keys(floats, dicts)
    results: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    server = start_s3()
    try:
        with temp_dir("osp-cold-") as folder:
            t = time.perf_counter()
            urls = {"file://": build(folder, floats, dicts, diffs)}
            print(f"state written in {time.perf_counter() - t:.1f} s", flush=True)
            urls["s3:// (moto)"] = copy_to_s3(folder, server.endpoint)
            for _ in range(args.runs):  # interleaved, so drift in load hits every row alike
                for workload in ("instance", "1% batch"):
                    for name, src in sources:
                        for store, url in urls.items():
                            key = (workload, store, name)
                            results.setdefault(key, []).append(
                                run_process(src, url, workload, batch)
                            )
            cluster: dict[str, Any] | None = None
            if not args.no_cluster:
                t = time.perf_counter()
                sizes = (CLUSTER_KEYS, CLUSTER_ROWS, CLUSTER_BATCHES)
                cluster = run_cluster(
                    folder, server.endpoint, *(sizes if not args.quick else (2_000, 200, 5))
                )
                print(f"local-cluster runs took {time.perf_counter() - t:.0f} s", flush=True)
    finally:
        server.stop()

    digests = {
        w: {r["digest"] for (wl, _, _), rs in results.items() if wl == w for r in rs}
        for w in ("instance", "1% batch")
    }
    for workload, found in digests.items():
        if len(found) != 1:
            raise RuntimeError(f"{workload}: restores disagree ({sorted(found)})")

    headers = [
        "workload",
        "code",
        "storage",
        "median s",
        "min s",
        "max s",
        "with open, median s",
        "segment reads",
        "bytes read",
        "S3 / file://",
    ]
    rows = []
    for (workload, store, name), rs in results.items():
        seconds = [r["seconds"] for r in rs]
        base = results[(workload, "file://", name)]
        ratio = median(seconds) / median([r["seconds"] for r in base])
        rows.append(
            [
                workload,
                name,
                store,
                f"{median(seconds):.3f}",
                f"{min(seconds):.3f}",
                f"{max(seconds):.3f}",
                f"{median([r['with_open'] for r in rs]):.3f}",
                f"{rs[0]['reads']:,}",
                fmt_bytes(rs[0]["bytes"]),
                "" if store == "file://" else f"{ratio:.2f}x",
            ]
        )
    rows.sort(key=lambda r: (r[0] != "instance", r[1] != "before", r[2]))
    print_table(headers, rows)
    goal_rows = [r for r in rows if r[1] == "after" and r[2] != "file://"]
    met = all(float(r[-1][:-1]) <= 2.0 for r in goal_rows)
    print(f"goal (S3 <= 2x file://, after): {'met' if met else 'not met'}")
    cluster_text = ""
    if cluster is not None:
        crows = cluster_rows(cluster)
        print_table(CLUSTER_HEADERS, crows)
        cluster_text = "\n".join(
            [
                "",
                f"On `local-cluster[2,1,1024]` (a master, two workers of one core, one executor "
                f"each; run in a subprocess): a query of `ops.aggregate('sum')`, "
                f"{PARALLELISM} instances, {MAX_KEY_GROUPS} key groups, state on the S3 "
                f"server with a SQLite catalog; batch 0 writes {CLUSTER_KEYS:,} keys, batches "
                f"1 to {CLUSTER_BATCHES - 1} {CLUSTER_ROWS:,} rows of random keys each (so every "
                "batch touches every key group). Per instance and batch, where the task got "
                "its instance (`TaskStats.cached`, `snapshot`; with a memory budget, a "
                "local store that read nothing from storage), and its restore seconds.\n",
                markdown_table(CLUSTER_HEADERS, crows),
                "",
                f"A probe job saw {len(cluster['local_dirs'])} distinct `SPARK_LOCAL_DIRS` "
                f"and {cluster['python_workers']} Python worker processes: each executor "
                "has local folders of its own (where local stores go) and a SparkFiles "
                "folder of its own (where snapshots go), so, as on a cluster of machines, "
                "what one executor keeps serves only its own workers, and an instance that "
                "Spark hands to the other executor is restored cold.",
            ]
        )
    if args.quick or args.no_record:
        return
    sample = results[("instance", "file://", "after")][0]
    text = "\n".join(
        [
            BEGIN,
            "## Cold restores from segment files: `file://` against S3 (issue 27)\n",
            "Command (from the repository root): `.venv/bin/python -m "
            "benchmarks.bench_cold_restore --before-src /tmp/wt-h3-before/src` (the "
            "before column: a `git worktree` of the commit before reads were coalesced)  ",
            f"Date: {time.strftime('%Y-%m-%d %H:%M %Z')}  ",
            f"Commit: {git_rev(str(ROOT))} (after), "
            f"{git_rev(args.before_src) if args.before_src else '-'} (before)  ",
            f"Machine: {machine()}  ",
            "Load average when recorded (1/5/15 min): "
            + " / ".join(f"{x:.2f}" for x in os.getloadavg())
            + "\n",
            f"{floats:,} keys of one float and {dicts:,} keys of a {DICT_ENTRIES}-entry dict, "
            f"{MAX_KEY_GROUPS} key groups written by {PARALLELISM} instances: a full "
            f"checkpoint, then {diffs} differential ones ({FLOATS_PER_DIFF:,} floats and "
            f"{DICTS_PER_DIFF} dict entries each), so each key group's chain is "
            f"{diffs + 1} blocks. The same files and catalog (SQLite) on `file://` and on "
            "moto's S3 server on 127.0.0.1. Each restore in a fresh process, timed from "
            "`op.instance(0, 4)` to every object read (instance: its "
            f"{sample['key_groups']} key groups; 1% batch: {len(batch)} keys of instance 0, "
            "which touch all its key groups); `with open` adds opening the storage and the "
            f"S3 client. Median of {args.runs}. Segment reads: GET requests on S3, "
            "`cat_file`/`cat_ranges` ranges on `file://`.\n",
            markdown_table(headers, rows),
            "",
            f"Goal: a cold restore from S3 within 2x of the same restore from `file://` "
            f"(after): **{'met' if met else 'not met'}**. All restores gave the same state "
            "(one digest per workload).",
            cluster_text,
            END,
        ]
    )
    current = BENCHMARKS_MD.read_text(encoding="utf-8")
    if BEGIN in current:
        head, rest = current.split(BEGIN, 1)
        current = head + text + rest.split(END, 1)[1]
    else:
        current = current.rstrip("\n") + "\n\n" + text + "\n"
    BENCHMARKS_MD.write_text(current, encoding="utf-8")
    print(f"[recorded the cold-restore section in {BENCHMARKS_MD}]")


if __name__ == "__main__":
    main()

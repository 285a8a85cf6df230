"""The ``objectspace`` command, run as a user runs it: in a subprocess, against SQLite,
PostgreSQL and segment (file://) storage holding state written here through the Python API.

``--json`` output is compared exactly with what the known content implies; errors (bad
arguments, a missing store, a wrong job name, a corrupt segment) must be one line on stderr,
exit non-zero, and leave the storage exactly as it was.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import objectspace as osp
from objectspace.inspection import format_time, redact
from objectspace.keyed import KeyState
from objectspace.keygroups import KeyGroups
from objectspace.storage.segments import SegmentBackend
from tests.support.storage import segment_url

JOB = "clicks"
SESSIONS, TOTALS = "sessions", "totals"
KG8, KG4 = KeyGroups(8), KeyGroups(4)
KEYS: list[Any] = [1, 2, 3, 4, 5, 6, "alice"]
WHEN = dt.datetime(2024, 1, 2, 3, 4, 5)

Objects = dict[str, tuple[str, Any]]  # name -> (kind, content)


# -- the known content ----------------------------------------------------------------------


def _n(key: Any) -> int:
    return key if isinstance(key, int) else 7


def model(checkpoint: int) -> dict[str, dict[Any, Objects]]:
    """Operator -> key -> object name -> (kind, content) as of a committed checkpoint."""
    sessions: dict[Any, Objects] = {
        k: {
            "buffer": ("List", [_n(k) * 100.0 + i for i in range(30)]),
            "count": ("Value", _n(k)),
            "seen": ("Dict", {"a": 1, "b": (1, b"x")}),
            "tags": ("Set", {"x", "y"}),
        }
        for k in KEYS
    }
    totals: dict[Any, Objects] = {
        "all": {
            "arr": ("Array", [None, 1.5, math.nan]),
            "empty": ("List", []),
            "ll": ("LinkedList", ["p", "q"]),
            "n": ("Value", {"n": 7, "when": WHEN}),
            "ss": ("SortedSet", [1, 3, 5]),
            "stack": ("Stack", [3, 2, 1]),  # iteration order: top first
            "top": ("SortedDict", {1: "a", 2: "b", 3: "c"}),
        }
    }
    if checkpoint >= 2:
        one = sessions[1]
        one["buffer"] = ("List", [*one["buffer"][1], 99.5])
        one["count"] = ("Value", 10)
        one["seen"] = ("Dict", {"b": (1, b"x")})
        del one["tags"]
        one["new"] = ("Queue", [1, 2])
        sessions["alice"]["count"] = ("Value", WHEN)
        totals["all"]["stack"] = ("Stack", [4, 3, 2, 1])
        totals["all"]["top"] = ("SortedDict", {0: "z", 1: "a", 2: "b", 3: "c"})
    return {SESSIONS: sessions, TOTALS: totals}


def _write_cp1(st: KeyState, key: Any) -> None:
    st.list("buffer").extend(_n(key) * 100.0 + i for i in range(30))
    st.value("count", _n(key))
    st.dict("seen").update({"a": 1, "b": (1, b"x")})
    st.set("tags").update({"x", "y"})


def _write_totals(st: KeyState) -> None:
    arr = st.array("arr", 3)
    arr[1] = 1.5
    arr[2] = math.nan
    st.list("empty")
    st.linked_list("ll").append("p")
    st.linked_list("ll").append("q")
    st.value("n", {"n": 7, "when": WHEN})
    st.sorted_set("ss").update({5, 1, 3})
    for v in (1, 2, 3):
        st.stack("stack").push(v)
    st.sorted_dict("top").update({3: "c", 1: "a", 2: "b"})


def populate(url: str) -> None:
    """Job ``clicks``: checkpoints 1 and 2 committed, version 3 pending; operators
    ``sessions`` (8 key groups, parallelism 2, schema 2) and ``totals`` (4, parallelism 1);
    and job ``other`` with an operator and no checkpoint."""
    storage = osp.open_storage(url)
    try:
        job = storage.job(JOB)
        sessions = job.operator(SESSIONS, 8, schema_version=2)
        totals = job.operator(TOTALS, 4)
        insts = [sessions.instance(i, 2) for i in range(2)]
        total = totals.instance(0, 1)

        def state(key: Any) -> KeyState:
            inst = insts[KG8.instance_of_key(key, 2)]
            return KeyState.for_key(inst.space_for_key(key), key)

        def commit(checkpoint: int) -> None:
            receipts = [i.save(checkpoint) for i in [*insts, total]]
            assert job.commit(checkpoint, receipts)
            for i in [*insts, total]:
                i.on_saved()

        for key in KEYS:
            _write_cp1(state(key), key)
        _write_totals(KeyState.for_key(total.space_for_key("all"), "all"))
        commit(1)
        one = state(1)
        one.list("buffer").append(99.5)
        one.value("count").value = 10
        del one.dict("seen")["a"]
        one.delete("tags")
        one.queue("new").enqueue(1)
        one.queue("new").enqueue(2)
        state("alice").value("count").value = WHEN
        every = KeyState.for_key(total.space_for_key("all"), "all")
        every.stack("stack").push(4)
        every.sorted_dict("top")[0] = "z"
        commit(2)
        state(2).value("count").value = 100
        insts[KG8.instance_of_key(2, 2)].save(3)  # pending: never committed
        storage.job("other").operator("op", 2)
    finally:
        storage.close()


# -- expected JSON, computed from the model -------------------------------------------------


def enc(value: Any) -> Any:
    """The documented JSON tags, written independently of objectspace.inspection."""
    if isinstance(value, float) and math.isnan(value):
        return {"$float": "nan"}
    if isinstance(value, tuple):
        return {"$tuple": [enc(v) for v in value]}
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode()}
    if isinstance(value, dt.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: enc(v) for k, v in value.items()}
        return {"$dict": [[enc(k), enc(v)] for k, v in value.items()]}
    if isinstance(value, list):
        return [enc(v) for v in value]
    return value


def text(value: Any) -> str:
    return json.dumps(enc(value), separators=(",", ":"), ensure_ascii=False)


def ordered(kind: str, content: Any) -> list[tuple[Any, Any]]:
    """(slot, value) pairs of a collection in export order."""
    if kind in ("Dict", "SortedDict"):
        return sorted(content.items())
    if kind in ("Set", "SortedSet"):
        return [(v, v) for v in sorted(content)]
    return list(enumerate(content))


def view(object_id: str, kind: str, content: Any, limit: int = 20) -> dict[str, Any]:
    if kind == "Value":
        return {"id": object_id, "kind": kind, "length": None, "value": enc(content)}
    pairs = ordered(kind, content)
    mapping = kind in ("Dict", "SortedDict")
    items = [[enc(k), enc(v)] if mapping else enc(v) for k, v in pairs[:limit]]
    return {
        "id": object_id,
        "kind": kind,
        "length": len(pairs),
        "items": items,
        "more": max(0, len(pairs) - limit),
    }


def prefix(key: Any) -> str:
    return repr(key).replace("%", "%25").replace("/", "%2F") + "/"


def objects_by_group(operator: str, checkpoint: int) -> dict[int, dict[str, tuple[str, Any]]]:
    groups = KG8 if operator == SESSIONS else KG4
    out: dict[int, dict[str, tuple[str, Any]]] = {}
    for key, objects in model(checkpoint)[operator].items():
        for name, obj in objects.items():
            out.setdefault(groups.key_group(key), {})[prefix(key) + name] = obj
    return out


def export_rows(operator: str, checkpoint: int) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for kg, objects in sorted(objects_by_group(operator, checkpoint).items()):
        for object_id, (kind, content) in sorted(objects.items()):
            if kind == "Value":
                rows.append((kg, object_id, kind, None, text(content)))
                continue
            pairs = ordered(kind, content)
            if not pairs:
                rows.append((kg, object_id, kind, None, None))
            sequence = kind not in ("Dict", "SortedDict", "Set", "SortedSet")
            for slot, value in pairs:
                rows.append(
                    (kg, object_id, kind, str(slot) if sequence else text(slot), text(value))
                )
    return rows


# -- running the command ----------------------------------------------------------------------


def run(*args: str, cwd: str | os.PathLike[str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "objectspace.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


def ok(*args: str, cwd: str | os.PathLike[str] | None = None) -> str:
    done = run(*args, cwd=cwd)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr
    return done.stdout


def ok_json(*args: str) -> Any:
    return json.loads(ok(*args, "--json"))


def fails(*args: str, code: int = 1, cwd: str | os.PathLike[str] | None = None) -> str:
    """Run a failing command; check the one-line error; return it."""
    done = run(*args, cwd=cwd)
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("objectspace: error: "), lines[0]
    assert "Traceback" not in done.stderr
    return lines[0]


# -- stores ---------------------------------------------------------------------------------------


def make_url(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path}/state.db"
    if kind == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    return segment_url(f"file://{tmp_path}/segments", f"sqlite:///{tmp_path}/catalog.db")


@pytest.fixture(params=["sqlite", "postgresql", "file"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    url = make_url(request.param, tmp_path, request)
    populate(url)
    return url


@pytest.fixture
def sqlite_store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/state.db"
    populate(url)
    return url


@pytest.fixture
def file_store(tmp_path: Path) -> str:
    url = segment_url(f"file://{tmp_path}/segments", f"sqlite:///{tmp_path}/catalog.db")
    populate(url)
    return url


def snapshot(url: str, folder: Path | None = None) -> Any:
    """Everything a command could change: the catalog's view and every file's bytes."""
    storage = osp.open_storage(url)
    try:
        state: dict[str, Any] = {}
        backend = storage.backend
        for name in storage.jobs():
            job = storage.job(name)
            last = job.last_checkpoint()
            chains = {
                o.name: backend.chains(name, o.name, range(o.max_key_groups), last)
                for o in job.operators()
                if last is not None
            }
            state[name] = (
                job.operators(),
                job.checkpoint_info(),
                backend.write_summary(name),
                chains,
            )
        if isinstance(backend, SegmentBackend):
            state["segments"] = backend.segments()
    finally:
        storage.close()
    files = {}
    if folder is not None:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and not path.name.endswith(("-wal", "-shm")):
                files[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state, files


# -- help, exit codes ------------------------------------------------------------------------------

COMMANDS = ["inspect", "show", "diff", "export", "gc", "compact", "retain", "demo"]


def test_help_of_every_subcommand() -> None:
    assert "usage: objectspace" in ok("--help")
    for command in COMMANDS:
        out = ok(command, "--help")
        assert out.startswith(f"usage: objectspace {command}"), out
    console_script = Path(sys.executable).with_name("objectspace")
    if console_script.exists():
        done = subprocess.run([str(console_script), "inspect", "--help"], capture_output=True)
        assert done.returncode == 0 and b"--operator" in done.stdout


# -- inspect -------------------------------------------------------------------------------------


def expected_inspect(url: str) -> dict[str, Any]:
    storage = osp.open_storage(url)
    try:
        job = storage.job(JOB)
        infos = {c.checkpoint_id: c for c in job.checkpoint_info()}
        pending = [s for s in storage.backend.write_summary(JOB) if not s.committed]
        changed = {KG8.key_group(1), KG8.key_group("alice")}
        groups = {
            SESSIONS: sorted({KG8.key_group(k) for k in KEYS}),
            TOTALS: [KG4.key_group("all")],
        }
        operators = []
        for name, max_kg, parallelism, schema in ((SESSIONS, 8, 2, 2), (TOTALS, 4, 1, 1)):
            chains = storage.backend.chains(JOB, name, range(max_kg), 2)
            rows = [
                {
                    "key_group": g,
                    "writes": 2 if (name == TOTALS or g in changed) else 1,
                    "full_version": 1,
                    "rows": sum(w.rows for w in chains[g]),
                    "bytes": sum(w.bytes for w in chains[g]),
                }
                for g in groups[name]
            ]
            operators.append(
                {
                    "operator": name,
                    "max_key_groups": max_kg,
                    "parallelism": parallelism,
                    "schema_version": schema,
                    "state": {
                        "as_of": 2,
                        "key_groups": len(rows),
                        "writes": sum(r["writes"] for r in rows),
                        "rows": sum(r["rows"] for r in rows),
                        "bytes": sum(r["bytes"] for r in rows),
                    },
                    "key_groups": rows,
                }
            )
        cp1_writes = len(groups[SESSIONS]) + 1
        cp2_writes = len(changed) + 1
        checkpoints = [
            {
                "checkpoint": 1,
                "status": "complete",
                "committed_at": format_time(infos[1].committed_at),
                "writes": cp1_writes,
                "full_writes": cp1_writes,
                "differential_writes": 0,
                "bytes": infos[1].bytes,
            },
            {
                "checkpoint": 2,
                "status": "complete",
                "committed_at": format_time(infos[2].committed_at),
                "writes": cp2_writes,
                "full_writes": 0,
                "differential_writes": cp2_writes,
                "bytes": infos[2].bytes,
            },
            {
                "checkpoint": 3,
                "status": "pending",
                "committed_at": None,
                "writes": 1,
                "full_writes": 0,
                "differential_writes": 1,
                "bytes": pending[0].bytes,
            },
        ]
        assert len(pending) == 1 and pending[0].version == 3
        other = {
            "job": "other",
            "last_checkpoint": None,
            "checkpoints": [],
            "operators": [
                {
                    "operator": "op",
                    "max_key_groups": 2,
                    "parallelism": None,
                    "schema_version": 1,
                    "state": {"as_of": None, "key_groups": 0, "writes": 0, "rows": 0, "bytes": 0},
                    "key_groups": [],
                }
            ],
        }
        clicks = {
            "job": JOB,
            "last_checkpoint": 2,
            "checkpoints": checkpoints,
            "operators": operators,
        }
        return {"storage": redact(storage.url), "jobs": [clicks, other]}
    finally:
        storage.close()


def test_inspect(store: str) -> None:
    expected = expected_inspect(store)
    assert ok_json("inspect", store) == expected
    for row in expected["jobs"][0]["checkpoints"][:2]:  # real ISO 8601 times, in UTC
        assert dt.datetime.fromisoformat(row["committed_at"]).utcoffset() == dt.timedelta(0)
    one = ok_json("inspect", store, "--job", JOB, "--operator", TOTALS)
    assert one == {
        "storage": expected["storage"],
        "jobs": [{**expected["jobs"][0], "operators": [expected["jobs"][0]["operators"][1]]}],
    }
    out = ok("inspect", store, "--job", JOB)
    for word in ("job 'clicks'", "complete", "pending", "sessions", "totals", "key group"):
        assert word in out
    assert "job 'other'" not in out


# -- show ------------------------------------------------------------------------------------------


def test_show(store: str) -> None:
    data = ok_json("show", store, "--job", JOB, "--operator", SESSIONS, "--key", "1")
    assert data == {
        "job": JOB,
        "operator": SESSIONS,
        "checkpoint": 2,
        "key_group": KG8.key_group(1),
        "key": 1,
        "objects": [
            {
                "id": "1/buffer",
                "kind": "List",
                "length": 31,
                "items": [100.0 + i for i in range(20)],
                "more": 11,
            },
            {"id": "1/count", "kind": "Value", "length": None, "value": 10},
            {"id": "1/new", "kind": "Queue", "length": 2, "items": [1, 2], "more": 0},
            {
                "id": "1/seen",
                "kind": "Dict",
                "length": 1,
                "items": [["b", {"$tuple": [1, {"$bytes": "eA=="}]}]],
                "more": 0,
            },
        ],
    }
    # a key group as of checkpoint 1, every object of every key in it
    kg = KG8.key_group(1)
    data = ok_json(
        "show", store, "--job", JOB, "--operator", SESSIONS, "--key-group", str(kg),
        "--checkpoint", "1", "--limit", "3",
    )  # fmt: skip
    objects = objects_by_group(SESSIONS, 1)[kg]
    assert data == {
        "job": JOB,
        "operator": SESSIONS,
        "checkpoint": 1,
        "key_group": kg,
        "objects": [view(i, *objects[i], limit=3) for i in sorted(objects)],
    }
    # every kind, and values JSON lacks
    data = ok_json("show", store, "--job", JOB, "--operator", TOTALS, "--key", "all")
    objects = model(2)[TOTALS]["all"]
    assert data["objects"] == [view(f"'all'/{n}", *objects[n]) for n in sorted(objects)]
    assert data["objects"][0]["items"] == [None, 1.5, {"$float": "nan"}]
    # --key-type str: "2" is not the int key 2
    data = ok_json(
        "show", store, "--job", JOB, "--operator", SESSIONS, "--key", "2", "--key-type", "str"
    )
    assert data["key"] == "2" and data["key_group"] == KG8.key_group("2")
    assert data["objects"] == []
    text_out = ok("show", store, "--job", JOB, "--operator", SESSIONS, "--key", "1")
    assert "1/buffer  List (31 items)" in text_out
    assert "… and 11 more" in text_out
    assert "1/count  Value = 10" in text_out


# -- diff ------------------------------------------------------------------------------------------


def test_diff(store: str) -> None:
    g1, ga = KG8.key_group(1), KG8.key_group("alice")
    objects = [
        {
            "key_group": g1,
            "id": "1/buffer",
            "change": "changed",
            "kind": "List",
            "old_length": 30,
            "new_length": 31,
            "slots": [{"slot": 30, "change": "added", "new": 99.5}],
            "more": 0,
        },
        {
            "key_group": g1,
            "id": "1/count",
            "change": "changed",
            "kind": "Value",
            "old": 1,
            "new": 10,
        },
        {"key_group": g1, "id": "1/new", "change": "added", **view("1/new", "Queue", [1, 2])},
        {
            "key_group": g1,
            "id": "1/seen",
            "change": "changed",
            "kind": "Dict",
            "old_length": 2,
            "new_length": 1,
            "slots": [{"slot": "a", "change": "removed", "old": 1}],
            "more": 0,
        },
        {"key_group": g1, "id": "1/tags", "change": "removed", **view("1/tags", "Set", {"x", "y"})},
        {
            "key_group": ga,
            "id": "'alice'/count",
            "change": "changed",
            "kind": "Value",
            "old": 7,
            "new": {"$datetime": "2024-01-02T03:04:05"},
        },
    ]
    objects.sort(key=lambda o: (o["key_group"], o["id"]))
    data = ok_json("diff", store, "--job", JOB, "--operator", SESSIONS, "--from", "1", "--to", "2")
    assert data == {
        "job": JOB,
        "operator": SESSIONS,
        "from": 1,
        "to": 2,
        "summary": {
            "added": 1,
            "removed": 1,
            "changed": 4,
            "replaced": 0,
            "key_groups_changed": len({g1, ga}),
        },
        "objects": objects,
    }
    totals = ok_json("diff", store, "--job", JOB, "--operator", TOTALS, "--from", "1", "--to", "2")
    assert [(o["id"], o["slots"]) for o in totals["objects"]] == [
        ("'all'/stack", [{"slot": 0, "change": "added", "new": 4}]),
        ("'all'/top", [{"slot": 0, "change": "added", "new": "z"}]),
    ]
    same = ok_json("diff", store, "--job", JOB, "--operator", SESSIONS, "--from", "2", "--to", "2")
    assert same["objects"] == [] and same["summary"]["key_groups_changed"] == 0
    out = ok("diff", store, "--job", JOB, "--operator", SESSIONS, "--from", "1", "--to", "2")
    assert "1 added, 1 removed, 4 changed" in out
    assert "+ 30: 99.5" in out


# -- export ------------------------------------------------------------------------------------------


def test_export(store: str, tmp_path: Path) -> None:
    target = tmp_path / "out" / "state.parquet"
    target.parent.mkdir()
    for operator, checkpoint in ((SESSIONS, 2), (TOTALS, None), (SESSIONS, 1)):
        expected = export_rows(operator, checkpoint or 2)
        args = ["export", store, "--job", JOB, "--operator", operator, "--to", str(target)]
        if checkpoint is None:  # the last checkpoint; the text summary
            out = ok(*args)
            assert out == (
                f"wrote {len(expected)} rows (7 objects in 1 key group, checkpoint 2) to {target}\n"
            )
        else:
            summary = ok_json(*args, "--checkpoint", str(checkpoint))
            assert summary == {
                "path": str(target),
                "checkpoint": checkpoint,
                "rows": len(expected),
                "objects": len({(r[0], r[1]) for r in expected}),
                "key_groups": len({r[0] for r in expected}),
            }
        frame = pd.read_parquet(target)
        assert list(frame.columns) == ["key_group", "object_id", "kind", "slot", "value"]
        assert str(frame["key_group"].dtype) == "int32"
        rows = [
            tuple(None if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in r)
            for r in frame.itertuples(index=False, name=None)
        ]
        assert rows == expected
    assert sorted(p.name for p in target.parent.iterdir()) == ["state.parquet"]  # no temporaries


# -- maintenance ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sqlite", "file"])
def test_compact_and_retain(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = make_url(kind, tmp_path, request)
    populate(url)
    before = ok_json(
        "export", url, "--job", JOB, "--operator", SESSIONS, "--to", str(tmp_path / "a.parquet")
    )
    data = ok_json("compact", url, "--job", JOB)
    chains = {KG8.key_group(1), KG8.key_group("alice")}
    assert data["job"] == JOB and data["as_of"] == 2
    assert [(o["operator"], o["key_groups"]) for o in data["operators"]] == [
        (SESSIONS, len(chains)),
        (TOTALS, 1),
    ]
    assert data["key_groups"] == len(chains) + 1 and data["bytes_written"] > 0
    sessions, totals = ok_json("inspect", url, "--job", JOB)["jobs"][0]["operators"]
    assert [(g["key_group"], g["writes"], g["full_version"]) for g in sessions["key_groups"]] == [
        (g, 1, 2 if g in chains else 1) for g in sorted({KG8.key_group(k) for k in KEYS})
    ]
    assert [(g["writes"], g["full_version"]) for g in totals["key_groups"]] == [(1, 2)]
    ok("export", url, "--job", JOB, "--operator", SESSIONS, "--to", str(tmp_path / "b.parquet"))
    assert before["rows"] == len(export_rows(SESSIONS, 2))
    assert pd.read_parquet(tmp_path / "a.parquet").equals(pd.read_parquet(tmp_path / "b.parquet"))
    assert "compacted 0 key groups" in ok("compact", url, "--job", JOB)

    data = ok_json("retain", url, "--job", JOB, "--keep-last", "1")
    assert data == {
        "job": JOB,
        "keep_last": 1,
        "kept": [2],
        "checkpoints_dropped": 1,
        "writes_removed": 2 * (len(chains) + 1),  # each compacted chain: full v1 and diff v2
        "pending_removed": 0,  # version 3 may still commit
        "rows_removed": data["rows_removed"],
        "segments": kind == "file",
    }
    assert (data["rows_removed"] > 0) == (kind == "sqlite")  # segment rows live in files
    error = fails(
        "show", url, "--job", JOB, "--operator", SESSIONS, "--key", "1", "--checkpoint", "1"
    )
    assert "checkpoint 1 of job 'clicks' is not restorable (restorable: 2)" in error
    assert [
        c["status"] for c in ok_json("inspect", url, "--job", JOB)["jobs"][0]["checkpoints"]
    ] == [
        "complete",
        "pending",
    ]
    assert "dropped 0 checkpoints" in ok("retain", url, "--job", JOB, "--keep-last", "1")
    if kind == "sqlite":
        assert "there are no files to collect" in ok("gc", url)
        assert ok_json("gc", url, "--dry-run", "--grace", "30s") == {
            "storage": redact(osp.open_storage(url).url),
            "segments": False,
            "dry_run": True,
            "grace_seconds": 30.0,
            "stamped": 0,
            "deleted": [],
            "bytes_deleted": 0,
            "referenced": 0,
            "refused": [],
        }


def _segments(url: str) -> tuple[set[str], set[str]]:
    """(referenced segment paths, segment files on disk)."""
    storage = osp.open_storage(url)
    try:
        backend = storage.backend
        assert isinstance(backend, SegmentBackend)
        referenced = backend.referenced_segments()
        on_disk = {p for p in backend.fs.find(backend._base) if p.endswith(".seg")}
        return referenced, on_disk
    finally:
        storage.close()


def test_gc(tmp_path: Path) -> None:
    url = segment_url(f"file://{tmp_path}/segments", f"sqlite:///{tmp_path}/catalog.db")
    populate(url)
    storage = osp.open_storage(url)
    try:  # an attempt at version 2 that never commits: its segment becomes garbage
        job = storage.job(JOB)
        stale = job.operator(SESSIONS).instance(KG8.instance_of_key(1, 2), 2, checkpoint=1)
        KeyState.for_key(stale.space_for_key(1), 1).value("count").value = -1
        stale.save(2)
    finally:
        storage.close()
    referenced, on_disk = _segments(url)
    assert referenced == on_disk
    n = len(on_disk)
    before = snapshot(url, tmp_path)
    data = ok_json("gc", url, "--dry-run", "--grace", "0")
    assert (data["stamped"], data["deleted"], data["referenced"]) == (0, [], n)
    assert snapshot(url, tmp_path) == before

    ok_json("retain", url, "--job", JOB, "--keep-last", "1")  # drops the stale pending write
    referenced, on_disk = _segments(url)
    (garbage,) = on_disk - referenced
    data = ok_json("gc", url, "--grace", "1h")  # phase one: stamp
    assert (data["stamped"], data["deleted"], data["referenced"]) == (1, [], n - 1)
    before = snapshot(url, tmp_path)
    for _ in range(2):  # a dry run reports and deletes nothing
        data = ok_json("gc", url, "--grace", "0", "--dry-run")
        assert data["dry_run"] and data["deleted"] == [garbage] and data["bytes_deleted"] > 0
        assert snapshot(url, tmp_path) == before
    out = ok("gc", url, "--grace", "10m")
    assert "deleted 0 unreferenced segment files" in out
    data = ok_json("gc", url, "--grace", "0")
    assert data["deleted"] == [garbage] and not data["dry_run"]
    referenced, on_disk = _segments(url)
    assert on_disk == referenced and garbage not in on_disk  # only garbage went
    for operator in (SESSIONS, TOTALS):
        out_file = tmp_path / f"{operator}.parquet"
        ok("export", url, "--job", JOB, "--operator", operator, "--to", str(out_file))
        assert len(pd.read_parquet(out_file)) == len(export_rows(operator, 2))
    assert ok_json("gc", url, "--grace", "0")["deleted"] == []


# -- errors: one line, non-zero, nothing changed ---------------------------------------------------


def test_bad_arguments(sqlite_store: str, tmp_path: Path) -> None:
    before = snapshot(sqlite_store, tmp_path)
    u = sqlite_store
    so = ["--job", JOB, "--operator", SESSIONS]
    cases: list[tuple[list[str], int, str]] = [
        ([], 2, "required: command"),
        (["frob"], 2, "invalid choice: 'frob'"),
        (["inspect"], 2, "inspect: the following arguments are required: URL"),
        (["show", u, *so], 2, "one of the arguments --key --key-group is required"),
        (["show", u, *so, "--key", "1", "--key-group", "2"], 2, "not allowed with argument"),
        (["show", u, *so, "--key-group", "-1"], 2, "argument --key-group"),
        (["show", u, *so, "--key", "x", "--key-type", "int"], 1, "--key 'x' is not an integer"),
        (["show", u, *so, "--key", "[1, 2.5]", "--key-type", "json"], 1, "a key cannot be a float"),
        (["show", u, *so, "--key-group", "8"], 1, "key group 8 is outside 0..7"),
        (["show", u, *so, "--key", "1", "--checkpoint", "9"], 1, "checkpoint 9 of job 'clicks' is not restorable (restorable: 1, 2)"),
        (["diff", u, *so, "--from", "x", "--to", "2"], 2, "argument --from: invalid int value: 'x'"),
        (["export", u, *so], 2, "the following arguments are required: --to"),
        (["export", u, *so, "--to", str(tmp_path / "no" / "x.parquet")], 1, "does not exist"),
        (["gc", u, "--grace", "5x"], 2, "invalid duration '5x'"),
        (["retain", u, "--job", JOB, "--keep-last", "0"], 2, "must be >= 1"),
        (["inspect", u, "--operator", SESSIONS], 1, "--operator needs --job"),
        (["inspect", u, "--job", JOB, "--operator", "nope"], 1, "job 'clicks' has no operator 'nope' (operators: 'sessions', 'totals')"),
        (["inspect", "memory://x"], 1, "memory:// storage lives inside one process"),
        (["inspect", "ftp://x/y"], 1, "unknown scheme 'ftp'"),
    ]  # fmt: skip
    for args, code, message in cases:
        assert message in fails(*args, code=code), args
    assert snapshot(sqlite_store, tmp_path) == before


def test_debug_shows_the_traceback(sqlite_store: str) -> None:
    done = run("--debug", "inspect", sqlite_store, "--job", "nope")
    assert done.returncode == 1 and "Traceback" in done.stderr and "CheckpointError" in done.stderr
    done = run("inspect", sqlite_store, "--job", "nope", "--debug")
    assert done.returncode == 1 and "Traceback" in done.stderr


def test_missing_store_is_an_error_and_creates_nothing(tmp_path: Path) -> None:
    missing = f"sqlite:///{tmp_path}/missing.db"
    catalog_missing = segment_url(f"file://{tmp_path}/seg", f"sqlite:///{tmp_path}/cat.db")
    so = ["--job", JOB, "--operator", SESSIONS]
    for url in (missing, catalog_missing):
        commands = [
            ["inspect", url],
            ["show", url, *so, "--key", "1"],
            ["diff", url, *so, "--from", "1", "--to", "2"],
            ["export", url, *so, "--to", str(tmp_path / "x.parquet")],
            ["gc", url],
            ["compact", url, "--job", JOB],
            ["retain", url, "--job", JOB, "--keep-last", "1"],
        ]
        for args in commands if url == missing else commands[:2]:
            assert "does not exist" in fails(*args), args
    assert list(tmp_path.iterdir()) == []
    not_a_store = tmp_path / "notes.db"
    not_a_store.write_text("not a database")
    assert "cannot read" in fails("inspect", f"sqlite:///{not_a_store}")
    assert not_a_store.read_text() == "not a database"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]


def test_missing_postgres_schema_is_an_error(postgres_url: str) -> None:
    assert "holds no objectspace catalog" in fails("inspect", postgres_url)
    import psycopg

    conninfo = postgres_url.split("?")[0]
    schema = postgres_url.split("schema=")[1]
    with psycopg.connect(conninfo) as conn:
        found = conn.execute(
            "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (schema,)
        ).fetchone()
    assert found is None  # nothing was created


@pytest.mark.parametrize("kind", ["sqlite", "postgresql", "file"])
def test_wrong_job(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = make_url(kind, tmp_path, request)
    populate(url)
    before = snapshot(url, tmp_path)
    so = ["--job", "nope", "--operator", SESSIONS]
    commands = [
        ["inspect", url, "--job", "nope"],
        ["show", url, *so, "--key", "1"],
        ["diff", url, *so, "--from", "1", "--to", "2"],
        ["export", url, *so, "--to", str(tmp_path / "x.parquet")],
        ["compact", url, "--job", "nope"],
        ["retain", url, "--job", "nope", "--keep-last", "1"],
    ]
    for args in commands if kind == "sqlite" else commands[:2]:
        error = fails(*args)
        assert "no job 'nope' in" in error and error.endswith("(jobs: 'clicks', 'other')"), error
    assert snapshot(url, tmp_path) == before


def _corrupt(url: str, key: Any, version: int) -> str:
    """Flip bytes in the block of ``key``'s key group written at ``version``; its file."""
    storage = osp.open_storage(url)
    try:
        kg = KG8.key_group(key)
        (write,) = [
            w
            for w in storage.backend.chains(JOB, SESSIONS, range(kg, kg + 1), 2)[kg]
            if w.version == version
        ]
        assert write.segment is not None
        path = Path(write.segment)
        data = bytearray(path.read_bytes())
        for i in range(write.offset + 12, write.offset + write.length):
            data[i] ^= 0x5A
        path.write_bytes(bytes(data))
        return str(path)
    finally:
        storage.close()


def test_corrupt_segment(file_store: str, tmp_path: Path) -> None:
    path = _corrupt(file_store, 1, 2)
    before = snapshot(file_store, tmp_path)
    so = ["--job", JOB, "--operator", SESSIONS]
    target = tmp_path / "x.parquet"
    for args in (
        ["show", file_store, *so, "--key", "1"],
        ["show", file_store, *so, "--key-group", str(KG8.key_group(1))],
        ["diff", file_store, *so, "--from", "1", "--to", "2"],
        ["export", file_store, *so, "--to", str(target)],
        ["compact", file_store, "--job", JOB],
    ):
        error = fails(*args)
        assert f"segment {path!r} is corrupt" in error, error
    assert not target.exists()
    assert snapshot(file_store, tmp_path) == before
    # what does not read the block still works: other key groups, the catalog
    other = next(k for k in KEYS if KG8.key_group(k) != KG8.key_group(1))
    ok("show", file_store, *so, "--key", str(other))
    assert ok_json("inspect", file_store)["jobs"][0]["last_checkpoint"] == 2


@pytest.mark.parametrize("listening", [False, True], ids=["closed-port", "silent-server"])
def test_connect_timeout_in_the_url_is_honoured(listening: bool) -> None:
    """A database that refuses, or accepts and never answers, fails the command within the
    URL's ``connect_timeout`` (not a fixed 30 s), with an objectspace error."""
    import socket
    import time

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        if listening:
            sock.listen(8)  # the kernel completes the handshake; nobody ever answers
        else:
            sock.close()
        url = f"postgresql://nobody@127.0.0.1:{port}/db?connect_timeout=1"
        started = time.monotonic()
        done = run("inspect", url)
        elapsed = time.monotonic() - started
    assert done.returncode != 0
    assert "error: cannot connect to" in done.stderr and "Traceback" not in done.stderr
    assert elapsed < 12, f"the command took {elapsed:.1f} s with connect_timeout=1"


# -- stats -----------------------------------------------------------------------------------------


def _record_batches(url: str) -> list[Any]:
    """Three committed batches of job 'runs' with their statistics recorded (the last two
    kept), as a StatefulRunner records them: without Spark."""
    from objectspace.engine import BatchStats
    from objectspace.spark.metrics import RecordingJob

    storage = osp.open_storage(url)
    try:
        job = RecordingJob(storage, "runs", keep=2)
        op = job.operator("op", 4)
        base = None
        ran = []
        for cp in range(3):
            instance = op.instance(0, 1, checkpoint=base)
            instance.space(cp % 4).create_value(f"{cp}/n", cp)
            stats = BatchStats(cp, 1, keys=cp + 1, rows_in=10 * cp, seconds_restore=0.25)
            job.record("op", stats, base)
            receipt = instance.save(cp)
            assert job.commit(cp, [receipt])
            ran.append(stats)
            base = cp
        return ran
    finally:
        storage.close()


def test_stats(tmp_path: Path) -> None:
    from objectspace.inspection import stats_row

    url = f"sqlite:///{tmp_path}/state.db"
    ran = _record_batches(url)
    populate(url)  # another job, which records none
    before = snapshot(url, tmp_path)
    data = ok_json("stats", url, "runs")
    assert data["storage"] == redact(url) and data["job"] == "runs" and data["operator"] == "op"
    assert data["batches"] == [stats_row(b) for b in ran[1:]]
    assert [b["keys"] for b in data["batches"]] == [2, 3]
    assert all(b["committed"] and b["bytes_written"] > 0 for b in data["batches"])
    assert ok_json("stats", url, "runs", "--last", "1", "--operator", "op")["batches"] == [
        stats_row(ran[2])
    ]
    table = ok("stats", url, "runs")
    assert "job 'runs', operator 'op'" in table and "restore s" in table and "0.250" in table
    assert ok_json("stats", url, JOB) == {
        "storage": redact(url),
        "job": JOB,
        "operator": None,
        "batches": [],
    }
    assert "no batch statistics recorded" in ok("stats", url, JOB)
    assert "no job 'nope'" in fails("stats", url, "nope")
    assert "has no operator 'x'" in fails("stats", url, "runs", "--operator", "x")
    assert "--last: must be >= 0" in fails("stats", url, "runs", "--last", "-1", code=2)
    assert "does not exist" in fails("stats", f"sqlite:///{tmp_path}/missing.db", "runs")
    assert not (tmp_path / "missing.db").exists()
    assert snapshot(url, tmp_path) == before
    assert ok("stats", "--help").startswith("usage: objectspace stats")

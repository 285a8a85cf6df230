"""What a durable commit per micro-batch costs at the disk, before any state store's design.

Two parts, each variant on its own fresh loop-mounted ext4 volume (``benchmarks/diskbytes``):

1. **Primitives.** 60 commits of a 20,000-byte random payload each (the Buffer workload's
   new state per micro-batch is 16,000 bytes of floats), written the ways a checkpoint can
   reach the disk: a new file per commit, ``fsync`` of the file and its folder (a segment
   file per batch), four such files per commit (a segment file per task); an append to one
   file and ``fsync``; SQLite in WAL mode with 1 KiB pages and ``synchronous=NORMAL`` (the
   settings of ``sqlite:///``), one transaction per commit, or five (four tasks and a
   driver commit, as a Spark batch of four partitions does); SQLite with a rollback journal
   (``journal_mode=PERSIST``, ``synchronous=FULL``). Reported: bytes at the disk, and per
   commit beyond the payload.
2. **objectspace's storage without Spark.** The Buffer workload (1,000 keys, list buffer of
   100, 2 float events per key per checkpoint, 60 checkpoints, 128 key groups) saved by 4
   instances and committed, as the runner does at parallelism 4, and by 1 instance, on
   ``sqlite:///`` and on ``file://`` segments with a SQLite catalog; where ``sqlite:///``'s
   WAL pages go, per table and index.
3. **The throughput workload on storage** (10,000 keys x 10 events, 20 checkpoints),
   with and without ``CompactionPolicy.full_when_smaller``; the segment catalog alone on
   its volume after 0, 1, 5 and 20 checkpoints.
4. **Catalog layouts**, emulated on raw SQLite: today's rows per key group against one
   row per instance and checkpoint.

    .venv/bin/python -m benchmarks.bench_diskfloor [--quick] [--no-record]
"""

from __future__ import annotations

import functools
import os
import random
import shutil
import sqlite3
import struct
import tempfile
import urllib.parse
from collections import Counter
from collections.abc import Callable, Sequence

import objectspace as osp
from benchmarks.common import fmt_bytes, parse_args, print_table, record, temp_dir
from benchmarks.diskbytes import tree_size, volume
from objectspace.checkpoint import CompactionPolicy

COMMITS = 60
PAYLOAD = 20_000
KEYS = 1_000
CAPACITY = 100
EVENTS = 2
KEY_GROUPS = 128
STAGE_BYTES = 16 * 1024 * 1024
# the throughput workload of bench_spark: 10,000 keys x 10 events per checkpoint, 20 of them
THROUGHPUT_KEYS = 10_000
THROUGHPUT_EVENTS = 10
THROUGHPUT_CHECKPOINTS = 20


def _fsync_folder(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def new_files(per_commit: int) -> Callable[[str, int], None]:
    def run(folder: str, commits: int) -> None:
        rng = random.Random(1)
        for c in range(commits):
            for f in range(per_commit):
                path = os.path.join(folder, f"segment-{c:05d}-{f}")
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                try:
                    os.write(fd, rng.randbytes(PAYLOAD // per_commit))
                    os.fsync(fd)
                finally:
                    os.close(fd)
                _fsync_folder(folder)

    return run


def append_one_file(folder: str, commits: int) -> None:
    rng = random.Random(1)
    fd = os.open(os.path.join(folder, "log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for _ in range(commits):
            os.write(fd, rng.randbytes(PAYLOAD))
            os.fsync(fd)
    finally:
        os.close(fd)


def sqlite_commits(per_commit: int, journal: str, synchronous: str) -> Callable[[str, int], None]:
    def run(folder: str, commits: int) -> None:
        rng = random.Random(1)
        conn = sqlite3.connect(os.path.join(folder, "state.db"), isolation_level=None)
        try:
            conn.execute("PRAGMA page_size=1024")
            conn.execute(f"PRAGMA journal_mode={journal}")
            conn.execute(f"PRAGMA synchronous={synchronous}")
            conn.execute("PRAGMA wal_autocheckpoint=65536")
            conn.execute("CREATE TABLE blocks(id INTEGER PRIMARY KEY, data BLOB NOT NULL)")
            conn.execute("CREATE TABLE catalog(id INTEGER PRIMARY KEY, data BLOB NOT NULL)")
            for _ in range(commits):
                for t in range(per_commit):
                    conn.execute("BEGIN IMMEDIATE")
                    if t < max(1, per_commit - 1):  # the tasks' blocks
                        size = PAYLOAD // max(1, per_commit - 1)
                        conn.execute("INSERT INTO blocks(data) VALUES (?)", (rng.randbytes(size),))
                    if t == per_commit - 1:  # the commit's catalog row
                        conn.execute("INSERT INTO catalog(data) VALUES (?)", (rng.randbytes(64),))
                    conn.execute("COMMIT")
        finally:
            conn.close()

    return run


PRIMITIVES: list[tuple[str, Callable[[str, int], None]]] = [
    ("a new file per commit (fsync file and folder)", new_files(1)),
    ("four new files per commit", new_files(4)),
    ("append to one file, fsync", append_one_file),
    (
        "SQLite WAL, NORMAL, 1 KiB pages: one transaction per commit",
        sqlite_commits(1, "WAL", "NORMAL"),
    ),
    (
        "SQLite WAL, NORMAL, 1 KiB pages: five transactions per commit",
        sqlite_commits(5, "WAL", "NORMAL"),
    ),
    (
        "SQLite rollback journal (PERSIST, FULL): one transaction per commit",
        sqlite_commits(1, "PERSIST", "FULL"),
    ),
]


def buffer_workload(
    url: str,
    parallelism: int,
    checkpoints: int,
    before_close: Callable[[], None] | None = None,
    stage_bytes: int = 0,
    *,
    keys: int = KEYS,
    events: int = EVENTS,
    policy: CompactionPolicy | None = None,
    fulls: list[int] | None = None,
) -> int:
    """The Buffer workload saved by ``parallelism`` instances; returns the logical bytes.
    ``before_close`` runs after the last commit, before the storage closes; ``stage_bytes``
    as in ``Instance.save`` (the saves' blocks stored by the commit); ``fulls`` gets the
    full writes of each checkpoint."""
    storage = osp.open_storage(url)
    try:
        job = storage.job("buffer")
        op = job.operator(
            "buffer100", max_key_groups=KEY_GROUPS, compaction=policy or CompactionPolicy()
        )
        instances = [op.instance(i, parallelism) for i in range(parallelism)]
        owner = [instances[op.key_groups.instance_of_key(k, parallelism)] for k in range(keys)]
        rng = random.Random(11)
        logical = 0
        for cp in range(checkpoints):
            for k in range(keys):
                space = owner[k].space_for_key(k)
                oid = f"{k}/buf"
                buf = space.get_list(oid) if oid in space else space.create_list(oid)
                for _ in range(events):
                    buf.append(rng.random())
                    if len(buf) == CAPACITY:
                        buf.clear()
            receipts = [inst.save(cp, stage_bytes=stage_bytes) for inst in instances]
            job.commit(cp, receipts)
            for inst in instances:
                logical += inst.last_save.bytes_written
                if fulls is not None:
                    fulls.append(inst.last_save.full)
                inst.on_saved()
        if before_close is not None:
            before_close()
        return logical
    finally:
        storage.close()


NO_FSYNC = "file:// segments, fsync=0"


def _url(backend: str, folder: str, catalog_folder: str | None = None) -> str:
    if backend == "sqlite:///":
        return f"sqlite:///{folder}/state.db"
    options = {"catalog": f"sqlite:///{catalog_folder or folder}/catalog.db"}
    if backend == NO_FSYNC:
        options["fsync"] = "0"
    return f"file://{folder}/segments?{urllib.parse.urlencode(options)}"


def catalog_layout(packed: bool, block: int) -> Callable[[str, int], None]:
    """The Buffer workload's catalog and blocks on raw SQLite with the settings of
    ``sqlite:///`` (WAL, ``synchronous=NORMAL``, 1 KiB pages), one transaction per
    checkpoint: as stored today (per key group a write row with its index entry, a block
    row and a head row), or packed (per instance one row holding its key groups' entries
    and their blocks, one row of every head of the operator)."""

    def run(folder: str, commits: int) -> None:
        rng = random.Random(3)
        conn = sqlite3.connect(os.path.join(folder, "state.db"), isolation_level=None)
        try:
            conn.execute("PRAGMA page_size=1024")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(
                "CREATE TABLE writes(id INTEGER PRIMARY KEY, op INT, kg INT, version INT, "
                "is_full INT, committed INT, bytes INT, rows INT, attempt TEXT, created REAL, "
                "segment INT, seg_offset INT, seg_length INT, digest INT, parent INT);"
                "CREATE INDEX writes_versions ON writes(op, version, kg);"
                "CREATE TABLE blocks(write INTEGER PRIMARY KEY, data BLOB);"
                "CREATE TABLE heads(op INT, kg INT, head INT, version INT, compaction INT, "
                "parent INT, PRIMARY KEY (op, kg)) WITHOUT ROWID;"
                "CREATE TABLE packs(id INTEGER PRIMARY KEY, op INT, version INT, entries BLOB, "
                "data BLOB);"
                "CREATE TABLE packed_heads(op INTEGER PRIMARY KEY, data BLOB);"
                "CREATE TABLE checkpoints(job INT, checkpoint INT, committed_at REAL, "
                "writes INT, bytes INT, full_writes INT, base INT, epoch INT, "
                "PRIMARY KEY (job, checkpoint)) WITHOUT ROWID;"
                "CREATE TABLE jobs(id INTEGER PRIMARY KEY, name TEXT, last INT, epoch INT);"
                "INSERT INTO jobs VALUES (1, 'buffer', NULL, 0);"
            )
            wid = 0
            for cp in range(commits):
                conn.execute("BEGIN IMMEDIATE")
                blocks = [rng.randbytes(block) for _ in range(KEY_GROUPS)]
                if packed:
                    per = KEY_GROUPS // 4
                    for i in range(4):
                        conn.execute(
                            "INSERT INTO packs(op, version, entries, data) VALUES (1, ?, ?, ?)",
                            (
                                cp,
                                rng.randbytes(per * 20),
                                b"".join(blocks[i * per : (i + 1) * per]),
                            ),
                        )
                    conn.execute(
                        "INSERT OR REPLACE INTO packed_heads VALUES (1, ?)",
                        (rng.randbytes(KEY_GROUPS * 10),),
                    )
                else:
                    for g, data in enumerate(blocks):
                        wid += 1
                        parent = wid - KEY_GROUPS if cp else None
                        conn.execute(
                            "INSERT INTO writes VALUES (?, 1, ?, ?, 0, 1, ?, 3, '', ?, NULL, 0, 0, "
                            "?, ?)",
                            (wid, g, cp, block, float(cp), rng.getrandbits(63), parent),
                        )
                        conn.execute("INSERT INTO blocks VALUES (?, ?)", (wid, data))
                        conn.execute(
                            "INSERT OR REPLACE INTO heads VALUES (1, ?, ?, ?, 0, ?)",
                            (g, wid, cp, parent),
                        )
                conn.execute(
                    "INSERT INTO checkpoints VALUES (1, ?, ?, ?, ?, 0, ?, 0)",
                    (cp, float(cp), KEY_GROUPS, KEY_GROUPS * block, cp - 1),
                )
                conn.execute("UPDATE jobs SET last = ? WHERE id = 1", (cp,))
                conn.execute("COMMIT")
        finally:
            conn.close()

    return run


def wal_pages(path: str) -> tuple[int, Counter[str], Counter[str]]:
    """Of the WAL of the SQLite database ``path``, still holding every frame: its page size,
    the frames per table or index (``dbstat``: the table that owns the page now), and the
    table's pages in the database."""
    with open(path + "-wal", "rb") as f:
        wal = f.read()
    page_size = struct.unpack(">I", wal[8:12])[0]
    frames: Counter[int] = Counter()
    for offset in range(32, len(wal) - 24 - page_size + 1, 24 + page_size):
        frames[struct.unpack(">I", wal[offset : offset + 4])[0]] += 1
    with tempfile.TemporaryDirectory() as tmp:  # a copy: reading must not touch the WAL
        copy = os.path.join(tmp, "copy.db")
        shutil.copy(path, copy)
        shutil.copy(path + "-wal", copy + "-wal")
        conn = sqlite3.connect(copy)
        try:
            owner = dict(conn.execute("SELECT pageno, name FROM dbstat"))
        finally:
            conn.close()
    by_table: Counter[str] = Counter()
    for page, count in frames.items():
        by_table[owner.get(page, "(free pages)")] += count
    return page_size, by_table, Counter(owner.values())


def _keep_wal_pages(found: list[tuple[int, Counter[str], Counter[str]]], path: str) -> None:
    found.append(wal_pages(path))


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__ or "", argv)
    commits = COMMITS // (6 if args.quick else 1)
    method = ""
    rows = []
    for name, fn in PRIMITIVES:
        with volume() as vol:
            fn(vol.path, commits)
            size = tree_size(vol.path)
        method = vol.method
        payload = commits * PAYLOAD
        rows.append(
            [
                name,
                fmt_bytes(payload),
                fmt_bytes(vol.written),
                fmt_bytes(size),
                fmt_bytes((vol.written - payload) / commits),
            ]
        )
        print(rows[-1], flush=True)
    primitives = print_table(
        [
            f"{commits} commits of {PAYLOAD:,} bytes",
            "payload",
            "bytes at the disk",
            "files at end",
            "per commit beyond the payload",
        ],
        rows,
    )
    checkpoints = commits
    rows = []
    for backend in ("sqlite:///", "file:// segments", NO_FSYNC):
        for parallelism, staged in ((4, False), (1, False), (4, True)):
            if backend == NO_FSYNC and not staged:
                continue
            with volume() as vol:
                logical = buffer_workload(
                    _url(backend, vol.path),
                    parallelism,
                    checkpoints,
                    stage_bytes=STAGE_BYTES if staged else 0,
                )
                size = tree_size(vol.path)
            if staged and backend == "sqlite:///":
                staged_logical = logical
            rows.append(
                [
                    backend,
                    str(parallelism),
                    "1 (the commit stores the staged saves)"
                    if staged
                    else f"{parallelism + 1} ({parallelism} saves + 1 commit)",
                    fmt_bytes(logical),
                    fmt_bytes(vol.written),
                    fmt_bytes(size),
                    fmt_bytes(vol.written / checkpoints),
                ]
            )
            print(rows[-1], flush=True)
    storage = print_table(
        [
            "storage",
            "instances",
            "transactions per checkpoint",
            "logical bytes",
            "bytes at the disk",
            "files at end",
            "per checkpoint",
        ],
        rows,
    )
    # per table or index: WAL frames in each variant (4 instances, 1, 4 staged)
    variants = {"4": (4, 0), "1": (1, 0), "4 staged": (4, STAGE_BYTES)}
    wal_rows: dict[str, dict[str, int]] = {}
    owned: Counter[str] = Counter()
    sizes: dict[str, int] = {}
    for label, (parallelism, stage_bytes) in variants.items():
        with temp_dir() as tmp:
            path = os.path.join(tmp, "state.db")
            found: list[tuple[int, Counter[str], Counter[str]]] = []
            keep = functools.partial(_keep_wal_pages, found, path)
            buffer_workload(f"sqlite:///{path}", parallelism, checkpoints, keep, stage_bytes)
        page_size, by_table, pages = found[0]
        sizes[label] = page_size * sum(by_table.values())
        if label == "4":
            owned = pages
        for name, count in by_table.items():
            wal_rows.setdefault(name, {})[label] = count
    ordered = sorted(wal_rows, key=lambda n: -wal_rows[n].get("4", 0))
    shown = [n for n in ordered if max(wal_rows[n].values()) >= checkpoints // 2]
    rest = [n for n in ordered if n not in shown]

    def per_variant(names: Sequence[str]) -> list[str]:
        return [f"{sum(wal_rows[n].get(v, 0) for n in names):,}" for v in variants]

    table_rows = [
        [
            name,
            f"{owned.get(name, 0):,}",
            *per_variant([name]),
            f"{wal_rows[name].get('4', 0) / checkpoints:.1f}",
        ]
        for name in shown
    ]
    if rest:
        table_rows.append(
            [
                f"{len(rest)} other tables and indexes",
                f"{sum(owned.get(n, 0) for n in rest):,}",
                *per_variant(rest),
                f"{sum(wal_rows[n].get('4', 0) for n in rest) / checkpoints:.1f}",
            ]
        )
    table_rows.append(
        [
            "all (WAL bytes)",
            f"{sum(owned.values()):,}",
            *(
                f"{count} ({fmt_bytes(sizes[v])})"
                for count, v in zip(per_variant(list(wal_rows)), variants, strict=True)
            ),
            f"{sum(r.get('4', 0) for r in wal_rows.values()) / checkpoints:.1f}",
        ]
    )
    wal_table = print_table(
        [
            "table or index",
            "its pages at end (4 instances)",
            "pages written to the WAL, 4 instances",
            "1 instance",
            "4 instances, staged",
            "per checkpoint, 4 instances",
        ],
        table_rows,
    )
    # The segment catalog's WAL pages (4 instances, staged), by table or index.
    with temp_dir() as tmp:
        found = []
        catalog = os.path.join(tmp, "catalog.db")
        keep = functools.partial(_keep_wal_pages, found, catalog)
        buffer_workload(_url("file:// segments", tmp), 4, checkpoints, keep, STAGE_BYTES)
    catalog_page, catalog_frames, catalog_pages = found[0]
    catalog_rows = [
        [name, f"{catalog_pages.get(name, 0):,}", f"{count:,}", f"{count / checkpoints:.1f}"]
        for name, count in catalog_frames.most_common()
        if count >= checkpoints // 2
    ]
    small = [(n, c) for n, c in catalog_frames.items() if c < checkpoints // 2]
    if small:
        catalog_rows.append(
            [
                f"{len(small)} other tables and indexes",
                f"{sum(catalog_pages.get(n, 0) for n, _ in small):,}",
                f"{sum(c for _, c in small):,}",
                f"{sum(c for _, c in small) / checkpoints:.1f}",
            ]
        )
    frames = sum(catalog_frames.values())
    catalog_rows.append(
        [
            "all (WAL bytes)",
            f"{sum(catalog_pages.values()):,}",
            f"{frames:,} ({fmt_bytes(frames * (catalog_page + 24))})",
            f"{frames / checkpoints:.1f}",
        ]
    )
    catalog_table = print_table(
        ["table or index", "its pages at end", "pages written to the WAL", "per checkpoint"],
        catalog_rows,
    )
    # The throughput workload, with and without CompactionPolicy.full_when_smaller.
    through = THROUGHPUT_CHECKPOINTS // (4 if args.quick else 1)
    rows = []
    for backend in ("sqlite:///", "file:// segments"):
        for smaller in (False, True):
            fulls: list[int] = []
            with volume() as vol:
                logical = buffer_workload(
                    _url(backend, vol.path),
                    4,
                    through,
                    stage_bytes=STAGE_BYTES,
                    keys=THROUGHPUT_KEYS,
                    events=THROUGHPUT_EVENTS,
                    policy=CompactionPolicy(full_when_smaller=smaller),
                    fulls=fulls,
                )
                size = tree_size(vol.path)
            rows.append(
                [
                    backend,
                    "on" if smaller else "off",
                    f"{sum(fulls):,}",
                    fmt_bytes(logical),
                    fmt_bytes(vol.written),
                    fmt_bytes(size),
                ]
            )
            print(rows[-1], flush=True)
    throughput = print_table(
        [
            "storage",
            "full_when_smaller",
            "full writes",
            "logical bytes",
            "bytes at the disk",
            "files at end",
        ],
        rows,
    )
    # The segment catalog alone on its volume (segment files elsewhere): what a SQLite
    # catalog costs at the disk before any checkpoint, and per checkpoint.
    alone = []
    for count in (0, 1, 5, 20) if not args.quick else (0, 1, 5):
        with tempfile.TemporaryDirectory() as elsewhere, volume() as vol:
            buffer_workload(
                _url("file:// segments", elsewhere, vol.path),
                4,
                count,
                stage_bytes=STAGE_BYTES,
                keys=THROUGHPUT_KEYS,
                events=THROUGHPUT_EVENTS,
                policy=CompactionPolicy(full_when_smaller=True),
            )
            size = tree_size(vol.path)
        alone.append([f"{count}", fmt_bytes(vol.written), fmt_bytes(size)])
        print(alone[-1], flush=True)
    catalog_alone = print_table(
        ["checkpoints (throughput workload)", "the catalog's bytes at the disk", "its file at end"],
        alone,
    )
    # The catalog's layout, emulated on raw SQLite with the Buffer workload's block sizes.
    block = round(staged_logical / (checkpoints * KEY_GROUPS))
    rows = []
    for label, packed in (
        ("schema version 6: per key group a write row, index entry, block row, head row", False),
        ("packed: per instance one row (entries and blocks), one row of all heads", True),
    ):
        with volume() as vol:
            catalog_layout(packed, block)(vol.path, checkpoints)
            size = tree_size(vol.path)
        rows.append(
            [
                label,
                fmt_bytes(checkpoints * KEY_GROUPS * block),
                fmt_bytes(vol.written),
                fmt_bytes(size),
                fmt_bytes(vol.written / checkpoints),
            ]
        )
        print(rows[-1], flush=True)
    layouts = print_table(
        [
            "catalog layout (raw SQLite, WAL, NORMAL, 1 KiB pages)",
            "blocks",
            "bytes at the disk",
            "files at end",
            "per checkpoint",
        ],
        rows,
    )
    if args.record:
        record(
            "diskfloor",
            "\n\n".join(
                [
                    f"Bytes at the disk: {method} (each variant on its own fresh ext4 loop "
                    "volume, `sync` before and after; `benchmarks/diskbytes.py`).",
                    f"**Primitives**: {commits} commits of a {PAYLOAD:,}-byte random payload "
                    "(the Buffer workload's new state per micro-batch is 16,000 bytes of "
                    "floats). Every fsync of a file whose size or folder changed commits the "
                    "ext4 journal (its descriptor, the inode, bitmap and folder blocks, a "
                    "commit block), and those metadata blocks are written again in place: "
                    "that, not the payload, is most of a small commit's bytes. SQLite's WAL "
                    "writes each changed page once to the WAL and once more when it is "
                    "copied back (here when the database closes).",
                    primitives,
                    f"**objectspace's storage** (no Spark): the Buffer workload, {KEYS:,} "
                    f"keys, list buffer of {CAPACITY}, {EVENTS} float events per key per "
                    f"checkpoint, {checkpoints} checkpoints, {KEY_GROUPS} key groups, saved "
                    "by 4 instances (as the runner's 4 tasks) or 1 and committed. Each "
                    "instance's save is its own transaction (a task's pending writes) and "
                    "its own segment file, and the commit is one more catalog transaction; "
                    "or (staged) the saves store nothing and the commit stores their blocks "
                    "in its own transaction (segment storage: in one segment file), as "
                    "`StatefulRunner(inline_state_bytes=...)` does by default. Segment "
                    "files are synced to the disk (file and folder) before the catalog "
                    "records them; `fsync=0` in the URL skips that, and then a power "
                    "failure can leave a committed checkpoint naming a segment that never "
                    "reached the disk.",
                    storage,
                    "Where `sqlite:///`'s WAL pages go: the same workload with the WAL kept "
                    "to the end (it is copied back only when the storage closes), each frame "
                    "counted against the table or index that owns its page (SQLite's "
                    "`dbstat`); pages of 1 KiB.",
                    wal_table,
                    "In WAL mode with `synchronous=NORMAL` a commit does not fsync, so "
                    "SQLite's extra transactions cost little by themselves; what costs is "
                    "pages. Since schema version 7 a save's writes are one row of "
                    "`ckpt_packs` with one index entry, and a commit rewrites the rows of "
                    "`ckpt_head_chunks` (64 key groups each) where schema version 6 wrote a "
                    "write row, an index entry and a head row per key group (38 WAL pages "
                    "per checkpoint in the segment catalog below, 84 in `sqlite:///`'s). "
                    "What is left per key group is its block: a row of `ckpt_blocks` each "
                    "(one blob per pack would save its row overhead and a few pages more). "
                    "A segment file per save costs a journal commit per file.",
                    "The segment catalog's WAL pages, the same way (4 instances, staged; "
                    f"pages of {catalog_page} bytes, as a new SQLite catalog of segment "
                    "storage has them). Since schema version 7 the catalog holds no row per "
                    "key, table or write (blocks name their tables, a save's writes are one "
                    "pack, the heads of 64 key groups one row) and no index by segment or "
                    "path: what is left per checkpoint is the pack and its index entry, the "
                    "head chunks, the segment's reservation (its own transaction, before "
                    "the file is written) and the commit's rows (38.2 pages per checkpoint "
                    "in schema version 6).",
                    catalog_table,
                    f"**The throughput workload on storage** (as `bench_spark`'s: "
                    f"{THROUGHPUT_KEYS:,} keys x {THROUGHPUT_EVENTS} float events per "
                    f"checkpoint, {through} checkpoints, list buffer of {CAPACITY}, "
                    f"{KEY_GROUPS} key groups, 4 instances, staged), with and without "
                    "`CompactionPolicy.full_when_smaller`: every buffer fills and is "
                    "cleared in checkpoints 9 and 19; with it those checkpoints write each "
                    "key group whole (empty lists), which restarts the chains, and no "
                    "compaction rewrites the regrown buffers later.",
                    throughput,
                    "The segment catalog alone on its own volume (the segment files "
                    "elsewhere), the throughput workload: a new SQLite catalog costs a "
                    "quarter of a megabyte at the disk before its first checkpoint (its "
                    "file, WAL and shared-memory index created, the tables' pages written to "
                    "the WAL and copied back, each file's inode, folder and bitmap blocks "
                    "through the ext4 journal and written again in place, the WAL deleted "
                    "on close), then ~13 kB per checkpoint (20 WAL pages of 512 bytes, "
                    "their copy back, the journal).",
                    catalog_alone,
                    f"**The catalog's layout**, emulated on raw SQLite (the settings of "
                    f"`sqlite:///`, one transaction per checkpoint, {checkpoints} "
                    f"checkpoints of {KEY_GROUPS} random blocks of {block} bytes, the "
                    "Buffer workload's mean block as staged above), to measure what "
                    "packing the catalog would buy before building it (schema version 7 "
                    "packs the entries and the heads, not yet the blocks): rows per key "
                    "group, or one row per instance and checkpoint with its key groups' "
                    "entries (20 bytes each) and blocks, and one row of every head.",
                    layouts,
                ]
            ),
            title="What a durable commit costs at the disk",
        )


if __name__ == "__main__":
    main()

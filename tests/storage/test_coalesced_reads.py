"""Restores from segment files read coalesced ranges in parallel
(:mod:`objectspace.storage.segments.reads`): the plan, the same state as one read per
block on ``file://`` and on moto's S3 server, damaged bytes still detected and named, and
the number of requests bounded by the segment files a restore spans (counted on the S3
client's requests and through an fsspec wrapper, not a mock of S3)."""

from __future__ import annotations

import contextlib
import itertools
import pickle
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import objectspace as osp
from objectspace.checkpoint import Instance, Job, Operator
from objectspace.storage.contract import WriteInfo
from objectspace.storage.segments import ReadPolicy, SegmentBackend
from objectspace.storage.segments.reads import Read, fetch_reads, plan_reads
from tests.support.storage import segment_url

MAX_KG = 8
PER_BLOCK = ReadPolicy.per_block()


# -- the plan -----------------------------------------------------------------------------


def test_neighbours_merge_within_the_gap_and_the_cap() -> None:
    wanted = [("a", 0, 10), ("a", 10, 10), ("a", 25, 5), ("a", 100, 10), ("b", 0, 10)]
    policy = ReadPolicy(gap_bytes=5, max_read_bytes=1000)
    assert plan_reads(wanted, policy) == [
        Read("a", 0, 30, (0, 1, 2)),
        Read("a", 100, 110, (3,)),
        Read("b", 0, 10, (4,)),
    ]
    # the cap stops a read from growing; a block larger than the cap is read alone
    capped = plan_reads([("a", 0, 10), ("a", 10, 10), ("a", 20, 50)], ReadPolicy(5, 20))
    assert capped == [Read("a", 0, 20, (0, 1)), Read("a", 20, 70, (2,))]
    # per block: adjacent blocks are still read apart
    assert [r.blocks for r in plan_reads(wanted, PER_BLOCK)] == [(0,), (1,), (2,), (3,), (4,)]
    assert plan_reads([], ReadPolicy()) == []


def test_read_policy_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="workers"):
        ReadPolicy(workers=0)
    with pytest.raises(ValueError, match="max_read_bytes"):
        ReadPolicy(max_read_bytes=0)


blocks_strategy = st.lists(
    st.tuples(st.sampled_from("abc"), st.integers(0, 5_000), st.integers(1, 400)),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(blocks_strategy, st.integers(-1, 600), st.integers(1, 2_000))
def test_every_block_is_in_exactly_one_read_that_holds_it(
    spans: list[tuple[str, int, int]], gap: int, cap: int
) -> None:
    # blocks of one file do not overlap (a segment file's blocks are side by side)
    wanted, ends = [], {}
    for path, offset, length in spans:
        start = max(offset, ends.get(path, 0))
        wanted.append((path, start, length))
        ends[path] = start + length
    policy = ReadPolicy(gap_bytes=gap, max_read_bytes=cap)
    reads = plan_reads(wanted, policy)
    seen = sorted(i for r in reads for i in r.blocks)
    assert seen == list(range(len(wanted)))
    for read in reads:
        assert read.size <= cap or len(read.blocks) == 1
        members = [wanted[i] for i in read.blocks]
        assert all(p == read.path and read.start <= o and o + n <= read.end for p, o, n in members)
        assert read.start == members[0][1] and read.end == max(o + n for _, o, n in members)
        for (_, o1, n1), (_, o2, _) in itertools.pairwise(members):
            assert o2 - (o1 + n1) <= gap
    # reads of one file are apart: the next one starts where merging was not allowed
    by_path: dict[str, list[Read]] = {}
    for read in reads:
        by_path.setdefault(read.path, []).append(read)
    for rs in by_path.values():
        for a, b in itertools.pairwise(rs):
            _, offset, length = wanted[b.blocks[0]]
            assert offset == b.start >= a.end
            assert offset - a.end > gap or offset + length - a.start > cap


class _Slow:
    """An fsspec filesystem (local files) whose reads take a while and record how many are
    in flight at once."""

    def __init__(self, fs: Any) -> None:
        self._fs = fs
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.calls = 0

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kw: Any):
        with self.lock:
            self.now += 1
            self.calls += 1
            self.most = max(self.most, self.now)
        try:
            time.sleep(0.02)
            return self._fs.cat_file(path, start=start, end=end, **kw)
        finally:
            with self.lock:
                self.now -= 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)


def test_reads_run_in_parallel_up_to_the_workers(tmp_path: Any) -> None:
    import fsspec

    fs = fsspec.filesystem("file")
    paths = []
    for n in range(12):
        path = str(tmp_path / f"f{n}")
        with open(path, "wb") as f:
            f.write(bytes(range(n, n + 100)))
        paths.append(path)
    slow = _Slow(fs)
    reads = [Read(p, 5, 25, (0,)) for p in paths]
    got = fetch_reads(slow, reads, workers=3)
    assert got == [bytes(range(n + 5, n + 25)) for n in range(12)]
    assert slow.calls == 12
    assert slow.most == 3
    slow.most = 0
    assert fetch_reads(slow, reads, workers=1) == got
    assert slow.most == 1
    missing = fetch_reads(fs, [Read(str(tmp_path / "nope"), 0, 1, (0,)), reads[0]], workers=2)
    assert isinstance(missing[0], FileNotFoundError) and missing[1] == got[0]


# -- restores on file:// and S3 -----------------------------------------------------------


@pytest.fixture(params=["file", "s3"])
def storage(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[osp.Storage]:
    if request.param == "file":
        url = segment_url(f"file://{tmp_path}/segments", f"sqlite:///{tmp_path}/catalog.db")
    else:
        server = request.getfixturevalue("s3_server")
        bucket = request.getfixturevalue("s3_bucket")
        url = segment_url(
            f"s3://{bucket}/state",
            request.getfixturevalue("postgres_url"),
            endpoint_url=server.endpoint,
            key="testing",
            secret="testing",
        )
    s = osp.open_storage(url)
    assert isinstance(s.backend, SegmentBackend)
    yield s
    s.close()


def seg(storage: osp.Storage) -> SegmentBackend:
    backend = storage.backend
    assert isinstance(backend, SegmentBackend)
    return backend


def _edit(inst: Instance, rng: random.Random) -> None:
    """Random edits of random key groups of ``inst``: values, dicts and lists created,
    changed and deleted."""
    for g in rng.sample(list(inst.key_groups), k=rng.randint(1, len(inst.key_groups))):
        space = inst.space(g)
        for _ in range(rng.randint(1, 12)):
            oid = f"o{rng.randrange(20)}"
            roll = rng.random()
            if oid in space and roll < 0.15:
                space.delete(oid)
            elif oid not in space:
                kind = rng.choice(["value", "dict", "list"])
                if kind == "value":
                    space.create_value(oid, rng.random())
                elif kind == "dict":
                    space.create_dict(oid).update(
                        {rng.randrange(50): rng.random() for _ in range(5)}
                    )
                else:
                    space.create_list(oid).extend(rng.random() for _ in range(rng.randint(0, 30)))
            else:
                obj = space.get(oid)
                if isinstance(obj, osp.PersistedDict):
                    obj[rng.randrange(50)] = "x" * rng.randint(0, 300)
                elif isinstance(obj, osp.PersistedList):
                    obj.append(rng.random())
                else:
                    obj.value = (rng.random(), "y" * rng.randint(0, 200))  # type: ignore[attr-defined]


def _commit(job: Job, instances: list[Instance], checkpoint: int) -> None:
    receipts = [inst.save(checkpoint) for inst in instances]
    assert job.commit(checkpoint, receipts) is True
    for inst in instances:
        inst.on_saved()


def random_history(storage: osp.Storage, seed: int, checkpoints: int = 6) -> Operator:
    """Job ``j``, operator ``o``: random edits over ``checkpoints`` checkpoints, written at
    parallelism 2 and then 3 (blocks of one key group in files of different instances), with
    a compaction (a segment file per key group) in the middle."""
    rng = random.Random(seed)
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    parallelism = 2
    instances = [op.instance(i, parallelism) for i in range(parallelism)]
    for cp in range(1, checkpoints + 1):
        if cp == checkpoints // 2:
            op.compact(min_chain_length=2)
            parallelism = 3
            instances = [op.instance(i, parallelism) for i in range(parallelism)]
        for inst in instances:
            _edit(inst, rng)
        _commit(job, instances, cp)
    return op


def _load(
    backend: SegmentBackend, policy: ReadPolicy, groups: range, as_of: int
) -> dict[int, tuple[list[WriteInfo], dict[str, dict[bytes, bytes]]]]:
    before = backend.reads
    backend.reads = policy
    try:
        return backend.load("j", "o", groups, as_of)
    finally:
        backend.reads = before


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_coalesced_restores_equal_one_read_per_block(storage: osp.Storage, seed: int) -> None:
    backend = seg(storage)
    op = random_history(storage, seed)
    rng = random.Random(seed)
    for as_of in op.job.checkpoints():
        every = range(MAX_KG)
        expected = _load(backend, PER_BLOCK, every, as_of)
        assert expected  # the history left state behind
        for policy in (ReadPolicy(), ReadPolicy(gap_bytes=0, max_read_bytes=300, workers=2)):
            assert _load(backend, policy, every, as_of) == expected
        low = rng.randrange(MAX_KG)
        part = range(low, rng.randint(low + 1, MAX_KG))
        assert _load(backend, ReadPolicy(), part, as_of) == {
            g: v for g, v in expected.items() if g in part
        }
        # any set of key groups: each as load gives it, those between are not returned
        wanted = rng.sample(range(MAX_KG), k=rng.randint(1, MAX_KG))
        assert backend.load_groups("j", "o", wanted, as_of) == {
            g: v for g, v in expected.items() if g in wanted
        }
        # a chain read alone, as a reader that planned it does
        for _g, (writes, tables) in expected.items():
            assert backend.read("j", "o", writes) == tables
    # instances restore the same objects either way
    backend.reads = PER_BLOCK
    one_by_one = _contents(op)
    backend.reads = ReadPolicy()
    assert _contents(op) == one_by_one


def _contents(op: Operator) -> dict[tuple[int, str], Any]:
    out: dict[tuple[int, str], Any] = {}
    for index in range(3):
        inst = op.instance(index, 3)
        for g, space in inst.spaces():
            for oid in space:
                obj = space.get(oid)
                if isinstance(obj, osp.PersistedDict):
                    out[(g, oid)] = dict(obj)
                elif isinstance(obj, osp.PersistedList):
                    out[(g, oid)] = list(obj)
                else:
                    out[(g, oid)] = obj.value  # type: ignore[attr-defined]
    return out


def test_load_groups_of_nothing_reads_nothing(storage: osp.Storage) -> None:
    backend = seg(storage)
    random_history(storage, 5, checkpoints=2)
    issued = backend.reads_issued
    assert backend.load_groups("j", "o", [], 2) == {}
    assert backend.reads_issued == issued


def test_read_policy_travels_with_the_backend(storage: osp.Storage) -> None:
    backend = seg(storage)
    backend.reads = ReadPolicy(gap_bytes=7, max_read_bytes=99, workers=2)
    again = pickle.loads(pickle.dumps(backend))
    assert again.reads == backend.reads
    assert osp.open_storage(backend.url).backend.reads == ReadPolicy()  # type: ignore[attr-defined]


# -- damaged files ------------------------------------------------------------------------


def _one_file_history(storage: osp.Storage) -> tuple[Operator, dict[int, WriteInfo]]:
    """One instance, one checkpoint: a file of MAX_KG blocks side by side; each key
    group's write."""
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    inst = op.instance(0, 1)
    for g in inst.key_groups:
        inst.space(g).create_list("l").extend([g, "payload " * 20, float(g)])
    _commit(job, [inst], 1)
    chains = seg(storage).chains("j", "o", range(MAX_KG), 1)
    return op, {g: ws[0] for g, ws in chains.items()}


def _rewrite(backend: SegmentBackend, path: str, data: bytes) -> None:
    backend.fs.pipe_file(path, data)
    backend.fs.invalidate_cache()


def test_a_damaged_block_inside_a_coalesced_read_is_named(storage: osp.Storage) -> None:
    backend = seg(storage)
    op, writes = _one_file_history(storage)
    w = writes[3]
    assert w.segment is not None
    assert (
        len(plan_reads([(w.segment, x.offset, x.length) for x in writes.values()], backend.reads))
        == 1
    )
    data = bytearray(backend.fs.cat_file(w.segment))
    data[w.offset + w.length // 2] ^= 0x20
    _rewrite(backend, w.segment, bytes(data))
    with pytest.raises(osp.CorruptStateError) as err:
        backend.load("j", "o", range(MAX_KG), 1)
    assert w.segment in str(err.value)
    assert "key group 3 " in str(err.value)
    with pytest.raises(osp.CorruptStateError, match="key group 3 "):
        op.instance(0, 1).load_all()
    # key groups 2 and 4 are read in one read whose gap is the damaged block: not decoded
    assert set(backend.load_groups("j", "o", [2, 4], 1)) == {2, 4}


def test_a_truncated_file_under_a_coalesced_read_is_named(storage: osp.Storage) -> None:
    backend = seg(storage)
    _, writes = _one_file_history(storage)
    w = writes[5]
    assert w.segment is not None
    data = backend.fs.cat_file(w.segment)
    _rewrite(backend, w.segment, data[: w.offset + 3])
    with pytest.raises(osp.CorruptStateError, match="truncated") as err:
        backend.load("j", "o", range(MAX_KG), 1)
    assert w.segment in str(err.value)
    assert "key group 5" in str(err.value)
    assert set(backend.load("j", "o", range(5), 1)) == set(range(5))  # before the cut


def test_a_missing_file_is_named(storage: osp.Storage) -> None:
    backend = seg(storage)
    _, writes = _one_file_history(storage)
    path = writes[0].segment
    assert path is not None
    backend.fs.rm_file(path)
    backend.fs.invalidate_cache()
    with pytest.raises(osp.CorruptStateError, match="missing") as err:
        backend.load("j", "o", range(MAX_KG), 1)
    assert path in str(err.value)


# -- requests -----------------------------------------------------------------------------


class _CountingFS:
    """An fsspec filesystem that counts the ranges it is asked for, whichever call."""

    def __init__(self, fs: Any) -> None:
        self._fs = fs
        self.ranges = 0

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kw: Any):
        self.ranges += 1
        return self._fs.cat_file(path, start=start, end=end, **kw)

    def cat_ranges(self, paths: list[str], starts: list[int], ends: list[int], **kw: Any):
        self.ranges += len(paths)
        return self._fs.cat_ranges(paths, starts, ends, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)


@contextlib.contextmanager
def counted_requests(backend: SegmentBackend) -> Iterator[list[str]]:
    """The requests a restore sends: on S3, the HTTP requests of the S3 client (its
    ``before-send`` event, ``"GET"`` for a ranged read); on a local filesystem, the ranges
    asked of the filesystem, through a wrapper."""
    sent: list[str] = []
    fs = backend.fs
    if fs.protocol == "s3" or "s3" in fs.protocol:
        fs.connect()

        def before_send(request: Any, **_: Any) -> None:
            sent.append(request.method)

        events = fs.s3.meta.events
        events.register("before-send.s3", before_send)
        try:
            yield sent
        finally:
            events.unregister("before-send.s3", before_send)
        return
    counting = _CountingFS(fs)
    backend._fs = counting
    try:
        yield sent
    finally:
        backend._fs = fs
        sent.extend(["GET"] * counting.ranges)


def test_requests_are_one_per_segment_file(storage: osp.Storage) -> None:
    backend = seg(storage)
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    instances = [op.instance(i, 2) for i in range(2)]
    checkpoints = 6
    for cp in range(1, checkpoints + 1):
        for inst in instances:
            for g in inst.key_groups:
                space = inst.space(g)
                lst = space.get_list("l") if "l" in space else space.create_list("l")
                lst.extend([cp, g, "p" * 50])
        _commit(job, instances, cp)
    chains = backend.chains("j", "o", range(4), checkpoints)
    blocks = sum(len(ws) for ws in chains.values())
    files = {w.segment for ws in chains.values() for w in ws}
    assert blocks == 4 * checkpoints and len(files) == checkpoints

    with counted_requests(backend) as sent:
        op.instance(0, 2).load_all()  # key groups 0..3: 4 blocks in each of 6 files
    assert sent.count("GET") == len(files)
    assert sent.count("GET") == len(sent)  # nothing but the ranged reads

    backend.reads = PER_BLOCK
    with counted_requests(backend) as sent:
        op.instance(0, 2).load_all()
    assert sent.count("GET") == blocks

    backend.reads = ReadPolicy()
    issued, fetched = backend.reads_issued, backend.bytes_fetched
    with counted_requests(backend) as sent:
        assert set(backend.load_groups("j", "o", [0, 3], checkpoints)) == {0, 3}
    assert sent.count("GET") == len(files)  # key groups 1 and 2 are the gap of one read
    assert backend.reads_issued - issued == len(files)
    expected = sum(
        ws[-1].offset + ws[-1].length - ws[0].offset
        for ws in (
            sorted((w for g in (0, 3) for w in chains[g] if w.segment == f), key=lambda w: w.offset)
            for f in files
        )
    )
    assert backend.bytes_fetched - fetched == expected

"""The one block format (objectspace.storage.blocks): every kind of edit round-trips, the
checksum and the catalog's record are checked, legacy segment blocks are still read, and
an operator's blocks switch to a dictionary trained on its own blocks."""

from __future__ import annotations

import math
import random
import struct
import sys
from pathlib import Path
from typing import Any

import msgpack
import pytest
import xxhash
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

import objectspace as osp
from objectspace.collections import table_heads
from objectspace.storage import blocks
from objectspace.storage.blocks import columns, compression, decode, names
from objectspace.storage.contract import WriteInfo, materialize
from objectspace.tables import DELETED, TableChanges
from tests.support.numbered import expected as numbered_by_definition
from tests.support.twins import twins

NAMES = st.one_of(
    st.sampled_from(["t", "a/items", "a/metadata", "b/c/items", "state/index"]),
    # numbered folders (schema version 6 writes them as templates): leading zeros, a number
    # too long for one, a NUL, numbers in the suffix, a bare number
    st.builds(
        "{}{}{}/{}".format,
        st.sampled_from(["state/item/", "k", "", "x\x00/", "s/0"]),
        st.one_of(
            st.integers(0, 10**6).map(str),
            st.sampled_from(["007", "0", "1" * 19, "999999999999999999"]),
        ),
        st.sampled_from(["/buf", "", "/b2", "/3"]),
        st.sampled_from(["items", "metadata"]),
    ),
)
KEYS = st.one_of(
    st.binary(max_size=6),
    st.integers(0, 10**6).map(lambda i: b"%d" % i),
    st.sampled_from([b"0", b"00", b"01", b"", b"-1", b"1" * 30]),
)
VALUES = st.one_of(
    st.binary(max_size=12),
    st.floats(allow_nan=False).map(lambda f: msgpack.packb(f, use_single_float=False)),
    st.just(DELETED),
)
TABLE = st.builds(
    TableChanges, truncated=st.booleans(), rows=st.dictionaries(KEYS, VALUES, max_size=8)
)
CHANGES = st.dictionaries(NAMES, TABLE, max_size=8)


def expected(changes: dict[str, TableChanges], full: bool) -> tuple[dict[str, bool], list[Any]]:
    truncated = {n: True for n, c in changes.items() if c.truncated and not full}
    rows = [
        (n, k, None if v is DELETED else v)
        for n, c in changes.items()
        for k, v in c.rows.items()
        if not (full and v is DELETED)
    ]
    return truncated, rows


@settings(max_examples=200, deadline=None)
@given(CHANGES, st.booleans(), st.sampled_from(["ids", "names", "compact"]))
def test_every_edit_round_trips(changes: dict[str, TableChanges], full: bool, form: str) -> None:
    heads = blocks.block_heads(changes)
    head_ids = {h: i + 7 for i, h in enumerate(heads)} if form == "ids" else None
    names = {i + 7: h for i, h in enumerate(heads)}
    block, count = blocks.encode_block(changes, full, head_ids=head_ids, compact=form == "compact")
    truncated, rows = blocks.decode_block(block, "here", lambda wanted: names)
    want_truncated, want_rows = expected(changes, full)
    assert truncated == want_truncated
    assert sorted(rows, key=repr) == sorted(want_rows, key=repr)
    assert count == len(want_rows) + len(want_truncated)
    info = WriteInfo(1, 0, 1, full, len(block), count)
    record = blocks.Block(info, block, blocks.block_digest(block), count, "here")
    assert blocks.replay([record], "", lambda wanted: names) == materialize(
        [(want_truncated, want_rows)]
    )


def test_a_flipped_bit_anywhere_is_detected() -> None:
    changes = {"a/items": TableChanges(rows={b"%d" % i: b"v%d" % i for i in range(50)})}
    block, _ = blocks.encode_block(changes, True)
    for at in range(len(block)):
        broken = bytearray(block)
        broken[at] ^= 0x04
        with pytest.raises(osp.CorruptStateError, match="job x"):
            blocks.decode_block(bytes(broken), "job x")


def test_running_out_of_memory_is_not_reported_as_corruption(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    changes = {"a/items": TableChanges(rows={b"%d" % i: b"v%d" % i for i in range(50)})}
    block, _ = blocks.encode_block(changes, True)

    def no_memory(*args: Any) -> Any:
        raise MemoryError

    monkeypatch.setattr(decode, "_table_values", no_memory)
    with pytest.raises(MemoryError):
        blocks.decode_block(block, "job x")


def test_a_legacy_segment_block_is_read() -> None:
    """The block layout segment storage wrote before this format."""
    payload = msgpack.packb(
        [
            ["a"],
            [2],
            ["items", "metadata"],
            [0, 1],
            [2, 1],
            [1],
            [1, 1, 6],
            b"01length",
            [-2, -1, 1],
            b"\x02",
            msgpack.packb(1.5)[1:],  # the floats as byte planes (one float: its bytes)
        ],
        use_bin_type=True,
    )
    body = zstandard.ZstdCompressor(level=3).compress(payload)
    block = struct.pack("<IQ", len(body), xxhash.xxh64_intdigest(body)) + body
    truncated, rows = blocks.decode_block(block, "old")
    assert truncated == {"a/metadata": True}
    floats = msgpack.packb(1.5)
    assert rows == [
        ("a/items", b"0", floats),
        ("a/items", b"1", None),
        ("a/metadata", b"length", b"\x02"),
    ]


def buffer_history(url: str, checkpoints: int = 12, keys: int = 200) -> dict[int, list[float]]:
    storage = osp.open_storage(url)
    job = storage.job("j")
    op = job.operator("o", max_key_groups=64)
    inst = op.instance(0, 1)
    rng = random.Random(5)
    reference: dict[int, list[float]] = {}
    for cp in range(1, checkpoints + 1):
        for k in range(keys):
            space = inst.space_for_key(k)
            buf = space.get_list(f"{k}/b") if f"{k}/b" in space else space.create_list(f"{k}/b")
            buf.append(rng.random())
            reference[k] = list(buf)
        assert job.commit(cp, [inst.save(cp)]) is True
        inst.on_saved()
    storage.close()
    return reference


def restored(url: str, keys: int = 200) -> dict[int, list[float]]:
    storage = osp.open_storage(url)
    try:
        inst = storage.job("j").operator("o").instance(0, 1)
        return {k: list(inst.space_for_key(k).get_list(f"{k}/b")) for k in range(keys)}
    finally:
        storage.close()


@pytest.fixture(params=["sqlite", "file", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    catalog = f"sqlite:///{tmp_path / 'state.db'}"
    if request.param == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    if request.param == "sqlite":
        return catalog
    from urllib.parse import quote

    return f"file://{tmp_path}/segments?catalog={quote(catalog, safe='')}"


def test_blocks_switch_to_a_trained_dictionary(url: str, tmp_path: Path) -> None:
    reference = buffer_history(url)
    assert restored(url) == reference
    # the newest writes' blocks name the dictionary; the first ones do not
    storage = osp.open_storage(url)
    backend: Any = storage.backend
    catalog = getattr(backend, "catalog", backend)
    [(count,)] = catalog._run(
        "test", lambda tx: tx.all("SELECT COUNT(*) FROM ckpt_dictionaries"), write=False
    )
    assert count == 1  # one per operator, trained once
    chains = backend.chains("j", "o", range(64), 12)
    firsts, lasts = [], []
    for chain in chains.values():
        data = [block_bytes(backend, w, tmp_path) for w in (chain[0], chain[-1])]
        firsts.append(blocks.dictionary_id(data[0]))
        lasts.append(blocks.dictionary_id(data[1]))
    storage.close()
    assert firsts == [None] * len(chains)
    assert None not in lasts and len(set(lasts)) == 1


def block_bytes(backend: Any, w: WriteInfo, tmp_path: Path) -> bytes:
    if w.segment is not None:
        with open(w.segment, "rb") as f:
            f.seek(w.offset)
            return f.read(w.length)
    [(data,)] = backend._run(
        "test",
        lambda tx: tx.all("SELECT data FROM ckpt_blocks WHERE write = ?", (w.write_id,)),
        write=False,
    )
    return bytes(data)


def test_a_missing_dictionary_is_an_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    buffer_history(url)
    import sqlite3

    conn = sqlite3.connect(tmp_path / "state.db")
    with conn:
        assert conn.execute("DELETE FROM ckpt_dictionaries").rowcount == 1
    conn.close()
    with pytest.raises(osp.CorruptStateError, match="dictionary") as err:
        restored(url)
    assert "'j'" in str(err.value) and "'o'" in str(err.value) and "checkpoint" in str(err.value)


def big_state(objects: int = 300, items: int = 20) -> dict[str, TableChanges]:
    changes = {"state/index": TableChanges(rows={})}
    for o in range(objects):
        changes["state/index"].rows[f"{o}/l".encode()] = b"\x81\xa4kind\xa4List"
        changes[f"state/item/{o}/l/items"] = TableChanges(
            rows={b"%d" % i: msgpack.packb(o + i / 100) for i in range(items)}
        )
        changes[f"state/item/{o}/l/metadata"] = TableChanges(rows={b"length": bytes([items])})
    return changes


def test_a_large_full_block_is_chunked_and_round_trips() -> None:
    changes = big_state()
    rows = sum(len(c.rows) for c in changes.values())
    assert rows > 3 * blocks.CHUNK_ROWS
    block, count = blocks.encode_block(changes, True)
    assert count == rows
    truncated, decoded = blocks.decode_block(block, "here")
    assert truncated == {}
    assert sorted(decoded) == sorted(expected(changes, True)[1])
    small, _ = blocks.encode_block(changes, False)  # a differential block is never chunked
    assert len(small) < len(block) + 1024


def test_lookup_decodes_only_the_chunks_of_its_range() -> None:
    changes = big_state()
    block, _ = blocks.encode_block(changes, True)
    prefix = "state/item/123/l/"
    found = blocks.lookup(block, "here", (prefix, b""), (prefix[:-1] + "0", b""))
    assert found == {name: dict(c.rows) for name, c in changes.items() if name.startswith(prefix)}
    index = blocks.lookup(block, "here", ("state/index", b"123/l"), ("state/index", b"123/l\x00"))
    assert index == {"state/index": {b"123/l": b"\x81\xa4kind\xa4List"}}
    # a byte flipped in the last chunk: the whole block fails, a lookup elsewhere does not
    broken = bytearray(block)
    broken[-5] ^= 0x01
    with pytest.raises(osp.CorruptStateError, match="checksum"):
        blocks.decode_block(bytes(broken), "here")
    again = blocks.lookup(bytes(broken), "here", (prefix, b""), (prefix[:-1] + "0", b""))
    assert again == found


def test_table_names_split_into_folder_and_last_component() -> None:
    changes = {f"state/item/{i}/items": TableChanges(rows={b"\x01": b"x" * 9}) for i in range(6)}
    changes["a/b/c/d"] = TableChanges(rows={b"1": b"y"})
    changes["top"] = TableChanges(rows={b"1": b"y"})
    assert _splits(changes) == [
        *[(f"state/item/{i}", "items") for i in range(6)],
        ("a/b/c", "d"),
        ("", "top"),
    ]
    block, rows = blocks.encode_block(changes, False)
    assert rows == 8
    assert blocks.decode_block(block, "test")[1] == [
        (name, key, value) for name, c in changes.items() for key, value in c.rows.items()
    ]
    assert blocks.block_heads(changes) == [
        *[f"state/item/{i}" for i in range(6)],
        "a/b/c",
        "",
    ]


@pytest.mark.parametrize("seed", range(4))
def test_names_split_and_matched_in_c_level_passes_are_those_of_one_name_at_a_time(
    seed: int,
) -> None:
    """Names are split and folders matched in C-level passes: the splits and matches are
    those of one name at a time, and the blocks decode to the rows (plain folders among
    numbered ones, leading zeros, 19 digits, non-ASCII digits, NULs, several numbers)."""
    rng = random.Random(seed)
    folders = [f"state/item/{rng.randrange(10**6)}/sessions" for _ in range(40)]
    folders += ["state", "state/item/#time/due", "state/item/007/x", "a/1234567890123456789/b"]
    folders += ["state/item/\u0663\u0664/v", "s/12/t/34", "0", "x9"]
    if seed == 0:  # a NUL: matched name by name
        folders.append("state/item/5\x00/v")
    if seed == 3:  # the numbered folders by one template, and plain ones (a key group's)
        folders = [f for f in folders if f.startswith("state/item/") and f[11:12].isdigit()]
        folders = [f for f in folders if not f.startswith("state/item/0")]
        folders[5:5] = ["state", "state/item/#time/due", "x"]
    if seed == 1:  # every folder numbered by one template (the common case)
        folders = [f for f in folders if f.startswith("state/item/") and f[11:12].isdigit()]
        folders = [f for f in folders if "\x00" not in f and not f.startswith("state/item/0")]
    changes = {
        f"{folder}/{tail}": TableChanges(rows={b"%d" % i: b"\x01\x02"})
        for i, folder in enumerate(folders)
        for tail in ("items", "metadata")
    }
    cached = blocks.encode_block(changes, False, compact=True)
    split = _splits(changes)
    assert split == [(n.rpartition("/")[0], n.rpartition("/")[2]) for n in changes]
    assert sorted(blocks.decode_block(cached[0], "b")[1]) == sorted(
        (name, key, value) for name, change in changes.items() for key, value in change.rows.items()
    )
    templates = names._name_templates(folders)
    assert templates == _templates_by_definition(folders)
    assert blocks.encode_block(changes, False, compact=True) == cached
    assert blocks.encode_block(changes, False) == blocks.encode_block(changes, False)


def _splits(changes: dict[str, TableChanges]) -> list[tuple[str, str]]:
    """Each table name's (folder, last component), as ``table_heads`` gives them."""
    heads, table_head, table_tail = table_heads(list(changes))
    return [(heads[h], tail) for h, tail in zip(table_head, table_tail, strict=True)]


def _templates_by_definition(folders: list[str]) -> Any:
    """What names._name_templates gives, from its definition: the folders a template
    shares with no other as they come, then each shared template's folders by number."""
    found = [numbered_by_definition(f) for f in folders]
    groups: dict[str, dict[int, int]] = {}
    for i, numbered in enumerate(found):
        if numbered:
            groups.setdefault(numbered[0], {})[numbered[1]] = i
    shared = {t: members for t, members in groups.items() if len(members) > 1}
    if not shared:
        return None
    order = [i for i, numbered in enumerate(found) if not numbered or numbered[0] not in shared]
    others = [folders[i] for i in order]
    column = []
    for template, members in shared.items():
        numbers = sorted(members)
        order.extend(members[n] for n in numbers)
        column.append([template, columns._uvarints(columns._deltas(numbers))])
    return order, others, column


@pytest.mark.parametrize("dict_id", [1, 63, 64, 300])
def test_a_trained_dictionary_id_below_64_is_named_by_the_kind_byte(dict_id: int) -> None:
    payloads = [
        msgpack.packb([f"state/item/{i}/l/items", [b"%d" % j for j in range(20)]])
        for i in range(200)
    ]
    dictionary = blocks.Dictionary(dict_id, zstandard.train_dictionary(4096, payloads).as_bytes())
    changes = {
        f"state/item/{i}/l/items": TableChanges(rows={b"%d" % j: b"x%d" % j for j in range(8)})
        for i in range(5)
    }
    block, _ = blocks.encode_block(changes, False, dictionary=dictionary)
    ref, _ = blocks.encode_block(changes, False, dictionary=blocks.Dictionary(300, dictionary.data))
    assert blocks.dictionary_id(block) == dict_id
    if dict_id < 64:
        assert block[0] == 0x40 + dict_id and len(block) == len(ref) - 5  # no 255 + u32
    else:
        assert block[0] == 0x23
    lookup = {dict_id: dictionary.data}.get
    assert blocks.decode_block(block, "b", dictionaries=lookup)[1] == [
        (name, key, value) for name, change in changes.items() for key, value in change.rows.items()
    ]
    flipped = bytes([block[0] ^ 1]) + block[1:]  # names another dictionary (or kind)
    both = {dict_id: dictionary.data, dict_id ^ 1: dictionary.data}.get
    # a kind that names the dictionary is covered by the checksum (0x23 -> 0x22: undecodable)
    with pytest.raises(osp.CorruptStateError, match="checksum" if dict_id < 64 else "corrupt"):
        blocks.decode_block(flipped, "b", dictionaries=both)


def test_numbered_folders_are_written_as_templates() -> None:
    """Schema version 6's compact form: folders that differ by a number are a template and
    the numbers; floats lose their marker plane. It decodes to the same rows, smaller."""
    rng = random.Random(5)
    changes = {"state/index": TableChanges(rows={b"x": b"\x01"})}
    for n in rng.sample(range(100_000), 60):
        changes[f"state/item/{n}/buf/items"] = TableChanges(
            rows={b"%d" % i: msgpack.packb(rng.random()) for i in range(3)}
        )
        changes[f"state/item/{n}/buf/metadata"] = TableChanges(rows={b"length": b"\x03"})
    changes["state/item/'abc'/buf/items"] = TableChanges(rows={b"0": msgpack.packb(0.5)})
    changes["state/item/12/count/value"] = TableChanges(rows={b"v": b"\x07"}, truncated=True)
    plain, rows = blocks.encode_block(changes, False)
    compact, compact_rows = blocks.encode_block(changes, False, compact=True)
    assert rows == compact_rows
    (truncated, got), (want_truncated, want) = (
        blocks.decode_block(compact, "b"),
        blocks.decode_block(plain, "b"),
    )
    assert truncated == want_truncated == {"state/item/12/count/value": True}
    assert sorted(got) == sorted(want)
    assert len(compact) < len(plain) - 60, (len(compact), len(plain))
    columns = msgpack.unpackb(decode._payload(compact, "b", None), raw=False)
    [[others, templated]] = columns[0]
    assert others == ["state", "state/item/'abc'/buf", "state/item/12/count"]
    assert [t[0] for t in templated] == ["state/item/\x00/buf"]
    # floats without their marker plane: random.random()'s as fixed-point numbers, k * 2**-53
    # (schema version 7; version 6 wrote their 8 bytes, code -9)
    assert columns[-1][-1][0] == -16 - 53
    # the same changes written plain (what SQLiteStore files hold) keep every name
    assert "state/item/'abc'/buf" in msgpack.unpackb(decode._payload(plain, "b", None))[0]


def _floats(count: int, seed: int) -> dict[str, TableChanges]:
    """Lists of uniform floats (the throughput workload's values), 10 per object, and each
    list's 1-byte length: two fixed-width columns, the floats' the widest."""
    rng = random.Random(seed)
    changes = {}
    for obj in range((count + 9) // 10):
        items = {b"%d" % i: msgpack.packb(rng.random()) for i in range(min(10, count - obj * 10))}
        changes[f"{obj}/buf/items"] = TableChanges(rows=items)
        changes[f"{obj}/buf/metadata"] = TableChanges(rows={b"length": b"\x1e"})
    return changes


@pytest.mark.parametrize("trained", [False, True])
@pytest.mark.parametrize("count", [blocks.PLANE_BLOCK_ROWS - 1, blocks.PLANE_BLOCK_ROWS, 2000])
def test_float_planes_are_zstd_blocks_of_their_own(
    count: int, trained: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A block of many floats codes each byte plane on its own (same frame format, fewer
    bytes: about a quarter byte per uniform float); fewer floats are compressed as before."""
    changes = _floats(count, count)
    dictionary = None
    if trained:
        samples = [
            msgpack.packb([f"{i}/buf/items", random.Random(i).randbytes(64)]) for i in range(300)
        ]
        dictionary = blocks.Dictionary(3, zstandard.train_dictionary(2048, samples).as_bytes())
    for full in (False, True):
        block, rows = blocks.encode_block(changes, full, dictionary=dictionary)
        monkeypatch.setattr(compression, "PLANE_BLOCK_ROWS", 10**9)
        whole, _ = blocks.encode_block(changes, full, dictionary=dictionary)
        monkeypatch.undo()
        lookup = None if dictionary is None else {3: dictionary.data}.get
        assert blocks.decode_block(block, "b", dictionaries=lookup) == blocks.decode_block(
            whole, "b", dictionaries=lookup
        )
        assert rows == count + (count + 9) // 10
        if count < blocks.PLANE_BLOCK_ROWS:
            assert block == whole
        else:
            assert block != whole
        if count >= 2000:
            assert len(block) <= len(whole) - count // 8, (len(block), len(whole))


FIXTURES = Path(__file__).parent.parent / "fixtures"


def test_a_version_1_segment_store_is_read_and_written_on(tmp_path: Path) -> None:
    """A segment store written by the previous version (``OSSEG1`` files with their index
    tail, trained-dictionary blocks of kind 0x23, the SQLite catalog as a dump), made by
    ``buffer_history(url, 12, 60)``."""
    import shutil
    import sqlite3
    from urllib.parse import quote

    shutil.copytree(FIXTURES / "segments_v1", tmp_path / "store")
    root = tmp_path / "store"
    conn = sqlite3.connect(root / "catalog.db")  # the catalog, from its dump
    conn.executescript((root / "catalog.sql").read_text())
    conn.close()
    url = f"file://{root}/segments?catalog={quote(f'sqlite:///{root}/catalog.db', safe='')}"
    conn = sqlite3.connect(root / "catalog.db")
    before = conn.execute("SELECT id, path, bytes FROM ckpt_segments ORDER BY id").fetchall()
    conn.close()
    old_files = sorted((root / "segments").rglob("*.seg"))
    assert old_files and all(f.read_bytes().startswith(b"OSSEG1\n") for f in old_files)
    expected = buffer_history(f"memory://v1-{tmp_path.name}", checkpoints=12, keys=60)
    assert restored(url, keys=60) == expected
    # migrated to schema version 7: its segments, with their ids, without an index by path
    conn = sqlite3.connect(root / "catalog.db")
    after = conn.execute("SELECT id, path, bytes FROM ckpt_segments ORDER BY id").fetchall()
    indexes = [row[1] for row in conn.execute("PRAGMA index_list(ckpt_segments)")]
    conn.close()
    assert len(after) == len(before) > 0 and indexes == []
    assert [row[0] for row in after] == [row[0] for row in before]
    # a new checkpoint on top: a version 2 file after the version 1 chain
    storage = osp.open_storage(url)
    job = storage.job("j")
    inst = job.operator("o").instance(0, 1)
    for k in range(60):
        inst.space_for_key(k).get_list(f"{k}/b").append(float(k))
        expected[k].append(float(k))
    assert job.commit(13, [inst.save(13)]) is True
    storage.close()
    new_files = set((root / "segments").rglob("*.seg")) - set(old_files)
    assert new_files and all(f.read_bytes().startswith(b"OSSEG2\n") for f in new_files)
    assert restored(url, keys=60) == expected


TRICKY_KEYS = st.sampled_from(
    [
        b"0",
        b"1",
        b"7",
        b"10",
        b"01",
        b"00",
        b"",
        b"-1",
        b"+1",
        b" 1",
        b"1a",
        b"x",
        b"9" * 18,
        b"9" * 19,
        b"123456789012345678",
        "\u0661".encode(),  # an Arabic-Indic digit one
    ]
) | st.integers(0, 10**6).map(lambda i: b"%d" % i)


@pytest.mark.parametrize("row_columns", twins("row_columns"))
@settings(max_examples=300, deadline=None)
@given(st.lists(TRICKY_KEYS, min_size=1, max_size=8, unique=True))
def test_table_keys_delta_encode_exactly_the_canonical_decimal_keys(
    row_columns: Any, keys: list[bytes]
) -> None:
    """A table's keys are stored as delta-encoded ints only when every key is the canonical
    decimal form of an int below 10**18 (so decoding gives the same bytes back), on the
    path for a few keys and on the path for many."""
    canonical = all(
        0 < len(k) <= 18 and k.isdigit() and k.isascii() and b"%d" % int(k) == k for k in keys
    )
    got = row_columns([dict.fromkeys(keys, b"v")], False, DELETED)
    if not canonical:
        assert got[1] == [0] and got[4] == keys
        return
    ints = [int(k) for k in keys]
    assert got[1] == [1] and got[2] == [b - a for a, b in zip([0, *ints[:-1]], ints, strict=True)]
    changes = {"state/item/l/items": TableChanges(rows={k: b"v" for k in keys})}
    block, _ = blocks.encode_block(changes, False)
    truncated, rows = blocks.decode_block(block, "test")
    assert not truncated and rows == [("state/item/l/items", k, b"v") for k in keys]


_RNG = random.Random(5)
FLOAT_SETS = {
    "random": [_RNG.random() for _ in range(700)],
    "integers": [float(i * 7) for i in range(700)],
    "quarters": [i / 4 for i in range(700)],
    "decimals": [round(_RNG.uniform(0, 100), 2) for _ in range(700)],
    "negative": [-1.5, 2.0] * 350,
    "negative zero": [0.0, -0.0] * 350,
    "infinite": [1.0, math.inf] * 350,
    "nan": [1.0, math.nan] * 350,
    "subnormal": [5e-324, 1e-310, 0.0] * 200,
    "huge": [1e300, 3.0] * 350,
    # a fraction beside a number whose scaling to the fraction's binary point overflows
    "huge and a half": [1e300, 0.5] * 350,
    "largest and a quarter": [sys.float_info.max, 0.25] * 350,
    "2**56 and a half": [2.0**56, 0.5] * 350,
    "tiny and huge": [2.0**-1074, 2.0**55] * 350,
    "mixed binades": [1e-9, 1e9] * 350,
    "few": [0.5, 0.75],
    "zeros": [0.0] * 10,
}


@pytest.mark.parametrize("name", sorted(FLOAT_SETS))
def test_floats_round_trip_bit_for_bit(name: str) -> None:
    """Floats of one column as fixed-point numbers where they have a common binary point
    (schema version 7), as byte planes otherwise: every value comes back with its bits
    (``-0.0``, infinities, NaN's payload, subnormals)."""
    values = [msgpack.packb(f, use_single_float=False) for f in FLOAT_SETS[name]]
    changes = {
        f"state/item/{k}/buf/items": TableChanges(
            rows={b"%d" % i: v for i, v in enumerate(values[k::4])}
        )
        for k in range(4)
    }
    block, _ = blocks.encode_block(changes, False, compact=True)
    _, rows = blocks.decode_block(block, "here")
    assert sorted(rows) == sorted((n, k, v) for n, c in changes.items() for k, v in c.rows.items())


def test_fixed_point_floats_cost_their_bits() -> None:
    def size(floats: list[float]) -> int:
        rows = {b"%d" % i: msgpack.packb(f, use_single_float=False) for i, f in enumerate(floats)}
        block, _ = blocks.encode_block({"a/items": TableChanges(rows=rows)}, False, compact=True)
        return len(block)

    # integers as floats: a byte or two each, where 8-byte doubles took ~3
    assert size(FLOAT_SETS["integers"]) < 2.2 * 700
    # random.random(): 53 bits each (6.625 bytes), within 0.2 byte of it (keys, header)
    assert size(FLOAT_SETS["random"]) < (6.625 + 0.2) * 700
    found = columns._fixed_point(
        columns._shuffle(b"".join(struct.pack(">d", f) for f in FLOAT_SETS["random"]), 8), 700
    )
    assert found is not None and found[0] == 53 and len(found[1]) == 7 * 700
    assert columns._fixed_point(columns._shuffle(struct.pack(">2d", 1e-9, 1e9), 8), 2) is None

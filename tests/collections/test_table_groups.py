"""``table_heads`` and ``grouped_tables`` (C, and their pure-Python twins): a block's tables
grouped by folder, against a plain definition, over random names (folders of one to three
tables, names without a slash, empty components, characters of every width), random folder
orders and truncated tables; bad arguments raise the same in both."""

from __future__ import annotations

import random
from typing import Any

import pytest

from objectspace.collections import _impl, _pycore
from objectspace.tables import TableChanges

TWINS = [pytest.param((_pycore.table_heads, _pycore.grouped_tables), id="python")]
if _impl.IMPLEMENTATION == "c":
    TWINS.append(pytest.param((_impl.table_heads, _impl.grouped_tables), id="c"))

_PARTS = ["state", "item", "", "a", "é", "日本", "\U0001f600", "items", "metadata", "17", "x/y"]


def _names(rng: random.Random) -> list[str]:
    names: list[str] = []
    for _ in range(rng.randrange(0, 40)):
        folder = "/".join(rng.choice(_PARTS) for _ in range(rng.randrange(0, 4)))
        for tail in rng.sample(["items", "metadata", "data", "é", ""], rng.randrange(1, 4)):
            name = f"{folder}/{tail}" if folder or rng.random() < 0.5 else tail
            if name not in names:
                names.append(name)
    if rng.random() < 0.3:
        rng.shuffle(names)
    return names


def _expected(names: list[str], order: list[int] | None, truncated: set[str], full: bool) -> Any:
    """The grouping as the block format defines it, written plainly."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(name.rpartition("/")[0], []).append(name)
    heads = list(groups)
    if order is not None:
        heads = [heads[i] for i in order]
    tails: dict[str, int] = {}
    flat = [name for head in heads for name in groups[head]]
    table_tails = [tails.setdefault(n.rpartition("/")[2], len(tails)) for n in flat]
    cut = [] if full else [i for i, n in enumerate(flat) if n in truncated]
    return heads, [len(groups[h]) for h in heads], tails, table_tails, cut, flat


@pytest.mark.parametrize("twins", TWINS)
@pytest.mark.parametrize("seed", range(300))
def test_grouped_as_defined(twins: Any, seed: int) -> None:
    table_heads, grouped_tables = twins
    rng = random.Random(seed)
    names = _names(rng)
    truncated = {n for n in names if rng.random() < 0.2}
    changes = {n: TableChanges(rows={n.encode("utf-8"): b"v"}) for n in names}
    for n in truncated:
        changes[n].truncated = True
    heads, table_head, table_tail = table_heads(names)
    assert heads == list(dict.fromkeys(n.rpartition("/")[0] for n in names))
    assert [heads[h] for h in table_head] == [n.rpartition("/")[0] for n in names]
    assert table_tail == [n.rpartition("/")[2] for n in names]
    order = None if rng.random() < 0.3 else rng.sample(range(len(heads)), len(heads))
    full = rng.random() < 0.3
    got = grouped_tables(list(changes.values()), table_head, table_tail, order, full)
    want_heads, counts, tails, table_tails, cut, flat = _expected(names, order, truncated, full)
    if order is not None:
        assert [heads[i] for i in order] == want_heads
    assert got[0] == counts
    assert got[1] == tails and list(got[1]) == list(tails)  # ids by first use
    assert got[2] == table_tails
    assert got[3] == cut
    assert [rows for rows in got[4]] == [changes[n].rows for n in flat]
    assert all(r is changes[n].rows for r, n in zip(got[4], flat, strict=True))


@pytest.mark.parametrize("twins", TWINS)
def test_bad_arguments_raise(twins: Any) -> None:
    table_heads, grouped_tables = twins
    with pytest.raises(TypeError):
        table_heads(("a/b",))
    with pytest.raises(TypeError, match="must be a str"):
        table_heads(["a/b", b"c/d"])
    edits = [TableChanges(), TableChanges()]
    with pytest.raises(ValueError, match="differ in length"):
        grouped_tables(edits, [0], ["x", "y"], None, False)
    with pytest.raises(ValueError, match="out of range"):
        grouped_tables(edits, [0, -1], ["x", "y"], None, False)
    with pytest.raises(ValueError, match="out of range"):
        grouped_tables(edits, [0, 2], ["x", "y"], [1, 0], False)
    with pytest.raises(ValueError, match="out of range"):
        grouped_tables(edits, [0, 1], ["x", "y"], [], False)
    with pytest.raises(ValueError, match="out of range"):
        grouped_tables(edits, [0, "1"], ["x", "y"], None, False)
    with pytest.raises(ValueError, match="out of range"):
        grouped_tables(edits, [0, True], ["x", "y"], None, False)
    with pytest.raises(ValueError, match="each folder's index once"):
        grouped_tables(edits, [0, 1], ["x", "y"], [1, 1], False)
    with pytest.raises(TypeError):
        grouped_tables(tuple(edits), [0, 1], ["x", "y"], None, False)
    with pytest.raises(AttributeError):
        grouped_tables([object(), object()], [0, 1], ["x", "y"], None, False)

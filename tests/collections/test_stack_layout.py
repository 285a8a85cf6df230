"""A stack's stored layout: its count is the number of its ``items`` rows (no metadata); a
stack stored with ``metadata: count`` (the layout before) is read up to that count and
keeps writing it."""

from __future__ import annotations

import pytest

import objectspace as osp
from objectspace.tables import CheckpointKind, TableChanges

ITEMS = "state/item/s/items"
META = "state/item/s/metadata"


def _dumps(value: object) -> bytes:
    return osp.MsgpackSerializer().dumps(value)


def _load(store: osp.Store) -> osp.ObjectSpace:
    return osp.ObjectSpace.load(store.reader())


def test_a_push_writes_one_row_and_no_count() -> None:
    store = osp.MemoryStore()
    space = osp.ObjectSpace()
    stack = space.create_stack("s")
    stack.push("a")
    space.checkpoint(store)
    stack.push("b")
    stats = space.checkpoint(store)
    assert (stats.items_written, stats.items_deleted) == (1, 0)
    assert META not in store.dump()
    stack.pop()
    stats = space.checkpoint(store)
    assert (stats.items_written, stats.items_deleted) == (0, 1)
    assert store.dump()[ITEMS] == {b"0": _dumps("a")}
    assert list(_load(store).get_stack("s")) == ["a"]


def test_a_stack_stored_with_its_count_is_read_up_to_it_and_keeps_writing_it() -> None:
    store = osp.MemoryStore()
    writer = store.writer(CheckpointKind.FULL)
    writer.merge(
        {
            "state/index": TableChanges(rows={b"s": _dumps({"kind": "Stack"})}),
            META: TableChanges(rows={b"count": _dumps(2)}),
            ITEMS: TableChanges(rows={b"0": _dumps("a"), b"1": _dumps("b"), b"2": _dumps("?")}),
        }
    )
    writer.commit()
    space = _load(store)
    stack = space.get_stack("s")
    assert list(stack) == ["b", "a"]  # top first; the row past the count unread
    stack.push("c")
    space.checkpoint(store)
    assert store.dump()[META] == {b"count": _dumps(3)}
    assert list(_load(store).get_stack("s")) == ["c", "b", "a"]


def test_a_stack_whose_rows_are_not_its_slots_is_corrupt_state() -> None:
    store = osp.MemoryStore()
    space = osp.ObjectSpace()
    space.create_stack("s").push(0)
    space.checkpoint(store)
    writer = store.writer(CheckpointKind.DIFFERENTIAL)
    writer.merge({ITEMS: TableChanges(truncated=True, rows={b"0": b"\x01", b"2": b"\x02"})})
    writer.commit()
    with pytest.raises(osp.CorruptStateError, match=r"stack 's' misses slot 1 of 2"):
        _load(store)

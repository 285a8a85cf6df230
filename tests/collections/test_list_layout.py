"""A list's stored layout: its length is the number of its ``items`` rows, ``metadata``
holds only its head (when not 0); a list stored with ``metadata: length`` (the layout
before) is read up to that length and keeps writing it."""

from __future__ import annotations

from typing import Any

import pytest

import objectspace as osp
from objectspace.tables import DELETED, CheckpointKind, TableChanges

ITEMS = "state/item/l/items"
META = "state/item/l/metadata"


def _load(store: osp.Store) -> osp.ObjectSpace:
    return osp.ObjectSpace.load(store.reader())


def _dumps(value: object) -> bytes:
    return osp.MsgpackSerializer().dumps(value)


def _saved_list(values: list[Any]) -> tuple[osp.MemoryStore, osp.ObjectSpace, Any]:
    """A store, and a space whose list ``l`` holds ``values``, checkpointed to it."""
    store = osp.MemoryStore()
    space = osp.ObjectSpace()
    lst = space.create_list("l")
    lst.extend(values)
    space.checkpoint(store)
    return store, space, lst


def test_an_append_writes_one_row_and_no_length() -> None:
    store, space, lst = _saved_list([1, 2])
    assert META not in store.dump()
    assert store.dump()[ITEMS] == {b"0": _dumps(1), b"1": _dumps(2)}
    lst.append(3)
    writer = store.writer(CheckpointKind.DIFFERENTIAL)
    space.save(writer)
    written = {table: dict(c.rows) for table, c in writer.changes.items() if c.rows}
    assert written == {ITEMS: {b"2": _dumps(3)}}
    writer.commit()
    space.on_saved()
    assert list(_load(store).get_list("l")) == [1, 2, 3]


def test_the_head_is_written_when_it_moves_and_deleted_when_it_is_back_at_zero() -> None:
    store, space, lst = _saved_list(list(range(5)))
    del lst[:2]
    space.checkpoint(store)
    assert store.dump()[META] == {b"head": _dumps(2)}
    assert sorted(store.dump()[ITEMS]) == [b"2", b"3", b"4"]
    assert list(_load(store).get_list("l")) == [2, 3, 4]
    lst.append(5)  # the head stays: no metadata row
    stats = space.checkpoint(store)
    assert (stats.items_written, stats.items_deleted) == (1, 0)
    lst.clear()
    lst.append("x")
    space.checkpoint(store)
    assert META not in store.dump()
    assert store.dump()[ITEMS] == {b"0": _dumps("x")}
    assert list(_load(store).get_list("l")) == ["x"]


def test_a_failed_save_that_moved_the_head_is_carried_into_the_next() -> None:
    store, space, lst = _saved_list(list(range(4)))
    lst.pop(0)
    writer = store.writer(CheckpointKind.DIFFERENTIAL)
    space.save(writer)
    writer.rollback()
    lst.append(9)
    space.checkpoint(store)
    assert list(_load(store).get_list("l")) == [1, 2, 3, 9]
    assert store.dump()[META] == {b"head": _dumps(1)}
    assert sorted(store.dump()[ITEMS]) == [b"1", b"2", b"3", b"4"]


def _old_layout_store(rows: dict[bytes, bytes], length: int) -> osp.MemoryStore:
    store = osp.MemoryStore()
    writer = store.writer(CheckpointKind.FULL)
    writer.merge(
        {
            "state/index": TableChanges(rows={b"l": _dumps({"kind": "List"})}),
            META: TableChanges(rows={b"length": _dumps(length)}),
            ITEMS: TableChanges(rows=dict(rows)),
        }
    )
    writer.commit()
    return store


def test_a_list_stored_with_its_length_is_read_up_to_it_and_keeps_writing_it() -> None:
    # A row past the stored length (which that layout never read) stays unread.
    store = _old_layout_store({b"0": _dumps("a"), b"1": _dumps("b"), b"2": _dumps("?")}, 2)
    space = _load(store)
    lst = space.get_list("l")
    assert list(lst) == ["a", "b"]
    lst.append("c")
    lst.append("d")
    space.checkpoint(store)
    assert store.dump()[META] == {b"length": _dumps(4)}
    assert list(_load(store).get_list("l")) == ["a", "b", "c", "d"]
    lst.pop()
    space.checkpoint(store)
    assert store.dump()[META] == {b"length": _dumps(3)}
    again = _load(store)
    assert list(again.get_list("l")) == ["a", "b", "c"]
    full = osp.MemoryStore()
    again.checkpoint(full, CheckpointKind.FULL)  # a full save keeps the layout too
    assert full.dump()[META] == {b"length": _dumps(3)}
    assert list(_load(full).get_list("l")) == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("rows", "missing"),
    [({b"0": b"\x01", b"2": b"\x02"}, "b'1'"), ({b"1": b"\x01"}, "b'0'")],
    ids=["gap", "no-first-slot"],
)
def test_a_list_whose_rows_are_not_its_positions_is_corrupt_state(
    rows: dict[bytes, bytes], missing: str
) -> None:
    store, _space, _lst = _saved_list([0])
    writer = store.writer(CheckpointKind.DIFFERENTIAL)
    writer.merge({ITEMS: TableChanges(truncated=True, rows=rows)})
    writer.commit()
    with pytest.raises(osp.CorruptStateError, match=r"list 'l' misses slot") as info:
        _load(store)
    assert missing in str(info.value)


def test_a_value_appended_and_popped_in_one_interval_writes_nothing() -> None:
    store, space, lst = _saved_list([1, 2])
    lst.append(3)
    lst.pop()
    stats = space.checkpoint(store)
    assert (stats.items_written, stats.items_deleted, stats.tables_deleted) == (0, 0, 0)
    lst.pop()  # a stored slot: its delete
    stats = space.checkpoint(store)
    assert (stats.items_written, stats.items_deleted) == (0, 1)
    assert store.dump()[ITEMS] == {b"0": _dumps(1)}
    assert DELETED not in store.dump()[ITEMS].values()


def test_the_change_estimate_counts_appended_slots() -> None:
    """Compaction weighs a save by :meth:`ObjectSpace.change_rows`: appended slots count
    though they are a range, not a set of slots."""
    space = osp.ObjectSpace()
    lst = space.create_list("l")
    lst.extend(range(10))
    space.checkpoint(osp.MemoryStore())
    for i in range(3):
        lst.append(i)
    assert lst._dirty is None
    assert space.change_rows() == 3 + 1  # the slots and the metadata

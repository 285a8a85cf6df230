"""Instance.save and restores pause Python's cyclic garbage collector (``gc_paused``): a
save allocates per dirty object, and collections meanwhile traverse the whole state."""

from __future__ import annotations

import gc
import threading
from typing import Any

import pytest

import objectspace as osp
from objectspace.space import gc_paused


def test_a_save_runs_no_cyclic_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    storage = osp.open_storage("memory://save-gc")
    op = storage.job("j").operator("o", max_key_groups=4)
    inst = op.instance(0, 1)
    for key in range(200):
        inst.space_for_key(key).create_dict(f"{key}/d")[key] = float(key)
    enabled: list[bool] = []
    save = osp.ObjectSpace.save
    write_pending = type(storage.backend).write_pending

    def noting_save(self: osp.ObjectSpace, writer: Any) -> None:
        enabled.append(gc.isenabled())
        save(self, writer)

    def noting_write(self: Any, *args: Any) -> Any:
        enabled.append(gc.isenabled())
        return write_pending(self, *args)

    monkeypatch.setattr(osp.ObjectSpace, "save", noting_save)
    monkeypatch.setattr(type(storage.backend), "write_pending", noting_write)
    receipt = inst.save(1)
    assert enabled and not any(enabled)
    assert gc.isenabled()
    op.job.commit(1, [receipt])
    inst.on_saved()
    storage.close()


def test_gc_paused_nests_and_restores_the_state() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # disabled before: left disabled
    finally:
        gc.enable()
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_gc_paused_from_threads_ends_enabled() -> None:
    barrier = threading.Barrier(4)

    def work() -> None:
        barrier.wait()
        for _ in range(200):
            with gc_paused():
                pass

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert gc.isenabled()


def test_a_discarded_instance_is_freed_without_a_collection() -> None:
    """A space and its objects refer to each other: a dropped instance would wait for a
    collection of the whole heap; discard frees it by reference counting at once."""
    import weakref

    from objectspace.engine.residency import discard

    storage = osp.open_storage("memory://discard-gc")
    op = storage.job("j").operator("o", max_key_groups=4)

    def made() -> tuple[Any, list[weakref.ref[Any]]]:
        inst = op.instance(0, 1)
        for key in range(50):
            inst.space_for_key(key).create_value(f"{key}/v", float(key))
            inst.space_for_key(key).create_dict(f"{key}/d")[key] = [key]
        return inst, [weakref.ref(space) for _, space in inst._spaces.items()]

    collecting = gc.isenabled()
    gc.disable()
    try:
        kept, kept_refs = made()
        del kept
        assert all(r() is not None for r in kept_refs)  # a cycle: still held
        gone, gone_refs = made()
        discard(gone)
        del gone
        assert all(r() is None for r in gone_refs)
    finally:
        if collecting:
            gc.enable()
        gc.collect()


def test_fewer_collections_can_leave_older_objects_out_and_puts_them_back() -> None:
    """``freeze``: objects that exist when the block starts are out of its collections
    (a garbage cycle among them is collected only after the block); new ones are in
    them; nested uses and objects frozen by another keep the freeze as it was."""
    import weakref

    from objectspace.collector import fewer_collections

    class Node:
        other: Any = None

    gc.collect()
    old = Node()
    old.other = Node()
    old.other.other = old  # a cycle
    gone = weakref.ref(old)
    thresholds = gc.get_threshold()
    with fewer_collections(freeze=True):
        assert gc.get_freeze_count() > 0
        frozen = gc.get_freeze_count()
        with fewer_collections(freeze=True):  # nested: nothing more frozen, nothing undone
            assert gc.get_freeze_count() == frozen
        assert gc.get_freeze_count() == frozen
        del old
        gc.collect()
        assert gone() is not None  # frozen: not collected inside the block
        new = Node()
        new.other = Node()
        new.other.other = new
        made = weakref.ref(new)
        del new
        gc.collect()
        assert made() is None  # made in the block: collected in it
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == thresholds
    gc.collect()
    assert gone() is None  # back with the others: collected after the block

    gc.freeze()  # another freezer's objects stay frozen, and are not ours to put back
    try:
        count = gc.get_freeze_count()
        with fewer_collections(freeze=True):
            assert gc.get_freeze_count() == count
        assert gc.get_freeze_count() == count
    finally:
        gc.unfreeze()


@pytest.mark.parametrize(("budget", "freezes"), [(None, True), ("64 MiB", False)])
def test_a_batch_leaves_the_older_state_out_of_its_collections_unless_a_budget_applies(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, budget: str | None, freezes: bool
) -> None:
    """Without a memory budget a task's collections walk what the batch made, not the
    state before it (``gc.freeze`` around each instance run); with one, objects it evicts
    must be freed at once, so nothing is frozen."""
    from objectspace.testing import simulate

    calls: list[str] = []
    real_freeze, real_unfreeze = gc.freeze, gc.unfreeze

    def freeze() -> None:
        calls.append("freeze")
        real_freeze()

    def unfreeze() -> None:
        calls.append("unfreeze")
        real_unfreeze()

    monkeypatch.setattr(gc, "freeze", freeze)
    monkeypatch.setattr(gc, "unfreeze", unfreeze)

    def count(key: Any, rows: list[dict[str, Any]], state: Any) -> list[dict[str, Any]]:
        value = state.value("n", 0)
        value.value += len(rows)
        return [{"k": key, "n": value.value}]

    batches = [[{"k": k % 3, "v": k} for k in range(6)] for _ in range(2)]
    sim = simulate(
        count, batches, key="k", order_by="v", memory_budget=budget, local_dir=str(tmp_path)
    )
    assert sim.outputs[-1][-1]["n"] == 4
    assert gc.get_freeze_count() == 0
    if freezes:
        assert calls and calls == ["freeze", "unfreeze"] * (len(calls) // 2)
    else:
        assert calls == []


def _cycle() -> tuple[Any, Any]:
    """A garbage-to-be cycle of two objects, and a weak reference to it."""
    import weakref

    class Node:
        other: Any = None

    first = Node()
    first.other = Node()
    first.other.other = first
    return first, weakref.ref(first)


def test_a_process_that_keeps_leaves_its_state_frozen_between_blocks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``keep_frozen``: what a freezing block froze, and what it made and kept, stay out of
    the collections after it (a garbage cycle among them waits), until the allocated
    blocks grow past the rule (then one full collection, and frozen again), a block that
    does not freeze (a memory budget) or the policy's end puts them back."""
    import sys

    from objectspace import collector
    from objectspace.collector import fewer_collections, keep_frozen, keeps_frozen

    gc.collect()
    assert gc.get_freeze_count() == 0
    monkeypatch.setattr(collector, "_kept_blocks", sys.getallocatedblocks() * 10)  # no growth
    old, old_ref = _cycle()
    keep_frozen()
    try:
        assert keeps_frozen()
        with fewer_collections(freeze=True):
            assert gc.get_freeze_count() > 0
            frozen = gc.get_freeze_count()
            with fewer_collections(freeze=True):  # nested: nothing more frozen or undone
                assert gc.get_freeze_count() == frozen
            assert gc.get_freeze_count() == frozen
            made, made_ref = _cycle()
            young, young_ref = _cycle()
            del young
            gc.collect()
            assert young_ref() is None  # made in the block and gone: collected in it
        assert gc.get_freeze_count() > frozen  # what the block made and kept joined them
        del old, made
        gc.collect()
        assert old_ref() is not None and made_ref() is not None  # kept frozen: they wait
        with fewer_collections(freeze=True):  # the next block: no growth, no collection
            pass
        gc.collect()
        assert old_ref() is not None
        monkeypatch.setattr(collector, "_kept_blocks", 0)  # as if the state had grown
        monkeypatch.setattr(collector, "KEPT_MIN_BLOCKS", 0)
        with fewer_collections(freeze=True):
            pass
        assert old_ref() is None and made_ref() is None  # one full collection at its end
        assert gc.get_freeze_count() > 0  # and frozen again
        assert collector._kept_blocks > 0
        monkeypatch.setattr(collector, "_kept_blocks", sys.getallocatedblocks() * 10)

        gone, gone_ref = _cycle()
        with fewer_collections(freeze=True):
            pass
        del gone
        gc.collect()
        assert gone_ref() is not None
        with fewer_collections():  # a block that does not freeze sees every object
            assert gc.get_freeze_count() == 0
            gc.collect()
            assert gone_ref() is None
        kept, kept_ref = _cycle()
        with fewer_collections(freeze=True):
            pass
        assert gc.get_freeze_count() > 0
    finally:
        keep_frozen(False)
    assert not keeps_frozen()
    assert gc.get_freeze_count() == 0  # the policy's end puts them back
    del kept
    gc.collect()
    assert kept_ref() is None


def test_a_process_that_does_not_keep_puts_them_back_after_each_block() -> None:
    from objectspace.collector import fewer_collections, keeps_frozen

    assert not keeps_frozen()
    gc.collect()
    with fewer_collections(freeze=True):
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0

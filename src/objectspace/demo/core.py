"""The end-to-end example that ``make demo`` runs.

1. The reference document's array example, table by table, with the JSON serializer.
2. The Buffer workload: 1,000 keys each with a list buffer of 100, 60 differential
   checkpoints to SQLite with 2 new events per key in between, against writing each
   key's whole buffer at every checkpoint.
"""

from __future__ import annotations

import os
import pickle
import random
import tempfile
import time

from objectspace.serialization import JsonSerializer
from objectspace.space import ObjectSpace
from objectspace.storage.stores import MemoryStore, SQLiteStore
from objectspace.tables import CheckpointKind

__all__ = ["run_demo"]


def _print_tables(tables: dict[str, dict[bytes, bytes]]) -> None:
    for name in sorted(tables, key=lambda t: (t != "state/index", t)):
        print(f"  {name}")
        rows = tables[name]
        for key in sorted(rows, key=lambda k: (len(k), k)):
            print(f"    {key.decode()} = {rows[key].decode()}")


def array_example() -> None:
    print("== The array example (JSON serializer, full checkpoint) ==")
    space = ObjectSpace(JsonSerializer())
    array = space.create_array("foo", 8, fill=0)
    array[3] = 42
    array[5] = 43
    store = MemoryStore()
    writer = store.writer(CheckpointKind.FULL)
    space.save(writer)
    stats = writer.commit()
    space.on_saved()
    _print_tables(store.dump())
    print(f"  -> {stats.items_written} rows, {stats.bytes_written} bytes")
    array[3] = 44
    stats = space.checkpoint(store, kind=CheckpointKind.DIFFERENTIAL)
    print(
        f"  array[3] = 44, differential checkpoint: {stats.items_written} row(s), "
        f"{stats.bytes_written} bytes"
    )


def buffer_workload(
    keys: int = 1000, checkpoints: int = 60, per_interval: int = 2, capacity: int = 100
) -> None:
    print(
        f"\n== Buffer workload: {keys:,} keys x {checkpoints} checkpoints x "
        f"{per_interval} events, buffer of {capacity} =="
    )
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(os.path.join(tmp, "state.db"))
        space = ObjectSpace()
        buffers = [space.create_list(f"buf/{k}") for k in range(keys)]
        whole: list[list[float]] = [
            [] for _ in range(keys)
        ]  # what a whole-state-per-key design would persist
        emitted = 0
        ours = theirs = 0
        started = time.perf_counter()
        for checkpoint in range(1, checkpoints + 1):
            for k, buf in enumerate(buffers):
                for _ in range(per_interval):
                    value = rng.random()
                    buf.append(value)
                    whole[k].append(value)
                    if len(buf) == capacity:
                        emitted += 1
                        buf.clear()
                        whole[k].clear()
            stats = space.checkpoint(store)
            ours += stats.bytes_written
            theirs += sum(
                len(f"buf/{k}".encode()) + len(pickle.dumps(b)) for k, b in enumerate(whole)
            )
            if checkpoint in (1, 2, checkpoints // 2, checkpoints):
                print(
                    f"  checkpoint {checkpoint:>3}: {stats.items_written:>5} rows, "
                    f"{stats.bytes_written:>7,} bytes written"
                )
        elapsed = time.perf_counter() - started
        payload = keys * checkpoints * per_interval * 8
        print(f"  buffers emitted: {emitted:,}")
        print(f"  object space, differential checkpoints: {ours / 1e6:6.2f} MB written")
        print(
            f"  whole buffer per key at every checkpoint: {theirs / 1e6:6.2f} MB "
            f"({theirs / ours:.1f}x more)"
        )
        print(f"  raw payload (8-byte floats): {payload / 1e6:6.2f} MB")
        print(f"  wall time: {elapsed:.2f} s")
        restored = ObjectSpace.load(store.reader())
        assert all(list(restored.get_list(f"buf/{k}")) == list(b) for k, b in enumerate(buffers))
        print(f"  restored {len(restored):,} buffers from SQLite: identical")


def run_demo() -> None:
    array_example()
    buffer_workload()

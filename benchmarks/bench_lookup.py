"""One key's objects from a full block, without decoding the key group (state larger than
memory, the step after blocks).

20,000 keys in 128 key groups, each a list of 50 floats, full-checkpointed to
``sqlite:///`` (about 8,000 rows per key group: chunked full blocks of
``blocks.CHUNK_ROWS`` rows sorted by table and key). For 500 random keys: the time to
decode the key group's whole block (``decode_block``) and to look up only that key's rows
(``blocks.lookup`` of the key's index row and of its tables' name range). Both read the
block from the same bytes in memory (the SQL fetch is not timed).

    .venv/bin/python -m benchmarks.bench_lookup [--quick] [--no-record]
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any

import objectspace as osp
from benchmarks.common import fmt_ms, median, parse_args, print_table, record, temp_dir
from objectspace.storage import blocks

KEYS = 20_000
ITEMS = 50
LOOKUPS = 500


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__ or "", argv)
    keys = KEYS // (10 if args.quick else 1)
    lookups = LOOKUPS // (10 if args.quick else 1)
    rng = random.Random(7)
    with temp_dir() as tmp:
        url = f"sqlite:///{tmp}/lookup.db"
        storage = osp.open_storage(url)
        job = storage.job("lookup")
        op = job.operator("lists", max_key_groups=128)
        inst = op.instance(0, 1)
        for key in range(keys):
            inst.space_for_key(key).create_list(f"{key}/l").extend(
                [rng.random() for _ in range(ITEMS)]
            )
        job.commit(1, [inst.save(1)])
        backend: Any = storage.backend
        loaded = backend.load_blocks("lookup", "lists", range(128), 1)
        data = {g: bs[0].data for g, (_, bs) in loaded.items()}
        names, dicts = backend.table_names, backend.dictionary
        chunked = sum(1 for d in data.values() if d[0] == 0x24)
        whole, one = [], []
        for key in rng.sample(range(keys), lookups):
            block = data[op.key_groups.key_group(key)]
            oid = f"{key}/l"
            start = time.perf_counter()
            _, rows = blocks.decode_block(block, "bench", names, dicts)
            whole.append(time.perf_counter() - start)
            start = time.perf_counter()
            prefix = f"state/item/{oid}/"
            found = blocks.lookup(
                block,
                "bench",
                ("state/index", oid.encode()),
                ("state/index", oid.encode() + b"\0"),
                names,
                dicts,
            ) | blocks.lookup(block, "bench", (prefix, b""), (prefix[:-1] + "0", b""), names, dicts)
            one.append(time.perf_counter() - start)
            expected = {(n, k) for n, k, _ in rows if n.startswith(prefix)}
            assert {(n, k) for n, t in found.items() if n != "state/index" for k in t} == expected
            assert len(found.get(f"state/item/{oid}/items", {})) == ITEMS
        storage.close()
    rows_per_group = keys * (ITEMS + 2) // 128
    table = print_table(
        [
            "keys",
            "rows per key group",
            "chunked key groups",
            "decode the key group (median)",
            "lookup one key (median)",
            "speed-up",
        ],
        [
            [
                f"{keys:,}",
                f"~{rows_per_group:,}",
                f"{chunked} of {len(data)}",
                fmt_ms(median(whole)),
                fmt_ms(median(one)),
                f"{median(whole) / median(one):.1f}x",
            ]
        ],
    )
    if args.record:
        record(
            "lookup",
            "\n\n".join(
                [
                    f"{keys:,} keys x a list of {ITEMS} floats in 128 key groups, one full "
                    f"checkpoint in `sqlite:///`; {lookups} random keys: decoding the key "
                    "group's block versus `blocks.lookup` of the key's rows (its index row "
                    f"and its tables' name range), chunks of {blocks.CHUNK_ROWS} rows.",
                    table,
                ]
            ),
            title="One key's objects from a full block (lookup)",
        )


if __name__ == "__main__":
    main()

"""One of two drivers that run the same job at once (tests/checkpoint/test_two_drivers.py).

``python two_drivers_worker.py URL TAG CHECKPOINTS`` waits for a line on stdin, then, for
``n`` in 1..CHECKPOINTS, appends ``f"{TAG}{n}"`` to a list per key, saves checkpoint ``n``
and commits it through a fresh :class:`Job` (so only the store can tell a lost commit). It
is careless on purpose: whatever the commit raises, it acknowledges the save and goes on.
The two take turns at sleeping between checkpoints, so that they overtake each other. It prints one JSON line: the checkpoints it committed and the conflicts it met.
"""

from __future__ import annotations

import json
import random
import sys
import time
from typing import Any

import objectspace as osp
from objectspace.checkpoint import EMPTY

JOB = "twice"
OPERATOR = "log"
KEYS = [f"k{i}" for i in range(6)]
MAX_KEY_GROUPS = 8


def expected(tag: str, last: int) -> dict[str, list[str]]:
    """The state after ``tag`` alone committed checkpoints 1..``last``."""
    return {key: [f"{tag}{n}" for n in range(1, last + 1)] for key in KEYS} if last else {}


def restore(storage: osp.Storage) -> dict[str, list[str]]:
    """Every key's list as restored from the last committed checkpoint."""
    op = storage.job(JOB).operator(OPERATOR)
    inst = op.instance(0, 1)
    state: dict[str, list[str]] = {}
    for key in KEYS:
        space = inst.space_for_key(key)
        if key in space:
            state[key] = list(space.get_list(key))
    return state


def main(url: str, tag: str, checkpoints: int) -> dict[str, Any]:
    storage = osp.open_storage(url)
    op = storage.job(JOB).operator(OPERATOR, MAX_KEY_GROUPS)
    inst = op.instance(0, 1, checkpoint=EMPTY)
    sys.stdin.readline()  # both drivers start together
    committed: list[int] = []
    conflicts = 0
    for n in range(1, checkpoints + 1):
        for key in KEYS:
            space = inst.space_for_key(key)
            items = space.get_list(key) if key in space else space.create_list(key)
            items.append(f"{tag}{n}")
        receipt = inst.save(n)
        try:
            if storage.job(JOB).commit(n, [receipt]):
                committed.append(n)
        except osp.CheckpointConflictError:
            conflicts += 1
        except osp.CheckpointError:
            conflicts += 1  # e.g. the other driver is ahead: still careless
        inst.on_saved()
        # The drivers take turns at being the slow one, every 4 checkpoints, so that each
        # gets ahead of the other now and then.
        slow = (n // 4) % 2 == (tag == "A")
        time.sleep(random.uniform(0.02, 0.04) if slow else random.uniform(0, 0.002))
    return {"tag": tag, "committed": committed, "conflicts": conflicts}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], int(sys.argv[3]))), flush=True)

"""The wire format of what a task reports to the driver: its receipt, its statistics and, when
small, its output rows, packed in one binary column of the task's result. msgpack of plain
fields only, checked field by field on the driver (never a pickle: a row's bytes must not be
able to run code there).
"""

from __future__ import annotations

import dataclasses

from objectspace.checkpoint import Receipt
from objectspace.engine import TaskStats
from objectspace.errors import CheckpointError
from objectspace.storage.contract import StagedWrite

__all__ = ["I64", "MAX_RECEIPT_BYTES", "pack_receipt", "unpack_receipt"]


_RECEIPT_VERSION = 5
_RECEIPT_INTS = ("index", "parallelism", "checkpoint_id", "bytes_written", "rows_written")
I64 = 1 << 63
MAX_RECEIPT_BYTES = 1 << 26
"""The largest receipt row the driver decodes (its output included: see
``StatefulRunner(inline_output_bytes=...)``, which is capped below it)."""


def pack_receipt(receipt: Receipt | None, stats: TaskStats, output: bytes | None = None) -> bytes:
    """The receipt row's bytes: msgpack of plain fields only (never a pickle: the driver
    decodes them, and a row's bytes must not be able to run code there). ``output`` is the
    task's output rows as an Arrow IPC stream when they travel with the receipt, ``None``
    when the task emitted them as rows of its result."""
    import msgpack

    packed_receipt = None
    if receipt is not None:
        packed_receipt = {f.name: getattr(receipt, f.name) for f in dataclasses.fields(Receipt)}
        packed_receipt["writes"] = [list(w) for w in receipt.writes]
        # a staged write's operator and attempt are the receipt's
        packed_receipt["staged"] = [
            [w.key_group, w.version, w.full, w.block, w.rows, w.parent, w.digest]
            for w in receipt.staged
        ]
    return bytes(
        msgpack.packb(
            {
                "v": _RECEIPT_VERSION,
                "receipt": packed_receipt,
                "stats": dataclasses.asdict(stats),
                "output": output,
            },
            use_bin_type=True,
        )
    )


def _is_int(value: object) -> bool:
    return type(value) is int and -I64 <= value < I64


def unpack_receipt(blob: object) -> tuple[Receipt | None, TaskStats, bytes | None]:
    """Decode and check what :func:`pack_receipt` wrote (the receipt, the task's stats and
    its output when it travels with them); :class:`CheckpointError` for anything else (no
    field of another type, no field missing or extra)."""
    import msgpack

    def bad(why: str) -> CheckpointError:
        return CheckpointError(f"a task returned a malformed receipt row ({why})")

    if not isinstance(blob, bytes | bytearray) or len(blob) > MAX_RECEIPT_BYTES:
        raise bad(f"{type(blob).__name__} of {len(blob) if isinstance(blob, bytes) else '?'}")
    try:
        data = msgpack.unpackb(
            bytes(blob), raw=False, strict_map_key=True, use_list=True, max_ext_len=0
        )
    except Exception as exc:
        raise bad(f"not msgpack: {type(exc).__name__}") from exc
    if not isinstance(data, dict) or set(data) != {"v", "receipt", "stats", "output"}:
        raise bad("not a receipt map")
    if data["v"] != _RECEIPT_VERSION:
        raise bad(f"version {data['v']!r}")
    output = data["output"]
    if output is not None and not isinstance(output, bytes):
        raise bad(f"output of type {type(output).__name__}")
    raw_stats = data["stats"]
    fields = {f.name: f for f in dataclasses.fields(TaskStats)}
    if not isinstance(raw_stats, dict) or set(raw_stats) != set(fields):
        raise bad("stats fields")
    for name, value in raw_stats.items():
        if name == "deadlines":
            if not isinstance(value, list) or not all(
                isinstance(d, list) and len(d) in (1, 2) and all(_is_int(x) for x in d)
                for d in value
            ):
                raise bad(f"stats field {name}")
            continue
        default: object = fields[name].default
        kind: type = type(default)
        ok = (
            type(value) is bool
            if kind is bool
            else _is_int(value)
            if kind is int
            else type(value) in (float, int) and not isinstance(value, bool)
        )
        if not ok:
            raise bad(f"stats field {name}={value!r}")
    stats = TaskStats(**raw_stats)
    raw = data["receipt"]
    if raw is None:
        return None, stats, output
    names = {f.name for f in dataclasses.fields(Receipt)}
    if not isinstance(raw, dict) or set(raw) != names:
        raise bad("receipt fields")
    if not all(isinstance(raw[n], str) for n in ("job", "operator", "attempt")):
        raise bad("receipt names")
    if not all(_is_int(raw[n]) for n in _RECEIPT_INTS):
        raise bad("receipt numbers")
    if raw["base"] is not None and not _is_int(raw["base"]):
        raise bad(f"receipt base {raw['base']!r}")
    writes = raw["writes"]
    if not isinstance(writes, list) or not all(
        isinstance(w, list) and len(w) == 2 and _is_int(w[0]) and _is_int(w[1]) for w in writes
    ):
        raise bad("receipt writes")
    raw["writes"] = tuple((w[0], w[1]) for w in writes)
    staged = raw["staged"]
    if not isinstance(staged, list) or not all(
        isinstance(w, list)
        and len(w) == 7
        and _is_int(w[0])
        and _is_int(w[1])
        and type(w[2]) is bool
        and isinstance(w[3], bytes)
        and _is_int(w[4])
        and (w[5] is None or _is_int(w[5]))
        and _is_int(w[6])
        for w in staged
    ):
        raise bad("receipt staged writes")
    raw["staged"] = tuple(
        StagedWrite(raw["operator"], w[0], w[1], raw["attempt"], w[2], w[3], w[4], w[5], w[6])
        for w in staged
    )
    return Receipt(**raw), stats, output

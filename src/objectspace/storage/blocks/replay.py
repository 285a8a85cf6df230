"""Replaying a key group's chain of blocks, each verified against the catalog's record of
it: present where the catalog says, its checksum, the catalog's digest and row count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from objectspace.errors import CorruptStateError
from objectspace.storage.blocks.decode import DictionaryLookup, Tables, _decode_all, _Decoded
from objectspace.storage.blocks.framing import _HEAD, block_digest
from objectspace.storage.contract import WriteInfo
from objectspace.tables import DELETED, TableChanges

__all__ = ["Block", "replay", "replay_changes"]


def _apply(tables: Tables, decoded: _Decoded) -> int:
    """Apply a decoded block to ``tables``; returns its number of rows."""
    for i in decoded.truncated:
        tables.pop(decoded.names[i], None)
    values = decoded.values
    keys = decoded.keys
    row = 0
    for name, count in zip(decoded.names, decoded.counts, strict=True):
        if not count:
            continue
        end = row + count
        table_values = values[row:end]
        table = tables.get(name)
        if table is None:
            table = tables[name] = {}
        if None in table_values:
            for key, value in zip(keys[row:end], table_values, strict=True):
                if value is None:
                    table.pop(key, None)
                else:
                    table[key] = value
        else:
            table.update(zip(keys[row:end], table_values, strict=True))  # type: ignore[arg-type]
        row = end
    return len(keys) + len(decoded.truncated)


def _apply_changes(changes: dict[str, TableChanges], decoded: _Decoded) -> int:
    """Add a decoded block's edits to ``changes`` (a table it deletes starts again, as a
    deleted table); returns its number of rows."""
    names = decoded.names
    for i in decoded.truncated:
        changes[names[i]] = TableChanges(truncated=True)
    keys = decoded.keys
    values = decoded.values
    row = 0
    for name, count in zip(names, decoded.counts, strict=True):
        if not count:
            continue
        end = row + count
        target = changes.get(name)
        if target is None:
            target = changes[name] = TableChanges()
        rows = target.rows
        for key, value in zip(keys[row:end], values[row:end], strict=True):
            rows[key] = DELETED if value is None else value
        row = end
    return len(keys) + len(decoded.truncated)


@dataclass(frozen=True)
class Block:
    """A write's block as read from where it lives, with the catalog's record of it."""

    write: WriteInfo
    data: bytes | None  # None: not found where the catalog says it is
    digest: int | None  # the catalog's digest (None: written before digests, unchecked)
    rows: int  # the catalog's row count
    where: str  # where the block lives, for errors


def replay(
    blocks: Iterable[Block],
    where: str,
    resolve: Callable[[Sequence[int]], Mapping[int, str]] | None = None,
    dictionaries: DictionaryLookup | None = None,
) -> Tables:
    """The tables of one key group after applying ``blocks`` (its chain) in order, each
    verified: present, its checksum, the catalog's digest and row count. ``where`` names
    the job and operator in errors."""
    tables: Tables = {}
    _verified(blocks, where, resolve, dictionaries, lambda d: _apply(tables, d))
    return {name: rows for name, rows in tables.items() if rows}


def replay_changes(
    blocks: Iterable[Block],
    where: str,
    resolve: Callable[[Sequence[int]], Mapping[int, str]] | None = None,
    dictionaries: DictionaryLookup | None = None,
) -> dict[str, TableChanges]:
    """The edits of ``blocks`` (writes that follow one another in a key group's chain),
    merged in order as one write's changes (deleted rows and tables kept), each block
    verified as :func:`replay` verifies it: what brings the key group's state as of the
    write before the first block to its state after the last."""
    changes: dict[str, TableChanges] = {}
    _verified(blocks, where, resolve, dictionaries, lambda d: _apply_changes(changes, d))
    return changes


def _verified(
    blocks: Iterable[Block],
    where: str,
    resolve: Callable[[Sequence[int]], Mapping[int, str]] | None,
    dictionaries: DictionaryLookup | None,
    apply: Callable[[_Decoded], int],
) -> None:
    """Decode each of ``blocks`` in order, checked, and ``apply`` it."""
    for block in blocks:
        w = block.write
        what = (
            f"{where}key group {w.key_group} checkpoint {w.version} (write {w.write_id}) "
            f"in {block.where}"
        )
        if block.data is None:
            raise CorruptStateError(f"{what}: the block is missing")
        if len(block.data) <= _HEAD.size:
            raise CorruptStateError(
                f"{what}: the block is truncated ({len(block.data)} bytes, no more than its header)"
            )
        if block.digest is not None and block_digest(block.data) != block.digest:
            raise CorruptStateError(
                f"{what}: the block is not the one the catalog recorded (digest mismatch: "
                "rows missing or added)"
            )
        rows = 0
        for decoded in _decode_all(block.data, what, resolve, dictionaries):
            try:
                rows += apply(decoded)
            except (IndexError, ValueError) as exc:
                raise CorruptStateError(f"{what}: the block is corrupt: {exc}") from exc
        if rows != block.rows:
            raise CorruptStateError(
                f"{what}: the write has {block.rows} rows but its block holds {rows} "
                "(rows missing or added)"
            )

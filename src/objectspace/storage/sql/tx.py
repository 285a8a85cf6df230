"""The transaction every catalog query runs in, and what the roles of
:class:`~objectspace.storage.sql.SQLBackend` share.

:class:`Tx` is one transaction with ``?`` parameters; :class:`Transactions` is what a dialect
provides (:meth:`Transactions._run`: connections, transactions, retries; the columns of a
table; bulk block insertion) and the fault hook tests interrupt the protocol with. The
role classes (``jobs``, ``dictionaries``, ``packing``, ``heads``, ``migrations``,
``segments``, ``commit``, ``load``, ``retention``) build on it; ``base`` composes them.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, Protocol, TypeVar

from objectspace.storage.sql.catalog import SegmentCatalog
from objectspace.storage.sql.schema import Dialect

__all__ = ["COMPACTION", "Transactions", "Tx"]

# The attempt name of the committed full writes that compaction adds.
COMPACTION = "compaction"
# The attempt name of the writes a commit stores itself (staged writes): an attempt name
# tells pending writes apart, and these are never pending outside the commit; empty, it
# costs a pack no bytes.
_COMMITTED_ATTEMPT = ""
# Their ``created``: 0, which SQLite stores in no byte (the commit's time is the
# checkpoint's ``committed_at``); a pending write records when it was stored.
_COMMITTED_CREATED = 0.0


def _stamp() -> float:
    """``ckpt_packs.created``: when a write was stored, in whole seconds (SQLite stores a
    whole ``REAL`` as a 4-byte integer, a fractional one in 8 bytes; nothing reads it
    finer)."""
    return float(int(time.time()))


_R = TypeVar("_R")


def _chunks(items: Sequence[Any], size: int = 500) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _marks(n: int) -> str:
    return ",".join("?" * n)


class Tx(Protocol):
    """One transaction: statements with ``?`` parameters."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any: ...
    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...
    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None: ...
    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...


class Transactions(SegmentCatalog):
    """What a SQL dialect provides, and the fault hook.

    ``fault_hook``, when set, is called with the name of each step of a write or commit
    (:attr:`STEPS`) inside its transaction; an exception it raises aborts the transaction.
    Tests use it to interrupt the protocol anywhere.
    """

    STEPS: ClassVar[tuple[str, ...]] = (
        "write:begin",
        "write:rows",
        "write:end",
        "commit:begin",
        "commit:mark",
        "commit:end",
    )

    url: str

    DIALECT: ClassVar[Dialect]
    """Which rendering of :mod:`objectspace.storage.sql.schema` the store uses."""

    def __init__(self) -> None:
        super().__init__()
        self.fault_hook: Callable[[str], None] | None = None

    @abstractmethod
    def _run(self, what: str, work: Callable[[Tx], _R], *, write: bool = True) -> _R:
        """Run ``work`` in one transaction and commit it; roll back if it raises.

        Errors of the database become :class:`~objectspace.StorageError` naming ``what``.
        A dialect may retry ``work`` on transient conflicts.
        """

    def _insert_blocks(self, tx: Tx, blocks: list[tuple[int, bytes]]) -> None:
        """Store ``(write id, block)`` pairs (in write-id order: appended to the table)."""
        tx.executemany("INSERT INTO ckpt_blocks (write, data) VALUES (?, ?)", blocks)

    def _fault(self, step: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(step)

    @abstractmethod
    def _columns(self, tx: Tx, table: str) -> set[str]:
        """The names of the columns of ``table``."""

"""The checkpoint catalog and block store in SQL, shared by the SQLite and PostgreSQL backends.

Layout: a catalog (jobs, operators, checkpoints, writes, segment files) and the data of
every write as one block (:mod:`objectspace.storage.blocks`): a row ``(write id, bytes)`` of
``ckpt_blocks``, or a range of a segment file that the write references by path, offset and
length. Blocks are appended in write-id order, so they land at the end of their B-tree. The
writes one transaction stores for one operator at one version share one row of
``ckpt_packs`` (:mod:`objectspace.storage.sql.packs`): a checkpoint adds a row per operator
and save to the catalog, not a row and an index entry per key group.

A dialect subclass supplies connections and transactions (:meth:`SQLBackend._run`), the
schema (the DDL of both dialects is in :mod:`objectspace.storage.sql.schema`), pack ids and
bulk block insertion. SQL here is written with ``?`` parameters.

:class:`SQLBackend` is composed of one class per role, each in a module of its own:
``tx`` (what a dialect provides), ``jobs`` (jobs, operators, marks), ``dictionaries``
(trained dictionaries, table names), ``packing`` (the rows of ``ckpt_packs``), ``heads``
(chain heads), ``migrations`` (older schema versions), ``segments`` (segment files and their
garbage collection), ``commit`` (writing, committing, fencing), ``load`` (chains and
restores) and ``retention``.

Blocks are verified on read (:func:`objectspace.storage.blocks.replay`): each write's
catalog entry keeps its row count and its block's checksum as its digest (``None`` in stores
written before digests existed: those are not cross-checked), and a restore checks every
write of its chains is there, with its block and its table names, and that no retained
checkpoint lost one of its writes. Any mismatch raises
:class:`~objectspace.CorruptStateError` naming the job, operator, key group and checkpoint.
"""

from __future__ import annotations

from objectspace.storage.sql.commit import Commits
from objectspace.storage.sql.load import Loads
from objectspace.storage.sql.migrations import Migrations
from objectspace.storage.sql.retention import Retention

__all__ = ["SQLBackend"]


class SQLBackend(Migrations, Commits, Loads, Retention):
    """Catalog and row storage over a SQL database; see the module docstring.

    ``fault_hook``, when set, is called with the name of each step of a write or commit
    (:attr:`STEPS`) inside its transaction; an exception it raises aborts the transaction.
    Tests use it to interrupt the protocol anywhere.
    """

"""Jobs, operators and marks in the SQL catalog, and the lookups every other role makes:
an operator's id and row, names for errors, a column of rows by id.
"""

from __future__ import annotations

from typing import Any

from objectspace.errors import CheckpointError, CorruptStateError
from objectspace.storage.contract import CheckpointInfo, OperatorInfo
from objectspace.storage.sql.tx import Transactions, Tx, _chunks, _marks

__all__ = ["Jobs"]


class Jobs(Transactions):
    """The rows of ``ckpt_jobs``, ``ckpt_operators``, ``ckpt_marks`` and ``ckpt_checkpoints``."""

    @staticmethod
    def _job_id(tx: Tx, job: str) -> int | None:
        row = tx.one("SELECT id FROM ckpt_jobs WHERE name = ?", (job,))
        return None if row is None else int(row[0])

    @staticmethod
    def _operator_row(tx: Tx, job: str, operator: str) -> tuple[Any, ...] | None:
        return tx.one(
            "SELECT o.id, o.max_key_groups, o.parallelism, o.schema_version FROM ckpt_operators o "
            "JOIN ckpt_jobs j ON j.id = o.job WHERE j.name = ? AND o.name = ?",
            (job, operator),
        )

    @staticmethod
    def _column_by_id(tx: Tx, table: str, column: str, ids: set[int]) -> dict[int, Any]:
        """``column`` of each row of ``table`` whose ``id`` is one of ``ids`` (rows that
        exist): one query per 500 ids."""
        found: dict[int, Any] = {}
        for chunk in _chunks(sorted(ids)):
            for rid, value in tx.all(
                f"SELECT id, {column} FROM {table} WHERE id IN ({_marks(len(chunk))})",
                list(chunk),
            ):
                found[int(rid)] = value
        return found

    def _operator_id(self, tx: Tx, job: str, operator: str) -> int:
        row = self._operator_row(tx, job, operator)
        if row is None:
            raise CheckpointError(f"operator {operator!r} of job {job!r} does not exist")
        return int(row[0])

    @staticmethod
    def _operator_names(tx: Tx, op_id: int) -> str:
        """``job 'j' operator 'o'`` of an operator id, for errors (its id if it has no row)."""
        row = tx.one(
            "SELECT j.name, o.name FROM ckpt_operators o JOIN ckpt_jobs j ON j.id = o.job "
            "WHERE o.id = ?",
            (op_id,),
        )
        return f"operator id {op_id}" if row is None else f"job {row[0]!r} operator {row[1]!r}"

    def ensure_operator(
        self, job: str, operator: str, max_key_groups: int | None, schema_version: int | None
    ) -> OperatorInfo:
        version = 1 if schema_version is None else schema_version

        def work(tx: Tx) -> OperatorInfo:
            row = self._operator_row(tx, job, operator)
            if row is None:
                if max_key_groups is None:
                    raise CheckpointError(
                        f"operator {operator!r} of job {job!r} does not exist; give "
                        "max_key_groups to create it"
                    )
                orphan = tx.one(
                    "SELECT p.op, p.version FROM ckpt_packs p WHERE NOT EXISTS "
                    "(SELECT 1 FROM ckpt_operators o WHERE o.id = p.op) LIMIT 1"
                )
                if orphan is not None:
                    raise CorruptStateError(
                        f"cannot create operator {operator!r} of job {job!r} in {self!r}: the "
                        f"catalog holds writes (checkpoint {orphan[1]}) of operator id "
                        f"{orphan[0]}, whose operator row is missing"
                    )
                tx.execute(
                    "INSERT INTO ckpt_jobs (name) VALUES (?) ON CONFLICT (name) DO NOTHING", (job,)
                )
                tx.execute(
                    "INSERT INTO ckpt_operators (job, name, max_key_groups, schema_version) "
                    "VALUES (?, ?, ?, ?)",
                    (self._job_id(tx, job), operator, max_key_groups, version),
                )
                return OperatorInfo(job, operator, max_key_groups, None, version)
            op_id, stored_max, parallelism, stored_schema = row
            if max_key_groups is not None and max_key_groups != stored_max:
                raise CheckpointError(
                    f"operator {operator!r} of job {job!r} was created with max_key_groups="
                    f"{stored_max}; it cannot be reopened with max_key_groups={max_key_groups} "
                    "(the key space is fixed for the life of the state)"
                )
            if schema_version is not None and schema_version != stored_schema:
                tx.execute(
                    "UPDATE ckpt_operators SET schema_version = ? WHERE id = ?",
                    (schema_version, op_id),
                )
                stored_schema = schema_version
            return OperatorInfo(job, operator, stored_max, parallelism, stored_schema)

        return self._run(f"opening operator {job}/{operator}", work)

    def operator_info(self, job: str, operator: str) -> OperatorInfo | None:
        row = self._run(
            "reading an operator", lambda tx: self._operator_row(tx, job, operator), write=False
        )
        return None if row is None else OperatorInfo(job, operator, row[1], row[2], row[3])

    def jobs(self) -> list[str]:
        rows = self._run(
            "listing jobs",
            lambda tx: tx.all("SELECT name FROM ckpt_jobs ORDER BY name"),
            write=False,
        )
        return [name for (name,) in rows]

    def operators(self, job: str) -> list[OperatorInfo]:
        rows = self._run(
            "listing operators",
            lambda tx: tx.all(
                "SELECT o.name, o.max_key_groups, o.parallelism, o.schema_version "
                "FROM ckpt_operators o JOIN ckpt_jobs j ON j.id = o.job WHERE j.name = ? "
                "ORDER BY o.name",
                (job,),
            ),
            write=False,
        )
        return [OperatorInfo(job, *row) for row in rows]

    def read_mark(self, job: str, name: str) -> str | None:
        row = self._run(
            "reading a mark",
            lambda tx: tx.one(
                "SELECT m.value FROM ckpt_marks m JOIN ckpt_jobs j ON j.id = m.job "
                "WHERE j.name = ? AND m.name = ?",
                (job, name),
            ),
            write=False,
        )
        return None if row is None else str(row[0])

    def write_mark(self, job: str, name: str, value: str) -> None:
        def work(tx: Tx) -> None:
            tx.execute(
                "INSERT INTO ckpt_jobs (name) VALUES (?) ON CONFLICT (name) DO NOTHING", (job,)
            )
            job_id = self._job_id(tx, job)
            tx.execute(
                "INSERT INTO ckpt_marks (job, name, value) VALUES (?, ?, ?) "
                "ON CONFLICT (job, name) DO UPDATE SET value = excluded.value",
                (job_id, name, value),
            )

        self._run(f"writing mark {name!r} of job {job!r}", work)

    def last_checkpoint(self, job: str) -> int | None:
        row = self._run(
            "reading the last checkpoint",
            lambda tx: tx.one("SELECT last_checkpoint FROM ckpt_jobs WHERE name = ?", (job,)),
            write=False,
        )
        return None if row is None or row[0] is None else int(row[0])

    def checkpoints(self, job: str) -> list[CheckpointInfo]:
        rows = self._run(
            "listing checkpoints",
            lambda tx: tx.all(
                "SELECT c.checkpoint, c.committed_at, c.writes, c.bytes, c.full_writes, c.base "
                "FROM ckpt_checkpoints c JOIN ckpt_jobs j ON j.id = c.job WHERE j.name = ? "
                "ORDER BY c.checkpoint",
                (job,),
            ),
            write=False,
        )
        return [CheckpointInfo(*row) for row in rows]

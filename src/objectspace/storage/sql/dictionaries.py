"""Trained zstd dictionaries in the SQL catalog (``ckpt_dictionaries``, one per operator: the
first one stored wins) and the names of interned table folders (``ckpt_tables``), both
cached once committed: they never change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from objectspace.storage.blocks import Dictionary, sample
from objectspace.storage.sql.jobs import Jobs
from objectspace.storage.sql.tx import Tx, _chunks, _marks

__all__ = ["Dictionaries"]


class Dictionaries(Jobs):
    """An operator's trained dictionary for writers, dictionaries and table names by id for readers."""

    def __init__(self) -> None:
        super().__init__()
        self._names_by_id: dict[int, str] = {}
        # Trained dictionaries: per operator id (writers), and their bytes by id (readers);
        # both only of committed rows, which never change.
        self._op_dictionaries: dict[int, Dictionary] = {}
        self._dictionaries: dict[int, bytes] = {}
        self._dictionary_by_name: dict[tuple[str, str], Dictionary] = {}

    def _operator_dictionary_tx(self, tx: Tx, op_id: int) -> Dictionary | None:
        """The operator's trained dictionary, if it has one (cached once committed)."""
        cached = self._op_dictionaries.get(op_id)
        if cached is not None:
            return cached
        row = tx.one("SELECT id, data FROM ckpt_dictionaries WHERE op = ?", (op_id,))
        return None if row is None else Dictionary(int(row[0]), bytes(row[1]))

    def _store_dictionary_tx(self, tx: Tx, op_id: int, data: bytes) -> Dictionary:
        """Store a dictionary trained for the operator, unless another writer stored one
        first; returns the operator's dictionary (the first one stored)."""
        tx.execute(
            "INSERT INTO ckpt_dictionaries (op, data) VALUES (?, ?) ON CONFLICT (op) DO NOTHING",
            (op_id, data),
        )
        row = tx.one("SELECT id, data FROM ckpt_dictionaries WHERE op = ?", (op_id,))
        assert row is not None
        return Dictionary(int(row[0]), bytes(row[1]))

    def _remember_dictionary(self, op_id: int, dictionary: Dictionary) -> None:
        """Cache a committed dictionary of the operator."""
        self._op_dictionaries[op_id] = dictionary
        self._dictionaries[dictionary.id] = dictionary.data

    def operator_dictionary(self, job: str, operator: str) -> Dictionary | None:
        """The trained dictionary of the operator's blocks, if it has one yet."""

        known = self._dictionary_by_name.get((job, operator))
        if known is not None:
            return known

        def work(tx: Tx) -> tuple[int, Dictionary | None]:
            op_id = self._operator_id(tx, job, operator)
            return op_id, self._operator_dictionary_tx(tx, op_id)

        op_id, dictionary = self._run("reading the operator's dictionary", work, write=False)
        if dictionary is not None:
            self._remember_dictionary(op_id, dictionary)
            self._dictionary_by_name[(job, operator)] = dictionary
        return dictionary

    def offer_dictionary(self, job: str, operator: str, payloads: Sequence[bytes]) -> None:
        """Sample block payloads of the operator (encoded without a trained dictionary);
        once there are enough, train a dictionary and store it (unless one is stored)."""
        data = sample(f"{self.url}#{job}#{operator}", payloads)
        if data is None:
            return

        def work(tx: Tx) -> tuple[int, Dictionary]:
            op_id = self._operator_id(tx, job, operator)
            return op_id, self._store_dictionary_tx(tx, op_id, data)

        op_id, dictionary = self._run("storing the operator's dictionary", work)
        self._remember_dictionary(op_id, dictionary)
        self._dictionary_by_name[(job, operator)] = dictionary

    def dictionary(self, dict_id: int) -> bytes | None:
        """The bytes of trained dictionary ``dict_id`` (``None``: not in the catalog)."""
        data = self._dictionaries.get(dict_id)
        if data is None:
            row = self._run(
                "reading a dictionary",
                lambda tx: tx.one("SELECT data FROM ckpt_dictionaries WHERE id = ?", (dict_id,)),
                write=False,
            )
            if row is None:
                return None
            data = self._dictionaries[dict_id] = bytes(row[0])
        return data

    def table_names(self, ids: Sequence[int]) -> dict[int, str]:
        """Names of interned table ids (ids never change once committed: cached)."""
        cache = self._names_by_id
        missing = sorted({i for i in ids if i not in cache})
        if missing:

            def work(tx: Tx) -> list[tuple[Any, ...]]:
                found: list[tuple[Any, ...]] = []
                for chunk in _chunks(missing):
                    found += tx.all(
                        f"SELECT id, name FROM ckpt_tables WHERE id IN ({_marks(len(chunk))})",
                        list(chunk),
                    )
                return found

            for tid, name in self._run("reading table names", work, write=False):
                cache[int(tid)] = name
        return {i: cache[i] for i in ids if i in cache}

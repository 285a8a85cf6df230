"""The one-space, unversioned stores' contract: a place where one object space is persisted."""

from __future__ import annotations

from abc import ABC, abstractmethod

from objectspace.tables import CheckpointKind, StateReader, StateWriter

__all__ = ["Store"]


class Store(ABC):
    """A place where one object space is persisted: hands out writers and readers."""

    @abstractmethod
    def writer(self, kind: CheckpointKind = CheckpointKind.DIFFERENTIAL) -> StateWriter:
        """A new writer; FULL replaces the store's content when it commits."""

    @abstractmethod
    def reader(self) -> StateReader:
        """A reader of the last committed state."""

    def dump(self) -> dict[str, dict[bytes, bytes]]:
        """Every table as ``{table: {key: value}}``."""
        return self.reader().dump()

"""The exception hierarchy: one root, :class:`ObjectSpaceError`, and a subclass per failure."""

from __future__ import annotations

__all__ = [
    "CheckpointConflictError",
    "CheckpointError",
    "CorruptStateError",
    "DeploymentError",
    "ObjectDeletedError",
    "ObjectExistsError",
    "ObjectSpaceError",
    "ReservedColumnError",
    "SerializationError",
    "StorageError",
    "StorageNotSharedError",
    "TimeError",
    "WrongKindError",
]


class ObjectSpaceError(Exception):
    """Raised for every failure that objectspace itself detects; the root of the hierarchy."""


class ObjectExistsError(ObjectSpaceError, KeyError):
    """Raised when ``create_*`` is called with an id that the space already holds."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class WrongKindError(ObjectSpaceError, TypeError):
    """Raised when ``get_<kind>`` finds an object of another kind under the id."""


class ObjectDeletedError(ObjectSpaceError):
    """Raised when an object is used after it was deleted from its space."""


class SerializationError(ObjectSpaceError):
    """Raised when a value cannot be encoded to, or decoded from, bytes."""


class StorageError(ObjectSpaceError):
    """Raised when a store cannot be opened, read or written."""


class CorruptStateError(StorageError):
    """Raised when stored state is inconsistent or fails its checksum."""


class CheckpointError(ObjectSpaceError):
    """Raised when a checkpoint cannot be written, committed or restored as asked."""


class ReservedColumnError(ObjectSpaceError, ValueError):
    """Raised when an input, an output row or an output_schema uses a column objectspace reserves."""


class TimeError(ObjectSpaceError, ValueError):
    """Raised when a time, duration or time option is not one objectspace understands."""


class CheckpointConflictError(CheckpointError):
    """Raised when another driver (or writer epoch) committed the checkpoint, or fenced the
    job, so that a commit would build on state the store does not hold."""


class DeploymentError(ObjectSpaceError):
    """Raised when the executors cannot run objectspace as the driver asked: the C extension
    is not what runs there, or objectspace is not installed there at all."""


class StorageNotSharedError(StorageError):
    """Raised when a query on a cluster is given storage its executors cannot all reach:
    ``memory://``, or a ``sqlite:///`` or ``file://`` path an executor does not see."""

"""The checks of user-given names, counts and checkpoint ids, and :data:`EMPTY`."""

from __future__ import annotations

__all__ = ["EMPTY"]


EMPTY = -1
"""As a checkpoint to restore from: before the first checkpoint (no state)."""


_I64_MAX = (1 << 63) - 1
# Job and operator names are catalog text (PostgreSQL text holds no NUL) and file names.
_MAX_NAME = 1024


def _check_name(what: str, name: object) -> str:
    """``name`` if it is a job or operator name: non-empty UTF-8 text, no NUL, at most
    1024 characters; else ValueError naming it."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"{what} is a non-empty str, not {name!r}")
    if "\x00" in name or len(name) > _MAX_NAME:
        raise ValueError(
            f"{what} holds no NUL byte and at most {_MAX_NAME} characters, not {name[:80]!r}"
        )
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{what} must be valid UTF-8 text, not {name[:80]!r} (a lone surrogate at {exc.start})"
        ) from exc
    return name


def _check_count(what: str, value: object, least: int) -> int:
    if type(value) is not int or not least <= value <= _I64_MAX:
        raise ValueError(f"{what} must be an int in {least}..{_I64_MAX}, not {value!r}")
    return value


def _check_checkpoint_id(checkpoint_id: object) -> int:
    if (
        not isinstance(checkpoint_id, int)
        or isinstance(checkpoint_id, bool)
        or not 0 <= checkpoint_id <= _I64_MAX
    ):
        raise ValueError(
            f"a checkpoint id is an int in 0..{_I64_MAX} (a signed 64-bit id), "
            f"not {checkpoint_id!r}"
        )
    return checkpoint_id

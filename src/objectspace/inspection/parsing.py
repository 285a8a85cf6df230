"""Values given as text (on the command line): durations and keys."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from objectspace.inspection.values import KEY_TYPES, compact_json
from objectspace.keygroups import Key

__all__ = ["parse_duration", "parse_key"]


# -- command-line values ----------------------------------------------------------------------

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?\s*$", re.IGNORECASE)
_UNITS = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_INT = re.compile(r"^[+-]?\d+$")


def parse_duration(text: str) -> float:
    """Seconds of ``10m``, ``30s``, ``1h``, ``2d``, ``500ms`` or ``600`` (seconds)."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(
            f"invalid duration {text!r}: use a number of seconds or a number with a unit "
            "ms, s, m, h or d (e.g. 600, 30s, 10m, 1h)"
        )
    unit = match.group(2)
    return float(match.group(1)) * _UNITS[unit.lower() if unit else None]


def _from_key_json(data: Any) -> Any:
    if isinstance(data, list):
        return tuple(_from_key_json(v) for v in data)
    if isinstance(data, dict):
        if len(data) == 1:
            ((tag, payload),) = data.items()
            if tag == "$bytes":
                return base64.b64decode(payload)
            if tag == "$tuple":
                return tuple(_from_key_json(v) for v in payload)
        raise ValueError(f"a key cannot be a JSON object ({compact_json(data)})")
    if isinstance(data, float):
        raise ValueError(f"a key cannot be a float ({data!r})")
    return data


def parse_key(text: str, key_type: str = "auto") -> Key:
    """The key that ``--key text`` names.

    ``auto`` (default): an int if the text is an optionally signed run of digits, else the
    text; ``int``; ``str`` (the text as it is, e.g. ``--key-type str --key 42`` for the
    string ``"42"``); ``json``: JSON where arrays are tuples (multi-column keys) and
    ``{"$bytes": "<base64>"}`` is bytes, e.g. ``[1, "a"]`` for the key ``(1, "a")``.
    """
    if key_type == "str":
        return text
    if key_type == "int" or (key_type == "auto" and _INT.match(text)):
        if not _INT.match(text):
            raise ValueError(f"--key {text!r} is not an integer")
        return int(text)
    if key_type == "auto":
        return text
    if key_type == "json":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"--key {text!r} is not JSON: {exc}") from None
        key: Key = _from_key_json(data)
        return key
    raise ValueError(f"unknown key type {key_type!r}; expected one of {', '.join(KEY_TYPES)}")

"""objectspace.inspection's small pure helpers, in process (the commands built on them are
tested end to end in tests/cli)."""

from __future__ import annotations

from objectspace.inspection import parse_duration, parse_key, redact, to_json
from tests.support.storage import segment_url


def test_helpers_the_commands_rely_on() -> None:
    """Small pure functions the commands rely on: durations, keys, redaction, JSON tags."""
    assert [parse_duration(t) for t in ("600", "30s", "10m", "1h", "1.5h", "2d", "500ms")] == [
        600, 30, 600, 3600, 5400, 172800, 0.5,
    ]  # fmt: skip
    assert parse_key("42") == 42 and parse_key("-3") == -3 and parse_key("4_2") == "4_2"
    assert parse_key("42", "str") == "42" and parse_key('[1, "a"]', "json") == (1, "a")
    assert parse_key('{"$bytes": "eA=="}', "json") == b"x"
    assert redact("postgresql://u:secret@h:5/db?schema=s") == "postgresql://u:***@h:5/db?schema=s"
    masked = redact(segment_url("s3://b/p", "postgresql://u:pw@h/db", secret="s3cret"))
    assert "pw" not in masked and "s3cret" not in masked
    assert to_json({1: frozenset({2, 1})}) == {"$dict": [[1, {"$frozenset": [1, 2]}]]}
    assert to_json(float("-inf")) == {"$float": "-inf"}

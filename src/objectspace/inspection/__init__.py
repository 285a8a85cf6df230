"""Looking into checkpoint storage, and maintaining it: the library behind ``objectspace``.

Every function here takes an open :class:`~objectspace.Storage` (see :func:`open_existing`)
and returns plain data (dicts, lists, ints, strings) that :func:`dumps` turns into the
``--json`` output of the command; :mod:`objectspace.cli.render` prints the same data as
tables with `rich <https://rich.readthedocs.io>`_. Nothing here imports rich or argparse.

Layer 6. Modules: ``probe`` (opening existing storage, finding jobs, operators and
checkpoints), ``values`` (values as JSON, entry rows), ``parsing`` (durations and keys given
as text), ``views`` (``inspect``, ``show``), ``diff``, ``export``, ``maintenance`` (``gc``,
``compact``, ``retain``), ``stats`` (:func:`read_stats`: the batch statistics a Spark
runner commits with each checkpoint, for ``stats``).

Opening storage without changing it
-----------------------------------

:func:`open_existing` refuses a store that does not exist instead of creating it: a
``sqlite:///`` file (or the SQLite catalog of a segment storage) must exist and hold an
objectspace catalog (checked with a read-only connection), a PostgreSQL schema must hold
the catalog tables, and ``memory://`` (which lives in one process) is refused. Reading
never writes: operators are opened from their stored metadata, not with
:meth:`~objectspace.Job.operator` (which may update it).

Values as JSON
--------------

State values are Python values; :func:`to_json` maps them to JSON with the tags of
:class:`~objectspace.JsonSerializer`: ``{"$tuple": [...]}``, ``{"$bytes": "<base64>"}``,
``{"$datetime": "<iso>"}``, ``{"$date": "<iso>"}``, ``{"$set": [...]}`` (elements
sorted), ``{"$frozenset": [...]}``, ``{"$dict": [[k, v], ...]}`` for a dict whose keys are
not all strings, plus ``{"$float": "nan" | "inf" | "-inf"}`` and, for any other type,
``{"$repr": "<repr>"}``. :func:`json_text` is the compact text of that JSON.

Exported rows (``export`` and :func:`objectspace.spark.read_state`)
-------------------------------------------------------------------

One row per entry, columns :data:`ENTRY_COLUMNS`:

- ``key_group`` (int32): the object's key group;
- ``object_id`` (string) and ``kind`` (string: ``Value``, ``Array``, ``List``, ``Queue``,
  ``Stack``, ``LinkedList``, ``Set``, ``SortedSet``, ``Dict``, ``SortedDict``);
- ``slot`` (string, nullable): for sequences the position in iteration order as decimal
  digits (``"0"``, ``"1"``, ...; a Stack iterates from the top), for dicts the
  :func:`json_text` of the key, for sets that of the element; ``NULL`` for a Value;
- ``value`` (string, nullable): the :func:`json_text` of the value (for sets: of the
  element again).

A Value is one row with ``slot`` NULL; an empty collection is one row with ``slot`` and
``value`` NULL, so every object appears. Rows come by key group, then object id; within
an object in its order (Dict and Set entries sorted by key/element).

The ``--json`` shapes
---------------------

``inspect`` (:func:`inspect_storage`)::

    {"storage": "<URL, secrets masked>",
     "jobs": [{"job": "clicks", "last_checkpoint": 3 | null,
               "checkpoints": [{"checkpoint": 1, "status": "complete" | "pending",
                                "committed_at": "<ISO 8601 UTC>" | null,
                                "writes": 8, "full_writes": 8, "differential_writes": 0,
                                "bytes": 1234}, ...],
               "operators": [{"operator": "sessions", "max_key_groups": 128,
                              "parallelism": 4 | null, "schema_version": 1,
                              "state": {"as_of": 3 | null, "key_groups": 5, "writes": 9,
                                        "rows": 100, "bytes": 2048},
                              "key_groups": [{"key_group": 0, "writes": 2,
                                              "full_version": 1, "rows": 10,
                                              "bytes": 120}, ...]}, ...]}, ...]}

``checkpoints`` lists the restorable (committed, retained) checkpoints, with what their
commit recorded, then the *pending* versions: versions whose every write is uncommitted
(a checkpoint being written, or a failed attempt that retention will remove); their
figures are those of the pending writes. ``key_groups`` lists the key groups that hold
state as of the last checkpoint, with the chain a restore reads (its writes, the version
of its full write, rows and bytes stored); ``state`` sums them.

``show`` (:func:`show_objects`)::

    {"job": "clicks", "operator": "sessions", "checkpoint": 3, "key_group": 5,
     "key": <JSON of the key> (only with --key),
     "objects": [{"id": "42/buffer", "kind": "List", "length": 1000,
                  "items": [<JSON>, ...first limit], "more": 980},
                 {"id": "42/count", "kind": "Value", "length": null, "value": <JSON>},
                 {"id": "42/seen", "kind": "Dict", "length": 3,
                  "items": [[<key JSON>, <value JSON>], ...], "more": 0}, ...]}

``diff`` (:func:`diff_checkpoints`)::

    {"job": ..., "operator": ..., "from": 1, "to": 2,
     "summary": {"added": 1, "removed": 1, "changed": 2, "replaced": 0,
                 "key_groups_changed": 2},
     "objects": [{"key_group": 3, "id": "1/new", "change": "added", "kind": "Value",
                  "length": null, "value": 5},
                 {"key_group": 3, "id": "1/old", "change": "removed", "kind": "Set",
                  "length": 2, "items": [...], "more": 0},
                 {"key_group": 3, "id": "1/count", "change": "changed", "kind": "Value",
                  "old": 5, "new": 7},
                 {"key_group": 3, "id": "1/buffer", "change": "changed", "kind": "List",
                  "old_length": 50, "new_length": 51,
                  "slots": [{"slot": 50, "change": "added", "new": 1.5},
                            {"slot": 3, "change": "changed", "old": 1, "new": 2},
                            {"slot": 0, "change": "removed", "old": 9}, ...],
                  "more": 0},
                 {"key_group": 3, "id": "1/x", "change": "replaced", "kind": "List",
                  "old_kind": "Set"}]}

Objects are ordered by key group and id. A slot is an index (sequences; removed slots
count in the old sequence, added and changed ones in the new; a changed slot that moved
also has ``"old_slot"``), a key (dicts) or an element (sets). Sequences are compared with
:class:`difflib.SequenceMatcher`, so a queue that dropped two items at its head and got
two at its tail shows four slots, not every slot changed (sequences longer than
:data:`MAX_MATCHED` together are compared index by index).

``export``: ``{"path", "rows", "objects", "key_groups", "checkpoint"}``; ``gc``, ``compact``
and ``retain``: see :func:`collect_garbage`, :func:`compact_job` and :func:`retain_job`;
``stats``: see :func:`batch_stats`.
"""

from __future__ import annotations

from objectspace.inspection.diff import diff_checkpoints
from objectspace.inspection.export import export_parquet, parquet_schema, slices, state_rows
from objectspace.inspection.maintenance import collect_garbage, compact_job, retain_job
from objectspace.inspection.parsing import parse_duration, parse_key
from objectspace.inspection.probe import (
    find_job,
    find_operator,
    open_existing,
    redact,
    resolve_checkpoint,
    serializer_named,
)
from objectspace.inspection.stats import batch_stats, read_stats, stats_row
from objectspace.inspection.values import (
    DEFAULT_LIMIT,
    ENTRY_COLUMNS,
    KEY_TYPES,
    MAX_MATCHED,
    SLICE_KEY_GROUPS,
    Progress,
    dumps,
    entries,
    format_time,
    json_text,
    to_json,
)
from objectspace.inspection.views import inspect_storage, show_objects

__all__ = [
    "DEFAULT_LIMIT",
    "ENTRY_COLUMNS",
    "KEY_TYPES",
    "MAX_MATCHED",
    "SLICE_KEY_GROUPS",
    "Progress",
    "batch_stats",
    "collect_garbage",
    "compact_job",
    "diff_checkpoints",
    "dumps",
    "entries",
    "export_parquet",
    "find_job",
    "find_operator",
    "format_time",
    "inspect_storage",
    "json_text",
    "open_existing",
    "parquet_schema",
    "parse_duration",
    "parse_key",
    "read_stats",
    "redact",
    "resolve_checkpoint",
    "retain_job",
    "serializer_named",
    "show_objects",
    "slices",
    "state_rows",
    "stats_row",
    "to_json",
]

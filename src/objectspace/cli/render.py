"""Rendering the plain data of :mod:`objectspace.inspection` with rich: tables, trees and
progress bars.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
from objectspace.inspection.probe import id_summary
from objectspace.inspection.values import DEFAULT_LIMIT, Progress, compact_json

__all__ = [
    "progress_bar",
    "render_compact",
    "render_diff",
    "render_export",
    "render_gc",
    "render_inspect",
    "render_retain",
    "render_show",
    "render_stats",
]


# -- rendering (rich) -----------------------------------------------------------------------------


@contextlib.contextmanager
def progress_bar(description: str, *, enabled: bool = True) -> Iterator[Progress]:
    """A rich progress bar on stderr, shown only on a terminal; yields its callback."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TimeElapsedColumn
    from rich.progress import Progress as RichProgress

    console = Console(stderr=True)
    bar = RichProgress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not (enabled and console.is_terminal),
    )
    with bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total if total > 0 else None)

        yield update


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{n} B"  # pragma: no cover


def _n(count: int, word: str) -> str:
    """``1 key group``, ``2 key groups``."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def _short(data: Any, width: int = 120) -> str:
    text = compact_json(data)
    return text if len(text) <= width else text[: width - 1] + "…"


def _text(value: Any) -> Any:
    from rich.text import Text

    return Text("" if value is None else str(value))


def render_inspect(data: dict[str, Any], console: Console, limit: int = DEFAULT_LIMIT) -> None:
    """``inspect`` as tables: per job its checkpoints, operators and key groups."""
    from rich.table import Table

    console.print(_text(f"storage {data['storage']}"))
    if not data["jobs"]:
        console.print("no jobs")
    for job in data["jobs"]:
        console.print()
        last = job["last_checkpoint"]
        console.print(
            _text(f"job {job['job']!r}: last checkpoint {'none' if last is None else last}")
        )
        checkpoints = job["checkpoints"]
        table = Table(title="checkpoints", title_justify="left")
        for name in ("id", "status", "committed at (UTC)", "writes", "full", "diff", "bytes"):
            table.add_column(
                name,
                justify="right" if name in {"id", "writes", "full", "diff", "bytes"} else "left",
            )
        shown = checkpoints[-limit:] if limit > 0 else checkpoints
        for c in shown:
            table.add_row(
                _text(c["checkpoint"]),
                _text(c["status"]),
                _text(c["committed_at"][:19].replace("T", " ") if c["committed_at"] else "-"),
                _text(c["writes"]),
                _text(c["full_writes"]),
                _text(c["differential_writes"]),
                _text(_size(c["bytes"])),
            )
        if len(shown) < len(checkpoints):
            table.caption = f"… and {len(checkpoints) - len(shown)} older"
        console.print(table if checkpoints else "no checkpoints")
        ops = Table(title="operators", title_justify="left")
        for name in (
            "operator",
            "max key groups",
            "parallelism",
            "schema",
            "key groups with state",
            "rows",
            "bytes",
        ):
            ops.add_column(name, justify="left" if name == "operator" else "right")
        for o in job["operators"]:
            s = o["state"]
            ops.add_row(
                _text(o["operator"]),
                _text(o["max_key_groups"]),
                _text("-" if o["parallelism"] is None else o["parallelism"]),
                _text(o["schema_version"]),
                _text(s["key_groups"]),
                _text(s["rows"]),
                _text(_size(s["bytes"])),
            )
        console.print(ops)
        for o in job["operators"]:
            groups = o["key_groups"]
            if not groups:
                continue
            kg = Table(
                title=f"state of {o['operator']!r} by key group, as of checkpoint "
                f"{o['state']['as_of']}",
                title_justify="left",
            )
            for name in ("key group", "writes", "full version", "rows", "bytes"):
                kg.add_column(name, justify="right")
            picked = groups[:limit] if limit > 0 else groups
            for g in picked:
                kg.add_row(
                    _text(g["key_group"]),
                    _text(g["writes"]),
                    _text("-" if g["full_version"] is None else g["full_version"]),
                    _text(g["rows"]),
                    _text(_size(g["bytes"])),
                )
            if len(picked) < len(groups):
                kg.caption = f"… and {len(groups) - len(picked)} more key groups (--json lists all)"
            console.print(kg)


def _render_contents(console: Console, view: dict[str, Any], indent: str = "  ") -> None:
    if "value" in view:
        return
    for i, item in enumerate(view["items"]):
        if view["kind"] in {"Dict", "SortedDict"}:
            console.print(_text(f"{indent}{_short(item[0], 60)}: {_short(item[1])}"))
        elif view["kind"] in {"Set", "SortedSet"}:
            console.print(_text(f"{indent}{_short(item)}"))
        else:
            console.print(_text(f"{indent}[{i}] {_short(item)}"))
    if view["more"]:
        console.print(_text(f"{indent}… and {view['more']} more"))


def _headline(view: dict[str, Any]) -> str:
    if "value" in view:
        return f"{view['kind']} = {_short(view['value'])}"
    n = view["length"]
    return f"{view['kind']} ({n} item{'' if n == 1 else 's'})"


def render_show(data: dict[str, Any], console: Console) -> None:
    """``show``: each object with its kind and (truncated) contents."""
    what = (
        f"key {_short(data['key'])} (key group {data['key_group']})"
        if "key" in data
        else (f"key group {data['key_group']}")
    )
    console.print(
        _text(
            f"{data['job']}/{data['operator']} as of checkpoint {data['checkpoint']}: {what}, "
            f"{len(data['objects'])} object{'' if len(data['objects']) == 1 else 's'}"
        )
    )
    for view in data["objects"]:
        console.print(_text(f"{view['id']}  {_headline(view)}"))
        _render_contents(console, view)


def render_diff(data: dict[str, Any], console: Console) -> None:
    """``diff``: one line per changed object, then its changed slots."""
    s = data["summary"]
    console.print(
        _text(
            f"{data['job']}/{data['operator']}: checkpoint {data['from']} -> {data['to']}: "
            f"{s['added']} added, {s['removed']} removed, {s['changed']} changed, "
            f"{s['replaced']} replaced objects in {_n(s['key_groups_changed'], 'key group')}"
        )
    )
    marks = {"added": "+", "removed": "-", "changed": "~", "replaced": "!"}
    for entry in data["objects"]:
        head = f"{marks[entry['change']]} [kg {entry['key_group']}] {entry['id']}  "
        change = entry["change"]
        if change in {"added", "removed"}:
            console.print(_text(head + f"{change}: " + _headline(entry)))
            _render_contents(console, entry, "    ")
        elif change == "replaced":
            console.print(_text(head + f"replaced: {entry['old_kind']} -> {entry['kind']}"))
        elif "old" in entry:
            console.print(
                _text(
                    head
                    + f"{entry['kind']}: {_short(entry['old'], 50)} -> {_short(entry['new'], 50)}"
                )
            )
        else:
            console.print(
                _text(
                    head + f"{entry['kind']}: {entry['old_length']} -> {entry['new_length']} items"
                )
            )
            for slot in entry["slots"]:
                where = _short(slot["slot"], 60)
                if slot["change"] == "added":
                    line = f"+ {where}" + (f": {_short(slot['new'])}" if "new" in slot else "")
                elif slot["change"] == "removed":
                    line = f"- {where}" + (f": {_short(slot['old'])}" if "old" in slot else "")
                else:
                    line = f"~ {where}: {_short(slot['old'], 50)} -> {_short(slot['new'], 50)}"
                console.print(_text("    " + line))
            if entry["more"]:
                console.print(_text(f"    … and {entry['more']} more changed slots"))


def render_export(data: dict[str, Any], console: Console) -> None:
    console.print(
        _text(
            f"wrote {_n(data['rows'], 'row')} ({_n(data['objects'], 'object')} in "
            f"{_n(data['key_groups'], 'key group')}, checkpoint {data['checkpoint']}) to "
            f"{data['path']}"
        )
    )


def render_gc(data: dict[str, Any], console: Console) -> None:
    if not data["segments"]:
        console.print(
            _text(f"{data['storage']} keeps state in its database: there are no files to collect")
        )
        return
    deleted = data["deleted"]
    verb = "would delete" if data["dry_run"] else "deleted"
    stamped = "would stamp" if data["dry_run"] else "stamped"
    console.print(
        _text(
            f"{verb} {_n(len(deleted), 'unreferenced segment file')} "
            f"({_size(data['bytes_deleted'])}); {stamped} {data['stamped']} newly unreferenced "
            f"(deleted after the grace period of {data['grace_seconds']:g} s); "
            f"{data['referenced']} referenced files kept"
        )
    )
    for path in deleted:
        console.print(_text(f"  {path}"))
    for path in data.get("refused", []):
        console.print(_text(f"  refused (not inside the storage root): {path}"))


def render_compact(data: dict[str, Any], console: Console) -> None:
    if data["as_of"] is None:
        console.print(_text(f"job {data['job']!r} has no checkpoint: nothing to compact"))
        return
    console.print(
        _text(
            f"compacted {_n(data['key_groups'], 'key group')} of job {data['job']!r} as of checkpoint "
            f"{data['as_of']}: read {_size(data['bytes_read'])}, wrote "
            f"{_size(data['bytes_written'])}; nothing was removed (the older writes stay "
            "until `objectspace retain`)"
        )
    )
    for o in data["operators"]:
        console.print(_text(f"  {o['operator']}: {_n(o['key_groups'], 'key group')}"))


def render_retain(data: dict[str, Any], console: Console) -> None:
    kept = data["kept"]
    console.print(
        _text(
            f"job {data['job']!r}: dropped {_n(data['checkpoints_dropped'], 'checkpoint')}, removed "
            f"{data['writes_removed']} writes ({data['rows_removed']} rows) and "
            f"{data['pending_removed']} pending writes; kept checkpoints "
            f"{id_summary(kept)}"
        )
    )
    if data["segments"] and (data["writes_removed"] or data["pending_removed"]):
        console.print("segment files no longer referenced are deleted by `objectspace gc`")


# Columns of the stats table: (header, BatchStats field).
_STATS_COLUMNS = (
    ("checkpoint", "checkpoint_id"),
    ("p", "parallelism"),
    ("keys", "keys"),
    ("rows in", "rows_in"),
    ("rows out", "rows_out"),
    ("written", "bytes_written"),
    ("timers", "timers_fired"),
    ("late", "rows_late"),
    ("cached", "cached_instances"),
    ("restore s", "seconds_restore"),
    ("total s", "seconds_total"),
)


def render_stats(data: dict[str, Any], console: Console) -> None:
    from rich.table import Table

    batches = data["batches"]
    if not batches:
        console.print(_text(f"job {data['job']!r}: no batch statistics recorded"))
        return
    table = Table(title=f"job {data['job']!r}, operator {data['operator']!r}")
    for header, _ in _STATS_COLUMNS:
        table.add_column(header, justify="right")
    for row in batches:
        cells = []
        for _, name in _STATS_COLUMNS:
            value = row[name]
            if name == "bytes_written":
                cells.append(_size(value))
            elif isinstance(value, float):
                cells.append(f"{value:.3f}")
            else:
                cells.append(str(value))
        table.add_row(*cells)
    console.print(table)

"""The argument parser of ``objectspace`` (argparse): subcommands, options and their checks."""

from __future__ import annotations

import argparse
from typing import NoReturn

from objectspace.cli.commands import (
    _compact,
    _demo,
    _diff,
    _export,
    _gc,
    _inspect,
    _retain,
    _show,
    _stats,
)

__all__ = ["build_parser"]


_PROG = "objectspace"


class _Parser(argparse.ArgumentParser):
    """Reports a usage error as one line (and the subcommand's ``--help`` to read)."""

    def error(self, message: str) -> NoReturn:
        sub = self.prog.removeprefix(_PROG).strip()
        where = f"{sub}: " if sub else ""
        self.exit(2, f"{_PROG}: error: {where}{message} (see `{self.prog} --help`)\n")


def _nonnegative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {value}")
    return value


def _positive_int(text: str) -> int:
    value = _nonnegative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, not {value}")
    return value


def _duration(text: str) -> float:
    from objectspace.inspection import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_URL_HELP = (
    "storage URL: sqlite:///path, postgresql://..., or file:///dir?catalog=<URL> "
    "(segments); it must exist, nothing is created"
)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand."""
    common = _Parser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks on errors"
    )
    parser = _Parser(
        prog=_PROG,
        description="Fine-grained, checkpointed operator state: inspect and maintain storage.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(name: str, help: str, description: str | None = None) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=description or help, parents=[common])

    def json_flag(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--json", action="store_true", help="print JSON (shape: see objectspace.inspection)"
        )

    def limit_flag(p: argparse.ArgumentParser, help: str) -> None:
        p.add_argument("--limit", type=_nonnegative_int, default=20, help=help)

    def checkpoint_flag(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--checkpoint", type=_nonnegative_int, help="checkpoint id (default: the last)"
        )

    def job_operator(p: argparse.ArgumentParser) -> None:
        p.add_argument("url", metavar="URL", help=_URL_HELP)
        p.add_argument("--job", required=True, help="job name")
        p.add_argument("--operator", required=True, help="operator name")
        p.add_argument(
            "--serializer",
            choices=("msgpack", "json", "pickle"),
            help="the serializer the operator's state was written with (default msgpack; "
            "pickle runs code from the store: use only on trusted storage)",
        )

    demo = command("demo", "run the streaming demo on local Spark (or --core: without Spark)")
    demo.add_argument("--core", action="store_true", help="the object-space example, no Spark")
    demo.add_argument("--batches", type=int, default=24, help="micro-batches (default 24)")
    demo.add_argument(
        "--connect",
        action="store_true",
        help="through Spark Connect: SparkSession.builder.remote('local[2]') (needs "
        "grpcio, grpcio-status and googleapis-common-protos)",
    )
    demo.set_defaults(func=_demo)

    p = command(
        "inspect",
        "jobs, operators, checkpoints and state sizes",
        "List the jobs of a storage; per job its checkpoints (complete, or pending: written "
        "but not committed) and its operators with their metadata and state size by key "
        "group as of the last checkpoint.",
    )
    p.add_argument("url", metavar="URL", help=_URL_HELP)
    p.add_argument("--job", help="only this job")
    p.add_argument("--operator", help="only this operator (needs --job)")
    limit_flag(
        p,
        "tables show the newest N checkpoints and first N key groups (0: all; "
        "--json always lists all)",
    )
    json_flag(p)
    p.set_defaults(func=_inspect)

    p = command(
        "show",
        "the objects of a key or key group as of a checkpoint",
        "Restore one key group as of a checkpoint (default: the last) and print the objects "
        "of a key, or all of the key group, with their kind and contents. --key is text: "
        "with --key-type auto (default) it is an int when it is an integer, else a string; "
        "--key-type str keeps it a string (e.g. --key 42 --key-type str), int requires an "
        "int, json reads JSON where arrays are tuples (multi-column keys, e.g. "
        '\'[1, "a"]\') and {"$bytes": base64} is bytes.',
    )
    job_operator(p)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--key", help="a key: its objects (ids starting with the key's prefix)")
    which.add_argument("--key-group", type=_nonnegative_int, help="a key group: all its objects")
    p.add_argument(
        "--key-type",
        choices=("auto", "int", "str", "json"),
        default="auto",
        help="how to read --key",
    )
    checkpoint_flag(p)
    limit_flag(p, "items shown per collection (default 20)")
    json_flag(p)
    p.set_defaults(func=_show)

    p = command(
        "diff",
        "what changed between two checkpoints, object by object",
        "Compare an operator's state at two checkpoints: objects added, removed, replaced "
        "(another kind) or changed, with the changed slots (index, key or element) of "
        "collections. Key groups that no write changed in between are not read.",
    )
    job_operator(p)
    p.add_argument("--from", dest="from_", type=_nonnegative_int, required=True, metavar="N")
    p.add_argument("--to", type=_nonnegative_int, required=True, metavar="M")
    limit_flag(p, "slots shown per object (default 20)")
    json_flag(p)
    p.set_defaults(func=_diff)

    p = command(
        "export",
        "write an operator's state to Parquet, one row per entry",
        "Write one row per entry (key_group int32, object_id, kind, slot, value as JSON text) "
        "to a Parquet file that pandas, DuckDB and Spark read. The file appears whole or not "
        "at all; an existing file is replaced.",
    )
    job_operator(p)
    checkpoint_flag(p)
    p.add_argument("--to", required=True, metavar="FILE.parquet", help="the Parquet file to write")
    json_flag(p)
    p.set_defaults(func=_export)

    p = command(
        "gc",
        "delete segment files that nothing references any more",
        "One garbage-collection pass of a segment storage: stamp files that no write "
        "references, delete those stamped longer ago than the grace period. A referenced "
        "file is never deleted, nor a path outside the storage root (refused and reported). "
        "SQL storages have no files to collect.",
    )
    p.add_argument("url", metavar="URL", help=_URL_HELP)
    p.add_argument(
        "--grace",
        type=_duration,
        default=600.0,
        help="how long a file stays after it was found unreferenced: 600, 30s, 10m, 1h, 2d "
        "(default 10m)",
    )
    p.add_argument("--dry-run", action="store_true", help="report, change nothing")
    json_flag(p)
    p.set_defaults(func=_gc)

    p = command(
        "compact",
        "rewrite differential chains as full writes",
        "For every operator of the job, rewrite each key group whose restore chain holds "
        "differential writes as one full write as of the last checkpoint, so restores read "
        "less. Older writes stay until `retain`.",
    )
    p.add_argument("url", metavar="URL", help=_URL_HELP)
    p.add_argument("--job", required=True, help="job name")
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="do not read every chain before writing (by default a corrupt segment stops "
        "the command before it writes anything)",
    )
    json_flag(p)
    p.set_defaults(func=_compact)

    p = command(
        "retain",
        "drop old checkpoints and the writes only they need",
        "Keep the last K checkpoints; remove older ones, the writes no kept checkpoint "
        "needs, and pending writes that can never commit. On segment storage, run `gc` "
        "afterwards to delete the files.",
    )
    p.add_argument("url", metavar="URL", help=_URL_HELP)
    p.add_argument("--job", required=True, help="job name")
    p.add_argument("--keep-last", type=_positive_int, required=True, metavar="K")
    json_flag(p)
    p.set_defaults(func=_retain)

    p = command(
        "stats",
        "the statistics of a job's batches, as committed with its checkpoints",
        "The BatchStats a StatefulRunner commits with each checkpoint (the last `history` "
        "batches, default 100), oldest first: keys, rows in and out, bytes written, timers "
        "fired, late rows, restore seconds, cached instances, ... Readable wherever the "
        "storage is: the driver's runner.last_batch is not (e.g. under Spark Connect).",
    )
    p.add_argument("url", metavar="URL", help=_URL_HELP)
    p.add_argument("job", metavar="JOB", help="job name")
    p.add_argument("--operator", help="the runner's operator (needed when the job has several)")
    p.add_argument(
        "--last", type=_nonnegative_int, metavar="N", help="only the last N batches (default all)"
    )
    json_flag(p)
    p.set_defaults(func=_stats)

    return parser

"""The ``objectspace`` command: inspect, show, diff, export and maintain checkpoint storage.

Every subcommand has ``--help``. A command exits 0 on success, 1 when it fails and 2 on
bad arguments; its error is one line on stderr (``objectspace: error: ...``), with the
traceback only under ``--debug``. The work is done by :mod:`objectspace.inspection`
(``inspect``, ``show``, ``diff``, ``export``, ``gc``, ``compact``, ``retain``, whose
``--json`` shapes it documents) and :mod:`objectspace.plots` (``bench``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from objectspace.checkpoint import Storage

__all__ = ["build_parser", "main"]

_PROG = "objectspace"


class _Parser(argparse.ArgumentParser):
    """Reports a usage error as one line (and the subcommand's ``--help`` to read)."""

    def error(self, message: str) -> NoReturn:
        sub = self.prog.removeprefix(_PROG).strip()
        where = f"{sub}: " if sub else ""
        self.exit(2, f"{_PROG}: error: {where}{message} (see `{self.prog} --help`)\n")


# -- subcommands ------------------------------------------------------------------------------


def _demo(args: argparse.Namespace) -> int:
    if args.core:
        from objectspace.demo import run_demo

        run_demo()
        return 0
    from objectspace.spark_demo import run_spark_demo

    return run_spark_demo(batches=args.batches)


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def _emit(args: argparse.Namespace, data: Any, render: Callable[..., None], *extra: Any) -> None:
    from objectspace.inspection import dumps

    if args.json:
        sys.stdout.write(dumps(data) + "\n")
    else:
        render(data, _console(), *extra)


@contextmanager
def _storage(url: str) -> Iterator[Storage]:
    from objectspace.inspection import open_existing

    storage = open_existing(url)
    try:
        yield storage
    finally:
        storage.close()


def _inspect(args: argparse.Namespace) -> int:
    from objectspace.inspection import inspect_storage, render_inspect

    with _storage(args.url) as storage:
        data = inspect_storage(storage, args.job, args.operator)
    _emit(args, data, render_inspect, args.limit)
    return 0


def _show(args: argparse.Namespace) -> int:
    from objectspace import inspection as ins

    has_key = args.key is not None
    key = ins.parse_key(args.key, args.key_type) if has_key else None
    with _storage(args.url) as storage:
        op = ins.find_operator(
            storage, args.job, args.operator, ins.serializer_named(args.serializer)
        )
        data = ins.show_objects(
            op,
            key=key,
            key_group=args.key_group,
            checkpoint=args.checkpoint,
            limit=args.limit,
            has_key=has_key,
        )
    _emit(args, data, ins.render_show)
    return 0


def _diff(args: argparse.Namespace) -> int:
    from objectspace import inspection as ins

    with _storage(args.url) as storage:
        op = ins.find_operator(
            storage, args.job, args.operator, ins.serializer_named(args.serializer)
        )
        with ins.progress_bar("comparing key groups") as progress:
            data = ins.diff_checkpoints(
                op, args.from_, args.to, limit=args.limit, progress=progress
            )
    _emit(args, data, ins.render_diff)
    return 0


def _export(args: argparse.Namespace) -> int:
    from objectspace import inspection as ins

    with _storage(args.url) as storage:
        op = ins.find_operator(
            storage, args.job, args.operator, ins.serializer_named(args.serializer)
        )
        with ins.progress_bar("exporting key groups") as progress:
            data = ins.export_parquet(op, args.to, args.checkpoint, progress)
    _emit(args, data, ins.render_export)
    return 0


def _gc(args: argparse.Namespace) -> int:
    from objectspace import inspection as ins

    with _storage(args.url) as storage, ins.progress_bar("collecting garbage") as progress:
        progress(0, 0)
        data = ins.collect_garbage(storage, args.grace, dry_run=args.dry_run)
    _emit(args, data, ins.render_gc)
    return 0


def _compact(args: argparse.Namespace) -> int:
    from objectspace import inspection as ins

    with _storage(args.url) as storage, ins.progress_bar("compacting") as progress:
        data = ins.compact_job(storage, args.job, verify=not args.no_verify, progress=progress)
    _emit(args, data, ins.render_compact)
    return 0


def _retain(args: argparse.Namespace) -> int:
    from objectspace import inspection as ins

    with _storage(args.url) as storage, ins.progress_bar("applying retention") as progress:
        progress(0, 0)
        data = ins.retain_job(storage, args.job, args.keep_last)
    _emit(args, data, ins.render_retain)
    return 0


def _benchmarks_root() -> Path:
    """The source checkout holding ``benchmarks/``: the current folder or the package's."""
    for root in (Path.cwd(), Path(__file__).resolve().parents[2]):
        if (root / "benchmarks" / "__main__.py").is_file():
            return root
    raise FileNotFoundError(
        "cannot find benchmarks/ (run `objectspace bench` from a source checkout of objectspace)"
    )


def _bench(args: argparse.Namespace) -> int:
    from objectspace.plots import draw_benchmarks

    root = _benchmarks_root()
    if not args.plots_only:
        command = [
            sys.executable,
            "-m",
            "benchmarks",
            *(["--quick"] if args.quick else []),
            *args.names,
        ]
        done = subprocess.run(command, cwd=root, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"`{' '.join(command[1:])}` failed with exit code {done.returncode}")
    results = root / "benchmarks" / "results.json"
    drawn = draw_benchmarks(results, root / "docs")
    if not drawn:
        print(f"no {results.relative_to(root)} found: no plots drawn")
    for path in drawn:
        print(f"drew {path.relative_to(root)}")
    return 0


# -- the parser ---------------------------------------------------------------------------------


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
    p.add_argument(
        "--limit",
        type=_nonnegative_int,
        default=20,
        help="tables show the newest N checkpoints and first N key groups (0: all; "
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
    p.add_argument("--checkpoint", type=_nonnegative_int, help="checkpoint id (default: the last)")
    p.add_argument(
        "--limit", type=_nonnegative_int, default=20, help="items shown per collection (default 20)"
    )
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
    p.add_argument(
        "--limit", type=_nonnegative_int, default=20, help="slots shown per object (default 20)"
    )
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
    p.add_argument("--checkpoint", type=_nonnegative_int, help="checkpoint id (default: the last)")
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
        "bench",
        "run the benchmarks and draw docs/bench-*.png",
        "Run `python -m benchmarks` (which rewrites BENCHMARKS.md) from the source checkout, "
        "then draw docs/bench-*.png from benchmarks/results.json if the benchmarks wrote one.",
    )
    p.add_argument("--quick", action="store_true", help="small sizes, nothing recorded")
    p.add_argument("--plots-only", action="store_true", help="only draw the plots")
    p.add_argument("names", nargs="*", metavar="NAME", help="only these benchmarks")
    p.set_defaults(func=_bench)
    return parser


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if isinstance(exc, KeyError) and text.startswith("'"):
        text = f"not found: {text}"
    return text or type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = bool(getattr(args, "debug", False))
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if debug:
            raise
        print(f"{_PROG}: error: {_one_line(exc)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

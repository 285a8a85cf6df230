"""The subcommands of ``objectspace``: each takes the parsed arguments and returns the exit status."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from objectspace.checkpoint import Operator, Storage

# -- subcommands ------------------------------------------------------------------------------


def _demo(args: argparse.Namespace) -> int:
    if args.core:
        from objectspace.demo.core import run_demo

        run_demo()
        return 0
    from objectspace.demo.spark import run_spark_demo

    return run_spark_demo(batches=args.batches, connect=args.connect)


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


def _operator(storage: Storage, args: argparse.Namespace) -> Operator:
    """The operator that ``--job`` and ``--operator`` name, read with ``--serializer``."""
    from objectspace.inspection import find_operator, serializer_named

    return find_operator(storage, args.job, args.operator, serializer_named(args.serializer))


def _inspect(args: argparse.Namespace) -> int:
    from objectspace.cli.render import render_inspect
    from objectspace.inspection import inspect_storage

    with _storage(args.url) as storage:
        data = inspect_storage(storage, args.job, args.operator)
    _emit(args, data, render_inspect, args.limit)
    return 0


def _show(args: argparse.Namespace) -> int:
    from objectspace import inspection as ins
    from objectspace.cli import render

    has_key = args.key is not None
    key = ins.parse_key(args.key, args.key_type) if has_key else None
    with _storage(args.url) as storage:
        op = _operator(storage, args)
        data = ins.show_objects(
            op,
            key=key,
            key_group=args.key_group,
            checkpoint=args.checkpoint,
            limit=args.limit,
            has_key=has_key,
        )
    _emit(args, data, render.render_show)
    return 0


def _diff(args: argparse.Namespace) -> int:
    from objectspace import inspection as ins
    from objectspace.cli import render

    with _storage(args.url) as storage:
        op = _operator(storage, args)
        with render.progress_bar("comparing key groups") as progress:
            data = ins.diff_checkpoints(
                op, args.from_, args.to, limit=args.limit, progress=progress
            )
    _emit(args, data, render.render_diff)
    return 0


def _export(args: argparse.Namespace) -> int:
    from objectspace import inspection as ins
    from objectspace.cli import render

    with _storage(args.url) as storage:
        op = _operator(storage, args)
        with render.progress_bar("exporting key groups") as progress:
            data = ins.export_parquet(op, args.to, args.checkpoint, progress)
    _emit(args, data, render.render_export)
    return 0


def _gc(args: argparse.Namespace) -> int:
    from objectspace import inspection as ins
    from objectspace.cli import render

    with _storage(args.url) as storage, render.progress_bar("collecting garbage") as progress:
        progress(0, 0)
        data = ins.collect_garbage(storage, args.grace, dry_run=args.dry_run)
    _emit(args, data, render.render_gc)
    return 0


def _compact(args: argparse.Namespace) -> int:
    from objectspace import inspection as ins
    from objectspace.cli import render

    with _storage(args.url) as storage, render.progress_bar("compacting") as progress:
        data = ins.compact_job(storage, args.job, verify=not args.no_verify, progress=progress)
    _emit(args, data, render.render_compact)
    return 0


def _retain(args: argparse.Namespace) -> int:
    from objectspace import inspection as ins
    from objectspace.cli import render

    with _storage(args.url) as storage, render.progress_bar("applying retention") as progress:
        progress(0, 0)
        data = ins.retain_job(storage, args.job, args.keep_last)
    _emit(args, data, render.render_retain)
    return 0


def _stats(args: argparse.Namespace) -> int:
    from objectspace import inspection as ins
    from objectspace.cli import render

    with _storage(args.url) as storage:
        data = ins.batch_stats(storage, args.job, args.operator, args.last)
    _emit(args, data, render.render_stats)
    return 0


# -- the parser ---------------------------------------------------------------------------------

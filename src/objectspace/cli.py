"""The ``objectspace`` command."""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> int:
    if args.core:
        from objectspace.demo import run_demo

        run_demo()
        return 0
    from objectspace.spark_demo import run_spark_demo

    return run_spark_demo(batches=args.batches)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="objectspace", description="Fine-grained, checkpointed operator state."
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo", help="run the streaming demo on local Spark (or --core: without Spark)"
    )
    demo.add_argument("--core", action="store_true", help="the object-space example, no Spark")
    demo.add_argument("--batches", type=int, default=24, help="micro-batches (default 24)")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if args.debug:
            raise
        print(f"objectspace: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""Layer 8: the ``objectspace`` command: inspect, show, diff, export and maintain checkpoint storage.

Every subcommand has ``--help``. A command exits 0 on success, 1 when it fails and 2 on
bad arguments; its error is one line on stderr (``objectspace: error: ...``), with the
traceback only under ``--debug``. The work is done by :mod:`objectspace.inspection`
(``inspect``, ``show``, ``diff``, ``export``, ``gc``, ``compact``, ``retain``, whose
``--json`` shapes it documents) and :mod:`objectspace.demo` (``demo``). Modules: ``parser``
(argparse), ``commands`` (one function per subcommand), ``render`` (rich).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from objectspace.cli.parser import _PROG, build_parser

__all__ = ["build_parser", "main"]


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

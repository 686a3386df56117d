"""The ``pager`` command line.

Each subcommand lives in its own module of this package and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a callable
``func(args) -> int``. Errors pager raises are printed as one line and exit 2;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from pager.errors import PagerError

__all__ = ["main"]

# Order is the order ``pager --help`` lists them in.
SUBCOMMANDS = ("replay", "bench", "tune", "inspect", "reindex", "state", "proxy", "mcp")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pager",
        description="Schedule an LLM agent's context window like virtual memory.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"{__name__}.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except PagerError as exc:
        print(f"pager: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("pager: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

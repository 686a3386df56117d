"""``pager tune``: search scheduler options on replayed sessions.

Prints the Pareto frontier of cache-adjusted cost against need coverage and can
write the chosen configuration to a file ``pager.open(config=...)`` accepts.
See ``docs/tuning.md``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the ``tune`` subcommand."""
    p = subparsers.add_parser(
        "tune",
        help="search scheduler options on replayed sessions (cost vs coverage frontier)",
    )
    p.add_argument("paths", nargs="*", metavar="PATH")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Run ``pager tune``; return the exit status."""
    print("pager tune: not implemented yet", file=sys.stderr)
    return 1

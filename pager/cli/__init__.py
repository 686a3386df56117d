"""The ``pager`` command line.

Each subcommand lives in its own module (of this package, or of ``pager.lab.cli``
for the replaying commands; ``SUBCOMMANDS`` names them) and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a callable
``func(args) -> int``. Errors pager raises are printed as one line and exit 2;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from importlib.metadata import Distribution

from pager.errors import PagerError

__all__ = ["main"]

# Command -> the module that registers it, in the order ``pager --help`` lists them. The
# replaying commands live in the lab (``pager.lab.cli``), the tooling layer the library never
# imports: they are named here by string and imported only when the parser is built.
SUBCOMMANDS = {
    "replay": "pager.lab.cli.replay",
    "bench": "pager.lab.cli.bench",
    "tune": "pager.lab.cli.tune",
    "inspect": "pager.cli.inspect",
    "pool": "pager.cli.pool",
    "reindex": "pager.cli.reindex",
    "state": "pager.cli.state",
    "proxy": "pager.cli.proxy",
    "ui": "pager.cli.ui",
    "mcp": "pager.cli.mcp",
}


# pyproject.toml's [project] name: looked up first, since finding the distribution that provides
# ``pager`` by scanning every installed one (packages_distributions) costs ~0.5 s of CPU
DISTRIBUTION = "llm-context-pager"


def version() -> str:
    """Return the installed distribution's version (whatever it is named), else ``pager.__version__``."""
    from importlib import metadata

    import pager

    try:
        dist = metadata.distribution(DISTRIBUTION)
        if "pager" in _top_level(dist):
            return dist.version
    except Exception:  # not installed under that name (or broken metadata): scan for it
        pass
    try:
        for name in metadata.packages_distributions().get("pager", ()):
            return metadata.version(name)
    except Exception:  # pragma: no cover - broken metadata: the package's own number will do
        pass
    return pager.__version__


def _top_level(dist: Distribution) -> set[str]:
    # the top-level names a distribution provides, read as packages_distributions reads them
    declared = (dist.read_text("top_level.txt") or "").split()
    if declared:
        return set(declared)
    return {f.parts[0] for f in dist.files or () if len(f.parts) > 1}


class _Version(argparse.Action):
    # like action="version", but the number is looked up only when asked for
    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kw: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        print(f"pager {version()}")
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pager",
        description="Schedule an LLM agent's context window like virtual memory.",
    )
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in SUBCOMMANDS.values():
        importlib.import_module(module).register(sub)
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

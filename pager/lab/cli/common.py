"""What every replaying command shares (``replay``, ``bench``, ``tune``).

Argument types that report a bad value on one line, the options the commands
have in common (session paths and filters, pricing, the price of a fault,
jobs, progress), the checks run before anything is replayed, loading the
sessions, and the plain-text table with its glossary. ``pager.lab.cli.bench``,
``replay`` and ``tune`` build on it; it registers no command itself.
"""

from __future__ import annotations

import argparse
import os
import types
from pathlib import Path
from typing import Any, Callable, Mapping, NoReturn, Sequence

from pager.errors import ConfigError, InputError, PagerError
from pager.lab.replay.cost import FAULT_COST, PRICING, FaultCost, Pricing, pricing
from pager.lab.replay.runner import LONG_GAP, NEED_GAP
from pager.lab.replay.session import Session, discover, load_session
from pager.lab.replay.parallel import default_jobs
from pager.options import Options, load_config

__all__ = [
    "DATA_DIR", "GLOSSARY", "add_explain", "add_fault_options", "add_jobs", "add_long_gap", "add_paths",
    "add_progress", "add_session_options", "check_output", "check_outputs", "check_pager_options", "count",
    "default_paths", "failures_text", "fault_of", "fraction", "glossary", "jobs_of", "load", "loaded_note",
    "non_negative", "one_line_errors", "positive_int", "pricing_of", "process_note", "replay_inputs",
    "select", "table",
]

DATA_DIR = Path(__file__).resolve().parents[2] / "data"


# --------------------------------------------------------------------------
# Argument types: a bad value is a usage error, reported on one line


def _number(kind: Callable[[str], Any], what: str, ok: Callable[[Any], bool]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    parse.__name__ = what
    return parse


positive_int = _number(int, "a positive integer", lambda v: v > 0)
count = _number(int, "an integer >= 0", lambda v: v >= 0)
non_negative = _number(float, "a number >= 0", lambda v: v >= 0 and v != float("inf"))
fraction = _number(float, "a number between 0 and 1", lambda v: 0.0 <= v <= 1.0)


def _one_line_error(self: argparse.ArgumentParser, message: str) -> NoReturn:
    # one line, no usage block: the message names the argument; --help has the rest
    self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def one_line_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Make ``parser`` report a usage error on one line (and exit 2, as argparse does)."""
    parser.error = types.MethodType(_one_line_error, parser)  # type: ignore[method-assign]
    return parser


# --------------------------------------------------------------------------
# Options shared by replay, bench and tune


def add_paths(p: argparse.ArgumentParser) -> None:
    """Add the session PATH arguments shared by the replaying commands."""
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="session files or directories (searched for *.jsonl, raw/ skipped); "
                   "default: ../shared/traces if present, else the bundled synthetic sessions")


def add_session_options(p: argparse.ArgumentParser, min_assistant: int = 10) -> None:
    """Add the session filter and pricing options shared by bench and tune."""
    p.add_argument("--min-assistant", type=count, default=min_assistant, metavar="N",
                   help=f"skip sessions with fewer assistant messages (default {min_assistant})")
    p.add_argument("--pricing", choices=sorted(PRICING), default="anthropic",
                   help="cache pricing model (default anthropic: read 0.1x, write 1.25x)")
    p.add_argument("--cache-discount", type=fraction, default=None, metavar="F",
                   help="openai pricing: discount on cached tokens, 0..1 (default 0.5)")
    add_fault_options(p)


def add_fault_options(p: argparse.ArgumentParser) -> None:
    """Add the constants that price a fault (``--fault-*``, ``--output-price``)."""
    p.add_argument("--fault-tokens", type=non_negative, default=FAULT_COST.recall_tokens,
                   metavar="TOKENS", help="effective cost: tokens of the recall call and result "
                   f"a fault adds, at the write price (default {FAULT_COST.recall_tokens:g})")
    p.add_argument("--fault-output", type=non_negative, default=FAULT_COST.output_tokens,
                   metavar="TOKENS", help="effective cost: output tokens of the extra call "
                   f"(default {FAULT_COST.output_tokens:g})")
    p.add_argument("--output-price", type=non_negative, default=FAULT_COST.output_price,
                   metavar="X", help="effective cost: an output token's price in base input "
                   f"tokens (default {FAULT_COST.output_price:g})")
    p.add_argument("--reread-cap", type=non_negative, default=None, metavar="TOKENS",
                   help="re-read cost: write at most TOKENS of each page a fault re-reads "
                   "(default: the whole page)")


def add_long_gap(p: argparse.ArgumentParser) -> None:
    """Add ``--long-gap`` (what makes a need long-range) and ``--need-gap`` (what makes one a need)."""
    p.add_argument("--long-gap", type=positive_int, default=LONG_GAP, metavar="N",
                   help=f"messages back that make a need long-range (default {LONG_GAP})")
    p.add_argument("--need-gap", type=positive_int, default=NEED_GAP, metavar="N",
                   help="count a need only when it was last seen N or more messages back "
                   f"(default {NEED_GAP}: any earlier message; issue 24's measure used 6)")


def add_jobs(p: argparse.ArgumentParser) -> None:
    """Add ``--jobs N`` (worker processes; default: the machine's cores)."""
    p.add_argument("--jobs", "-j", type=positive_int, default=None, metavar="N",
                   help="replay sessions in N processes (default: the processors this "
                   f"machine gives, here {default_jobs()}); the figures do not depend on N")


def add_explain(p: argparse.ArgumentParser) -> None:
    """Add ``--explain`` (a glossary under the table)."""
    p.add_argument("--explain", action="store_true",
                   help="print what each column means under the table")


def add_progress(p: argparse.ArgumentParser) -> None:
    """Add ``--progress`` / ``--no-progress``."""
    prog = p.add_mutually_exclusive_group()
    prog.add_argument("--progress", dest="progress", action="store_true", default=None,
                      help="always draw the progress bar")
    prog.add_argument("--no-progress", dest="progress", action="store_false",
                      help="never draw the progress bar")


def jobs_of(args: argparse.Namespace) -> int:
    """Return ``--jobs``, or the machine's processor count when not given."""
    return args.jobs if getattr(args, "jobs", None) else default_jobs()


def fault_of(args: argparse.Namespace) -> FaultCost:
    """Return the fault price the ``--fault-*`` options describe."""
    return FaultCost(recall_tokens=args.fault_tokens, output_tokens=args.fault_output,
                     output_price=args.output_price, reread_cap=getattr(args, "reread_cap", None))


def pricing_of(args: argparse.Namespace) -> Pricing:
    """Return the pricing model of ``--pricing`` / ``--cache-discount`` (a ConfigError if they clash)."""
    try:
        return pricing(args.pricing, discount=args.cache_discount)
    except ConfigError as exc:
        raise ConfigError(f"--cache-discount: {exc}") from None


def check_output(path: str | None, flag: str) -> None:
    """Raise ``ConfigError`` unless ``path`` (``flag``'s value) can be written."""
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{flag} {path}: is a directory")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise ConfigError(f"{flag} {path}: no such directory {str(parent)!r}")
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise ConfigError(f"{flag} {path}: not writable")


def check_outputs(**paths: str | None) -> None:
    """Check each output file (keyed by its flag's name) and that no two flags name the same file."""
    seen: dict[Path, str] = {}
    for name, path in paths.items():
        flag = "--" + name.replace("_", "-")
        check_output(path, flag)
        if path is None:
            continue
        other = seen.setdefault(Path(path).resolve(), flag)
        if other != flag:
            raise ConfigError(f"{other} and {flag} name the same file")


def check_pager_options(options: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Return ``options`` if ``pager.open`` would take them, else raise ``ConfigError`` naming ``where``.

    ``config`` (a file) is read and laid under the other options, as
    ``pager.open`` does; the policy and its parameters are built.
    """
    from pager.core.heat import get_policy

    opts = dict(options)
    try:
        base = load_config(opts.get("config")) if "config" in opts else {}
        rest = {k: v for k, v in opts.items() if k not in ("config", "counter")}
        built = Options.build({**base, **rest})
        get_policy(built.policy, **dict(built.policy_params))
    except PagerError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return opts


def default_paths() -> list[Path]:
    """Return ``../shared/traces`` if it exists (cwd, then project), else the bundled sessions."""
    for base in (Path.cwd(), DATA_DIR.parent.parent):
        traces = base / ".." / "shared" / "traces"
        if traces.is_dir():
            return [traces.resolve()]
    return [DATA_DIR]


def load(paths: Sequence[str | Path], skipped: list[tuple[str, str]]) -> list[Session]:
    """Load the sessions under ``paths``; a named file that is not a session is an error.

    Files found in a directory that are not sessions are skipped and listed in
    ``skipped``; a missing path, or a file named on the command line that is
    not a valid session, raises ``InputError``.
    """
    named = {Path(p) for p in paths if Path(p).is_file()}
    sessions = []
    for f in discover(paths):
        try:
            sessions.append(load_session(f))
        except InputError as exc:
            if f in named:
                raise
            skipped.append((str(f), str(exc)))
    return sessions


def select(sessions: Sequence[Session], min_assistant: int) -> list[Session]:
    """Return the sessions with at least ``min_assistant`` assistant messages."""
    return [s for s in sessions if s.n_assistant >= min_assistant]


def loaded_note(sessions: Sequence[Session], loaded: int, paths: Sequence[Any], min_assistant: int,
                skipped: Sequence[Any]) -> str:
    """Return the line saying what was loaded, left out and skipped."""
    note = f"{len(sessions)} sessions from {', '.join(map(str, paths))}"
    if loaded > len(sessions):
        note += (f" ({loaded - len(sessions)} with fewer than {min_assistant} assistant "
                 f"messages left out)")
    if skipped:
        note += f"; {len(skipped)} files skipped (not sessions)"
    return note


def replay_inputs(
    args: argparse.Namespace,
) -> tuple[list[Session], list[tuple[str, str]], str, Pricing, FaultCost, int]:
    """Return what ``bench`` and ``tune`` replay: the selected sessions, the files skipped, the note
    saying so, the pricing, the fault cost and the number of processes."""
    paths = args.paths or default_paths()
    skipped: list[tuple[str, str]] = []
    loaded = load(paths, skipped)
    sessions = select(loaded, args.min_assistant)
    note = loaded_note(sessions, len(loaded), paths, args.min_assistant, skipped)
    return sessions, skipped, note, pricing_of(args), fault_of(args), jobs_of(args)



# What each column means: printed under the table with --explain, and in docs/bench.md.
GLOSSARY: dict[str, str] = {
    "cost/full (re-read)": "the honest price, over full resend's: cost plus, per fault, one more "
                           "call on the cached prompt and each page that last held a missed need "
                           "written again at the write price (whole, or --reread-cap tokens)",
    "cost/full": "cache-adjusted input cost (cached reads and writes priced) over full resend's",
    "eff/full": "the miss priced as today, over full resend's: cost plus, per fault, one more "
                "call on the cached prompt with a recall excerpt (--fault-tokens, "
                "--fault-output, --output-price)",
    "fault rate": "share of calls whose prompt missed at least one need of the next message",
    "coverage": "share of needs (paths, identifiers, numbers, and rare words of 6+ letters the "
                "next message used that appeared earlier) found in the prompt",
    "long cov": "coverage of the needs last seen 40+ messages back (--long-gap)",
    "names cov": "coverage of the needs that name a thing: paths, identifiers, numbers",
    "worst cov": "the coverage of the strategy's worst session (named under the table)",
    "< 0.90": "sessions whose coverage is under 0.90, of the sessions with needs",
    "re-read pages": "pages re-read by faults, summed over calls (one per page per call)",
    "prompt/full": "prompt tokens over full resend's, summed over calls",
    "mean prompt": "mean prompt tokens per call",
    "max prompt": "largest prompt of any call",
    "med ratio": "median over sessions of prompt tokens / completion tokens (target <= 50)",
    "ratio": "prompt tokens / completion tokens",
    "growth": "mean prompt of a session's second half over its first half (median over "
              "sessions); 1.0 = a late call costs what an early one does",
    "violations": "broken invariants: unanswered tool calls, orphan results, history order, "
                  "over budget, missing L1 (should be 0)",
    "p50 ms": "median time to build one prompt",
    "p99 ms": "99th percentile time to build one prompt",
    "calls": "assistant messages replayed (one prompt built for each)",
}


def glossary(head: Sequence[str], *, extra: Mapping[str, str] | None = None) -> str:
    """Return the meaning of each column of ``head`` that has one, one line each."""
    words = {**GLOSSARY, **(extra or {})}
    cols = [h for h in head if h in words]
    width = max((len(h) for h in cols), default=0)
    lines = ["columns:"]
    lines += [f"  {h.ljust(width)}  {words[h]}" for h in cols]
    lines.append("  (definitions: docs/metrics.md)")
    return "\n".join(lines)




def table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Return a plain-text table: first column left-aligned, the others right-aligned."""
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]

    def line(r: Sequence[str]) -> str:
        cells = [str(c).ljust(widths[0]) if i == 0 else str(c).rjust(widths[i])
                 for i, c in enumerate(r)]
        return "  ".join(cells).rstrip()

    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, rows)])


def process_note() -> str:
    """Return how many processes the last replay used and the most memory one of them held."""
    from pager.lab.replay.parallel import LAST_RUN

    n, peak = LAST_RUN["processes"], LAST_RUN["peak_mib"]
    where = "this process" if n <= 1 else f"{n} worker processes"
    return f"replayed in {where}" + (f", peak memory {peak:.0f} MiB per process" if peak else "")


def failures_text(failures: Sequence[tuple[str, str, str]]) -> str:
    """Return one line per strategy that failed on a session."""
    return "\n".join([f"failed: {len(failures)} run(s)"]
                     + [f"  {name} on {sid}: {err}" for sid, name, err in failures])

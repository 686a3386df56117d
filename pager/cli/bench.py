"""``pager bench``: replay sessions through every strategy and compare them.

With no PATH it uses ``../shared/traces`` when that exists (relative to the
working directory, then to the project), else the synthetic sessions bundled
in ``pager/data``. See ``docs/bench.md``.

Every argument is checked before anything is replayed (``check_args``): a bad
value, an output path that cannot be written, a pager variant whose options
``pager.open`` would refuse, all exit 2 with one line. The helpers here
(argument types, shared options, the table, the glossary) serve ``replay``
and ``tune`` too.
"""

from __future__ import annotations

import argparse
import os
import sys
import types
from pathlib import Path
from typing import Any, Callable, Mapping, NoReturn, Sequence, TextIO

import orjson

from pager.errors import ConfigError, InputError, PagerError
from pager.options import Options, load_config, read_json_file
from pager.replay.cost import FAULT_COST, PRICING, FaultCost, Pricing, pricing
from pager.replay.facts import Facts
from pager.replay.metrics import SessionMetrics, StrategySummary
from pager.replay.parallel import default_jobs
from pager.replay.runner import LONG_GAP, NEED_GAP, BenchResult, run
from pager.replay.session import Session, discover, load_session
from pager.replay.strategies import (
    ClearToolResults,
    FullResend,
    ObservationMasking,
    PagerStrategy,
    SlidingWindow,
    pager_available,
)

__all__ = ["default_paths", "register", "run_bench"]

DATA_DIR = Path(__file__).resolve().parent.parent / "data"


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


def register(subparsers: Any) -> None:
    """Add the ``bench`` subcommand."""
    p = one_line_errors(subparsers.add_parser(
        "bench",
        help="replay sessions through pager and the baselines, side by side",
        description=(
            "Replay recorded sessions open-loop: for every assistant message each strategy "
            "builds a prompt from the history before it. Prints a table; writes JSON and a "
            "self-contained HTML report on request."
        ),
    ))
    add_paths(p)
    p.add_argument("--json", metavar="FILE", help="write every figure and series as JSON")
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML report")
    p.add_argument("--per-session", action="store_true", help="also print a table per session")
    add_session_options(p)
    p.add_argument("--window", type=positive_int, default=32_000, metavar="TOKENS",
                   help="sliding window budget (default 32000)")
    p.add_argument("--mask-keep", type=count, default=10, metavar="M",
                   help="observation masking: tool outputs kept (default 10)")
    p.add_argument("--clear-trigger", type=count, default=100_000, metavar="TOKENS",
                   help="tool-result clearing: trigger (default 100000)")
    p.add_argument("--clear-keep", type=count, default=3, metavar="K",
                   help="tool-result clearing: results kept (default 3)")
    p.add_argument("--context-window", type=positive_int, default=200_000, metavar="TOKENS",
                   help="context_window passed to pager (default 200000)")
    p.add_argument("--pager-config", action="append", default=[], metavar="FILE.json",
                   help="a pager variant from a JSON file: an object of pager.open options "
                   "(optional 'name'), or a list of them; repeatable")
    p.add_argument("--pager", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                   help="a pager variant with these options (values parsed as JSON when "
                   "they are; 'name=' names it); repeatable")
    p.add_argument("--no-pager", action="store_true", help="leave out pager with its defaults")
    p.add_argument("--native", action="store_true",
                   help="replay original Claude Code logs in Anthropic format with pager's cache breakpoints, "
                   "beside the same sessions as chat (see pager.replay.native)")
    add_long_gap(p)
    add_jobs(p)
    add_explain(p)
    add_progress(p)
    p.set_defaults(func=main)


def _value(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def parse_variant(spec: str) -> dict[str, Any]:
    """Parse ``key=value[,key=value]`` into pager options; raise ``ConfigError`` if malformed."""
    opts: dict[str, Any] = {}
    for part in spec.split(","):
        if not part.strip():
            continue
        key, sep, val = part.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--pager expects KEY=VALUE, got {part!r}")
        opts[key.strip()] = _value(val.strip())
    if not opts:
        raise ConfigError("--pager needs at least one KEY=VALUE")
    return opts


def load_variants(path: str) -> list[dict[str, Any]]:
    """Read pager variants from a JSON file (an object or a list of objects)."""
    data = read_json_file(path)
    items = data if isinstance(data, list) else [data]
    if not items:
        raise ConfigError(f"{path}: no variant in the file")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ConfigError(f"{path}: variant {i} must be a JSON object")
        item = dict(item)
        if isinstance(item.get("options"), dict):
            # a `pager tune --write` file: the options sit beside its figures
            item = {**item["options"], **({"name": item["name"]} if "name" in item else {})}
        item.setdefault("name", f"pager:{Path(path).stem}" + (f"-{i + 1}" if len(items) > 1 else ""))
        out.append(item)
    return out


def variants(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Return the pager variants ``args`` ask for, each checked as ``pager.open`` would.

    Raise ``ConfigError`` for a malformed spec or file, options ``pager.open``
    refuses, or two variants with one name.
    """
    out: list[tuple[str, dict[str, Any]]] = []
    if not args.no_pager:
        out.append(("the default pager", {"name": "pager"}))
    for path in args.pager_config:
        try:
            found = load_variants(path)
        except ConfigError as exc:
            raise ConfigError(f"--pager-config: {exc}") from None
        out.extend((f"--pager-config {path}", v) for v in found)
    for spec in args.pager:
        opts = parse_variant(spec)
        opts.setdefault("name", "pager[" + ",".join(f"{k}={v}" for k, v in opts.items()) + "]")
        out.append((f"--pager {spec}", opts))
    seen: set[str] = set()
    checked = []
    for where, v in out:
        opts = dict(v)
        name = str(opts.pop("name"))
        if name in seen or name in baseline_names(args):
            raise ConfigError(f"{where}: the name {name!r} is taken; give it another with name=")
        seen.add(name)
        opts.setdefault("context_window", args.context_window)
        check_pager_options(opts, where)
        checked.append({"name": name, **opts})
    return checked


def baseline_names(args: argparse.Namespace) -> set[str]:
    """Return the names the baselines take with these settings."""
    return {"full", f"window-{args.window // 1000}k", f"mask-{args.mask_keep}",
            f"clear-{args.clear_trigger // 1000}k"}


def build_strategies(args: argparse.Namespace, facts: Facts | None, warn: TextIO) -> list[Any]:
    """Return the strategies ``args`` ask for (pager ones only if pager can run)."""
    strategies: list[Any] = [
        FullResend(facts=facts),
        SlidingWindow(args.window, facts=facts),
        ObservationMasking(args.mask_keep, facts=facts),
        ClearToolResults(args.clear_trigger, args.clear_keep, facts=facts),
    ]
    found = variants(args)
    if found and not pager_available():
        print(f"pager bench: warning: pager.open is not available; skipping "
              f"{', '.join(v['name'] for v in found)}", file=warn)
        found = []
    for v in found:
        opts = dict(v)
        name = str(opts.pop("name"))
        strategies.append(PagerStrategy(name, **opts))
    return strategies


def check_args(args: argparse.Namespace) -> None:
    """Check every argument of ``pager bench`` before anything is replayed; raise ``ConfigError``."""
    pricing_of(args)
    fault_of(args)
    check_outputs(json=args.json, html=args.html)
    variants(args)
    for path in args.paths:
        if not Path(path).exists():
            raise ConfigError(f"{path}: no such file or directory")


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _kt(tokens: float | None) -> str:
    return "-" if tokens is None else f"{tokens / 1000:.1f}k"


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


SUMMARY_HEAD = ("strategy", "cost/full (re-read)", "eff/full", "cost/full", "fault rate",
                "coverage", "names cov", "worst cov", "< 0.90", "long cov", "prompt/full",
                "mean prompt", "max prompt", "med ratio", "growth", "violations", "p50 ms",
                "p99 ms")


def summary_rows(summary: Sequence[StrategySummary]) -> list[tuple[str, ...]]:
    """Return the aggregate table's rows, formatted."""
    rows = []
    for s in summary:
        name = s.strategy + (f" ({s.errors} failed)" if s.errors else "")
        rows.append((
            name, _fmt(s.reread_vs_full, ".3f"), _fmt(s.effective_vs_full, ".3f"),
            _fmt(s.cost_vs_full, ".3f"), _fmt(s.fault_rate, ".3f"), _fmt(s.coverage, ".3f"),
            _fmt(s.names_coverage, ".3f"), _fmt(s.worst_coverage, ".3f"),
            f"{s.sessions_below} of {s.sessions_measured}",
            _fmt(s.long_coverage, ".3f"), _fmt(s.mean_vs_full, ".2f"), _kt(s.mean_prompt),
            _kt(s.max_prompt), _fmt(s.median_ratio, ".0f"), _fmt(s.growth, ".2f"),
            str(s.violations), _fmt(s.latency_p50_ms, ".2f"), _fmt(s.latency_p99_ms, ".2f"),
        ))
    return rows


SESSION_HEAD = ("strategy", "calls", "cost/full (re-read)", "eff/full", "cost/full",
                "fault rate", "coverage", "names cov", "long cov", "re-read pages",
                "prompt/full", "mean prompt", "max prompt", "ratio", "growth", "violations")


def session_rows(metrics: Sequence[SessionMetrics]) -> list[tuple[str, ...]]:
    """Return one session's table rows, formatted."""
    rows = []
    for m in metrics:
        if m.error:
            rows.append((m.strategy, "failed (below)", *[""] * (len(SESSION_HEAD) - 2)))
            continue
        rows.append((
            m.strategy, str(m.calls), _fmt(m.reread_vs_full, ".3f"),
            _fmt(m.effective_vs_full, ".3f"), _fmt(m.cost_vs_full, ".3f"),
            _fmt(m.fault_rate, ".3f"), _fmt(m.coverage, ".3f"), _fmt(m.names_coverage, ".3f"),
            _fmt(m.long_coverage, ".3f"), str(m.reread_pages), _fmt(m.mean_vs_full, ".2f"),
            _kt(m.mean_prompt), _kt(m.max_prompt), _fmt(m.ratio, ".0f"), _fmt(m.growth, ".2f"),
            str(m.violations),
        ))
    return rows


def worst_text(summary: Sequence[StrategySummary]) -> str:
    """Return one line per strategy naming its worst session, and what kinds of miss dominate."""
    lines = ["worst session per strategy:"]
    width = max((len(s.strategy) for s in summary), default=0)
    for s in summary:
        if s.worst_session is None:
            continue
        lines.append(f"  {s.strategy.ljust(width)}  {_fmt(s.worst_coverage, '.3f')}  {s.worst_session}")
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
    from pager.replay.parallel import LAST_RUN

    n, peak = LAST_RUN["processes"], LAST_RUN["peak_mib"]
    where = "this process" if n <= 1 else f"{n} worker processes"
    return f"replayed in {where}" + (f", peak memory {peak:.0f} MiB per process" if peak else "")


def failures_text(failures: Sequence[tuple[str, str, str]]) -> str:
    """Return one line per strategy that failed on a session."""
    return "\n".join([f"failed: {len(failures)} run(s)"]
                     + [f"  {name} on {sid}: {err}" for sid, name, err in failures])


def run_bench(args: argparse.Namespace, out: TextIO, err: TextIO) -> BenchResult | None:
    """Run the benchmark ``args`` describe; print tables on ``out``; return the result.

    Every argument is checked first (``ConfigError``, nothing replayed).
    """
    check_args(args)
    sessions, skipped, note, price, fault, jobs = replay_inputs(args)
    print(f"pager bench: {note}", file=err)
    if not sessions:
        print("pager bench: nothing to replay", file=err)
        return None
    facts = Facts()
    strategies = build_strategies(args, facts, err)
    result = run(sessions, strategies, pricing=price, facts=facts, long_gap=args.long_gap,
                 progress=args.progress, stream=err, skipped=skipped, jobs=jobs, fault=fault,
                 need_gap=args.need_gap)

    if args.per_session:
        for r in result.runs:
            ms = result.metrics_for(r.id)
            print(f"\n{r.id}  ({r.source}, {r.assistant} assistant messages)", file=out)
            print(table(SESSION_HEAD, session_rows([ms[n] for n in result.strategies])), file=out)
        print(file=out)
    calls = sum(s.calls for s in result.summary[:1])
    print(f"{len(result.runs)} sessions, {calls} calls, pricing {price.name} "
          f"(read {price.read:g}x, write {price.write:g}x), {result.seconds:.1f} s "
          f"on {min(jobs, len(sessions))} process(es)", file=out)
    print(table(SUMMARY_HEAD, summary_rows(result.summary)), file=out)
    print(worst_text(result.summary), file=out)
    if result.failures:
        print(failures_text(result.failures), file=out)
    if args.explain:
        print(glossary(SUMMARY_HEAD), file=out)
    else:
        print("(--explain: what each column means)", file=out)

    print(f"pager bench: {process_note()}", file=err)
    if args.json:
        Path(args.json).write_bytes(
            orjson.dumps(result.to_json(), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
        )
        print(f"pager bench: wrote {args.json}", file=err)
    if args.html:
        from pager.replay.html import render

        Path(args.html).write_text(render(result), encoding="utf-8")
        print(f"pager bench: wrote {args.html}", file=err)
    return result


def main(args: argparse.Namespace) -> int:
    """Run ``pager bench``; return the exit status (1: nothing replayed, or a run failed)."""
    if getattr(args, "native", False):
        from pager.replay.native import bench_main

        return bench_main(args, sys.stdout, sys.stderr, args.paths or default_paths())
    result = run_bench(args, sys.stdout, sys.stderr)
    if result is None:
        return 1
    if result.failures:
        print(f"pager bench: {len(result.failures)} run(s) failed (listed under the table)",
              file=sys.stderr)
        return 1
    return 0

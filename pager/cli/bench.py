"""``pager bench``: replay sessions through every strategy and compare them.

With no PATH it uses ``../shared/traces`` when that exists (relative to the
working directory, then to the project), else the synthetic sessions bundled
in ``pager/data``. See ``docs/bench.md``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence, TextIO

import orjson

from pager.errors import ConfigError
from pager.options import read_json_file
from pager.replay.cost import PRICING, pricing
from pager.replay.facts import Facts
from pager.replay.metrics import SessionMetrics, StrategySummary
from pager.replay.runner import LONG_GAP, BenchResult, run
from pager.replay.session import load_sessions
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


def add_paths(p: argparse.ArgumentParser) -> None:
    """Add the session PATH arguments shared by the replaying commands."""
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="session files or directories (searched for *.jsonl, raw/ skipped); "
                   "default: ../shared/traces if present, else the bundled synthetic sessions")


def add_session_options(p: argparse.ArgumentParser) -> None:
    """Add the session filter and pricing options shared by bench and tune."""
    p.add_argument("--min-assistant", type=int, default=10, metavar="N",
                   help="skip sessions with fewer assistant messages (default 10)")
    p.add_argument("--pricing", choices=sorted(PRICING), default="anthropic",
                   help="cache pricing model (default anthropic: read 0.1x, write 1.25x)")
    p.add_argument("--cache-discount", type=float, default=None, metavar="F",
                   help="openai pricing: discount on cached tokens, 0..1 (default 0.5)")


def add_long_gap(p: argparse.ArgumentParser) -> None:
    """Add ``--long-gap`` (what makes a need long-range)."""
    p.add_argument("--long-gap", type=int, default=LONG_GAP, metavar="N",
                   help=f"messages back that make a need long-range (default {LONG_GAP})")


def add_progress(p: argparse.ArgumentParser) -> None:
    """Add ``--progress`` / ``--no-progress``."""
    prog = p.add_mutually_exclusive_group()
    prog.add_argument("--progress", dest="progress", action="store_true", default=None,
                      help="always draw the progress bar")
    prog.add_argument("--no-progress", dest="progress", action="store_false",
                      help="never draw the progress bar")


def register(subparsers: Any) -> None:
    """Add the ``bench`` subcommand."""
    p = subparsers.add_parser(
        "bench",
        help="replay sessions through pager and the baselines, side by side",
        description=(
            "Replay recorded sessions open-loop: for every assistant message each strategy "
            "builds a prompt from the history before it. Prints a table; writes JSON and a "
            "self-contained HTML report on request."
        ),
    )
    add_paths(p)
    p.add_argument("--json", metavar="FILE", help="write every figure and series as JSON")
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML report")
    p.add_argument("--per-session", action="store_true", help="also print a table per session")
    add_session_options(p)
    p.add_argument("--window", type=int, default=32_000, metavar="TOKENS",
                   help="sliding window budget (default 32000)")
    p.add_argument("--mask-keep", type=int, default=10, metavar="M",
                   help="observation masking: tool outputs kept (default 10)")
    p.add_argument("--clear-trigger", type=int, default=100_000, metavar="TOKENS",
                   help="tool-result clearing: trigger (default 100000)")
    p.add_argument("--clear-keep", type=int, default=3, metavar="K",
                   help="tool-result clearing: results kept (default 3)")
    p.add_argument("--context-window", type=int, default=200_000, metavar="TOKENS",
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
    add_progress(p)
    p.set_defaults(func=main)


def default_paths() -> list[Path]:
    """Return ``../shared/traces`` if it exists (cwd, then project), else the bundled sessions."""
    for base in (Path.cwd(), DATA_DIR.parent.parent):
        traces = base / ".." / "shared" / "traces"
        if traces.is_dir():
            return [traces.resolve()]
    return [DATA_DIR]


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


def build_strategies(args: argparse.Namespace, facts: Facts, warn: TextIO) -> list[Any]:
    """Return the strategies ``args`` ask for (pager ones only if pager can run)."""
    strategies: list[Any] = [
        FullResend(facts=facts),
        SlidingWindow(args.window, facts=facts),
        ObservationMasking(args.mask_keep, facts=facts),
        ClearToolResults(args.clear_trigger, args.clear_keep, facts=facts),
    ]
    variants: list[dict[str, Any]] = []
    if not args.no_pager:
        variants.append({"name": "pager"})
    for path in args.pager_config:
        variants.extend(load_variants(path))
    for spec in args.pager:
        opts = parse_variant(spec)
        opts.setdefault("name", "pager[" + ",".join(f"{k}={v}" for k, v in opts.items()) + "]")
        variants.append(opts)
    if variants and not pager_available():
        print(f"pager bench: warning: pager.open is not available; skipping "
              f"{', '.join(v['name'] for v in variants)}", file=warn)
        variants = []
    for v in variants:
        opts = dict(v)
        name = str(opts.pop("name"))
        opts.setdefault("context_window", args.context_window)
        strategies.append(PagerStrategy(name, **opts))
    return strategies


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _kt(tokens: float | None) -> str:
    return "-" if tokens is None else f"{tokens / 1000:.1f}k"


SUMMARY_HEAD = ("strategy", "cost/full", "coverage", "long cov", "prompt/full", "mean prompt",
                "max prompt", "med ratio", "growth", "violations", "p50 ms", "p99 ms")


def summary_rows(summary: Sequence[StrategySummary]) -> list[tuple[str, ...]]:
    """Return the aggregate table's rows, formatted."""
    rows = []
    for s in summary:
        name = s.strategy + (f" ({s.errors} failed)" if s.errors else "")
        rows.append((
            name, _fmt(s.cost_vs_full, ".2f"), _fmt(s.coverage, ".3f"),
            _fmt(s.long_coverage, ".3f"), _fmt(s.mean_vs_full, ".2f"), _kt(s.mean_prompt),
            _kt(s.max_prompt), _fmt(s.median_ratio, ".0f"), _fmt(s.growth, ".2f"),
            str(s.violations), _fmt(s.latency_p50_ms, ".2f"), _fmt(s.latency_p99_ms, ".2f"),
        ))
    return rows


SESSION_HEAD = ("strategy", "calls", "cost/full", "coverage", "long cov", "prompt/full",
                "mean prompt", "max prompt", "ratio", "growth", "violations")


def session_rows(metrics: Sequence[SessionMetrics]) -> list[tuple[str, ...]]:
    """Return one session's table rows, formatted."""
    rows = []
    for m in metrics:
        if m.error:
            rows.append((m.strategy, "failed: " + m.error, *[""] * (len(SESSION_HEAD) - 2)))
            continue
        rows.append((
            m.strategy, str(m.calls), _fmt(m.cost_vs_full, ".2f"), _fmt(m.coverage, ".3f"),
            _fmt(m.long_coverage, ".3f"), _fmt(m.mean_vs_full, ".2f"), _kt(m.mean_prompt),
            _kt(m.max_prompt), _fmt(m.ratio, ".0f"), _fmt(m.growth, ".2f"), str(m.violations),
        ))
    return rows


def table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Return a plain-text table: first column left-aligned, the others right-aligned."""
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]

    def line(r: Sequence[str]) -> str:
        cells = [str(c).ljust(widths[0]) if i == 0 else str(c).rjust(widths[i])
                 for i, c in enumerate(r)]
        return "  ".join(cells).rstrip()

    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, rows)])


def run_bench(args: argparse.Namespace, out: TextIO, err: TextIO) -> BenchResult | None:
    """Run the benchmark ``args`` describe; print tables on ``out``; return the result."""
    paths = args.paths or default_paths()
    if args.min_assistant < 0:
        raise ConfigError("--min-assistant must be >= 0")
    price = pricing(args.pricing, discount=args.cache_discount)
    skipped: list[tuple[str, str]] = []

    def skip(path: Path, exc: Exception) -> None:
        skipped.append((str(path), str(exc)))

    loaded = load_sessions(paths, on_skip=skip)
    sessions = [s for s in loaded if s.n_assistant >= args.min_assistant]
    short = len(loaded) - len(sessions)
    note = f"{len(sessions)} sessions from {', '.join(map(str, paths))}"
    if short:
        note += f" ({short} with fewer than {args.min_assistant} assistant messages left out)"
    if skipped:
        note += f"; {len(skipped)} files skipped (not sessions)"
    print(f"pager bench: {note}", file=err)
    if not sessions:
        print("pager bench: nothing to replay", file=err)
        return None
    facts = Facts()
    strategies = build_strategies(args, facts, err)
    result = run(sessions, strategies, pricing=price, facts=facts, long_gap=args.long_gap,
                 progress=args.progress, stream=err, skipped=skipped)

    if args.per_session:
        for r in result.runs:
            ms = result.metrics_for(r.id)
            print(f"\n{r.id}  ({r.source}, {r.assistant} assistant messages)", file=out)
            print(table(SESSION_HEAD, session_rows([ms[n] for n in result.strategies])), file=out)
        print(file=out)
    calls = sum(s.calls for s in result.summary[:1])
    print(f"{len(result.runs)} sessions, {calls} calls, pricing {price.name} "
          f"(read {price.read:g}x, write {price.write:g}x), {result.seconds:.1f} s", file=out)
    print(table(SUMMARY_HEAD, summary_rows(result.summary)), file=out)

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
    """Run ``pager bench``; return the exit status."""
    if getattr(args, "native", False):
        from pager.replay.native import bench_main

        return bench_main(args, sys.stdout, sys.stderr, args.paths or default_paths())
    result = run_bench(args, sys.stdout, sys.stderr)
    return 0 if result is not None else 1

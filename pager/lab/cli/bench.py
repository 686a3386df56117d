"""``pager bench``: replay sessions through every strategy and compare them.

With no PATH it uses ``../shared/traces`` when that exists (relative to the
working directory, then to the project), else the synthetic sessions bundled
in ``pager/data``. See ``docs/bench.md``.

Every argument is checked before anything is replayed (``check_args``): a bad
value, an output path that cannot be written, a pager variant whose options
``pager.open`` would refuse, all exit 2 with one line. What ``replay`` and
``tune`` share with it (argument types, shared options, the table, the
glossary) is ``pager.lab.cli.common``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence, TextIO

import orjson

from pager.errors import ConfigError
from pager.lab.cli.common import (
    add_explain,
    add_jobs,
    add_long_gap,
    add_paths,
    add_progress,
    add_session_options,
    check_outputs,
    check_pager_options,
    count,
    default_paths,
    failures_text,
    fault_of,
    glossary,
    one_line_errors,
    positive_int,
    pricing_of,
    process_note,
    replay_inputs,
    table,
)
from pager.lab.replay.facts import Facts
from pager.lab.replay.metrics import SessionMetrics, StrategySummary
from pager.lab.replay.runner import BenchResult, run
from pager.lab.replay.strategies import (
    ClearToolResults,
    FullResend,
    ObservationMasking,
    PagerStrategy,
    SlidingWindow,
)
from pager.options import read_json_file

__all__ = ["register", "run_bench"]


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
                   "beside the same sessions as chat (see pager.lab.replay.native)")
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


def build_strategies(args: argparse.Namespace, facts: Facts | None) -> list[Any]:
    """Return the strategies ``args`` ask for: the four baselines, then the pager variants."""
    strategies: list[Any] = [
        FullResend(facts=facts),
        SlidingWindow(args.window, facts=facts),
        ObservationMasking(args.mask_keep, facts=facts),
        ClearToolResults(args.clear_trigger, args.clear_keep, facts=facts),
    ]
    for v in variants(args):
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
    strategies = build_strategies(args, facts)
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
        from pager.lab.replay.html import render

        Path(args.html).write_text(render(result), encoding="utf-8")
        print(f"pager bench: wrote {args.html}", file=err)
    return result


def main(args: argparse.Namespace) -> int:
    """Run ``pager bench``; return the exit status (1: nothing replayed, or a run failed)."""
    if getattr(args, "native", False):
        from pager.lab.replay.native import bench_main

        return bench_main(args, sys.stdout, sys.stderr, args.paths or default_paths())
    result = run_bench(args, sys.stdout, sys.stderr)
    if result is None:
        return 1
    if result.failures:
        print(f"pager bench: {len(result.failures)} run(s) failed (listed under the table)",
              file=sys.stderr)
        return 1
    return 0

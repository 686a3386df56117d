"""``pager replay TRACE.jsonl...``: pager against full resend, per session.

The quick look: for each session, mean prompt tokens, the prompt:completion
ratio, the cache-adjusted input cost and the effective cost (cost plus the
price of each fault) of full resend and of pager. The full benchmark with
every baseline, coverage and an HTML report is ``pager bench``. Every argument
(``--config`` included) is checked before anything is replayed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pager.errors import ConfigError

__all__ = ["register"]


def register(sub: Any) -> None:
    from pager.lab.cli.common import (
        add_explain,
        add_fault_options,
        add_jobs,
        add_progress,
        count,
        one_line_errors,
        positive_int,
    )

    p = one_line_errors(sub.add_parser(
        "replay", help="replay sessions: pager against full resend",
        description="Replay recorded sessions open-loop (pager against full resend) and print, per session, "
                    "mean prompt tokens, prompt:completion ratio, cache-adjusted input cost and effective cost.",
    ))
    p.add_argument("paths", nargs="*", metavar="TRACE", help="session files or folders (default: bundled example)")
    p.add_argument("--context-window", type=positive_int, default=200_000, metavar="TOKENS")
    p.add_argument("--config", metavar="FILE.json", help="pager options file (as pager tune --write makes)")
    p.add_argument("--pricing", choices=("anthropic", "openai", "none"), default="anthropic")
    p.add_argument("--min-assistant", type=count, default=1, metavar="N",
                   help="skip sessions with fewer assistant messages (default 1)")
    add_fault_options(p)
    add_jobs(p)
    add_explain(p)
    add_progress(p)
    p.set_defaults(func=run)


def example_paths() -> list[Path]:
    """Return the bundled example sessions shipped inside the package."""
    data = Path(__file__).resolve().parents[2] / "data"
    return sorted(data.glob("*.jsonl"))


HEAD = ("session", "calls", "full mean", "pager mean", "full ratio", "pager ratio",
        "full cost", "pager cost", "cost/full", "eff/full", "fault rate", "violations")

GLOSSARY = {
    "session": "the session's id (first 48 characters)",
    "full mean": "mean prompt tokens per call, full resend",
    "pager mean": "mean prompt tokens per call, pager",
    "full ratio": "prompt tokens / completion tokens, full resend",
    "pager ratio": "prompt tokens / completion tokens, pager",
    "full cost": "cache-adjusted input cost of full resend, in base-price tokens",
    "pager cost": "cache-adjusted input cost of pager, in base-price tokens",
    "fault rate": "share of pager's calls whose prompt missed a need of the next message",
}


def run(args: argparse.Namespace) -> int:
    from pager.lab.cli.common import (
        check_pager_options,
        failures_text,
        fault_of,
        glossary,
        jobs_of,
        load,
        table,
    )
    from pager.options import load_config
    from pager.lab.replay.cost import pricing
    from pager.lab.replay.facts import Facts
    from pager.lab.replay.runner import run as run_replay
    from pager.lab.replay.strategies import FullResend, PagerStrategy

    # every argument first: nothing is replayed with a bad one
    fault = fault_of(args)
    price = pricing(args.pricing)
    try:
        options = load_config(args.config) if args.config else {}
    except ConfigError as exc:
        raise ConfigError(f"--config: {exc}") from None
    options["context_window"] = args.context_window
    check_pager_options(options, f"--config {args.config}" if args.config else "pager")
    for path in args.paths:
        if not Path(path).exists():
            raise ConfigError(f"{path}: no such file or directory")

    paths = [Path(p) for p in args.paths] or example_paths()
    skipped: list[tuple[str, str]] = []
    sessions = load(paths, skipped)
    sessions = [s for s in sessions if s.n_assistant >= args.min_assistant]
    for path, why in skipped:
        print(f"pager replay: skipped {path}: {why}", file=sys.stderr)
    if not sessions:
        raise ConfigError(f"no sessions to replay in {', '.join(map(str, paths))}")
    facts = Facts()
    strategies = [FullResend(facts=facts), PagerStrategy("pager", **options)]
    result = run_replay(sessions, strategies, pricing=price, facts=facts, progress=args.progress,
                        jobs=jobs_of(args), fault=fault)
    rows = []
    for r in result.runs:
        m = result.metrics_for(r.id)
        full, pg = m["full"], m["pager"]
        if pg.error:
            rows.append((r.id[:48], str(full.calls), f"{full.mean_prompt:,.0f}", "failed (below)",
                         *[""] * (len(HEAD) - 4)))
            continue
        rows.append((
            r.id[:48], str(full.calls), f"{full.mean_prompt:,.0f}", f"{pg.mean_prompt:,.0f}",
            f"{full.ratio:.0f}" if full.ratio else "-", f"{pg.ratio:.0f}" if pg.ratio else "-",
            f"{full.cost:,.0f}", f"{pg.cost:,.0f}",
            f"{pg.cost_vs_full:.2f}" if pg.cost_vs_full is not None else "-",
            f"{pg.effective_vs_full:.2f}" if pg.effective_vs_full is not None else "-",
            f"{pg.fault_rate:.3f}" if pg.fault_rate is not None else "-",
            str(pg.violations),
        ))
    print(f"{len(result.runs)} session(s), pricing {price.name} (cache read {price.read:g}x, "
          f"write {price.write:g}x); costs in base-price tokens")
    print(table(HEAD, rows))
    if result.failures:
        print(failures_text(result.failures))
    if args.explain:
        print(glossary(HEAD, extra=GLOSSARY))
    s = {x.strategy: x for x in result.summary}
    pg = s["pager"]
    if pg.cost_vs_full is None:
        print("\nall sessions: pager failed on every session (listed above)")
        return 1
    print(f"\nall sessions: pager cost {pg.cost_vs_full:.2f} of full resend, effective cost "
          f"{pg.effective_vs_full:.2f}, fault rate {pg.fault_rate:.3f}, mean prompt "
          f"{pg.mean_vs_full:.2f} of full, violations {pg.violations}")
    return 1 if result.failures or pg.violations else 0

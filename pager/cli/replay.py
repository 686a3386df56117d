"""``pager replay TRACE.jsonl...``: pager against full resend, per session.

The quick look: for each session, mean prompt tokens, the prompt:completion
ratio and the cache-adjusted input cost of full resend and of pager. The full
benchmark with every baseline, coverage and an HTML report is ``pager bench``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pager.errors import ConfigError

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "replay", help="replay sessions: pager against full resend",
        description="Replay recorded sessions open-loop (pager against full resend) and print, per session, "
                    "mean prompt tokens, prompt:completion ratio and cache-adjusted input cost.",
    )
    p.add_argument("paths", nargs="*", metavar="TRACE", help="session files or folders (default: bundled example)")
    p.add_argument("--context-window", type=int, default=200_000, metavar="TOKENS")
    p.add_argument("--config", metavar="FILE.json", help="pager options file (as pager tune --write makes)")
    p.add_argument("--pricing", choices=("anthropic", "openai", "none"), default="anthropic")
    p.add_argument("--min-assistant", type=int, default=1, metavar="N",
                   help="skip sessions with fewer assistant messages (default 1)")
    p.add_argument("--no-progress", dest="progress", action="store_false", default=None)
    p.set_defaults(func=run)


def example_paths() -> list[Path]:
    """Return the bundled example sessions shipped inside the package."""
    data = Path(__file__).resolve().parents[1] / "data"
    return sorted(data.glob("*.jsonl"))


def run(args: argparse.Namespace) -> int:
    from pager.options import load_config
    from pager.replay.cost import pricing
    from pager.replay.facts import Facts
    from pager.replay.runner import run as run_replay
    from pager.replay.session import load_sessions
    from pager.replay.strategies import FullResend, PagerStrategy
    from pager.cli.bench import table

    paths = [Path(p) for p in args.paths] or example_paths()
    skipped: list[tuple[str, str]] = []
    sessions = load_sessions(paths, on_skip=lambda path, exc: skipped.append((str(path), str(exc))))
    sessions = [s for s in sessions if s.n_assistant >= args.min_assistant]
    for path, why in skipped:
        print(f"pager replay: skipped {path}: {why}", file=sys.stderr)
    if not sessions:
        raise ConfigError(f"no sessions to replay in {', '.join(map(str, paths))}")
    options = load_config(args.config) if args.config else {}
    options["context_window"] = args.context_window
    facts = Facts()
    strategies = [FullResend(facts=facts), PagerStrategy("pager", **options)]
    price = pricing(args.pricing)
    result = run_replay(sessions, strategies, pricing=price, facts=facts, progress=args.progress)
    head = ("session", "calls", "full mean", "pager mean", "full ratio", "pager ratio",
            "full cost", "pager cost", "cost/full", "violations")
    rows = []
    for r in result.runs:
        m = result.metrics_for(r.id)
        full, pg = m["full"], m["pager"]
        if pg.error:
            rows.append((r.id[:48], str(full.calls), f"{full.mean_prompt:,.0f}", "failed: " + pg.error,
                         *[""] * 6))
            continue
        rows.append((
            r.id[:48], str(full.calls), f"{full.mean_prompt:,.0f}", f"{pg.mean_prompt:,.0f}",
            f"{full.ratio:.0f}" if full.ratio else "-", f"{pg.ratio:.0f}" if pg.ratio else "-",
            f"{full.cost:,.0f}", f"{pg.cost:,.0f}",
            f"{pg.cost_vs_full:.2f}" if pg.cost_vs_full is not None else "-", str(pg.violations),
        ))
    print(f"{len(result.runs)} session(s), pricing {price.name} (cache read {price.read:g}x, "
          f"write {price.write:g}x); costs in base-price tokens")
    print(table(head, rows))
    s = {x.strategy: x for x in result.summary}
    pg = s["pager"]
    if pg.cost_vs_full is None:
        print("\nall sessions: pager failed on every session (see the warnings above)")
        return 1
    print(f"\nall sessions: pager cost {pg.cost_vs_full:.2f} of full resend, "
          f"mean prompt {pg.mean_vs_full:.2f} of full, violations {pg.violations}")
    failed = [r for r in rows if str(r[3]).startswith("failed")]
    return 1 if failed or s["pager"].violations else 0

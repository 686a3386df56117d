"""``pager tune``: search scheduler options on replayed sessions.

Replays the sessions through every configuration of a grid (beside full
resend), prints every point sorted by cache-adjusted cost with the Pareto
frontier of cost against need coverage marked, then the frontier with each
point's configuration. ``--write`` saves the chosen point as a file
``pager.open(config=...)`` and ``pager bench --pager-config`` accept. The
logic lives in ``pager.tune``; see ``docs/tuning.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Sequence, TextIO

import attrs
import orjson

from pager import tune
from pager.errors import ConfigError
from pager.replay.cost import pricing
from pager.replay.session import load_sessions
from pager.replay.strategies import pager_available
from pager.cli.bench import add_long_gap, add_paths, add_progress, add_session_options, default_paths, table

__all__ = ["register", "run_tune"]


def register(subparsers: Any) -> None:
    """Add the ``tune`` subcommand."""
    p = subparsers.add_parser(
        "tune",
        help="search scheduler options on replayed sessions (cost vs coverage frontier)",
        description=(
            "Replay recorded sessions through a grid of pager configurations and print the "
            "Pareto frontier of cache-adjusted cost against need coverage. With no --grid, "
            "a small built-in grid around the defaults (one knob moved at a time)."
        ),
    )
    add_paths(p)
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="values to try for one option (an Options name or policy_params.NAME); "
                   "repeatable, the grid is the product")
    p.add_argument("--grid-file", action="append", default=[], metavar="FILE.json",
                   help="a grid as a JSON object {key: [values]}; repeatable, merged with --grid")
    p.add_argument("--base", metavar="FILE.json",
                   help="options every point starts from (a pager config file; default: the "
                   "shipped defaults)")
    p.add_argument("--max-points", type=int, default=48, metavar="N",
                   help="replay at most N configurations, a deterministic sample (default 48)")
    p.add_argument("--seed", type=int, default=0, help="seed of that sample (default 0)")
    p.add_argument("--batch", type=int, default=6, metavar="N",
                   help="configurations replayed per pass over the sessions (default 6)")
    add_session_options(p)
    p.add_argument("--context-window", type=int, default=None, metavar="TOKENS",
                   help="context_window of every point (default: the base's, 200000)")
    p.add_argument("--objective", choices=tune.OBJECTIVES, default="coverage",
                   help="coverage figure the frontier and the choice use (default coverage)")
    p.add_argument("--target-coverage", type=float, default=0.97, metavar="F",
                   help="choose the cheapest frontier point covering at least F (default 0.97)")
    p.add_argument("--write", metavar="FILE.json",
                   help="write the chosen configuration as a pager config file")
    p.add_argument("--json", metavar="FILE", help="write every point as JSON")
    add_long_gap(p)
    p.add_argument("--dry-run", action="store_true",
                   help="list the configurations that would be replayed, and stop")
    add_progress(p)
    p.set_defaults(func=main)


def build_grid(args: argparse.Namespace) -> list[dict[str, Any]] | None:
    """Return the combinations ``--grid`` / ``--grid-file`` ask for, or None for the default."""
    grid: dict[str, list[Any]] = {}
    for path in args.grid_file:
        grid.update(tune.load_grid_file(path))
    for spec in args.grid:
        key, values = tune.parse_grid_spec(spec)
        grid[key] = values
    return tune.expand_grid(grid) if grid else None


def candidates(args: argparse.Namespace, err: TextIO) -> list[tune.Candidate]:
    """Return the valid, capped configurations to replay; notes go to ``err``."""
    base = tune.load_base(args.base, args.context_window)
    combos = build_grid(args)
    if combos is None:
        combos = [dict(p) for p in tune.DEFAULT_POINTS]
    else:
        combos = [{}, *combos]  # the base is the point every other one is read against

    def note(text: str) -> None:
        print(f"pager tune: {text}", file=err)

    valid = tune.validate(combos, base, note=note)
    kept = tune.cap(valid, args.max_points, seed=args.seed)
    if len(kept) < len(valid):
        note(f"{len(valid)} configurations, replaying a sample of {len(kept)} (--max-points)")
    return kept


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


HEAD = ("point", "pareto", "cost/full", "coverage", "long cov", "prompt/full", "med ratio",
        "growth", "violations")


def points_table(points: Sequence[tune.Point]) -> str:
    """Return the table of points, sorted by cost, each line ending with its changes."""
    ordered = tune.by_cost(points)
    rows = [(
        p.name + (f" ({p.errors} failed)" if p.errors else ""), "*" if p.frontier else "",
        _fmt(p.cost_vs_full, ".3f"), _fmt(p.coverage, ".3f"), _fmt(p.long_coverage, ".3f"),
        _fmt(p.mean_vs_full, ".2f"), _fmt(p.median_ratio, ".0f"), _fmt(p.growth, ".2f"),
        str(p.violations),
    ) for p in ordered]
    lines = table(HEAD, rows).splitlines()
    # the configuration goes last and left-aligned: it is text of any width
    tails = ["changes", "-------", *(tune.label(p.changes) for p in ordered)]
    width = max(len(line) for line in lines)
    return "\n".join(f"{line.ljust(width)}  {tail}" for line, tail in zip(lines, tails))


def frontier_text(points: Sequence[tune.Point], chosen: tune.Point | None, objective: str) -> str:
    """Return the frontier, cheapest first, with each point's configuration."""
    front = tune.by_cost(p for p in points if p.frontier)
    if not front:
        return "no point is on the frontier (every one had violations or failures)"
    out = [f"Pareto frontier (cost/full against {objective.replace('_', ' ')}):"]
    for p in front:
        mark = "  <- chosen" if chosen is not None and p.name == chosen.name else ""
        out.append(f"  {p.name}  cost/full {_fmt(p.cost_vs_full, '.3f')}  "
                   f"{objective.replace('_', ' ')} {_fmt(p.score(objective), '.3f')}{mark}")
        if p.changes:
            out.extend(f"      {k} = {tune.show(v)}" for k, v in p.changes.items())
        else:
            out.append("      (defaults)")
    return "\n".join(out)


def run_tune(args: argparse.Namespace, out: TextIO, err: TextIO) -> list[tune.Point] | None:
    """Run the search ``args`` describe; print on ``out``; return the points (None: nothing run)."""
    if args.min_assistant < 0:
        raise ConfigError("--min-assistant must be >= 0")
    if not 0.0 <= args.target_coverage <= 1.0:
        raise ConfigError("--target-coverage must be in [0, 1]")
    cands = candidates(args, err)
    if not cands:
        print("pager tune: no valid configuration to replay", file=err)
        return None
    if args.dry_run:
        for i, c in enumerate(cands):
            print(f"p{i + 1:02d}  {tune.label(c.changes)}", file=out)
        return None
    if not pager_available():
        raise ConfigError("pager.open is not available; nothing to tune")

    paths = args.paths or default_paths()
    price = pricing(args.pricing, discount=args.cache_discount)
    skipped: list[str] = []
    loaded = load_sessions(paths, on_skip=lambda path, exc: skipped.append(str(path)))
    sessions = [s for s in loaded if s.n_assistant >= args.min_assistant]
    note = f"{len(sessions)} sessions from {', '.join(map(str, paths))}"
    if len(loaded) > len(sessions):
        note += (f" ({len(loaded) - len(sessions)} with fewer than {args.min_assistant} "
                 f"assistant messages left out)")
    if skipped:
        note += f"; {len(skipped)} files skipped (not sessions)"
    print(f"pager tune: {note}; {len(cands)} configurations", file=err)
    if not sessions:
        print("pager tune: nothing to replay", file=err)
        return None

    t0 = time.monotonic()
    points = tune.run_points(sessions, cands, pricing=price, batch=args.batch,
                             progress=args.progress, stream=err, long_gap=args.long_gap)
    points = tune.pareto(points, args.objective)
    chosen = tune.choose(points, args.target_coverage, args.objective)

    calls = sum(max(0, s.n_assistant - (s.messages[0].get("role") == "assistant"))
                for s in sessions if s.messages)
    print(f"{len(sessions)} sessions, {calls} calls, pricing {price.name} "
          f"(read {price.read:g}x, write {price.write:g}x), {len(points)} configurations in "
          f"{time.monotonic() - t0:.0f} s; * = on the Pareto frontier", file=out)
    print(points_table(points), file=out)
    print(file=out)
    print(frontier_text(points, chosen, args.objective), file=out)
    if chosen is not None:
        reached = chosen.score(args.objective)
        why = ("cheapest frontier point" if reached is not None and reached >= args.target_coverage
               else "no frontier point reaches the target; highest coverage")
        print(f"\nchosen for {args.objective.replace('_', ' ')} >= {args.target_coverage:g}: "
              f"{chosen.name} ({why})", file=out)

    price_doc = attrs.asdict(price)
    if args.write:
        if chosen is None:
            raise ConfigError("no point to write: nothing is on the frontier")
        doc = tune.config_document(chosen, sessions=len(sessions), pricing=price_doc,
                                   objective=args.objective, target=args.target_coverage)
        Path(args.write).write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
        print(f"pager tune: wrote {args.write} ({chosen.name})", file=err)
    if args.json:
        doc = {
            "sessions": [s.id for s in sessions],
            "pricing": price_doc,
            "objective": args.objective,
            "target": args.target_coverage,
            "chosen": chosen.name if chosen is not None else None,
            "points": [p.to_json() for p in points],
        }
        Path(args.json).write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
        print(f"pager tune: wrote {args.json}", file=err)
    return points


def main(args: argparse.Namespace) -> int:
    """Run ``pager tune``; return the exit status."""
    if run_tune(args, sys.stdout, sys.stderr) is None:
        return 0 if args.dry_run else 1
    return 0

"""``pager tune``: search scheduler options on replayed sessions.

Replays the sessions through every configuration of a grid (beside full
resend), prints every point sorted by re-read cost (faults priced as the
re-read of the pages they lost) with the Pareto frontier of re-read cost
against names coverage marked, then the frontier with each point's
configuration, and the chosen point: least re-read cost with names coverage
and the worst session's coverage at or above their floors (``--names-floor``,
``--worst-floor``; ``--coverage-floor`` adds one on all needs). When no point
meets them it says so, and the frontier shows what is reachable. ``--write`` saves the chosen point as a file
``pager.open(config=...)`` and ``pager bench --pager-config`` accept.

Every argument (grid values included) is checked before anything is
replayed. ``--json FILE`` is the search's log, rewritten as sessions finish;
Ctrl-C stops the replay, writes the log and prints what is complete, and
``--resume`` continues from the log. The logic lives in ``pager.lab.tune``; see
``docs/tuning.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence, TextIO

import attrs
import orjson

from pager.lab import tune
from pager.errors import ConfigError
from pager.lab.cli.common import (
    add_explain,
    add_jobs,
    add_long_gap,
    add_paths,
    add_progress,
    add_session_options,
    check_outputs,
    fault_of,
    fraction,
    glossary,
    one_line_errors,
    positive_int,
    process_note,
    pricing_of,
    replay_inputs,
    table,
)

__all__ = ["register", "run_tune"]

NAMES_FLOOR = 0.97
WORST_FLOOR = 0.90


def register(subparsers: Any) -> None:
    """Add the ``tune`` subcommand."""
    p = one_line_errors(subparsers.add_parser(
        "tune",
        help="search scheduler options on replayed sessions (re-read cost vs coverage frontier)",
        description=(
            "Replay recorded sessions through a grid of pager configurations and print the "
            "Pareto frontier of re-read cost (cache-adjusted cost plus each fault priced as "
            "the re-read of the pages it lost) against names coverage, and the point of least "
            "re-read cost meeting the floors on names coverage and on the worst session's "
            "coverage. With no --grid, a small built-in grid around the defaults (one knob "
            "moved at a time)."
        ),
    ))
    add_paths(p)
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="values to try for one option (an Options name or policy_params.NAME); "
                   "repeatable, the grid is the product")
    p.add_argument("--grid-file", action="append", default=[], metavar="FILE.json",
                   help="a grid as a JSON object {key: [values]}; repeatable, merged with --grid")
    p.add_argument("--base", metavar="FILE.json",
                   help="options every point starts from (a pager config file; default: the "
                   "shipped defaults)")
    p.add_argument("--max-points", type=positive_int, default=48, metavar="N",
                   help="replay at most N configurations, a deterministic sample (default 48)")
    p.add_argument("--seed", type=int, default=0, help="seed of that sample (default 0)")
    p.add_argument("--batch", type=positive_int, default=6, metavar="N",
                   help="configurations replayed side by side on a session (default 6)")
    add_session_options(p)
    p.add_argument("--context-window", type=positive_int, default=None, metavar="TOKENS",
                   help="context_window of every point (default: the base's, 200000)")
    p.add_argument("--objective", choices=tune.OBJECTIVES, default=tune.OBJECTIVES[0],
                   help=f"coverage figure the frontier is drawn against (default {tune.OBJECTIVES[0]})")
    p.add_argument("--names-floor", type=fraction, default=NAMES_FLOOR, metavar="F",
                   help=f"the chosen point covers at least F of the names (default {NAMES_FLOOR})")
    p.add_argument("--worst-floor", type=fraction, default=WORST_FLOOR, metavar="F",
                   help="the chosen point's worst session covers at least F of its needs "
                   f"(default {WORST_FLOOR})")
    p.add_argument("--coverage-floor", "--target-coverage", dest="coverage_floor", type=fraction,
                   default=None, metavar="F",
                   help="also: the chosen point covers at least F of all needs (default: no floor)")
    p.add_argument("--write", metavar="FILE.json",
                   help="write the chosen configuration as a pager config file")
    p.add_argument("--json", metavar="FILE",
                   help="write every point, and the log --resume reads, as JSON (rewritten as "
                   "sessions finish)")
    p.add_argument("--resume", action="store_true",
                   help="continue the search logged in --json FILE: replay only what it lacks")
    add_long_gap(p)
    add_jobs(p)
    p.add_argument("--dry-run", action="store_true",
                   help="list the configurations that would be replayed, and stop")
    add_explain(p)
    add_progress(p)
    p.add_argument("--fit", action="store_true",
                   help="fit the 'fitted' heat policy's weights from the sessions instead (python -m pager.lab.fit)")
    p.set_defaults(func=main)


def build_grid(args: argparse.Namespace) -> list[dict[str, Any]] | None:
    """Return the combinations ``--grid`` / ``--grid-file`` ask for, or None for the default."""
    grid: dict[str, list[Any]] = {}
    for path in args.grid_file:
        try:
            grid.update(tune.load_grid_file(path))
        except ConfigError as exc:
            raise ConfigError(f"--grid-file: {exc}") from None
    for spec in args.grid:
        key, values = tune.parse_grid_spec(spec)
        grid[key] = values
    return tune.expand_grid(grid) if grid else None


def candidates(args: argparse.Namespace, err: TextIO) -> tuple[list[tune.Candidate], int]:
    """Return the valid, capped configurations to replay and how many were valid; notes go to ``err``.

    A grid value valid in no combination is a ``ConfigError``.
    """
    try:
        base = tune.load_base(args.base, args.context_window)
    except ConfigError as exc:
        raise ConfigError(f"--base: {exc}" if args.base else str(exc)) from None
    combos = build_grid(args)
    strict = combos is not None
    if combos is None:
        combos = [dict(p) for p in tune.DEFAULT_POINTS]
    else:
        combos = [{}, *combos]  # the base is the point every other one is read against

    notes: list[str] = []

    def note(text: str) -> None:
        notes.append(f"pager tune: {text}")

    valid = tune.validate(combos, base, note=note, strict=strict)
    for line in notes:  # only once the grid is known to be usable
        print(line, file=err)
    return tune.cap(valid, args.max_points, seed=args.seed), len(valid)


def check_args(args: argparse.Namespace) -> None:
    """Check the arguments that need no grid (pricing, outputs, paths, --resume)."""
    pricing_of(args)
    fault_of(args)
    check_outputs(write=args.write, json=args.json)
    if args.resume:
        if not args.json:
            raise ConfigError("--resume needs --json FILE: the log to continue")
        if not Path(args.json).is_file():
            raise ConfigError(f"--resume: no log at {args.json}")
    for path in args.paths:
        if not Path(path).exists():
            raise ConfigError(f"{path}: no such file or directory")


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


HEAD = ("point", "pareto", "floors", "re-read/full", "eff/full", "cost/full", "fault rate",
        "coverage", "names cov", "worst cov", "< 0.90", "long cov", "prompt/full", "med ratio",
        "growth", "violations")

GLOSSARY = {
    "point": "the configuration's name (p01 is the base: the defaults or --base)",
    "pareto": "* = on the Pareto frontier: no other point has less re-read cost and more "
              "coverage (--objective, names coverage by default)",
    "floors": "ok = meets every floor (--names-floor, --worst-floor, --coverage-floor)",
    "re-read/full": "cost with each fault priced as the re-read of its pages, over full "
                    "resend's (what tune minimises)",
    "changes": "the options this point sets differently from the base",
}


def floors_of(args: argparse.Namespace) -> dict[str, float]:
    """Return the floors the chosen point must meet: figure -> least value."""
    floors = {"names_coverage": args.names_floor, "worst_coverage": args.worst_floor}
    if args.coverage_floor is not None:
        floors["coverage"] = args.coverage_floor
    return floors


def points_table(points: Sequence[tune.Point], floors: dict[str, float] | None = None) -> str:
    """Return the table of points, sorted by re-read cost, each line ending with its changes."""
    ordered = tune.by_cost(points)
    ok = {p.name for p in points if floors is not None and tune.choose_floors([p], floors)}
    rows = [(
        p.name + (f" ({p.errors} failed)" if p.errors else ""), "*" if p.frontier else "",
        "ok" if p.name in ok else "", _fmt(p.reread_vs_full, ".3f"),
        _fmt(p.effective_vs_full, ".3f"), _fmt(p.cost_vs_full, ".3f"), _fmt(p.fault_rate, ".3f"),
        _fmt(p.coverage, ".3f"), _fmt(p.names_coverage, ".3f"), _fmt(p.worst_coverage, ".3f"),
        str(p.sessions_below), _fmt(p.long_coverage, ".3f"),
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
    what = objective.replace("_", " ")
    out = [f"Pareto frontier (re-read cost against {what}):"]
    for p in front:
        mark = "  <- chosen" if chosen is not None and p.name == chosen.name else ""
        out.append(f"  {p.name}  re-read/full {_fmt(p.reread_vs_full, '.3f')}  "
                   f"eff/full {_fmt(p.effective_vs_full, '.3f')}  "
                   f"cost/full {_fmt(p.cost_vs_full, '.3f')}  "
                   f"{what} {_fmt(p.score(objective), '.3f')}  "
                   f"worst {_fmt(p.worst_coverage, '.3f')}{mark}")
        if p.changes:
            out.extend(f"      {k} = {tune.show(v)}" for k, v in p.changes.items())
        else:
            out.append("      (defaults)")
    return "\n".join(out)


def _write_atomic(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    Path(tmp).write_bytes(data)
    os.replace(tmp, path)


class _Log:
    """The search's log file (``--json``): what has been measured, rewritten as sessions finish."""

    def __init__(self, args: argparse.Namespace, sessions: Sequence[Any], settings: dict[str, Any],
                 floors: dict[str, float], log: tune.Log) -> None:
        self.args, self.sessions, self.settings, self.floors, self.log = args, sessions, settings, floors, log
        self.last_save = 0.0

    def document(self, points: list[tune.Point], chosen: tune.Point | None, complete: bool) -> dict:
        return {
            "written_by": "pager tune",
            "complete": complete,
            "sessions": [s.id for s in self.sessions],
            "pricing": self.settings["pricing"],
            "fault_cost": self.settings["fault_cost"],
            "objective": self.args.objective,
            "target": self.args.coverage_floor,
            "floors": self.floors,
            "chosen": chosen.name if chosen is not None else None,
            "points": [p.to_json() for p in points],
            "settings": self.settings,
            "runs": self.log.runs_json(),
        }

    def save(self, points: list[tune.Point], chosen: tune.Point | None, complete: bool) -> None:
        if self.args.json:
            _write_atomic(self.args.json, orjson.dumps(self.document(points, chosen, complete),
                                                       option=orjson.OPT_INDENT_2))
            self.last_save = time.monotonic()

    def on_progress(self, _log: tune.Log) -> None:
        if self.args.json and time.monotonic() - self.last_save >= 2.0:
            self.save([], None, False)


def _interrupted(args: argparse.Namespace, saver: _Log, sessions: Sequence[Any], cands: Sequence[tune.Candidate],
                 out: TextIO, err: TextIO) -> None:
    """Log and print what an interrupted search measured on every session."""
    points = tune.pareto(tune.points_from(saver.log, sessions, cands), args.objective)
    saver.save(points, None, False)
    print(f"\npager tune: interrupted; {len(points)} of {len(cands)} configurations "
          f"measured on every session", file=err)
    if points:
        print(points_table(points, saver.floors), file=out)
    if args.json:
        print(f"pager tune: wrote {args.json}; continue with the same command and --resume",
              file=err)
    else:
        print("pager tune: give --json FILE to keep what an interrupted search measured",
              file=err)


def _print_points(args: argparse.Namespace, points: list[tune.Point], chosen: tune.Point | None,
                  floors: dict[str, float], sessions: Sequence[Any], head: str, out: TextIO) -> None:
    """Print the measured points, the frontier and the choice."""
    calls = sum(max(0, s.n_assistant - (s.messages[0].get("role") == "assistant"))
                for s in sessions if s.messages)
    print(f"{len(sessions)} sessions, {calls} calls, {head}; "
          f"* = on the Pareto frontier, ok = meets the floors", file=out)
    print(points_table(points, floors), file=out)
    failed = [(p.name, sid, e) for p in points for sid, e in p.failures]
    if failed:
        print(f"failed: {len(failed)} run(s)", file=out)
        for name, sid, e in failed:
            print(f"  {name} on {sid}: {e}", file=out)
    if args.explain:
        print(glossary(("point", "pareto", *HEAD[2:], "changes"), extra=GLOSSARY), file=out)
    print(file=out)
    print(frontier_text(points, chosen, args.objective), file=out)
    if chosen is not None:
        print(f"\nchosen for {tune.floors_text(floors)}: {chosen.name} (least re-read cost "
              f"{_fmt(chosen.reread_vs_full, '.3f')} meeting every floor; worst session "
              f"{chosen.worst_session})", file=out)
    else:
        print(f"\nno point meets the floors ({tune.floors_text(floors)}); the frontier above "
              "is what this grid reaches: lower a floor or widen the grid", file=out)


def _write_chosen(args: argparse.Namespace, chosen: tune.Point | None, sessions: Sequence[Any],
                  settings: dict[str, Any], floors: dict[str, float], err: TextIO) -> None:
    """Write the chosen point as a config file (``--write``), or say why nothing was written."""
    if args.write and chosen is None:
        print(f"pager tune: no point meets the floors; nothing written to {args.write}", file=err)
    elif args.write and chosen is not None:
        doc = tune.config_document(chosen, sessions=len(sessions), pricing=settings["pricing"],
                                   objective=args.objective, target=args.coverage_floor,
                                   fault_cost=settings["fault_cost"], floors=floors)
        Path(args.write).write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
        print(f"pager tune: wrote {args.write} ({chosen.name})", file=err)


def run_tune(args: argparse.Namespace, out: TextIO, err: TextIO) -> list[tune.Point] | None:
    """Run the search ``args`` describe; print on ``out``; return the points (None: nothing run).

    Raises ``KeyboardInterrupt`` after printing and logging what finished
    when interrupted.
    """
    check_args(args)
    cands, valid = candidates(args, err)
    if not cands:
        print("pager tune: no valid configuration to replay", file=err)
        return None
    # said with the run's first line, so an argument error found later is still the only line
    sampled = f" (a sample of the {valid} valid ones, --max-points)" if len(cands) < valid else ""
    if args.dry_run:
        if sampled:
            print(f"pager tune: {len(cands)} configurations{sampled}", file=err)
        for i, c in enumerate(cands):
            print(f"p{i + 1:02d}  {tune.label(c.changes)}", file=out)
        return None
    sessions, skipped, note, price, fault, jobs = replay_inputs(args)
    settings = {
        "sessions": [{"id": s.id, "digest": tune.session_digest(s)} for s in sessions],
        "pricing": attrs.asdict(price),
        "fault_cost": attrs.asdict(fault),
        "long_gap": args.long_gap,
        "need_gap": args.need_gap,
    }
    log = tune.Log.resume(args.json, settings) if args.resume else tune.Log(settings=settings)
    floors = floors_of(args)
    print(f"pager tune: {note}; {len(cands)} configurations{sampled}", file=err)
    if not sessions:
        print("pager tune: nothing to replay", file=err)
        return None
    saver = _Log(args, sessions, settings, floors, log)
    t0 = time.monotonic()
    try:
        points = tune.run_points(sessions, cands, pricing=price, batch=args.batch,
                                 progress=args.progress, stream=err, long_gap=args.long_gap,
                                 jobs=jobs, fault=fault, log=log, on_progress=saver.on_progress,
                                 need_gap=args.need_gap)
    except KeyboardInterrupt:
        _interrupted(args, saver, sessions, cands, out, err)
        raise
    points = tune.pareto(points, args.objective)
    chosen = tune.choose_floors(points, floors)
    print(f"pager tune: {process_note()}", file=err)
    head = (f"pricing {price.name} (read {price.read:g}x, write {price.write:g}x), {len(points)} configurations in "
            f"{time.monotonic() - t0:.0f} s on {min(jobs, len(sessions))} process(es)")
    _print_points(args, points, chosen, floors, sessions, head, out)
    _write_chosen(args, chosen, sessions, settings, floors, err)
    if args.json:
        saver.save(points, chosen, True)
        print(f"pager tune: wrote {args.json}", file=err)
    return points


def main(args: argparse.Namespace) -> int:
    """Run ``pager tune``; return the exit status (1: nothing replayed, or a run failed)."""
    if args.fit:
        from pager.lab.fit import main as fit_main

        return fit_main([*map(str, args.paths), "--min-assistant", str(args.min_assistant),
                         *(["--write", args.write] if args.write else [])])
    try:
        points = run_tune(args, sys.stdout, sys.stderr)
    except KeyboardInterrupt:
        return 130
    if points is None:
        return 0 if args.dry_run else 1
    if args.write and tune.choose_floors(points, floors_of(args)) is None:
        return 1  # asked for a configuration, and none meets the floors (said on stdout)
    if any(p.errors for p in points):
        print("pager tune: some configurations failed on some sessions (listed under the table)",
              file=sys.stderr)
        return 1
    return 0

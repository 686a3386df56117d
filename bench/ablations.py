"""Print the ablation table: each row switches one component of the shipped defaults off.

    python bench/ablations.py                      # ../shared/traces, the standard rows
    python bench/ablations.py --row quota3:recall_pages=3,recall_tokens=900
    python bench/ablations.py --only defaults,fifo --json out.json
    python bench/ablations.py --folds 2 --fold 0 --json f0.json   # one half of the sessions
    python bench/ablations.py --merge f0.json f1.json             # both halves, pooled

Every row is replayed on the same calls in one process, beside full resend, with
the same replay as ``pager bench`` (``pager.lab.replay.run``). The headline is the
*re-read cost* of issue 24, the price ``pager bench`` puts first: a call
*faults* when at least one of its needs is missing from its prompt, and each
fault re-reads every page that last held a missed need, whole, at the write
price, plus one more call on the cached prompt and its output
(``pager.lab.replay.cost.FAULT_COST.reread``). Issue 15's *effective cost* (a
340-token excerpt per fault) is kept as a column, with names coverage and the
worst session's coverage.

    python bench/ablations.py --need-gap 6          # needs that stood 6+ messages back

``+/-`` columns are paired differences from the defaults row with a
session-bootstrap standard error (2,000 resamples of sessions, fixed seed): a
row whose difference is within two standard errors is within noise.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import orjson

from pager.lab.replay.cost import FAULT_COST, pricing
from pager.lab.replay.facts import Facts
from pager.lab.replay.runner import BenchResult, run
from pager.lab.replay.session import load_sessions
from pager.lab.replay.strategies import ClearToolResults, FullResend, PagerStrategy

# One switch per row against the shipped defaults.
ROWS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "heat fifo": {"policy": "fifo"},
    "recall off": {"recall_pages": 0},
    "tasks off": {"task_focus": False},
    "objective off": {"objective": False},
    "stubs off": {"stub_threshold": 10**9, "inline_max": 10**9},
    "tail stubs off": {"inline_max": 0},
    "minor rounds off": {"minor_rounds": False},
}


def parse_row(spec: str) -> tuple[str, dict[str, Any]]:
    """Parse ``NAME:KEY=VALUE[,KEY=VALUE]`` (values JSON where they parse)."""
    name, _, rest = spec.partition(":")
    opts: dict[str, Any] = {}
    for part in filter(None, rest.split(",")):
        key, _, val = part.partition("=")
        try:
            opts[key.strip()] = orjson.loads(val)
        except orjson.JSONDecodeError:
            opts[key.strip()] = val
    return name.strip(), opts


def per_session(result: BenchResult, name: str) -> dict[str, np.ndarray]:
    """Return per-session sums of one strategy: cost, effective cost, faults, needs, ..."""
    p = result.pricing
    cols: dict[str, list[float]] = {k: [] for k in (
        "cost", "effective", "reread", "calls", "faults", "needs", "covered", "long_needs", "long_covered",
        "names", "names_covered", "prompt", "completion")}
    for r in result.runs:
        recs = r.records.get(name, ())
        cost = sum(p.cost(c.prompt_tokens, c.cached_tokens) for c in recs)
        faults = [c for c in recs if c.fault]
        cols["cost"].append(cost)
        cols["effective"].append(cost + sum(FAULT_COST.cost(c.prompt_tokens, p) for c in faults))
        cols["reread"].append(cost + sum(FAULT_COST.reread(c.prompt_tokens, c.reread_pages, p) for c in faults))
        cols["calls"].append(len(recs))
        cols["faults"].append(len(faults))
        for key, attr in (("needs", "needs"), ("covered", "covered"), ("long_needs", "long_needs"),
                          ("long_covered", "long_covered"), ("names", "names"),
                          ("names_covered", "names_covered"), ("prompt", "prompt_tokens"),
                          ("completion", "completion_tokens")):
            cols[key].append(sum(getattr(c, attr) for c in recs))
    return {k: np.asarray(v, dtype=np.float64) for k, v in cols.items()}


def figures(s: dict[str, np.ndarray], full: dict[str, np.ndarray]) -> dict[str, float]:
    """Return pooled figures of per-session sums ``s`` (``full``: full resend's)."""
    ratios = [a / b for a, b in zip(s["prompt"], s["completion"]) if b > 0]
    return {
        "cost": s["cost"].sum() / full["cost"].sum(),
        "effective": s["effective"].sum() / full["effective"].sum(),
        "reread": s["reread"].sum() / full["reread"].sum(),
        "names_coverage": s["names_covered"].sum() / max(s["names"].sum(), 1),
        "worst_coverage": float(min((c / n for c, n in zip(s["covered"], s["needs"]) if n), default=1.0)),
        "below_90": int(sum(1 for c, n in zip(s["covered"], s["needs"]) if n and c / n < 0.9)),
        "fault_rate": s["faults"].sum() / s["calls"].sum(),
        "coverage": s["covered"].sum() / s["needs"].sum(),
        "long_coverage": s["long_covered"].sum() / max(s["long_needs"].sum(), 1),
        "prompt": s["prompt"].sum() / full["prompt"].sum(),
        "median_ratio": statistics.median(ratios) if ratios else float("nan"),
    }


def paired_se(a: dict[str, np.ndarray], b: dict[str, np.ndarray], full: dict[str, np.ndarray],
              key: str, reps: int = 2000, seed: int = 15) -> float:
    """Return the session-bootstrap standard error of ``figure(a) - figure(b)`` for ``key``."""
    rng = np.random.default_rng(seed)
    n = full["calls"].size
    idx = rng.integers(0, n, size=(reps, n))
    num, den = {"effective": ("effective", None), "cost": ("cost", None), "reread": ("reread", None),
                "coverage": ("covered", "needs"), "names_coverage": ("names_covered", "names"),
                "long_coverage": ("long_covered", "long_needs")}[key]

    def pooled(s: dict[str, np.ndarray]) -> np.ndarray:
        top = s[num][idx].sum(axis=1)
        bottom = (full[key if key in ("effective", "cost", "reread") else "cost"] if den is None else s[den])[idx].sum(axis=1)
        return top / np.maximum(bottom, 1e-9)

    return float(np.std(pooled(a) - pooled(b)))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", default=None)
    ap.add_argument("--row", action="append", default=[], metavar="NAME:KEY=VALUE,...",
                    help="an extra row (options added to the defaults)")
    ap.add_argument("--config", action="append", default=[], metavar="NAME=FILE.json",
                    help="an extra row from a JSON file of options (e.g. python -m pager.lab.fit --write)")
    ap.add_argument("--clear", action="store_true",
                    help="add the clear-old-tool-results baseline (trigger 100,000, keep 3) as a row")
    ap.add_argument("--only", default=None, help="comma-separated standard rows to keep")
    ap.add_argument("--min-assistant", type=int, default=10)
    ap.add_argument("--need-gap", type=int, default=None, help="needs stood at least N messages back (bench default 1)")
    ap.add_argument("--folds", type=int, default=1, help="split sessions into N folds by session")
    ap.add_argument("--fold", type=int, default=0, help="the fold to replay (with --folds)")
    ap.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--merge", nargs="+", metavar="FILE.json",
                    help="print the table of earlier --json runs (e.g. the folds of one run) pooled")
    args = ap.parse_args(argv)

    paths = args.paths or [str(Path(__file__).resolve().parent.parent.parent / "shared" / "traces")]
    sessions = [s for s in load_sessions(paths) if s.n_assistant >= args.min_assistant]
    sessions.sort(key=lambda s: s.id)
    if args.folds > 1:
        sessions = [s for i, s in enumerate(sessions) if i % args.folds == args.fold]
    rows = dict(ROWS)
    if args.only is not None:
        keep = set(args.only.split(",")) | {"defaults"}
        rows = {k: v for k, v in rows.items() if k in keep}
    for spec in args.row:
        name, opts = parse_row(spec)
        rows[name] = opts
    for spec in args.config:
        name, _, path = spec.partition("=")
        data = orjson.loads(Path(path).read_bytes())
        rows[name.strip()] = dict(data.get("options", data))
    if args.merge:
        sums, rows = _merge(args.merge)
        print_table(sums, rows, f"{len(args.merge)} runs merged", args.json)
        return 0
    facts = Facts()
    strategies: list[Any] = [FullResend(facts=facts)]
    strategies += [PagerStrategy(name, **opts) for name, opts in rows.items()]
    if args.clear:
        strategies.append(ClearToolResults(100_000, 3, name="clear (baseline)", facts=facts))
        rows["clear (baseline)"] = {}
    price = pricing("anthropic")
    extra = {} if args.need_gap is None else {"need_gap": args.need_gap}
    result = run(sessions, strategies, pricing=price, facts=facts, progress=args.progress, **extra)
    sums = {name: per_session(result, name) for name in ["full", *rows]}
    print_table(sums, rows, f"{len(sessions)} sessions, {int(sums['full']['calls'].sum())} calls, "
                f"{result.seconds:.0f} s", args.json)
    return 0


def _merge(paths: Sequence[str]) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, Any]]:
    """Return per-session sums and rows of several ``--json`` files (rows present in all of them)."""
    data = [orjson.loads(Path(p).read_bytes()) for p in paths]
    names = [n for n in data[0]["per_session"] if all(n in d["per_session"] for d in data)]
    sums = {n: {k: np.concatenate([np.asarray(d["per_session"][n][k]) for d in data])
                for k in data[0]["per_session"][n]} for n in names}
    rows = {n: data[0]["rows"][n]["options"] for n in names if n != "full"}
    return sums, rows


def print_table(sums: dict[str, dict[str, np.ndarray]], rows: dict[str, Any], title: str, json_path: str | None) -> None:
    """Print the ablation table of per-session sums; write them and the figures to ``json_path``."""
    full = sums["full"]
    base = sums["defaults"]
    table = []
    head = ("row", "re-read/full", "+/- (se)", "eff/full", "cost/full", "faults", "coverage", "+/- cov (se)",
            "names cov", "+/- names (se)", "worst", "< 0.90", "long cov", "+/- long (se)", "prompt/full", "med ratio")
    out: dict[str, Any] = {"sessions": int(full["calls"].size), "calls": int(full["calls"].sum()), "rows": {},
                           "per_session": {n: {k: v.tolist() for k, v in d.items()} for n, d in sums.items()}}
    b = figures(base, full)
    keys = ("reread", "effective", "coverage", "names_coverage", "long_coverage")
    for name, opts in rows.items():
        s = sums[name]
        f = figures(s, full)
        d = {k: f[k] - b[k] for k in keys}
        se = {k: paired_se(s, base, full, k) for k in keys}
        out["rows"][name] = {"options": opts, **{k: float(v) for k, v in f.items()},
                             **{f"d_{k}": float(d[k]) for k in keys}, **{f"se_{k}": se[k] for k in keys}}
        table.append((
            name, f"{f['reread']:.3f}", f"{d['reread']:+.3f} ({se['reread']:.3f})", f"{f['effective']:.3f}",
            f"{f['cost']:.3f}", f"{f['fault_rate']:.3f}", f"{f['coverage']:.3f}",
            f"{d['coverage']:+.3f} ({se['coverage']:.3f})", f"{f['names_coverage']:.3f}",
            f"{d['names_coverage']:+.3f} ({se['names_coverage']:.3f})", f"{f['worst_coverage']:.3f}",
            f"{f['below_90']} of {full['calls'].size}", f"{f['long_coverage']:.3f}",
            f"{d['long_coverage']:+.3f} ({se['long_coverage']:.3f})", f"{f['prompt']:.2f}", f"{f['median_ratio']:.0f}",
        ))
    widths = [max(len(str(r[i])) for r in [head, *table]) for i in range(len(head))]
    print(title)
    for r in [head, tuple("-" * w for w in widths), *table]:
        print("  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)))
    if json_path:
        Path(json_path).write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))


if __name__ == "__main__":
    sys.exit(main())

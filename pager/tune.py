"""Search scheduler options on replayed sessions: the logic behind ``pager tune``.

Theory of operation:

1. A *grid* maps option names (``Options`` fields, or ``policy_params.X`` for
   one parameter of the heat policy) to candidate values. ``expand_grid``
   takes the product, laid over a base configuration (the defaults, a
   ``--base`` file, the context window). ``DEFAULT_POINTS`` is the grid used
   when none is given: the defaults and one knob moved at a time.
2. ``validate`` builds each combination with ``Options.build`` and the policy
   with ``get_policy``; invalid ones (``low_watermark > high_watermark``, a
   parameter the policy lacks) are dropped with a note, duplicates merged,
   and ``cap`` keeps at most ``max_points`` (a deterministic sample, always
   keeping the base).
3. ``run_points`` replays the sessions through the variants in batches, each
   batch beside ``FullResend`` so every cost is relative to full resend on the
   same calls; the summaries become ``Point`` values.
4. ``pareto`` marks the points no other point beats on both cache-adjusted
   cost (lower is better) and need coverage (higher is better); a point with
   violations or failures is never on the frontier. ``choose`` picks the
   cheapest frontier point that reaches a coverage target.
5. ``config_document`` is what ``--write`` saves: the full options under
   ``"options"`` (``pager.open(config=...)`` reads that key) beside the
   figures that justified them.

Only step 3 replays anything; the rest is pure and tested with hand-made
points.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, TextIO

import attrs
import orjson

from pager.errors import ConfigError, PagerError
from pager.core.heat import get_policy
from pager.options import Options, load_config, read_json_file

__all__ = [
    "DEFAULT_POINTS",
    "OBJECTIVES",
    "Candidate",
    "Point",
    "by_cost",
    "cap",
    "changes",
    "choose",
    "config_document",
    "expand_grid",
    "flatten",
    "label",
    "load_base",
    "load_grid_file",
    "pareto",
    "parse_grid_spec",
    "run_points",
    "show",
    "validate",
]

PARAM_PREFIX = "policy_params."

# The grid used when none is given: the defaults, then one knob moved at a
# time to each side. A star, not a product, so each knob's effect can be read
# off on its own and a run on a dozen sessions stays at a few minutes.
DEFAULT_POINTS: tuple[Mapping[str, Any], ...] = (
    {},
    {"high_watermark": 20_000},
    {"high_watermark": 48_000},
    {"low_watermark": 4_000},
    {"low_watermark": 12_000},
    {"recent_units": 2},
    {"recent_units": 5},
    {"stub_threshold": 1_000},
    {"stub_threshold": 4_000},
    {"recall_pages": 0},
    {"recall_pages": 5, "recall_tokens": 1_500},
    {"policy_params.half_life": 24},
)

# Coverage figures a run can be tuned for: the StrategySummary attribute names.
OBJECTIVES = ("coverage", "long_coverage")


# --------------------------------------------------------------------------
# Grids


def _check_key(key: str) -> str:
    key = key.strip()
    if key.startswith(PARAM_PREFIX):
        if not key[len(PARAM_PREFIX):]:
            raise ConfigError(f"grid key {key!r} names no policy parameter")
        return key
    if key not in Options.names():
        raise ConfigError(
            f"unknown grid key {key!r}; valid: option names {sorted(Options.names())} "
            f"or {PARAM_PREFIX}NAME"
        )
    return key


def _scalar(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def parse_grid_spec(spec: str) -> tuple[str, list[Any]]:
    """Parse ``key=v1,v2,...`` into the key and its values.

    Values are JSON where they parse (numbers, ``true``, ``null``, objects)
    and strings otherwise, so ``policy=decay,reference`` and
    ``policy_params={"half_life": 8},{"half_life": 16}`` both work.
    """
    key, sep, rest = spec.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--grid expects KEY=V1,V2,..., got {spec!r}")
    key = _check_key(key)
    rest = rest.strip()
    try:
        # the whole list as JSON first: keeps commas inside objects intact
        values = orjson.loads(f"[{rest}]")
    except orjson.JSONDecodeError:
        values = [_scalar(v.strip()) for v in rest.split(",") if v.strip()]
    if not values:
        raise ConfigError(f"--grid {key} has no values")
    return key, list(values)


def load_grid_file(path: str | Path) -> dict[str, list[Any]]:
    """Read a grid from a JSON file holding ``{key: [values]}`` (a bare value is one value)."""
    data = read_json_file(path)
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"{path}: a grid file holds a non-empty JSON object of key: [values]")
    grid: dict[str, list[Any]] = {}
    for key, values in data.items():
        values = values if isinstance(values, list) else [values]
        if not values:
            raise ConfigError(f"{path}: grid key {key!r} has no values")
        grid[_check_key(key)] = list(values)
    return grid


def expand_grid(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Return every combination of the grid's values, in order (the first key varies slowest)."""
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


def _apply(base: Mapping[str, Any], combo: Mapping[str, Any]) -> dict[str, Any]:
    data = dict(base)
    params = dict(data.get("policy_params") or {})
    for key, value in combo.items():
        if key.startswith(PARAM_PREFIX):
            params[key[len(PARAM_PREFIX):]] = value
        elif key == "policy_params":
            params = dict(value or {})
        else:
            data[key] = value
    # a policy switched by the grid starts from its own defaults, not the base's parameters
    if "policy" in combo and "policy_params" not in combo and combo["policy"] != base.get("policy"):
        params = {k[len(PARAM_PREFIX):]: v for k, v in combo.items() if k.startswith(PARAM_PREFIX)}
    data["policy_params"] = params
    return data


def flatten(options: Mapping[str, Any]) -> dict[str, Any]:
    """Return options with ``policy_params`` spread into ``policy_params.X`` keys."""
    out = {k: v for k, v in options.items() if k != "policy_params"}
    for k, v in (options.get("policy_params") or {}).items():
        out[PARAM_PREFIX + k] = v
    return out


def changes(options: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    """Return the (flattened) options whose values differ from ``base``."""
    flat, ref = flatten(options), flatten(base)
    return {k: v for k, v in flat.items() if k not in ref or ref[k] != v}


def label(diff: Mapping[str, Any]) -> str:
    """Return ``key=value`` pairs of a configuration's changes, or ``defaults``."""
    if not diff:
        return "defaults"
    return " ".join(f"{k}={show(v)}" for k, v in diff.items())


def show(value: Any) -> str:
    """Return a value as a grid spec writes it: strings bare, the rest as JSON."""
    return value if isinstance(value, str) else orjson.dumps(value).decode()


@attrs.frozen
class Candidate:
    """One valid configuration to replay: its full options and what differs from the base."""

    options: Mapping[str, Any]
    changes: Mapping[str, Any]


def validate(
    combos: Iterable[Mapping[str, Any]],
    base: Mapping[str, Any] | None = None,
    *,
    note: Callable[[str], None] | None = None,
) -> list[Candidate]:
    """Return the combinations that build valid options, in order, without duplicates.

    Each is laid over ``base`` and checked with ``Options.build`` and
    ``get_policy``; an invalid one is reported through ``note`` and skipped.
    The base itself is checked too: an invalid base is a ``ConfigError``.
    """
    base_opts = Options.build(base or {})
    ref = base_opts.to_dict()
    get_policy(base_opts.policy, **dict(base_opts.policy_params))
    out: list[Candidate] = []
    seen: set[bytes] = set()
    for combo in combos:
        try:
            opts = Options.build(_apply(ref, combo))
            get_policy(opts.policy, **dict(opts.policy_params))
        except PagerError as exc:
            if note is not None:
                note(f"skipped {label(dict(combo))}: {exc}")
            continue
        data = opts.to_dict()
        key = orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
        if key in seen:
            continue
        seen.add(key)
        out.append(Candidate(options=data, changes=changes(data, ref)))
    return out


def cap(candidates: Sequence[Candidate], max_points: int, *, seed: int = 0) -> list[Candidate]:
    """Return at most ``max_points`` candidates: a seeded sample, order kept, the base kept.

    The base configuration (no changes), when present, is always kept: it is
    the point every other one is read against.
    """
    if max_points < 1:
        raise ConfigError("--max-points must be at least 1")
    if len(candidates) <= max_points:
        return list(candidates)
    base = [i for i, c in enumerate(candidates) if not c.changes][:1]
    rest = [i for i in range(len(candidates)) if i not in base]
    picked = base + random.Random(seed).sample(rest, max_points - len(base))
    return [candidates[i] for i in sorted(picked)]


# --------------------------------------------------------------------------
# Points and the frontier


@attrs.frozen
class Point:
    """One configuration's aggregate figures over the replayed sessions."""

    name: str
    changes: Mapping[str, Any]
    options: Mapping[str, Any]
    cost_vs_full: float | None
    coverage: float | None
    long_coverage: float | None = None
    mean_vs_full: float | None = None
    median_ratio: float | None = None
    growth: float | None = None
    violations: int = 0
    errors: int = 0
    frontier: bool = False

    def score(self, objective: str = "coverage") -> float | None:
        """Return the coverage figure ``objective`` names."""
        if objective not in OBJECTIVES:
            raise ConfigError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
        return getattr(self, objective)

    def eligible(self, objective: str = "coverage") -> bool:
        """Return whether the point may be on the frontier: clean, and measured."""
        return (self.violations == 0 and self.errors == 0
                and self.cost_vs_full is not None and self.score(objective) is not None)

    def figures(self) -> dict[str, Any]:
        """Return the measured figures as a JSON-able dict."""
        return {
            "cost_vs_full": self.cost_vs_full,
            "coverage": self.coverage,
            "long_coverage": self.long_coverage,
            "mean_vs_full": self.mean_vs_full,
            "median_ratio": self.median_ratio,
            "growth": self.growth,
            "violations": self.violations,
            "errors": self.errors,
        }

    def to_json(self) -> dict[str, Any]:
        """Return the point as a JSON-able dict."""
        return {"name": self.name, "frontier": self.frontier, "changes": dict(self.changes),
                **self.figures(), "options": dict(self.options)}


def pareto(points: Sequence[Point], objective: str = "coverage") -> list[Point]:
    """Return ``points`` with ``frontier`` set on those no other point dominates.

    A point dominates another when it costs no more and covers no less, and is
    strictly better on one of the two. Points with violations, failures or a
    missing figure are never on the frontier and dominate nothing. Equal
    points do not dominate each other, so ties all stay on the frontier.
    """
    ok = [p for p in points if p.eligible(objective)]

    def dominated(p: Point) -> bool:
        pc, ps = p.cost_vs_full, p.score(objective)
        for q in ok:
            qc, qs = q.cost_vs_full, q.score(objective)
            if qc <= pc and qs >= ps and (qc < pc or qs > ps):  # type: ignore[operator]
                return True
        return False

    return [attrs.evolve(p, frontier=p.eligible(objective) and not dominated(p)) for p in points]


def choose(points: Sequence[Point], target: float, objective: str = "coverage") -> Point | None:
    """Return the cheapest frontier point covering at least ``target``.

    If no frontier point reaches the target, return the one covering most
    (the cheaper on a tie); None when the frontier is empty. ``points`` must
    have been through ``pareto``.
    """
    front = [p for p in points if p.frontier]
    if not front:
        return None

    def cov(p: Point) -> float:
        return p.score(objective) or 0.0  # frontier points are measured: never None here

    def cost(p: Point) -> float:
        return p.cost_vs_full or 0.0

    good = [p for p in front if cov(p) >= target]
    if good:
        return min(good, key=lambda p: (cost(p), -cov(p)))
    return max(front, key=lambda p: (cov(p), -cost(p)))


def by_cost(points: Iterable[Point]) -> list[Point]:
    """Return points sorted by cost (unmeasured last), then by name."""
    return sorted(points, key=lambda p: (p.cost_vs_full is None, p.cost_vs_full or 0.0, p.name))


def config_document(
    point: Point,
    *,
    sessions: int,
    pricing: Mapping[str, Any],
    objective: str = "coverage",
    target: float | None = None,
) -> dict[str, Any]:
    """Return what ``--write`` saves: full options under ``"options"``, and the evidence."""
    return {
        "options": dict(point.options),
        "changes": dict(point.changes),
        "figures": point.figures(),
        "sessions": sessions,
        "pricing": dict(pricing),
        "objective": objective,
        "target": target,
        "written_by": "pager tune",
    }


# --------------------------------------------------------------------------
# Replaying


def run_points(
    sessions: Sequence[Any],
    candidates: Sequence[Candidate],
    *,
    pricing: Any,
    batch: int = 6,
    progress: bool | None = None,
    stream: TextIO | None = None,
    long_gap: int | None = None,
    opener: Callable[..., Any] | None = None,
) -> list[Point]:
    """Replay ``sessions`` through every candidate, ``batch`` at a time; return their points.

    Each batch runs beside ``FullResend`` so costs are relative to full resend
    on the same calls. One ``Facts`` serves every batch: token counts and
    terms of a message are computed once for the whole search.
    """
    from pager.replay.facts import Facts
    from pager.replay.runner import LONG_GAP, run
    from pager.replay.strategies import FullResend, PagerStrategy

    if batch < 1:
        raise ConfigError("batch must be at least 1")
    facts = Facts()
    names = [f"p{i + 1:02d}" for i in range(len(candidates))]
    points: list[Point] = []
    batches = range(0, len(candidates), batch)
    for n, start in enumerate(batches):
        chunk = list(zip(names[start:start + batch], candidates[start:start + batch]))
        if stream is not None and len(batches) > 1:
            stream.write(f"pager tune: batch {n + 1}/{len(batches)} "
                         f"({chunk[0][0]}-{chunk[-1][0]})\n")
        extra = {"opener": opener} if opener is not None else {}
        strategies: list[Any] = [FullResend("full", facts=facts)]
        strategies += [PagerStrategy(name, **extra, **dict(c.options)) for name, c in chunk]
        result = run(sessions, strategies, pricing=pricing, facts=facts,
                     long_gap=LONG_GAP if long_gap is None else long_gap,
                     progress=progress, stream=stream, full_name="full")
        summary = {s.strategy: s for s in result.summary}
        for name, c in chunk:
            s = summary[name]
            points.append(Point(
                name=name, changes=c.changes, options=c.options,
                cost_vs_full=s.cost_vs_full, coverage=s.coverage,
                long_coverage=s.long_coverage, mean_vs_full=s.mean_vs_full,
                median_ratio=s.median_ratio, growth=s.growth,
                violations=s.violations, errors=s.errors,
            ))
    return points


def load_base(config: str | Path | None, context_window: int | None = None) -> dict[str, Any]:
    """Return the base options: a config file's (if any) with ``context_window`` laid over."""
    base = load_config(config) if config is not None else {}
    if context_window is not None:
        base["context_window"] = context_window
    return Options.build(base).to_dict()

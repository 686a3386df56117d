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
3. ``run_points`` replays each session through every variant (``batch`` at a
   time, beside ``FullResend`` so every cost is relative to full resend on the
   same calls), one session per task, in ``jobs`` processes. Each task gives
   one ``SessionMetrics`` per variant; a ``Log`` keeps them, so that an
   interrupted search can be resumed without replaying what finished. The
   per-session figures of a variant, over every session, become its ``Point``.
4. ``pareto`` marks the points no other point beats on both re-read cost
   (cache-adjusted cost plus each fault priced as the re-read of its pages;
   lower is better) and a coverage figure (names coverage by default; higher
   is better); a point with violations or failures is never on the frontier.
   ``choose_floors`` picks the point of least re-read cost that meets every
   floor (names coverage, the worst session's coverage, ...), or none;
   ``choose`` the frontier point of least cost above one floor.
5. ``config_document`` is what ``--write`` saves: the full options under
   ``"options"`` (``pager.open(config=...)`` reads that key) beside the
   figures that justified them.

Only step 3 replays anything; the rest is pure and tested with hand-made
points.
"""

from __future__ import annotations

import hashlib
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
    "COSTS",
    "DEFAULT_POINTS",
    "OBJECTIVES",
    "Candidate",
    "Log",
    "Point",
    "by_cost",
    "cap",
    "changes",
    "choose",
    "choose_floors",
    "floors_text",
    "config_document",
    "expand_grid",
    "flatten",
    "label",
    "load_base",
    "load_grid_file",
    "pareto",
    "parse_grid_spec",
    "run_points",
    "session_digest",
    "show",
    "tune_session",
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
OBJECTIVES = ("names_coverage", "coverage", "long_coverage", "worst_coverage")

# Cost figures the frontier can be drawn on; the first (the re-read price) is what tune minimises.
COSTS = ("reread_vs_full", "effective_vs_full", "cost_vs_full")


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
    strict: bool = False,
) -> list[Candidate]:
    """Return the combinations that build valid options, in order, without duplicates.

    Each is laid over ``base`` and checked with ``Options.build`` and
    ``get_policy``; an invalid one is reported through ``note`` and skipped.
    The base itself is checked too: an invalid base is a ``ConfigError``.
    With ``strict`` (a grid the user gave), a value that is valid in no
    combination (``high_watermark=-1``, ``policy=nosuch``) is a ``ConfigError``
    naming it; combinations invalid only together are still skipped.
    """
    base_opts = Options.build(base or {})
    ref = base_opts.to_dict()
    get_policy(base_opts.policy, **dict(base_opts.policy_params))
    out: list[Candidate] = []
    seen: set[bytes] = set()
    used: dict[tuple[str, bytes], bool] = {}  # (key, value) -> valid in some combination
    why: dict[tuple[str, bytes], str] = {}
    combos = list(combos)
    for combo in combos:
        pairs = [(k, orjson.dumps(v, option=orjson.OPT_SORT_KEYS)) for k, v in combo.items()]
        try:
            opts = Options.build(_apply(ref, combo))
            get_policy(opts.policy, **dict(opts.policy_params))
        except PagerError as exc:
            for pair in pairs:
                used.setdefault(pair, False)
                why.setdefault(pair, str(exc))
            if note is not None:
                note(f"skipped {label(dict(combo))}: {exc}")
            continue
        for pair in pairs:
            used[pair] = True
        data = opts.to_dict()
        key = orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
        if key in seen:
            continue
        seen.add(key)
        out.append(Candidate(options=data, changes=changes(data, ref)))
    if strict:
        bad = [pair for pair, ok in used.items() if not ok]
        # blame a value that is invalid on its own first (every combination then fails)
        for key, raw in sorted(bad, key=lambda pair: _valid_alone(ref, pair)):
            value = show(orjson.loads(raw))
            reason = _why_alone(ref, (key, raw)) or why[(key, raw)]
            raise ConfigError(f"--grid {key}={value}: no combination with it is valid: {reason}")
    return out


def _why_alone(ref: Mapping[str, Any], pair: tuple[str, bytes]) -> str | None:
    try:
        opts = Options.build(_apply(ref, {pair[0]: orjson.loads(pair[1])}))
        get_policy(opts.policy, **dict(opts.policy_params))
    except PagerError as exc:
        return str(exc)
    return None


def _valid_alone(ref: Mapping[str, Any], pair: tuple[str, bytes]) -> bool:
    return _why_alone(ref, pair) is None


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
    effective_vs_full: float | None = None
    fault_rate: float | None = None
    failures: tuple[tuple[str, str], ...] = ()  # (session, error)
    reread_vs_full: float | None = None
    names_coverage: float | None = None
    worst_coverage: float | None = None
    worst_session: str | None = None
    sessions_below: int = 0

    def score(self, objective: str = "coverage") -> float | None:
        """Return the coverage figure ``objective`` names."""
        if objective not in OBJECTIVES:
            raise ConfigError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
        return getattr(self, objective)

    def price(self, cost: str = COSTS[0]) -> float | None:
        """Return the cost figure ``cost`` names (re-read cost by default)."""
        if cost not in COSTS:
            raise ConfigError(f"cost must be one of {COSTS}, got {cost!r}")
        return getattr(self, cost)

    def eligible(self, objective: str = "coverage", cost: str = COSTS[0]) -> bool:
        """Return whether the point may be on the frontier: clean, and measured."""
        return (self.violations == 0 and self.errors == 0
                and self.price(cost) is not None and self.score(objective) is not None)

    def figures(self) -> dict[str, Any]:
        """Return the measured figures as a JSON-able dict."""
        return {
            "reread_vs_full": self.reread_vs_full,
            "effective_vs_full": self.effective_vs_full,
            "fault_rate": self.fault_rate,
            "names_coverage": self.names_coverage,
            "worst_coverage": self.worst_coverage,
            "worst_session": self.worst_session,
            "sessions_below": self.sessions_below,
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
                **self.figures(), "options": dict(self.options),
                "failures": [{"session": sid, "error": e} for sid, e in self.failures]}


def pareto(points: Sequence[Point], objective: str = "coverage", cost: str = COSTS[0]) -> list[Point]:
    """Return ``points`` with ``frontier`` set on those no other point dominates.

    A point dominates another when it costs no more (``cost``: re-read cost
    by default) and covers no less, and is strictly better on one of the two.
    Points with violations, failures or a missing figure are never on the
    frontier and dominate nothing. Equal points do not dominate each other,
    so ties all stay on the frontier.
    """
    ok = [p for p in points if p.eligible(objective, cost)]

    def dominated(p: Point) -> bool:
        pc, ps = p.price(cost), p.score(objective)
        for q in ok:
            qc, qs = q.price(cost), q.score(objective)
            if qc <= pc and qs >= ps and (qc < pc or qs > ps):  # type: ignore[operator]
                return True
        return False

    return [attrs.evolve(p, frontier=p.eligible(objective, cost) and not dominated(p))
            for p in points]


def choose(points: Sequence[Point], floor: float, objective: str = "coverage",
           cost: str = COSTS[0]) -> Point | None:
    """Return the frontier point of least cost (re-read cost) covering at least ``floor``.

    If no frontier point reaches the floor, return the one covering most
    (the cheaper on a tie); None when the frontier is empty. ``points`` must
    have been through ``pareto`` with the same ``cost``.
    """
    front = [p for p in points if p.frontier]
    if not front:
        return None

    def cov(p: Point) -> float:
        return p.score(objective) or 0.0  # frontier points are measured: never None here

    def price(p: Point) -> float:
        return p.price(cost) or 0.0

    good = [p for p in front if cov(p) >= floor]
    if good:
        return min(good, key=lambda p: (price(p), -cov(p)))
    return max(front, key=lambda p: (cov(p), -price(p)))


def choose_floors(points: Sequence[Point], floors: Mapping[str, float],
                  cost: str = COSTS[0]) -> Point | None:
    """Return the clean point of least ``cost`` (re-read cost) meeting every floor, or None.

    ``floors`` maps coverage figures (``OBJECTIVES``) to the least each must
    reach, e.g. ``{"names_coverage": 0.97, "worst_coverage": 0.90}``. A point
    with violations, failures or a missing figure never qualifies. On a tie
    of cost, the one covering more names wins, then the name.
    """
    for objective in floors:
        if objective not in OBJECTIVES:
            raise ConfigError(f"floor on {objective!r}: expected one of {OBJECTIVES}")

    def meets(p: Point) -> bool:
        if not p.eligible(OBJECTIVES[0], cost):
            return False
        return all((p.score(k) is not None and p.score(k) >= v)  # type: ignore[operator]
                   for k, v in floors.items())

    good = [p for p in points if meets(p)]
    if not good:
        return None
    return min(good, key=lambda p: (p.price(cost), -(p.names_coverage or 0.0), p.name))


def floors_text(floors: Mapping[str, float]) -> str:
    """Return the floors as words: ``names coverage >= 0.97, worst coverage >= 0.9``."""
    return ", ".join(f"{k.replace('_', ' ')} >= {v:g}" for k, v in floors.items()) or "no floor"


def by_cost(points: Iterable[Point], cost: str = COSTS[0]) -> list[Point]:
    """Return points sorted by ``cost`` (re-read cost; unmeasured last), then by name."""
    return sorted(points, key=lambda p: (p.price(cost) is None, p.price(cost) or 0.0, p.name))


def config_document(
    point: Point,
    *,
    sessions: int,
    pricing: Mapping[str, Any],
    objective: str = "coverage",
    target: float | None = None,
    fault_cost: Mapping[str, Any] | None = None,
    floors: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Return what ``--write`` saves: full options under ``"options"``, and the evidence.

    ``target`` is the coverage floor the choice was made under; ``floors``
    every floor (figure -> least value).
    """
    return {
        "options": dict(point.options),
        "changes": dict(point.changes),
        "figures": point.figures(),
        "sessions": sessions,
        "pricing": dict(pricing),
        "fault_cost": dict(fault_cost) if fault_cost is not None else None,
        "objective": objective,
        "target": target,
        "floors": dict(floors) if floors is not None else None,
        "written_by": "pager tune",
    }


# --------------------------------------------------------------------------
# Replaying


def session_digest(session: Any) -> str:
    """Return a short digest of a session's messages (what a resumed log is checked against)."""
    return hashlib.blake2b(orjson.dumps(list(session.messages)), digest_size=12).hexdigest()


def option_key(options: Mapping[str, Any]) -> str:
    """Return the canonical text of a configuration: the key results are logged under."""
    return orjson.dumps(dict(options), option=orjson.OPT_SORT_KEYS).decode()


def tune_session(
    session: Any,
    variants: Sequence[tuple[str, Mapping[str, Any]]],
    batch: int,
    long_gap: int,
    pricing: Any,
    fault: Any,
    counter: Any = None,
    opener: Callable[..., Any] | None = None,
    need_gap: int | None = None,
) -> dict[str, Any]:
    """Replay one session through ``variants`` (name, options), ``batch`` at a time.

    Full resend runs once, with the first batch; every variant's figures are
    relative to it. Return ``{name: SessionMetrics}``. This is the task a
    worker process runs for ``run_points``.
    """
    from pager.lab.replay.facts import Facts
    from pager.lab.replay.metrics import summarize_session
    from pager.lab.replay.parallel import Emitter, emit
    from pager.lab.replay.runner import NEED_GAP, run_session
    from pager.lab.replay.strategies import FullResend, PagerStrategy

    facts = Facts(counter)
    bar = Emitter()
    extra = {"opener": opener} if opener is not None else {}
    out: dict[str, Any] = {}
    full_records: Any = None
    try:
        for start in range(0, len(variants), batch):
            chunk = variants[start:start + batch]
            strategies: list[Any] = [] if full_records is not None else [FullResend("full", facts=facts)]
            strategies += [PagerStrategy(name, **extra, **dict(opts)) for name, opts in chunk]
            r = run_session(session, strategies, facts=facts, long_gap=long_gap, progress=bar,
                            warn=lambda text: emit("warn", text),
                            need_gap=NEED_GAP if need_gap is None else need_gap)
            if full_records is None:
                full_records = r.records["full"]
            for name, _ in chunk:
                if name in r.errors:
                    out[name] = summarize_session(r.id, name, (), pricing, None, r.errors[name],
                                                  fault=fault)
                else:
                    out[name] = summarize_session(r.id, name, r.records[name], pricing,
                                                  full_records, fault=fault)
    finally:
        bar.flush()
    return out


@attrs.define
class Log:
    """What a search has measured, per configuration and session; saved as ``pager tune --json``.

    ``settings`` (sessions and their digests, pricing, fault cost, long gap)
    must match for a log to be resumed: figures measured under other settings
    are not comparable. ``results`` maps ``option_key(options)`` to
    ``{session id: SessionMetrics}``.
    """

    settings: dict[str, Any]
    results: dict[str, dict[str, Any]] = attrs.field(factory=dict)

    def has(self, options: Mapping[str, Any], session: str) -> bool:
        """Return whether ``options`` were measured on ``session``."""
        return session in self.results.get(option_key(options), {})

    def add(self, options: Mapping[str, Any], session: str, metrics: Any) -> None:
        """Record one configuration's figures on one session."""
        self.results.setdefault(option_key(options), {})[session] = metrics

    def runs_json(self) -> list[dict[str, Any]]:
        """Return the per-session figures as JSON: one entry per configuration."""
        return [{"options": orjson.loads(key), "sessions": {sid: m.to_json() for sid, m in per.items()}}
                for key, per in self.results.items()]

    @classmethod
    def resume(cls, path: str | Path, settings: Mapping[str, Any]) -> "Log":
        """Read the log a run wrote to ``path``; raise ``ConfigError`` if it cannot be resumed."""
        from pager.lab.replay.metrics import SessionMetrics

        doc = read_json_file(path)
        if not isinstance(doc, dict) or doc.get("written_by") != "pager tune" or "runs" not in doc:
            raise ConfigError(f"--resume: {path} is not a log written by pager tune --json")
        old = doc.get("settings") or {}
        for key in settings:
            if old.get(key) != settings[key]:
                what = key.replace("_", " ")
                raise ConfigError(f"--resume: {path} was measured with other {what}; "
                                  f"resume with the same sessions and settings, or start afresh")
        fields = {f.name for f in attrs.fields(SessionMetrics)}
        log = cls(settings=dict(settings))
        try:
            for run in doc["runs"]:
                for sid, m in run["sessions"].items():
                    log.add(run["options"], sid, SessionMetrics(**{k: v for k, v in m.items()
                                                                   if k in fields}))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"--resume: {path} is damaged: {exc}") from None
        return log


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
    jobs: int = 1,
    fault: Any = None,
    log: Log | None = None,
    on_progress: Callable[[Log], None] | None = None,
    need_gap: int | None = None,
) -> list[Point]:
    """Replay ``sessions`` through every candidate; return their points.

    One task per session replays the candidates it still lacks (``log``, when
    resuming, has the rest) ``batch`` at a time beside ``FullResend``, in
    ``jobs`` processes; ``on_progress(log)`` is called after each task. On
    ``KeyboardInterrupt`` the log holds every finished task and the
    interrupt propagates. Points are computed from the log, sessions in
    order, so they do not depend on ``jobs`` or on the run being resumed.
    """
    from pager.lab.replay.cost import FAULT_COST
    from pager.lab.replay.parallel import run_tasks
    from pager.lab.replay.runner import LONG_GAP, Progress, session_weight

    if batch < 1:
        raise ConfigError("batch must be at least 1")
    fault = fault if fault is not None else FAULT_COST
    gap = LONG_GAP if long_gap is None else long_gap
    log = log if log is not None else Log(settings={})
    names = [f"p{i + 1:02d}" for i in range(len(candidates))]
    tasks, weights, calls = [], [], 0
    for s in sessions:
        todo = [(n, dict(c.options)) for n, c in zip(names, candidates) if not log.has(c.options, s.id)]
        if not todo:
            continue
        tasks.append((s, todo, batch, gap, pricing, fault, None, opener, need_gap))
        groups = -(-len(todo) // batch)
        weights.append(session_weight(s) * (len(todo) + groups))
        n_calls = max(0, s.n_assistant - (bool(s.messages) and s.messages[0].get("role") == "assistant"))
        calls += n_calls * groups
    stream_ = stream
    bar = Progress(calls, stream=stream_, enabled=progress) if stream_ is not None else None
    by_name = dict(zip(names, candidates))

    def on_event(kind: str, payload: Any) -> None:
        if kind == "advance" and bar is not None:
            bar.advance(*payload)
        elif kind == "warn" and stream_ is not None:
            stream_.write(("\n" if bar is not None and bar.enabled else "")
                          + f"pager tune: warning: {payload}\n")

    def on_result(i: int, result: dict[str, Any]) -> None:
        sid = tasks[i][0].id
        for name, metrics in result.items():
            log.add(by_name[name].options, sid, metrics)
        if on_progress is not None:
            on_progress(log)

    if stream_ is not None and len(tasks) < len(sessions):
        stream_.write(f"pager tune: {len(sessions) - len(tasks)} of {len(sessions)} sessions "
                      f"already measured for every configuration (--resume)\n")
    try:
        run_tasks(tune_session, tasks, jobs=jobs, weights=weights, on_event=on_event,
                  on_result=on_result)
    finally:
        if bar is not None:
            bar.close()
    return points_from(log, sessions, candidates)


def points_from(log: Log, sessions: Sequence[Any], candidates: Sequence[Candidate]) -> list[Point]:
    """Return a point per candidate measured on every session (in ``log``), in order."""
    from pager.lab.replay.metrics import aggregate

    points = []
    for i, c in enumerate(candidates):
        per = log.results.get(option_key(c.options), {})
        if not all(s.id in per for s in sessions):
            continue
        name = f"p{i + 1:02d}"
        metrics = [per[s.id] for s in sessions]
        s = aggregate(name, metrics, [])
        points.append(Point(
            name=name, changes=c.changes, options=c.options,
            cost_vs_full=s.cost_vs_full, coverage=s.coverage,
            long_coverage=s.long_coverage, mean_vs_full=s.mean_vs_full,
            median_ratio=s.median_ratio, growth=s.growth,
            violations=s.violations, errors=s.errors,
            effective_vs_full=s.effective_vs_full, fault_rate=s.fault_rate,
            failures=tuple((m.session, m.error) for m in metrics if m.error),
            reread_vs_full=s.reread_vs_full, names_coverage=s.names_coverage,
            worst_coverage=s.worst_coverage, worst_session=s.worst_session,
            sessions_below=s.sessions_below,
        ))
    return points


def load_base(config: str | Path | None, context_window: int | None = None) -> dict[str, Any]:
    """Return the base options: a config file's (if any) with ``context_window`` laid over."""
    base = load_config(config) if config is not None else {}
    if context_window is not None:
        base["context_window"] = context_window
    opts = Options.build(base)
    get_policy(opts.policy, **dict(opts.policy_params))
    return opts.to_dict()

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

This module owns step 3 (the replay and its resumable log) and turning the
log into points. The grid steps (1, 2) live in ``pager.lab.grid``, the
frontier and the choice (4, 5) in ``pager.lab.frontier``; their names are
importable from here too. Only step 3 replays anything; the rest is pure and
tested with hand-made points.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TextIO

import attrs
import orjson

from pager.errors import ConfigError
from pager.lab.frontier import (
    COSTS, OBJECTIVES, Point, by_cost, choose, choose_floors, config_document, floors_text, pareto,
)
from pager.lab.grid import (
    DEFAULT_POINTS, Candidate, cap, changes, expand_grid, flatten, label, load_base, load_grid_file,
    parse_grid_spec, show, validate,
)
from pager.options import read_json_file

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


"""Run strategies over sessions, open-loop, and collect the measurements.

For every assistant message of a session (except one with no history before
it), every strategy gets the history before that message and builds a
prompt; the runner measures the prompt (tokens, cached prefix, needs covered,
invariants) and times the build. Strategies never see each other's prompts,
and the session's own later messages never depend on what a strategy built:
that is what open-loop means.

Needs are computed once per assistant message and shared by all strategies:
the needs of message i are the need-shaped strings of its text (see
``needs``: names, and plain words of six letters or more) whose most recent
earlier occurrence is ``need_gap`` (1: any earlier message) or more messages
before message i; a word counts only when at most ``needs.RARE_WORD``
earlier messages held it. A need is long-range when that occurrence is
``long_gap`` (40) or more messages back. The message of that occurrence is
the need's *page*: what a fault re-reads (``cost.FaultCost.reread``).

Sessions are independent: ``run(..., jobs=N)`` replays them in ``N``
processes (``parallel.run_tasks``) and gets the same figures as ``jobs=1``,
since every figure is computed afterwards from the call records, taken in
session order. Each session starts with empty memos, so the memory a replay
holds at once is one session's (per worker).
"""

from __future__ import annotations

import pickle
import sys
import time
from collections import Counter
from typing import Any, Mapping, Sequence, TextIO

import attrs
import orjson

from pager.errors import ConfigError
from pager.core.tokens import TokenCounter, content_text, default_counter
from pager.lab.replay.cost import FAULT_COST, FaultCost, Pricing, cached_prefix_tokens
from pager.lab.replay.facts import Facts
from pager.lab.replay.metrics import (
    SESSION_FLOOR,
    CallRecord,
    SessionMetrics,
    StrategySummary,
    aggregate,
    check_invariants,
    summarize_session,
)
from pager.lab.replay.needs import NAME_KINDS, RARE_WORD, extract_needs, message_text, terms
from pager.lab.replay.parallel import LAST_RUN, Emitter, emit, peak_rss_mib, run_tasks
from pager.lab.replay.session import Session
from pager.lab.replay.strategies import FullResend, describe

__all__ = ["BenchResult", "Progress", "SessionRun", "replay_session", "run", "run_session",
           "session_weight"]

LONG_GAP = 40
NEED_GAP = 1


class Progress:
    """Draw a one-line progress bar on a terminal (silent when the stream is not one)."""

    def __init__(
        self,
        total: int,
        *,
        stream: TextIO | None = None,
        enabled: bool | None = None,
        width: int = 28,
    ) -> None:
        self.total = max(total, 1)
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled
        self.width = width
        self.done = 0
        self.label = ""
        self._start = time.monotonic()
        self._drawn = 0.0

    def advance(self, n: int = 1, label: str | None = None) -> None:
        """Count ``n`` more units done; redraw at most ten times a second."""
        self.done += n
        if label is not None:
            self.label = label
        now = time.monotonic()
        if self.enabled and (now - self._drawn >= 0.1 or self.done >= self.total):
            self._drawn = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        frac = min(self.done / self.total, 1.0)
        filled = int(frac * self.width)
        elapsed = now - self._start
        eta = elapsed / frac - elapsed if frac > 0 else 0.0
        label = self.label if len(self.label) <= 40 else self.label[:37] + "..."
        line = (
            f"\r[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} calls "
            f"{_clock(elapsed)} eta {_clock(eta)}  {label}"
        )
        self.stream.write(line.ljust(110)[:110])
        self.stream.flush()

    def close(self) -> None:
        """End the bar's line."""
        if self.enabled:
            self._draw(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 60:02d}:{s % 60:02d}"


@attrs.frozen
class SessionRun:
    """Every strategy's call records on one session (and any strategy's error)."""

    id: str
    source: str
    path: str
    messages: int
    assistant: int
    records: Mapping[str, tuple[CallRecord, ...]]
    errors: Mapping[str, str] = attrs.field(factory=dict)


def _external(strategy: Any) -> bool:
    # strategies not written here (pager) get copies and have their failures recorded
    return bool(getattr(strategy, "copy_history", False))


def run_session(
    session: Session,
    strategies: Sequence[Any],
    *,
    facts: Facts,
    long_gap: int = LONG_GAP,
    progress: Progress | None = None,
    warn: Any = None,
    need_gap: int = NEED_GAP,
) -> SessionRun:
    """Replay one session through every strategy; return the call records."""
    msgs = session.messages
    records: dict[str, list[CallRecord]] = {s.name: [] for s in strategies}
    errors: dict[str, str] = {}
    previous: dict[str, list[bytes] | None] = {s.name: None for s in strategies}
    live = []
    for s in strategies:
        try:
            s.reset(dict(session.header))
            live.append(s)
        except Exception as exc:
            if not _external(s):
                raise
            errors[s.name] = _describe_error(exc)
            if warn:
                warn(f"{s.name} failed on {session.id} at reset: {errors[s.name]}")

    last_seen: dict[str, int] = {}
    seen_in: Counter[str] = Counter()  # earlier messages holding each term: what makes a word rare
    # where each canonical message is in the history, kept as the history grows (rather than
    # rebuilt for each call and strategy: every strategy's order check reads the same one)
    positions: dict[bytes, list[int]] = {}
    known = 0  # the history messages in positions: msgs[:known]
    try:
        for i, msg in enumerate(msgs):
            if msg.get("role") == "assistant" and i > 0:
                history = list(msgs[:i])
                for j in range(known, i):
                    positions.setdefault(facts.key(msgs[j]), []).append(j)
                known = i
                needs = extract_needs(message_text(msg), words=True)
                appeared = {n for n, kind in needs.items()
                            if n in last_seen and i - last_seen[n] >= need_gap
                            and (kind != "word" or seen_in[n] <= RARE_WORD)}
                long = {n for n in appeared if i - last_seen[n] >= long_gap}
                names = {n for n in appeared if needs[n] in NAME_KINDS}
                completion = facts.tokens(msg)
                copy: list[dict[str, Any]] | None = None
                for s in list(live):
                    hist = history
                    if _external(s):
                        if copy is None:
                            copy = orjson.loads(orjson.dumps(history))
                        hist = copy
                        copy = None  # each external strategy gets its own copy
                    t0 = time.perf_counter()
                    try:
                        prompt = s.build(hist)
                    except Exception as exc:
                        if not _external(s):
                            raise
                        errors[s.name] = _describe_error(exc, at=i)
                        live.remove(s)
                        if warn:
                            warn(f"{s.name} failed on {session.id}: {errors[s.name]}")
                        continue
                    elapsed_ms = (time.perf_counter() - t0) * 1000.0
                    records[s.name].append(
                        _measure(s, prompt, history, i, appeared, long, completion,
                                 elapsed_ms, facts, previous, names=names, sources=last_seen,
                                 positions=positions)
                    )
                if progress is not None:
                    progress.advance(1, session.id)
            offered = facts.terms(msg)
            last_seen.update(dict.fromkeys(offered, i))
            seen_in.update(offered)
    finally:
        for s in strategies:
            close = getattr(s, "close", None)
            if close is not None:
                try:
                    close()
                except Exception as exc:  # a failed cleanup must not hide the results
                    if warn:
                        warn(f"{s.name}: close failed on {session.id}: {exc}")
    return SessionRun(
        id=session.id,
        source=session.source,
        path=session.path,
        messages=len(msgs),
        assistant=session.n_assistant,
        records={k: tuple(v) for k, v in records.items() if k not in errors},
        errors=errors,
    )


def _describe_error(exc: BaseException, at: int | None = None) -> str:
    where = f" (building for message {at})" if at is not None else ""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}{where}"


def _measure(
    strategy: Any,
    prompt: list[dict[str, Any]],
    history: list[dict[str, Any]],
    index: int,
    appeared: set[str],
    long: set[str],
    completion: int,
    elapsed_ms: float,
    facts: Facts,
    previous: dict[str, list[bytes] | None],
    *,
    names: set[str] = frozenset(),  # type: ignore[assignment]
    sources: Mapping[str, int] | None = None,
    positions: Mapping[bytes, Sequence[int]] | None = None,
) -> CallRecord:
    keys = facts.keys(prompt)
    toks = [facts.tokens(m, k) for m, k in zip(prompt, keys)]
    total = sum(toks)
    cached = cached_prefix_tokens(previous[strategy.name], keys, toks)
    previous[strategy.name] = keys
    missing = appeared
    # newest first: the needs of the next message are mostly in the latest ones
    for j in range(len(prompt) - 1, -1, -1):
        if not missing:
            break
        missing = missing - facts.terms(prompt[j], keys[j])  # iterates the small set, not the terms
    violations = check_invariants(
        prompt,
        history,
        facts=facts,
        budget=getattr(strategy, "budget", None),
        prompt_tokens=total,
        pins_l1=bool(getattr(strategy, "pins_l1", False)),
        keys=keys,
        positions=positions,
    )
    layers_fn = getattr(strategy, "layers", None)
    layers = layers_fn() if layers_fn is not None else None
    pages: tuple[int, ...] = ()
    misses: tuple[str, ...] = ()
    if missing and sources is not None:
        where = {n: sources[n] for n in missing}
        # one re-read per page, however many of the call's needs it held
        pages = tuple(facts.tokens(history[j]) for j in sorted(set(where.values())))
        misses = miss_kinds(where, prompt, history)
    return CallRecord(
        index=index,
        prompt_tokens=total,
        cached_tokens=cached,
        completion_tokens=completion,
        messages=len(prompt),
        needs=len(appeared),
        covered=len(appeared) - len(missing),
        long_needs=len(long),
        long_covered=len(long - missing),
        violations=tuple(violations),
        latency_ms=elapsed_ms,
        layers=layers,
        names=len(names),
        names_covered=len(names - missing),
        reread_pages=pages,
        misses=misses,
    )


def miss_kinds(
    where: Mapping[str, int], prompt: Sequence[Mapping[str, Any]], history: Sequence[Mapping[str, Any]]
) -> tuple[str, ...]:
    """Return ``"state:kind"`` for each missed need (``where``: need -> index of its page).

    state: ``stubbed`` when the page's message is in the prompt in another
    form (its tool call id is there: a stub, a handle, an excerpt), else
    ``dropped``. kind: ``tool output``, ``agent text`` (the assistant's
    content), ``tool-call args`` (the need is only in its calls' arguments),
    ``user text`` or ``system``.
    """
    ids = set()
    for m in prompt:
        if m.get("role") == "tool":
            ids.add(m.get("tool_call_id"))
        for c in m.get("tool_calls") or ():
            ids.add(c.get("id"))
    out = []
    for need, j in sorted(where.items()):
        page = history[j]
        role = page.get("role")
        own = {page.get("tool_call_id")} if role == "tool" else {
            c.get("id") for c in page.get("tool_calls") or ()}
        state = "stubbed" if (own - {None}) & ids else "dropped"
        if role == "tool":
            kind = "tool output"
        elif role == "assistant":
            kind = "agent text" if need in terms(content_text(page.get("content"))) else "tool-call args"
        elif role == "user":
            kind = "user text"
        else:
            kind = "system"
        out.append(f"{state}:{kind}")
    return tuple(out)


@attrs.frozen
class BenchResult:
    """Everything one benchmark run measured, ready for tables, JSON and HTML."""

    strategies: tuple[str, ...]
    settings: tuple[Mapping[str, Any], ...]
    pricing: Pricing
    runs: tuple[SessionRun, ...]
    per_session: tuple[SessionMetrics, ...]
    summary: tuple[StrategySummary, ...]
    skipped: tuple[tuple[str, str], ...] = ()
    long_gap: int = LONG_GAP
    seconds: float = 0.0
    fault: FaultCost = FAULT_COST
    need_gap: int = NEED_GAP

    @property
    def failures(self) -> list[tuple[str, str, str]]:
        """Return ``(session, strategy, error)`` for every strategy that failed on a session."""
        return [(r.id, name, err) for r in self.runs for name, err in r.errors.items()]

    def metrics_for(self, session: str) -> dict[str, SessionMetrics]:
        """Return each strategy's figures on one session."""
        return {m.strategy: m for m in self.per_session if m.session == session}

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-able dict: settings, summary, per-session figures and series."""
        sessions = []
        for r in self.runs:
            series = {
                name: {
                    "index": [c.index for c in recs],
                    "prompt_tokens": [c.prompt_tokens for c in recs],
                    "cached_tokens": [c.cached_tokens for c in recs],
                    "completion_tokens": [c.completion_tokens for c in recs],
                    "latency_ms": [round(c.latency_ms, 3) for c in recs],
                    "faults": [int(c.fault) for c in recs],
                    "reread_pages": [list(c.reread_pages) for c in recs],
                    "layers": [dict(c.layers) if c.layers else None for c in recs]
                    if any(c.layers for c in recs)
                    else None,
                }
                for name, recs in r.records.items()
            }
            sessions.append(
                {
                    "id": r.id,
                    "source": r.source,
                    "path": r.path,
                    "messages": r.messages,
                    "assistant": r.assistant,
                    "errors": dict(r.errors),
                    "metrics": {k: v.to_json() for k, v in self.metrics_for(r.id).items()},
                    "series": series,
                }
            )
        return {
            "pricing": attrs.asdict(self.pricing),
            "fault_cost": attrs.asdict(self.fault),
            "long_gap": self.long_gap,
            "need_gap": self.need_gap,
            "session_floor": SESSION_FLOOR,
            "seconds": self.seconds,
            "strategies": list(self.settings),
            "summary": [s.to_json() for s in self.summary],
            "sessions": sessions,
            "skipped": [{"path": p, "reason": why} for p, why in self.skipped],
            "failures": [{"session": sid, "strategy": name, "error": err}
                         for sid, name, err in self.failures],
        }


def session_weight(session: Session) -> float:
    """Return a session's relative replay cost: calls times history length."""
    return float(session.n_assistant) * len(session.messages)


def replay_session(
    session: Session,
    strategies: Sequence[Any],
    counter: TokenCounter | None,
    long_gap: int,
    need_gap: int = NEED_GAP,
) -> SessionRun:
    """Replay one session with fresh memos; the task a worker process runs.

    Strategies arrive unpickled, without their ``Facts`` (see
    ``strategies._Baseline``): they get this task's. Progress and warnings go
    to ``parallel.emit``.
    """
    facts = Facts(counter)
    for s in strategies:
        if hasattr(s, "facts") and s.facts is None:
            s.facts = facts
    bar = Emitter()
    try:
        return run_session(session, strategies, facts=facts, long_gap=long_gap, progress=bar,
                           warn=lambda text: emit("warn", text), need_gap=need_gap)
    finally:
        bar.flush()


def run(
    sessions: Sequence[Session],
    strategies: Sequence[Any],
    *,
    pricing: Pricing,
    facts: Facts | None = None,
    long_gap: int = LONG_GAP,
    progress: bool | None = None,
    stream: TextIO | None = None,
    skipped: Sequence[tuple[str, str]] = (),
    full_name: str | None = None,
    jobs: int = 1,
    fault: FaultCost = FAULT_COST,
    need_gap: int = NEED_GAP,
) -> BenchResult:
    """Replay ``sessions`` through ``strategies``; return per-session and aggregate figures.

    Ratios to full resend use the strategy named ``full_name`` (default: the
    first ``FullResend`` among ``strategies``, else none). ``progress``:
    draw a bar on ``stream`` (stderr), None = only on a terminal. ``jobs``:
    worker processes (1: replay here); the strategies must then pickle.
    ``fault`` prices a fault for the effective cost.
    """
    stream = stream if stream is not None else sys.stderr
    if full_name is None:
        full_name = next((s.name for s in strategies if isinstance(s, FullResend)), None)
    names = tuple(s.name for s in strategies)
    if len(set(names)) != len(names):
        raise ConfigError(f"strategy names must be unique, got {list(names)}")
    if jobs < 1:
        raise ConfigError(f"jobs must be at least 1, got {jobs}")

    def warn(text: str) -> None:
        if bar.enabled:
            stream.write("\n")
        stream.write(f"pager bench: warning: {text}\n")

    total = sum(max(0, s.n_assistant - (s.messages[0].get("role") == "assistant"))
                for s in sessions if s.messages)
    bar = Progress(total, stream=stream, enabled=progress)
    t0 = time.monotonic()
    if jobs > 1 and len(sessions) > 1:
        try:
            pickle.dumps(list(strategies))
        except Exception as exc:
            raise ConfigError(f"jobs > 1 needs strategies that pickle: {exc}") from exc
        counter = facts.counter if facts is not None else None
        if counter is not None and counter is default_counter():
            counter = None  # each worker loads its own

        def on_event(kind: str, payload: Any) -> None:
            if kind == "advance":
                bar.advance(*payload)
            elif kind == "warn":
                warn(payload)

        runs = run_tasks(replay_session, [(s, strategies, counter, long_gap, need_gap) for s in sessions],
                         jobs=jobs, weights=[session_weight(s) for s in sessions],
                         on_event=on_event)
    else:
        facts = facts if facts is not None else Facts()
        runs = []
        for s in sessions:
            runs.append(run_session(s, strategies, facts=facts, long_gap=long_gap,
                                    progress=bar, warn=warn, need_gap=need_gap))
            facts.clear()  # memos are per session: memory stays one session's
        LAST_RUN.update(processes=1, peak_mib=peak_rss_mib())
    bar.close()
    seconds = time.monotonic() - t0
    return collect(runs, names, strategies, pricing=pricing, full_name=full_name,
                   skipped=skipped, long_gap=long_gap, seconds=seconds, fault=fault,
                   need_gap=need_gap)


def collect(
    runs: Sequence[SessionRun],
    names: Sequence[str],
    strategies: Sequence[Any],
    *,
    pricing: Pricing,
    full_name: str | None,
    skipped: Sequence[tuple[str, str]] = (),
    long_gap: int = LONG_GAP,
    seconds: float = 0.0,
    fault: FaultCost = FAULT_COST,
    need_gap: int = NEED_GAP,
) -> BenchResult:
    """Return the figures of replayed sessions (``runs``, in session order)."""
    per_session: list[SessionMetrics] = []
    for r in runs:
        full = r.records.get(full_name) if full_name else None
        for name in names:
            if name in r.errors:
                per_session.append(summarize_session(r.id, name, (), pricing, None, r.errors[name],
                                                     fault=fault))
            else:
                per_session.append(summarize_session(r.id, name, r.records[name], pricing, full,
                                                     fault=fault))
    summary = []
    for name in names:
        lat = [c.latency_ms for r in runs for c in r.records.get(name, ())]
        summary.append(aggregate(name, [m for m in per_session if m.strategy == name], lat))
    return BenchResult(
        strategies=tuple(names),
        settings=tuple(describe(strategies)),
        pricing=pricing,
        runs=tuple(runs),
        per_session=tuple(per_session),
        summary=tuple(summary),
        skipped=tuple(skipped),
        long_gap=long_gap,
        seconds=seconds,
        fault=fault,
        need_gap=need_gap,
    )

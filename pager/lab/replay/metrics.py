"""Benchmark metrics: invariant checks, per-call records, per-session and aggregate figures.

Every figure is defined in ``docs/metrics.md``; this module is the reference
implementation, and the tests hold it to hand-computed values. In short:

- per call (``CallRecord``): prompt tokens, cached tokens, completion tokens,
  needs / covered needs (all and long-range), invariant violations, latency;
- per session and strategy (``summarize_session``): mean and max prompt,
  prompt:completion ratio, cache-adjusted cost and its ratio to full resend,
  faults (calls missing at least one need) and effective cost (cost plus the
  price of each fault as an excerpt, ``cost.FaultCost``) and re-read cost
  (cost plus each fault priced as the re-read of its pages) and their ratios
  to full resend, names coverage (coverage of the needs that are names),
  mean prompt relative to full resend, growth, coverage, violations, latency;
- per strategy over sessions (``aggregate``): cost and mean prompt relative
  to full resend pooled (sum over sessions over full resend's sum), so are
  effective and re-read cost, the fault rate pooled over calls, names
  coverage pooled over names, the worst session's coverage (and which), the
  sessions under ``SESSION_FLOOR`` (0.90) coverage, the
  median over sessions of the prompt:completion ratio and of growth (and the
  pooled ratio), coverage pooled over all needs, violations summed, latency
  percentiles over all calls.
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

import attrs
import numpy as np

from pager.core.tokens import content_text
from pager.lab.replay.cost import FAULT_COST, FaultCost, Pricing
from pager.lab.replay.facts import Facts, canonical

__all__ = [
    "SESSION_FLOOR",
    "CallRecord",
    "SessionMetrics",
    "StrategySummary",
    "aggregate",
    "check_invariants",
    "effective_cost",
    "growth",
    "history_positions",
    "percentile",
    "reread_cost",
    "summarize_session",
    "violation_kind",
]

SYSTEM_ROLES = ("system", "developer")

# A session covering less than this is counted in ``StrategySummary.sessions_below``.
SESSION_FLOOR = 0.90


@attrs.frozen(slots=True)
class CallRecord:
    """One strategy's prompt for one assistant message, measured.

    ``index`` is the assistant message's position in the session's messages.
    ``names`` / ``names_covered``: the needs that are names (paths,
    identifiers, numbers). ``reread_pages``: the token counts of the distinct
    history messages that last held a missed need (what a fault re-reads);
    ``misses``: ``"state:kind"`` per missed need (``runner.miss_kinds``).
    """

    index: int
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    messages: int = 0
    needs: int = 0
    covered: int = 0
    long_needs: int = 0
    long_covered: int = 0
    violations: tuple[str, ...] = ()
    latency_ms: float = 0.0
    layers: Mapping[str, int] | None = None
    names: int = 0
    names_covered: int = 0
    reread_pages: tuple[int, ...] = ()
    misses: tuple[str, ...] = ()

    @property
    def fault(self) -> bool:
        """Return whether the prompt missed at least one of the call's needs."""
        return self.covered < self.needs


def violation_kind(violation: str) -> str:
    """Return the kind of a violation string (the part before the first colon)."""
    return violation.split(":", 1)[0]


def check_invariants(
    prompt: Sequence[Mapping[str, Any]],
    history: Sequence[Mapping[str, Any]],
    *,
    facts: Facts | None = None,
    budget: int | None = None,
    prompt_tokens: int | None = None,
    pins_l1: bool = False,
    keys: Sequence[bytes] | None = None,
    positions: Mapping[bytes, Sequence[int]] | None = None,
) -> list[str]:
    """Return the invariant violations of one built prompt (empty when it is sound).

    ``keys`` (the prompt's canonical bytes, ``facts.keys(prompt)``) and
    ``positions`` (``history_positions(history)``) may be passed by a caller that
    has them already: the replay keeps the positions of its growing history
    rather than rebuild them for every call and strategy.

    Checks, each reported as ``"kind: detail"``:

    - ``unanswered``: an assistant tool call with no tool message answering
      it before the next assistant message (or the end of the prompt);
    - ``orphan``: a tool message answering no open call of the latest
      assistant message;
    - ``order``: messages byte-equal (canonical bytes) to history messages
      must appear in history order; messages pager adds (stubs, recalls,
      cards) are not history and are not checked;
    - ``over_budget``: ``prompt_tokens > budget`` when a budget is given;
    - ``l1``: with ``pins_l1``, each history system message and the first
      user message must be in the prompt: a prompt message of the same role
      whose text contains the original text (pager may add to them).
    """
    key = facts.key if facts is not None else canonical
    out: list[str] = []

    open_calls: list[str] = []
    for i, m in enumerate(prompt):
        role = m.get("role")
        if role == "assistant":
            for cid in open_calls:
                out.append(f"unanswered: tool call {cid} before prompt[{i}]")
            open_calls = [c.get("id") for c in m.get("tool_calls") or ()]
        elif role == "tool":
            cid = m.get("tool_call_id")
            if cid in open_calls:
                open_calls.remove(cid)
            else:
                out.append(f"orphan: tool result {cid} at prompt[{i}]")
    for cid in open_calls:
        out.append(f"unanswered: tool call {cid} at the end of the prompt")

    if positions is None:
        positions = history_positions(history, facts)
    if keys is None:
        keys = [key(m) for m in prompt]
    last = -1
    for i, k in enumerate(keys):
        where = positions.get(k)
        if not where:
            continue
        # greedy: the earliest copy after the last matched one keeps any valid order valid
        nxt = next((j for j in where if j > last), None)
        if nxt is None:
            out.append(f"order: prompt[{i}] (history[{where[0]}]) is out of history order")
        else:
            last = nxt

    if budget is not None and prompt_tokens is not None and prompt_tokens > budget:
        out.append(f"over_budget: {prompt_tokens} tokens > budget {budget}")

    if pins_l1:
        out.extend(_l1_violations(prompt, history))
    return out


def history_positions(history: Sequence[Mapping[str, Any]], facts: Facts | None = None) -> dict[bytes, list[int]]:
    """Return each canonical message of ``history`` -> the indices holding it, ascending."""
    key = facts.key if facts is not None else canonical
    positions: dict[bytes, list[int]] = {}
    for j, h in enumerate(history):
        positions.setdefault(key(h), []).append(j)
    return positions


def _text(m: Mapping[str, Any]) -> str:
    return content_text(m.get("content"))


def _cut_head_of(text: str, want: str) -> bool:
    """Whether ``text`` is ``want`` cut by the L1 cap: its head, then pager's line naming the tail's handle."""
    head, sep, _ = text.rpartition("\n[pager: ")
    return bool(sep) and " continues off-prompt: " in text[len(head):] and want.startswith(head)


def _l1_violations(
    prompt: Sequence[Mapping[str, Any]], history: Sequence[Mapping[str, Any]]
) -> list[str]:
    out = []
    pinned = [(j, h) for j, h in enumerate(history) if h.get("role") in SYSTEM_ROLES]
    first_user = next(((j, h) for j, h in enumerate(history) if h.get("role") == "user"), None)
    if first_user is not None:
        pinned.append(first_user)
    for j, h in pinned:
        want = _text(h)
        role = h.get("role")
        roles = SYSTEM_ROLES if role in SYSTEM_ROLES else (role,)
        if not any(m.get("role") in roles and (want in _text(m) or _cut_head_of(_text(m), want)) for m in prompt):
            what = "first user message" if role == "user" else "system message"
            out.append(f"l1: {what} history[{j}] missing")
    return out


def percentile(values: Sequence[float], q: float) -> float | None:
    """Return the ``q``-th percentile (linear interpolation, numpy's default), or None if empty."""
    if len(values) == 0:
        return None
    return float(np.percentile(np.asarray(values, dtype=float), q))


def growth(prompts: Sequence[float]) -> float | None:
    """Return mean prompt of the second half of the calls over the first half.

    With n calls and h = n // 2, the first half is the first h calls and the
    second half the other n - h (so the middle call of an odd n is in the
    second). None when n < 2 or the first half's mean is 0.
    """
    h = len(prompts) // 2
    if h == 0:
        return None
    first = sum(prompts[:h]) / h
    second = sum(prompts[h:]) / (len(prompts) - h)
    return second / first if first else None


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


@attrs.frozen(slots=True)
class SessionMetrics:
    """One strategy on one session: the figures of ``docs/metrics.md``."""

    session: str
    strategy: str
    calls: int
    prompt_tokens: int
    completion_tokens: int
    mean_prompt: float
    max_prompt: int
    ratio: float | None
    cost: float
    cost_vs_full: float | None
    mean_vs_full: float | None
    growth: float | None
    needs: int
    covered: int
    long_needs: int
    long_covered: int
    violations: int
    violation_kinds: Mapping[str, int]
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    error: str | None = None
    full_cost: float | None = None
    full_prompt_tokens: int | None = None
    faults: int = 0
    effective_cost: float = 0.0
    effective_vs_full: float | None = None
    full_effective_cost: float | None = None
    names: int = 0
    names_covered: int = 0
    reread_cost: float = 0.0
    reread_vs_full: float | None = None
    full_reread_cost: float | None = None
    reread_pages: int = 0
    reread_tokens: int = 0
    misses: Mapping[str, int] = attrs.field(factory=dict)

    @property
    def names_coverage(self) -> float | None:
        """Return covered names over names, or None when there were none."""
        return _ratio(self.names_covered, self.names)

    @property
    def fault_rate(self) -> float | None:
        """Return faults over calls, or None when there were no calls."""
        return _ratio(self.faults, self.calls)

    @property
    def coverage(self) -> float | None:
        """Return covered needs over needs, or None when there were none."""
        return _ratio(self.covered, self.needs)

    @property
    def long_coverage(self) -> float | None:
        """Return covered long-range needs over long-range needs, or None."""
        return _ratio(self.long_covered, self.long_needs)

    def to_json(self) -> dict[str, Any]:
        """Return the figures as a JSON-able dict."""
        d = attrs.asdict(self)
        d["violation_kinds"] = dict(self.violation_kinds)
        d["misses"] = dict(self.misses)
        d["coverage"] = self.coverage
        d["long_coverage"] = self.long_coverage
        d["names_coverage"] = self.names_coverage
        d["fault_rate"] = self.fault_rate
        return d


def effective_cost(records: Sequence[CallRecord], pricing: Pricing, fault: FaultCost) -> float:
    """Return the summed effective cost of ``records``: cost, plus a fault's price per fault."""
    return sum(
        pricing.cost(r.prompt_tokens, r.cached_tokens)
        + (fault.cost(r.prompt_tokens, pricing) if r.fault else 0.0)
        for r in records
    )


def reread_cost(records: Sequence[CallRecord], pricing: Pricing, fault: FaultCost) -> float:
    """Return the summed re-read cost of ``records``: cost, plus each fault priced as a re-read."""
    return sum(
        pricing.cost(r.prompt_tokens, r.cached_tokens)
        + (fault.reread(r.prompt_tokens, r.reread_pages, pricing) if r.fault else 0.0)
        for r in records
    )


def summarize_session(
    session: str,
    strategy: str,
    records: Sequence[CallRecord],
    pricing: Pricing,
    full: Sequence[CallRecord] | None = None,
    error: str | None = None,
    fault: FaultCost = FAULT_COST,
) -> SessionMetrics:
    """Return one strategy's figures on one session; ``full`` is full resend's records.

    ``fault`` prices a fault for the effective cost.
    """
    prompts = [r.prompt_tokens for r in records]
    n = len(records)
    total = sum(prompts)
    completion = sum(r.completion_tokens for r in records)
    cost = sum(pricing.cost(r.prompt_tokens, r.cached_tokens) for r in records)
    effective = effective_cost(records, pricing, fault)
    reread = reread_cost(records, pricing, fault)
    cost_vs_full = mean_vs_full = full_cost = full_prompt = None
    effective_vs_full = full_effective = reread_vs_full = full_reread = None
    if full is not None and n:
        full_cost = sum(pricing.cost(r.prompt_tokens, r.cached_tokens) for r in full)
        full_prompt = sum(r.prompt_tokens for r in full)
        full_effective = effective_cost(full, pricing, fault)
        cost_vs_full = _ratio(cost, full_cost)
        mean_vs_full = _ratio(total, full_prompt)
        effective_vs_full = _ratio(effective, full_effective)
        full_reread = reread_cost(full, pricing, fault)
        reread_vs_full = _ratio(reread, full_reread)
    kinds = Counter(violation_kind(v) for r in records for v in r.violations)
    lat = [r.latency_ms for r in records]
    return SessionMetrics(
        session=session,
        strategy=strategy,
        calls=n,
        prompt_tokens=total,
        completion_tokens=completion,
        mean_prompt=total / n if n else 0.0,
        max_prompt=max(prompts, default=0),
        ratio=_ratio(total, completion),
        cost=cost,
        cost_vs_full=cost_vs_full,
        mean_vs_full=mean_vs_full,
        growth=growth(prompts),
        needs=sum(r.needs for r in records),
        covered=sum(r.covered for r in records),
        long_needs=sum(r.long_needs for r in records),
        long_covered=sum(r.long_covered for r in records),
        violations=sum(kinds.values()),
        violation_kinds=dict(kinds),
        latency_p50_ms=percentile(lat, 50),
        latency_p99_ms=percentile(lat, 99),
        error=error,
        full_cost=full_cost,
        full_prompt_tokens=full_prompt,
        faults=sum(1 for r in records if r.fault),
        effective_cost=effective,
        effective_vs_full=effective_vs_full,
        full_effective_cost=full_effective,
        names=sum(r.names for r in records),
        names_covered=sum(r.names_covered for r in records),
        reread_cost=reread,
        reread_vs_full=reread_vs_full,
        full_reread_cost=full_reread,
        reread_pages=sum(len(r.reread_pages) for r in records if r.fault),
        reread_tokens=sum(sum(r.reread_pages) for r in records if r.fault),
        misses=dict(Counter(k for r in records for k in r.misses)),
    )


@attrs.frozen(slots=True)
class StrategySummary:
    """One strategy over all sessions included."""

    strategy: str
    sessions: int
    calls: int
    cost_vs_full: float | None
    coverage: float | None
    long_coverage: float | None
    mean_prompt: float
    mean_vs_full: float | None
    max_prompt: int
    median_ratio: float | None
    pooled_ratio: float | None
    growth: float | None
    needs: int
    long_needs: int
    violations: int
    violation_kinds: Mapping[str, int]
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    errors: int = 0
    faults: int = 0
    fault_rate: float | None = None
    effective_vs_full: float | None = None
    reread_vs_full: float | None = None
    names: int = 0
    names_coverage: float | None = None
    worst_coverage: float | None = None
    worst_session: str | None = None
    sessions_below: int = 0
    sessions_measured: int = 0
    misses: Mapping[str, int] = attrs.field(factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Return the figures as a JSON-able dict."""
        d = attrs.asdict(self)
        d["violation_kinds"] = dict(self.violation_kinds)
        d["misses"] = dict(self.misses)
        d["session_floor"] = SESSION_FLOOR
        return d


def _pooled(metrics: Sequence[SessionMetrics], num: str, den: str) -> float | None:
    # sums over the sessions that have a full-resend figure, so the two sides match
    pairs = [(getattr(m, num), getattr(m, den)) for m in metrics if getattr(m, den) is not None]
    if not pairs:
        return None
    return _ratio(sum(a for a, _ in pairs), sum(b for _, b in pairs))


def _median(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def aggregate(
    strategy: str, metrics: Sequence[SessionMetrics], latencies: Sequence[float]
) -> StrategySummary:
    """Return a strategy's figures over sessions (``metrics``) and all its calls' ``latencies``.

    Sessions where the strategy failed (``error`` set) count in ``errors``
    only. The worst session and ``sessions_below`` (coverage under
    ``SESSION_FLOOR``) are over the sessions with at least one need
    (``sessions_measured``); a tie for the worst goes to the first in order.
    """
    ok = [m for m in metrics if m.error is None]
    measured = [m for m in ok if m.coverage is not None]
    worst = min(measured, key=lambda m: m.coverage, default=None)  # type: ignore[arg-type, return-value]
    misses: Counter[str] = Counter()
    for m in ok:
        misses.update(m.misses)
    calls = sum(m.calls for m in ok)
    needs = sum(m.needs for m in ok)
    long_needs = sum(m.long_needs for m in ok)
    kinds: Counter[str] = Counter()
    for m in ok:
        kinds.update(m.violation_kinds)
    return StrategySummary(
        strategy=strategy,
        sessions=len(ok),
        calls=calls,
        cost_vs_full=_pooled(ok, "cost", "full_cost"),
        coverage=_ratio(sum(m.covered for m in ok), needs),
        long_coverage=_ratio(sum(m.long_covered for m in ok), long_needs),
        mean_prompt=_ratio(sum(m.prompt_tokens for m in ok), calls) or 0.0,
        mean_vs_full=_pooled(ok, "prompt_tokens", "full_prompt_tokens"),
        max_prompt=max((m.max_prompt for m in ok), default=0),
        median_ratio=_median(m.ratio for m in ok),
        pooled_ratio=_ratio(sum(m.prompt_tokens for m in ok), sum(m.completion_tokens for m in ok)),
        growth=_median(m.growth for m in ok),
        needs=needs,
        long_needs=long_needs,
        violations=sum(kinds.values()),
        violation_kinds=dict(kinds),
        latency_p50_ms=percentile(latencies, 50),
        latency_p99_ms=percentile(latencies, 99),
        errors=len(metrics) - len(ok),
        faults=sum(m.faults for m in ok),
        fault_rate=_ratio(sum(m.faults for m in ok), calls),
        effective_vs_full=_pooled(ok, "effective_cost", "full_effective_cost"),
        reread_vs_full=_pooled(ok, "reread_cost", "full_reread_cost"),
        names=sum(m.names for m in ok),
        names_coverage=_ratio(sum(m.names_covered for m in ok), sum(m.names for m in ok)),
        worst_coverage=worst.coverage if worst is not None else None,
        worst_session=worst.session if worst is not None else None,
        sessions_below=sum(1 for m in measured if m.coverage < SESSION_FLOOR),  # type: ignore[operator]
        sessions_measured=len(measured),
        misses=dict(misses),
    )

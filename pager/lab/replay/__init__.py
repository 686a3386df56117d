"""The replay benchmark: recorded sessions replayed open-loop through prompt strategies.

For each assistant message of a session, every strategy (full resend, the
cheap baselines, pager) gets the history before it and builds a prompt; the
benchmark measures tokens, cache-adjusted cost, faults and effective cost,
growth, need coverage, invariants and latency (``docs/metrics.md``). ``pager
bench`` is the command line; ``run`` is the library entry point
(``run(..., jobs=N)`` replays sessions in N processes, with the same figures).
"""

from __future__ import annotations

from pager.lab.replay.cost import FAULT_COST, FaultCost, Pricing, pricing
from pager.lab.replay.metrics import CallRecord, SessionMetrics, StrategySummary, check_invariants
from pager.lab.replay.runner import BenchResult, run
from pager.lab.replay.session import Session, discover, load_session, load_sessions
from pager.lab.replay.strategies import (
    ClearToolResults,
    FullResend,
    ObservationMasking,
    PagerStrategy,
    SlidingWindow,
    Strategy,
    baselines,
)

__all__ = [
    "BenchResult",
    "CallRecord",
    "ClearToolResults",
    "FAULT_COST",
    "FaultCost",
    "FullResend",
    "ObservationMasking",
    "PagerStrategy",
    "Pricing",
    "Session",
    "SessionMetrics",
    "SlidingWindow",
    "Strategy",
    "StrategySummary",
    "baselines",
    "check_invariants",
    "discover",
    "load_session",
    "load_sessions",
    "pricing",
    "run",
]

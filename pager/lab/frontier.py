"""Read replayed configurations as points: the Pareto frontier of re-read cost and coverage, and the choice.

A ``Point`` is one configuration's aggregate figures over the replayed
sessions. ``pareto`` marks the points no other point beats on both re-read
cost and a coverage figure (``OBJECTIVES``); ``choose_floors`` and ``choose``
pick one; ``config_document`` is what ``pager tune --write`` saves. Pure:
tested with hand-made points; ``pager.lab.tune`` makes the real ones.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import attrs

from pager.errors import ConfigError

__all__ = [
    "COSTS",
    "OBJECTIVES",
    "Point",
    "by_cost",
    "choose",
    "choose_floors",
    "config_document",
    "floors_text",
    "pareto",
]

# Coverage figures a run can be tuned for: the StrategySummary attribute names.
OBJECTIVES = ("names_coverage", "coverage", "long_coverage", "worst_coverage")

# Cost figures the frontier can be drawn on; the first (the re-read price) is what tune minimises.
COSTS = ("reread_vs_full", "effective_vs_full", "cost_vs_full")


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


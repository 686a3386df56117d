"""The pure planner: append-only between rounds, generational rounds, budget, pairing of units."""

from __future__ import annotations

import numpy as np
import pytest

from pager.errors import BudgetError
from pager.core.plan import FULL, STUB, Layout, PlanConfig, PlanInput, plan


def table(n_units: int, out_tokens: int = 300, big_every: int = 0) -> PlanInput:
    """L1 (system + user) then n_units of (assistant call, tool result)."""
    pages, tokens, units, tool = [1, 2], [50, 50], [0, 1], [False, False]
    for u in range(n_units):
        pid = 10 + 2 * u
        pages += [pid, pid + 1]
        big = big_every and u % big_every == 0
        tokens += [40, 3_000 if big else out_tokens]
        units += [2 + u, 2 + u]
        tool += [False, True]
    n = len(pages)
    tok = np.asarray(tokens, dtype=np.int64)
    return PlanInput(
        page=np.asarray(pages, dtype=np.int64), tokens=tok,
        stub_tokens=np.where(np.asarray(tool), 60, tok),
        unit=np.asarray(units, dtype=np.int64), pinned=np.asarray([True, True] + [False] * (n - 2)),
        tool=np.asarray(tool), heat=np.arange(n, dtype=np.float64),
    )


def cut(inp: PlanInput, rows: int) -> PlanInput:
    import attrs

    return attrs.evolve(inp, **{f: getattr(inp, f)[:rows] for f in
                                ("page", "tokens", "stub_tokens", "unit", "pinned", "tool", "heat")})


CFG = PlanConfig(budget=20_000, high=4_000, low=2_000, recent_units=2)


def test_append_only_between_rounds_and_rounds_are_rare():
    full = table(60)
    prev = None
    rounds = 0
    for rows in range(4, len(full) + 1, 2):
        res = plan(cut(full, rows), CFG, prev)
        if res.round:
            rounds += 1
        elif prev is not None:
            assert res.layout.slots[: len(prev.slots)] == prev.slots
        assert res.tokens <= CFG.budget
        prev = res.layout
    assert 1 <= rounds <= 15


def test_minor_round_keeps_the_old_generation():
    full = table(80)
    prev = None
    minor = 0
    for rows in range(4, len(full) + 1, 2):
        res = plan(cut(full, rows), CFG, prev)
        if res.round and prev is not None and prev.stable > 2:
            kept = prev.slots[: prev.stable]
            if res.layout.slots[: len(kept)] == kept:
                minor += 1
        prev = res.layout
    assert minor >= 1


def test_units_are_kept_stubbed_or_dropped_whole():
    res = plan(table(40, big_every=3), CFG, None)
    shown = {s.page: s.kind for s in res.layout.slots if s.kind in (FULL, STUB)}
    for u in range(40):
        call, result = 10 + 2 * u, 11 + 2 * u
        assert (call in shown) == (result in shown)
    # an older big output is never shown in full
    assert all(shown.get(11 + 2 * u) != FULL for u in range(0, 37, 3))


def test_l1_over_budget_raises_with_amount():
    inp = table(2)
    with pytest.raises(BudgetError) as err:
        plan(inp, PlanConfig(budget=80, high=80, low=40))
    assert err.value.over_by == 100 - 80


def test_layout_state_round_trips():
    res = plan(table(30), CFG, None)
    assert Layout.from_state(res.layout.to_state()) == res.layout

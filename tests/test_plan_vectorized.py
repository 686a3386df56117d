"""The planner's per-row work at C speed plans what its Python loops planned (issue 23).

``plan._emit`` (a round's layout of the kept rows) and ``plan._append``'s
search for big outputs among the young slots were loops over every planned
row (and a set of every big output's page). They are written over numpy
columns now; the loops are kept here as the reference, and random page
tables, modes and growing sessions must give the same slots, tokens and
first young slot either way.
"""

from __future__ import annotations

import attrs
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from sizes import examples
from helpers import plan_table

from pager.core import plan as P
from pager.core.plan import FULL, INDEX, STUB, Layout, PlanConfig, PlanInput, Slot, _Mode


def _emit_loop(inp, u, mode, compact, big, l1, l1_tokens, n_recent):
    """The loop ``_emit`` was, one planned row at a time."""
    unit_pos = {int(x): k for k, x in enumerate(u.uniq)}
    slots = list(l1)
    total = l1_tokens
    if compact.any():
        lined = [int(r) for r in u.rows if compact[unit_pos[int(inp.unit[r])]]]
        cost = int(inp.compact_tokens[lined].sum()) + P.INDEX_OVERHEAD
        slots.append(Slot(INDEX, pages=tuple(int(inp.page[r]) for r in lined), tokens=cost))
        total += cost
    first_young = -1
    tail_from = u.uniq.size - n_recent
    for r in u.rows:
        k = unit_pos[int(inp.unit[r])]
        m = mode[k]
        if m == _Mode.DROP:
            continue
        if k >= tail_from and first_young < 0:
            first_young = len(slots)
        page = int(inp.page[r])
        stubbed = inp.tool[r] and (m == _Mode.STUBBED or (m == _Mode.KEPT and big[r]) or u.huge[r])
        slots.append(Slot(STUB if stubbed else FULL, page))
        total += int(inp.stub_tokens[r] if stubbed else inp.tokens[r])
    return slots, total, (first_young if first_young >= 0 else len(slots))


def _big_loop(inp, cfg, prev, idx, slots):
    """What ``_append`` did first to the previous slots: stub the big outputs of older steps."""
    n = len(inp)
    hard_max = cfg.budget // 4
    inline_max = min(cfg.inline_max or hard_max, hard_max)
    newest = int(inp.unit[n - 1]) if n else -1
    prev_newest = int(inp.unit[prev.upto - 1]) if prev.upto > 0 else -1
    tail = []
    big = set(inp.page[inp.tool & (inp.tokens > inline_max)].tolist())
    for j in range(len(slots) - 1, prev.stable - 1, -1):
        sl = slots[j]
        if sl.page in big and sl.kind is FULL and int(inp.unit[idx[sl.page]]) != newest:
            if not cfg.objective or int(inp.tokens[idx[sl.page]]) > hard_max:
                slots[j] = Slot(STUB, sl.page)
            elif int(inp.unit[idx[sl.page]]) == prev_newest:
                tail.append(j)
    return slots, tail


def _table(rng: np.random.Generator, n_units: int) -> PlanInput:
    """L1 (two rows) then units of a call and 0-2 results."""
    return plan_table(rng, n_units, most_results=2, sizes=(40, 300, 2_500, 6_000))


@settings(max_examples=examples(50, 150), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_units=st.integers(1, 40), n_recent=st.integers(0, 5),
       start=st.integers(0, 30))
def test_emit_equals_its_loop(seed: int, n_units: int, n_recent: int, start: int) -> None:
    rng = np.random.default_rng(seed)
    inp = _table(rng, n_units)
    cfg = PlanConfig(budget=40_000, high=8_000, low=4_000, inline_max=2_000)
    u = P._units(inp, cfg, cfg.low, min(start, len(inp)))
    if u is None:
        return
    mode = rng.integers(0, 4, u.uniq.size).astype(np.int8)
    compact = (rng.random(u.uniq.size) < 0.3) & (mode == _Mode.DROP)
    big = u.big.copy()
    big[rng.random(big.size) < 0.2] ^= True
    l1, l1_tokens = P._l1_slots(inp)
    n_recent = min(n_recent, u.uniq.size)
    assert P._emit(inp, u, mode, compact, big, l1, l1_tokens, n_recent) == _emit_loop(
        inp, u, mode, compact, big, l1, l1_tokens, n_recent)
    # each planned row's unit position, as the dict over ``uniq`` (units in order of first appearance) gave
    # it; with the unit ids relabelled at random too, so that their sorted order is not the rows' order
    relabelled = attrs.evolve(inp, unit=rng.permutation(int(inp.unit.max()) + 1)[inp.unit])
    for table in (inp, relabelled):
        v = P._units(table, cfg, cfg.low, min(start, len(table)))
        unit_pos = {int(x): k for k, x in enumerate(v.uniq)}
        assert v.upos.tolist() == [unit_pos[int(table.unit[r])] for r in v.rows]
        assert v.uniq.tolist() == list(dict.fromkeys(table.unit[v.rows].tolist()))


def _objective_fill_loop(inp, cfg, rows, upos, older, mode, stub_mask, stub_cost, prompt, left):
    """``plan._objective_fill`` as it was: its greedy pass reading numpy scalars one unit at a time."""
    best_u, drop_u, stub_u, shown_u, order = P._unit_prices(inp, cfg, rows, upos, older, mode.size, stub_mask,
                                                            prompt)
    for k in order:
        if best_u[k] >= drop_u[k] and stub_u[k] >= drop_u[k]:
            continue
        if best_u[k] < drop_u[k] and shown_u[k] <= left:
            mode[k] = _Mode.KEPT
            left -= int(shown_u[k])
        elif stub_u[k] < drop_u[k] and stub_cost[k] <= left:
            mode[k] = _Mode.STUBBED
            left -= int(stub_cost[k])
    return order


def _edge_budgets(inp, cfg, u, older):
    """Return ``(unit, budget, mode)``: under ``budget`` the fill gives ``unit`` that mode with nothing left.

    The first unit it keeps whole when nothing runs short, with a budget of what the units weighed up to
    it take; and the first it could keep as stubs for less than whole, with a budget that leaves it just
    its stubs (the units before it all fit, so the fill reaches it as with any larger budget).
    """
    mask = u.big.copy()
    best_u, drop_u, stub_u, shown_u, order = P._unit_prices(inp, cfg, u.rows, u.upos, older, u.uniq.size, mask,
                                                            cfg.budget)
    spent, first = 0, {}
    for k in order.tolist():
        if best_u[k] < drop_u[k]:
            cost = int(shown_u[k])
            if stub_u[k] < drop_u[k] and int(u.stub_cost[k]) < cost:
                first.setdefault(_Mode.STUBBED, (k, spent + int(u.stub_cost[k]), _Mode.STUBBED))
            first.setdefault(_Mode.KEPT, (k, spent + cost, _Mode.KEPT))
        elif stub_u[k] < drop_u[k]:
            cost = int(u.stub_cost[k])
        else:
            continue
        spent += cost
    return list(first.values())


@settings(max_examples=examples(50, 150), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_units=st.integers(1, 60), n_recent=st.integers(0, 5),
       left=st.integers(0, 60_000), need=st.floats(0.0, 3.0))
def test_objective_fill_keeps_what_its_scalar_loop_kept(seed: int, n_units: int, n_recent: int, left: int,
                                                        need: float) -> None:
    rng = np.random.default_rng(seed)
    inp = _table(rng, n_units)
    n = len(inp)
    inp = attrs.evolve(inp, need=rng.random((n, len(P.HORIZONS))) * need, growth=300.0, life=20.0)
    cfg = PlanConfig(budget=40_000, high=12_000, low=6_000, inline_max=2_000, objective=True)
    u = P._units(inp, cfg, cfg.low, 0)
    if u is None:
        return
    older = np.arange(max(0, u.uniq.size - min(n_recent, u.uniq.size)), dtype=np.int64)

    def both(budget: int) -> np.ndarray:
        got_mode, want_mode = (np.full(u.uniq.size, _Mode.DROP, dtype=np.int8) for _ in range(2))
        got_mask, want_mask = u.big.copy(), u.big.copy()
        got = P._objective_fill(inp, cfg, u.rows, u.upos, older, got_mode, got_mask, u.stub_cost, cfg.budget,
                                budget)
        want = _objective_fill_loop(inp, cfg, u.rows, u.upos, older, want_mode, want_mask, u.stub_cost,
                                    cfg.budget, budget)
        assert got.tolist() == want.tolist()
        assert got_mode.tolist() == want_mode.tolist()
        assert got_mask.tolist() == want_mask.tolist()
        return want_mode

    both(left)
    # the budget's edges: exactly what the first unit kept whole, and the first kept as stubs, take with the
    # units before them, so that each just fits (a fit tested with < instead of <= leaves it out)
    for k, budget, m in _edge_budgets(inp, cfg, u, older):
        assert both(budget)[k] == m


@settings(max_examples=examples(25, 60), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), objective=st.booleans())
def test_append_stubs_the_big_outputs_its_loop_stubbed(seed: int, objective: bool) -> None:
    rng = np.random.default_rng(seed)
    full = _table(rng, 40)
    cfg = PlanConfig(budget=40_000, high=12_000, low=6_000, inline_max=2_000, objective=objective)
    prev: Layout | None = None
    # calls of 1 to 3 new rows: a step's results may arrive a call after its call (the newest unit grows)
    bounds, k = [], 3
    while k < len(full):
        bounds.append(k)
        k += int(rng.integers(1, 4))
    bounds.append(len(full))
    for k in bounds:
        inp = attrs.evolve(full, **{f: getattr(full, f)[:k] for f in
                                    ("page", "tokens", "stub_tokens", "unit", "pinned", "tool", "heat",
                                     "compact_tokens")})
        if objective:
            inp = attrs.evolve(inp, need=np.full((k, len(P.HORIZONS)), 0.5), growth=300.0, life=20.0)
        idx = dict(zip(inp.page.tolist(), range(k)))
        if prev is not None and P._invalid(inp, cfg, prev, idx) == P.Reason.NONE:
            got = P._append(inp, cfg, prev, idx)
            want, tail = _big_loop(inp, cfg, prev, idx, list(prev.slots))
            # the older slots the loop stubbed are stubbed; the ones it left to the objective are decided
            # by it, with the new rows, the same way in both (``tail``)
            for j in range(len(prev.slots)):
                if j not in tail:
                    assert got[j] == want[j], j
        prev = P.plan(inp, cfg, prev).layout

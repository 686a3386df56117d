"""A layout's facts kept for the next call (``plan.Prior``) plan what a fresh plan plans (issue 23).

Between rounds the planner reads the running tokens, the big outputs shown in
full and the recall blocks of the previous layout's shared head from the
``Prior`` the previous plan returned, instead of walking every slot again. A
growing session planned call by call with the prior handed back must give the
very layouts, tokens, rounds and recalls that planning every call without it
gives, and every prior must hold the facts a fresh reading of its layout
gives. The scheduler's memoised card and planner figures, and the need of a
few rows (``NeedTable.expected_of``), are held to a fresh computation too.
"""

from __future__ import annotations

import attrs
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import pager
from pager.core import plan as P
from pager.core.heat import HORIZONS, NEEDS, PageTable, _TOOL_CODES, _age
from pager.core.plan import PlanConfig, PlanInput
from pager.lab.synth import generate_session
from pager.schedulers.paging import PagingScheduler
from helpers import plan_table
from sizes import examples

_COLUMNS = ("page", "tokens", "stub_tokens", "unit", "pinned", "tool", "heat", "compact_tokens")


def _table(rng: np.random.Generator, n_units: int) -> PlanInput:
    """L1 (two rows) then units of a call and 0-3 results, some of them big."""
    return plan_table(rng, n_units, most_results=3, sizes=(40, 300, 2_500, 6_000, 12_000))


def _fresh(prior: P.Prior, inp: PlanInput, idx: dict[int, int]) -> P.Prior:
    return P._facts(prior.slots, idx, inp, prior.inline_max, None)


# each example plans a growing table call by call (up to 90 units), so the prior is read at every step
# and a recall block, a card and both objectives occur within the suite's 30
@settings(max_examples=examples(30, 80), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), objective=st.booleans(), recall_leaves=st.booleans(),
       card=st.booleans(), n_units=st.integers(5, 90))
def test_planning_with_the_prior_equals_planning_without(seed: int, objective: bool, recall_leaves: bool,
                                                         card: bool, n_units: int) -> None:
    rng = np.random.default_rng(seed)
    full = _table(rng, n_units)
    cfg = PlanConfig(budget=60_000, high=14_000, low=7_000, inline_max=2_000, objective=objective,
                     recall_pages=2, recall_tokens=900, recall_leaves=recall_leaves, compact_tokens=200)
    need = rng.random((len(full), len(HORIZONS))) * np.asarray(HORIZONS) * 0.05
    prev = None
    prior = None
    k = 3
    while k <= len(full):
        inp = attrs.evolve(full, **{f: getattr(full, f)[:k] for f in _COLUMNS},
                           card="card" if card else "", card_tokens=30 if card else 0)
        if objective:
            inp = attrs.evolve(inp, need=need[:k], growth=300.0, life=20.0)
        # now and then a recall candidate among the older rows, shown in a block at the tail
        if k > 10 and rng.random() < 0.4:
            pick = [int(p) for p in rng.choice(inp.page[2 : k - 3], size=2, replace=False)]
            # or a page of another session, readable this call only (a block showing it must go after)
            foreign = frozenset([10**6 + k]) if rng.random() < 0.5 else frozenset()
            inp = attrs.evolve(inp, recall=[(p, 200) for p in (*foreign, *pick)], foreign=foreign)
        idx = dict(zip(inp.page.tolist(), range(k)))
        want = P.plan(inp, cfg, prev)
        got = P.plan(attrs.evolve(inp, prior=prior), cfg, prev)
        assert got.layout == want.layout
        assert (got.tokens, got.round, got.reason, got.recalled) == (
            want.tokens, want.round, want.reason, want.recalled)
        fresh = _fresh(got.prior, inp, idx)
        assert (got.prior.cum, got.prior.big, got.prior.recall) == (fresh.cum, fresh.big, fresh.recall)
        assert got.prior.cum[-1] == got.tokens
        prev, prior = got.layout, got.prior
        k += int(rng.integers(1, 4))


def test_a_prior_of_another_layout_or_window_is_not_read() -> None:
    rng = np.random.default_rng(3)
    inp = _table(rng, 30)
    cfg = PlanConfig(budget=60_000, high=14_000, low=7_000, inline_max=2_000)
    first = P.plan(inp, cfg)
    # facts that do not describe the layout: read, they would put every slot at 0 tokens
    wrong = attrs.evolve(first.prior, cum=[0] * len(first.prior.cum), big=[], recall=[])
    grown = attrs.evolve(_table(np.random.default_rng(3), 31))
    other_window = attrs.evolve(cfg, budget=6_000, high=5_000, low=3_000)
    for prior, c in ((attrs.evolve(wrong, slots=tuple(list(first.layout.slots))), cfg),  # equal slots, not the same
                     (wrong, other_window)):  # inline_max is budget // 4 now
        try:
            want = P.plan(grown, c, first.layout)
        except Exception as exc:  # noqa: BLE001 - the same error either way
            want = exc
        try:
            got = P.plan(attrs.evolve(grown, prior=prior), c, first.layout)
        except Exception as exc:  # noqa: BLE001
            got = exc
        if isinstance(want, Exception):
            assert type(got) is type(want)
        else:
            assert (got.layout, got.tokens) == (want.layout, want.tokens)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 40), clock=st.integers(0, 6_000),
       scale=st.floats(0.0, 4.0))
def test_the_need_of_a_few_rows_equals_the_table_s(seed: int, n: int, clock: int, scale: float) -> None:
    rng = np.random.default_rng(seed)
    kind = rng.integers(0, 6, n).astype(np.int8)
    tokens = rng.integers(0, 20_000, n)
    created = rng.integers(0, clock + 1, n)
    last_ref = np.maximum(created, rng.integers(0, clock + 1, n))
    table = PageTable(page_id=np.arange(n), created=created, last_ref=last_ref, ref_count=np.zeros(n, dtype=np.int64),
                      tokens=tokens, kind=kind, stale=np.zeros(n, dtype=bool), relevance=np.zeros(n))
    got = NEEDS.expected_of(kind, tokens, created, last_ref, clock, scale)
    # what ``expected`` computed before it delegated (np.isin, np.clip)
    group = np.isin(kind, _TOOL_CODES).astype(np.int64)
    size = np.searchsorted(np.asarray(NEEDS.sizes), tokens, side="left").clip(0, len(NEEDS.sizes) - 1)
    age = np.clip(_age(clock, np.maximum(created, last_ref)), 0, 4096).astype(np.int64)
    ahead = np.asarray(HORIZONS, dtype=np.int64)
    lo = NEEDS._cum[group, size, age + 1][:, None]
    hi = NEEDS._cum[group[:, None], size[:, None], age[:, None] + ahead[None, :] + 1]
    want = np.clip((hi - lo) * scale, 0.0, None)
    assert np.array_equal(got, want)
    assert np.array_equal(NEEDS.expected(table, clock, scale), want)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 20), h=st.floats(0.5, 2_000.0), odd=st.booleans())
def test_need_over_equals_its_clip(seed: int, n: int, h: float, odd: bool) -> None:
    rng = np.random.default_rng(seed)
    need = rng.random((n, len(HORIZONS))) * 40 - 2
    if odd:
        need[rng.integers(0, n), rng.integers(0, len(HORIZONS))] = rng.choice([np.nan, np.inf, -np.inf])
    inp = attrs.evolve(_table(rng, 0), need=need)
    rows = np.arange(n)
    got = P._need_over(inp, rows, h)
    # the interpolation of ``_need_over``, then what it returned before (np.clip of np.nan_to_num)
    grid = np.asarray(HORIZONS, dtype=np.float64)
    hh = float(min(max(h, grid[0]), grid[-1]))
    k = min(int(np.searchsorted(grid, hh, side="right")) - 1, grid.size - 2)
    w = (hh - grid[k]) / (grid[k + 1] - grid[k])
    at = need[:, k] * (1.0 - w) + need[:, k + 1] * w
    assert np.array_equal(got, np.clip(np.nan_to_num(at) / hh, 0.0, 1.0))


def _session(n_steps: int) -> list[dict]:
    _h, msgs = generate_session(11, n_steps)
    return [dict(m) for m in msgs]


def test_a_session_planned_with_the_memos_sends_what_one_without_sends(monkeypatch) -> None:
    """The scheduler's memos (prior, card, figures) change no prompt: each call's against a fresh plan."""
    msgs = _session(160)
    fast = pager.open(":memory:", session="s", context_window=24_000, log_reports=False)
    cold = pager.open(":memory:", session="s", context_window=24_000, log_reports=False)
    fast.pin("keep the parser fast")
    cold.pin("keep the parser fast")
    # the cold one forgets every memo before each call: each plan is a fresh computation
    sched = cold._scheduler
    assert isinstance(sched, PagingScheduler)
    used = {"prior": 0}
    prior_of = PagingScheduler._prior_of

    def counted(self, h, cut=(), reread=None):
        got = prior_of(self, h, cut, reread)
        if self is fast._scheduler and got is not None:
            used["prior"] += 1
        return got

    monkeypatch.setattr(PagingScheduler, "_prior_of", counted)
    bounds = [k for k in range(3, len(msgs)) if msgs[k]["role"] == "assistant"] + [len(msgs)]
    rounds = 0
    for i, k in enumerate(bounds):
        if i in (len(bounds) // 3, len(bounds) // 2):  # the card changes: a note
            fast.note(f"note {i}: the tests pass")
            cold.note(f"note {i}: the tests pass")
        sched._prior = sched._carded = sched._configs = None
        a = fast.assemble({"messages": msgs[:k]})
        b = cold.assemble({"messages": msgs[:k]})
        assert a == b, k
        assert fast.last_report.tokens == cold.last_report.tokens
        rounds += fast.last_report.round
    assert used["prior"] > len(bounds) // 2  # the fast path was taken, between rounds
    assert rounds >= 2  # and rounds came between
    fast.close()
    cold.close()


BASH = {"type": "function", "function": {"name": "bash", "description": "run a command",
                                         "parameters": {"type": "object", "properties": {}}}}


def test_re_readable_rows_that_change_with_the_request_s_tools_plan_afresh() -> None:
    """Without ``expand`` only file reads made with one of the request's tools are stubbable: the facts of a
    layout planned when the request offered no such tool are not those of one that does."""
    msgs = _session(160)
    fast = pager.open(":memory:", session="s", context_window=24_000, log_reports=False)
    cold = pager.open(":memory:", session="s", context_window=24_000, log_reports=False)
    sched = cold._scheduler
    bounds = [k for k in range(3, len(msgs)) if msgs[k]["role"] == "assistant"] + [len(msgs)]
    stubs = 0
    for i, k in enumerate(bounds):
        tools = [BASH] if (i // 4) % 2 else []  # the harness offers its shell on some calls only
        sched._prior = sched._carded = sched._configs = None
        a = fast.assemble({"messages": msgs[:k], "tools": tools}, reread_only=True)
        b = cold.assemble({"messages": msgs[:k], "tools": tools}, reread_only=True)
        assert a == b, k
        stubs += fast.last_report.pages_stubbed
    assert stubs  # file reads were stubbed on the calls that offered the tool
    fast.close()
    cold.close()

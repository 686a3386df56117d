"""Invariant checks and figures, against values computed by hand."""

from __future__ import annotations

import pytest

from pager.lab.replay.cost import pricing
from pager.lab.replay.metrics import (
    CallRecord,
    aggregate,
    check_invariants,
    growth,
    percentile,
    summarize_session,
)

from _replay_helpers import call

A = {"role": "assistant", "content": None, "tool_calls": [call("c1", "x"), call("c2", "y")]}
R1 = {"role": "tool", "tool_call_id": "c1", "content": "r1"}
R2 = {"role": "tool", "tool_call_id": "c2", "content": "r2"}
U = {"role": "user", "content": "u"}


def kinds(violations):
    return [v.split(":")[0] for v in violations]


def test_sound_prompt_has_no_violations():
    hist = [U, A, R1, R2]
    assert check_invariants(hist, hist) == []


def test_unanswered_call_and_orphan_result():
    assert kinds(check_invariants([U, A, R1], [U, A, R1, R2])) == ["unanswered"]
    assert kinds(check_invariants([U, A, R1, {"role": "assistant", "content": "z"}, R2], [])) == [
        "unanswered", "orphan"]
    assert kinds(check_invariants([U, R1], [U, A, R1])) == ["orphan"]


def test_order_follows_history_and_ignores_inserted_messages():
    stub = {"role": "user", "content": "[recalled page]"}
    hist = [U, A, R1, R2]
    assert check_invariants([U, stub, A, R1, R2], hist) == []
    assert kinds(check_invariants([A, R1, R2, U], hist)) == ["order"]


def test_order_with_duplicate_messages():
    x, y = {"role": "user", "content": "x"}, {"role": "user", "content": "y"}
    hist = [x, y, x]
    assert check_invariants([x, y, x], hist) == []
    assert check_invariants([y, x], hist) == []
    assert kinds(check_invariants([y, x, x], hist)) == ["order"]


def test_order_compares_wire_fields_only():
    # bookkeeping fields a recorder added do not make a copy a different message
    hist = [dict(U, usage={"prompt_tokens": 3}), {"role": "user", "content": "v"}]
    assert check_invariants([hist[1], U], hist) != []
    assert check_invariants([U, hist[1]], hist) == []


def test_budget_and_l1():
    sysm = {"role": "system", "content": "rules"}
    hist = [sysm, U, A, R1, R2]
    assert kinds(check_invariants(hist, hist, budget=10, prompt_tokens=11)) == ["over_budget"]
    assert check_invariants(hist, hist, budget=11, prompt_tokens=11) == []
    assert kinds(check_invariants([A, R1, R2], hist, pins_l1=True)) == ["l1", "l1"]
    grown = [{"role": "system", "content": "rules\n\nBudget: 10k tokens left."}, U]
    assert check_invariants(grown, hist, pins_l1=True) == []


def test_growth_and_percentile():
    assert growth([10]) is None
    assert growth([10, 30]) == 3.0
    assert growth([10, 20, 30]) == pytest.approx(25 / 10)  # odd: the middle call is second half
    assert growth([10, 20, 30, 40]) == pytest.approx(35 / 15)
    assert percentile([], 50) is None
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile(list(range(101)), 99) == 99.0


def rec(i, prompt, cached, completion, needs=0, covered=0, lneeds=0, lcovered=0, viol=(), lat=1.0):
    return CallRecord(index=i, prompt_tokens=prompt, cached_tokens=cached,
                      completion_tokens=completion, needs=needs, covered=covered,
                      long_needs=lneeds, long_covered=lcovered, violations=viol, latency_ms=lat)


def test_summarize_session_by_hand():
    full = [rec(1, 100, 0, 10), rec(3, 200, 100, 10)]
    mine = [rec(1, 50, 0, 10, 4, 3, 2, 1, lat=2.0), rec(3, 60, 50, 10, 2, 2, 0, 0,
                                                      ("order: x", "orphan: y"), lat=4.0)]
    price = pricing("anthropic")
    m = summarize_session("s", "mine", mine, price, full)
    assert m.calls == 2 and m.prompt_tokens == 110 and m.max_prompt == 60
    assert m.mean_prompt == 55
    assert m.ratio == pytest.approx(110 / 20)
    # mine: 1.25*50 + (0.1*50 + 1.25*10) = 80; full: 125 + (10 + 125) = 260
    assert m.cost == pytest.approx(80)
    assert m.cost_vs_full == pytest.approx(80 / 260)
    assert m.mean_vs_full == pytest.approx(110 / 300)
    assert m.growth == pytest.approx(60 / 50)
    assert (m.coverage, m.long_coverage) == (pytest.approx(5 / 6), pytest.approx(1 / 2))
    assert m.violations == 2 and dict(m.violation_kinds) == {"order": 1, "orphan": 1}
    assert m.latency_p50_ms == 3.0
    assert summarize_session("s", "x", [], price, full).coverage is None


def test_aggregate_pools_ratios_and_takes_medians():
    price = pricing("none")
    full_a, full_b = [rec(1, 100, 0, 10)], [rec(1, 300, 0, 1)]
    a = summarize_session("a", "s", [rec(1, 50, 0, 10, 2, 1)], price, full_a)
    b = summarize_session("b", "s", [rec(1, 30, 0, 1, 2, 2)], price, full_b)
    failed = summarize_session("c", "s", [], price, None, error="Boom")
    agg = aggregate("s", [a, b, failed], [1.0, 2.0, 3.0])
    assert agg.sessions == 2 and agg.errors == 1 and agg.calls == 2
    assert agg.cost_vs_full == pytest.approx(80 / 400)  # pooled, not (0.5 + 0.1) / 2
    assert agg.mean_vs_full == pytest.approx(80 / 400)
    assert agg.mean_prompt == 40
    assert agg.median_ratio == pytest.approx((5 + 30) / 2)
    assert agg.pooled_ratio == pytest.approx(80 / 11)
    assert agg.coverage == pytest.approx(3 / 4)
    assert agg.long_coverage is None
    assert agg.latency_p50_ms == 2.0

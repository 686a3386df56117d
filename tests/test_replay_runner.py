"""The runner end to end on the tiny hand-made session (see _replay_helpers.TINY)."""

from __future__ import annotations

import io

import pytest

from pager.lab.replay.cost import pricing
from pager.lab.replay.runner import Progress, run
from pager.lab.replay.session import Session
from pager.lab.replay.strategies import FullResend, ObservationMasking, SlidingWindow

from _replay_helpers import TINY, tiny_session, word_facts


def replay(strategies, facts, price="anthropic", **kw):
    return run([tiny_session()], strategies, pricing=pricing(price), facts=facts,
               progress=False, long_gap=2, **kw)


@pytest.fixture
def result():
    facts = word_facts()
    return replay([FullResend(facts=facts), SlidingWindow(25, facts=facts),
                   ObservationMasking(keep=0, facts=facts)], facts)


def test_calls_prompt_and_cached_tokens(result):
    recs = result.runs[0].records
    # calls for messages 2, 4, 6 (see the token table in _replay_helpers)
    assert [c.index for c in recs["full"]] == [2, 4, 6]
    assert [c.prompt_tokens for c in recs["full"]] == [14, 35, 51]
    assert [c.cached_tokens for c in recs["full"]] == [0, 14, 35]
    assert [c.completion_tokens for c in recs["full"]] == [12, 9, 7]
    assert [c.prompt_tokens for c in recs["window-0k"]] == [14, 6, 22]
    assert [c.cached_tokens for c in recs["window-0k"]] == [0, 6, 6]
    # the masked tool output "[Old tool output omitted]" is 4 + 4 tokens
    assert [c.prompt_tokens for c in recs["mask-0"]] == [14, 34, 50]
    assert [c.cached_tokens for c in recs["mask-0"]] == [0, 14, 34]


def test_needs_and_coverage(result):
    recs = result.runs[0].records
    # call 2 needs src/app.py (seen in msg 1); call 4: MAX_SIZE, 4096 (msg 3) and
    # src/app.py (last seen in msg 2's arguments, 2 back: long-range with long_gap=2);
    # call 6: load_config (msg 5) and MAX_SIZE (last seen in msg 4, 2 back: long-range)
    assert [(c.needs, c.long_needs) for c in recs["full"]] == [(1, 0), (3, 1), (2, 1)]
    assert [(c.covered, c.long_covered) for c in recs["full"]] == [(1, 0), (3, 1), (2, 1)]
    # window at call 4 holds only the system message
    assert [(c.covered, c.long_covered) for c in recs["window-0k"]] == [(1, 0), (0, 0), (2, 1)]
    # masking hides msg 3, the only source of MAX_SIZE and 4096 at call 4
    assert [(c.covered, c.long_covered) for c in recs["mask-0"]] == [(1, 0), (1, 1), (2, 1)]
    m = result.metrics_for("tiny")
    assert (m["window-0k"].coverage, m["window-0k"].long_coverage) == (0.5, 0.5)
    assert (m["mask-0"].coverage, m["mask-0"].long_coverage) == (pytest.approx(4 / 6), 1.0)


def test_session_figures(result):
    m = result.metrics_for("tiny")
    full, win, mask = m["full"], m["window-0k"], m["mask-0"]
    assert full.mean_prompt == pytest.approx(100 / 3)
    assert full.max_prompt == 51
    assert full.ratio == pytest.approx(100 / 28)
    assert full.growth == pytest.approx(((35 + 51) / 2) / 14)
    # anthropic, 0.1 x cached + 1.25 x the rest: full 17.5 + (1.4 + 26.25) + (3.5 + 20)
    assert full.cost == pytest.approx(68.65)
    # window: 17.5 + 0.6 + (0.6 + 20) = 38.7
    assert win.cost_vs_full == pytest.approx(38.7 / 68.65)
    # masking: 17.5 + (1.4 + 25) + (3.4 + 20) = 67.3
    assert mask.cost_vs_full == pytest.approx(67.3 / 68.65)
    assert win.mean_vs_full == pytest.approx(42 / 100)
    assert all(x.violations == 0 for x in m.values())
    summary = {s.strategy: s for s in result.summary}
    assert summary["window-0k"].cost_vs_full == pytest.approx(38.7 / 68.65)
    assert summary["full"].median_ratio == pytest.approx(100 / 28)


def test_no_caching_pricing_costs_tokens():
    facts = word_facts()
    r = replay([FullResend(facts=facts)], facts, price="none")
    assert r.per_session[0].cost == 100


def test_budget_violation_is_counted():
    facts = word_facts()

    class Greedy(FullResend):
        budget = 20

    r = replay([Greedy(name="greedy", facts=facts)], facts)
    # prompts of 35 and 51 tokens exceed 20
    assert r.per_session[0].violations == 2
    assert dict(r.per_session[0].violation_kinds) == {"over_budget": 2}


class Exploding:
    name = "boom"
    budget = None
    pins_l1 = True
    copy_history = True

    def __init__(self):
        self.closed = 0
        self.seen = []

    def reset(self, header):
        pass

    def build(self, history):
        self.seen.append(history)
        if len(history) > 3:
            raise RuntimeError("kaput\nsecond line")
        history[0]["content"] = "mutated"  # gets a copy: must not reach the others
        return history

    def close(self):
        self.closed += 1


def test_external_strategy_failure_is_recorded_and_others_go_on():
    facts = word_facts()
    boom = Exploding()
    warnings = io.StringIO()
    r = run([tiny_session()], [FullResend(facts=facts), boom], pricing=pricing("none"),
            facts=facts, progress=False, stream=warnings)
    assert r.runs[0].errors == {"boom": "RuntimeError: kaput (building for message 4)"}
    assert "boom failed on tiny" in warnings.getvalue()
    assert [c.prompt_tokens for c in r.runs[0].records["full"]] == [14, 35, 51]
    assert TINY[0]["content"] == "sys prompt"
    assert boom.closed == 1
    summary = {s.strategy: s for s in r.summary}
    assert summary["boom"].errors == 1 and summary["boom"].sessions == 0


def test_session_starting_with_assistant_skips_the_empty_call():
    facts = word_facts()
    s = Session(id="x", header={"type": "session", "id": "x"},
                messages=({"role": "assistant", "content": "hello"}, {"role": "user", "content": "hi"},
                          {"role": "assistant", "content": "yes"}))
    r = run([s], [FullResend(facts=facts)], pricing=pricing("none"), facts=facts, progress=False)
    assert [c.index for c in r.runs[0].records["full"]] == [2]


def test_progress_bar_draws_only_when_enabled():
    out = io.StringIO()
    bar = Progress(4, stream=out, enabled=True)
    for _ in range(4):
        bar.advance(1, "sess")
    bar.close()
    text = out.getvalue()
    assert "4/4 calls" in text and "sess" in text and text.endswith("\n")
    quiet = io.StringIO()
    Progress(4, stream=quiet).advance(4)  # StringIO is not a terminal
    assert quiet.getvalue() == ""


def test_to_json_has_series_and_summary(result):
    data = result.to_json()
    assert data["pricing"] == {"name": "anthropic", "read": 0.1, "write": 1.25}
    assert [s["strategy"] for s in data["summary"]] == ["full", "window-0k", "mask-0"]
    series = data["sessions"][0]["series"]["full"]
    assert series["prompt_tokens"] == [14, 35, 51] and series["layers"] is None
    assert data["sessions"][0]["metrics"]["mask-0"]["coverage"] == pytest.approx(4 / 6)

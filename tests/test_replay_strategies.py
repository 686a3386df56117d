"""The baselines and the pager strategy's plumbing, on hand-made histories."""

from __future__ import annotations

import os
from types import SimpleNamespace

from pager.lab.replay.strategies import (
    CLEARED,
    MASKED,
    ClearToolResults,
    FullResend,
    ObservationMasking,
    PagerStrategy,
    SlidingWindow,
)

from _replay_helpers import TINY, call, word_facts


def tool(cid: str, text: str) -> dict:
    return {"role": "tool", "tool_call_id": cid, "content": text}


def test_full_resend_returns_the_history():
    s = FullResend(facts=word_facts())
    s.reset({})
    assert s.build(list(TINY[:4])) == TINY[:4]


def test_sliding_window_keeps_system_and_whole_units_that_fit():
    # tokens: system 6, user 8, assistant+tool unit 12 + 9 = 21, assistant 9, user 7
    facts = word_facts()
    w = SlidingWindow(25, facts=facts)
    w.reset({})
    assert w.build(list(TINY[:2])) == [TINY[0], TINY[1]]  # 6 + 8 = 14
    # the unit of 21 does not fit the 19 left after the system message: stop there
    assert w.build(list(TINY[:4])) == [TINY[0]]
    # 7 + 9 fit; the unit of 21 does not; the older user message is not reached
    assert w.build(list(TINY[:6])) == [TINY[0], TINY[4], TINY[5]]
    assert SlidingWindow(27, facts=facts).build(list(TINY[:4])) == [TINY[0], TINY[2], TINY[3]]
    assert SlidingWindow(26, facts=facts).build(list(TINY[:4])) == [TINY[0]]


def test_sliding_window_never_splits_parallel_tool_results():
    facts = word_facts()
    hist = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call("a", "x"), call("b", "y")]},
        tool("a", "one two three"),
        tool("b", "four"),
    ]
    unit = sum(facts.tokens(m) for m in hist[1:])
    assert SlidingWindow(unit, facts=facts).build(hist) == hist[1:]
    assert SlidingWindow(unit - 1, facts=facts).build(hist) == []


def test_masking_replaces_all_but_the_last_m_tool_outputs():
    hist = [{"role": "user", "content": "go"}]
    for i in range(4):
        hist += [{"role": "assistant", "content": f"step {i}", "tool_calls": [call(f"c{i}", "ls")]},
                 tool(f"c{i}", f"output {i}")]
    m = ObservationMasking(keep=2, facts=word_facts())
    m.reset({})
    out = m.build(hist)
    assert [x["content"] for x in out if x["role"] == "tool"] == [MASKED, MASKED, "output 2", "output 3"]
    assert [x.get("tool_call_id") for x in out if x["role"] == "tool"] == ["c0", "c1", "c2", "c3"]
    assert out[:2] == hist[:2]
    # the placeholder is the same object on the next call, so its bytes never change
    again = m.build(hist)
    assert again[2] is out[2]
    assert hist[2]["content"] == "output 0"  # history untouched


def test_clearing_waits_for_the_trigger_then_keeps_the_last_k():
    facts = word_facts()
    hist = list(TINY[:4]) + [
        {"role": "assistant", "content": "more", "tool_calls": [call("c2", "ls")]},
        tool("c2", "a b c"),
    ]
    total = sum(facts.tokens(m) for m in hist)
    c = ClearToolResults(trigger=total, keep=1, facts=facts)
    c.reset({})
    assert c.build(hist) == hist  # at the trigger, not past it
    c = ClearToolResults(trigger=total - 1, keep=1, facts=facts)
    c.reset({})
    out = c.build(hist)
    assert out[3] == {"role": "tool", "tool_call_id": "c1", "content": CLEARED}
    assert out[5] is hist[5]
    assert ClearToolResults(trigger=0, keep=0, facts=facts).build(hist)[5]["content"] == CLEARED


class FakePager:
    def __init__(self, folder, **kw):
        self.folder, self.kw, self.closed = folder, kw, False
        self.last_report = None

    def assemble(self, request):
        msgs = request["messages"]
        self.last_report = SimpleNamespace(layers={"l1": 3, "l2": 4}, budget=150_000, elapsed_ms=1.0)
        return {"model": request["model"], "messages": msgs[:1] + msgs[-1:]}

    def close(self):
        self.closed = True


def test_pager_strategy_opens_a_fresh_store_per_session_and_cleans_up():
    opened = []

    def opener(folder, **kw):
        p = FakePager(folder, **kw)
        opened.append(p)
        return p

    s = PagerStrategy("pager-x", opener=opener, l2_quota=0.5)
    s.reset({"id": "sess-1"})
    p = opened[0]
    assert os.path.isdir(p.folder)
    assert p.kw == {"session": "sess-1", "context_window": 200_000, "l2_quota": 0.5}
    assert s.budget == 200_000  # before any report
    assert s.build(list(TINY[:4])) == [TINY[0], TINY[3]]
    assert s.layers() == {"l1": 3, "l2": 4}
    assert s.budget == 150_000  # from the report
    s.reset({"id": "sess-2"})  # closes the first one
    assert p.closed and not os.path.exists(p.folder)
    assert opened[1].kw["session"] == "sess-2"
    s.close()
    assert opened[1].closed and not os.path.exists(opened[1].folder)

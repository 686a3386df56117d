"""Rollover notices with seed 004's defaults: window-open, 25/50/75 %, reminder, fallback; the step trigger."""

from __future__ import annotations

import json
from typing import Any

import pager
from pager.core.tokens import HeuristicCounter

from helpers import assistant, big_text, call, system, tool, user


def open_(tmp_path, **kw: Any) -> pager.Pager:
    opts: dict[str, Any] = dict(context_window=40_000, mode="rollover", fallback_reserve=4_000,
                                reminder_threshold=4_000, counter=HeuristicCounter(4.0), log_reports=False)
    opts.update(kw)
    return pager.open(tmp_path / "ctx", session="s1", **opts)


def step(history: list[dict[str, Any]], i: int, lines: int = 40) -> None:
    cid = f"call_{i}"
    history.append(assistant(f"Step {i}", call(cid, "bash", command=f"pytest -k t{i}")))
    history.append(tool(cid, big_text(lines, tag=f"out{i}")))


def run(p: pager.Pager, steps: int, lines: int = 40) -> list[tuple[int, tuple[str, ...], list[dict[str, Any]]]]:
    history = [system("You are a coding agent."), user("Fix the bug.")]
    out = []
    for i in range(steps):
        msgs = p.assemble({"messages": history})["messages"]
        out.append((i, p.last_report.notices, msgs))
        step(history, i, lines)
    return out


def test_defaults_are_seed_004s():
    o = pager.Options()
    assert (o.notice_percents, o.reminder_threshold, o.fallback_reserve, o.max_notes) == ((25, 50, 75), 16_000, 8_000, 8)
    assert (o.effective_window_percent, o.auto_compact_ratio, o.window_notice, o.body_after_prefix) == (95, 0.9, True, True)
    assert o.l1_cap == 8_000 and o.max_steps == 0


def test_window_opens_with_its_number_id_and_tokens_left(tmp_path):
    p = open_(tmp_path)
    calls = run(p, 1)
    _, notices, msgs = calls[0]
    assert notices == ("window",)
    text = msgs[-1]["content"]
    assert text.startswith("[context window] This is context window 1 (id w1-") and "of session s1" in text
    assert "tokens remain before this window ends" in text
    p.close()


def test_usage_notices_fire_once_each_per_window_and_again_in_the_next(tmp_path):
    p = open_(tmp_path)
    calls = run(p, 90)
    labels = [n for _, notices, _ in calls for n in notices]
    rollovers = [i for i, (_, notices, _) in enumerate(calls) if any(n.startswith("rollover:") for n in notices)]
    assert rollovers, "the window should fill up and roll over"
    first = labels[: labels.index(next(n for n in labels if n.startswith("rollover:")))]
    assert [n for n in first if n.startswith("usage-")] == ["usage-25", "usage-50", "usage-75"]
    assert first.count("remind") == 1 and first.count("window") == 1
    # the next window announces itself and counts again from its own prefix
    after = labels[labels.index(next(n for n in labels if n.startswith("rollover:"))):]
    assert "window" in after and "usage-25" in after
    # a notice is re-sent byte-identical on later calls of its window
    i = next(i for i, (_, notices, _) in enumerate(calls) if "usage-50" in notices)
    text = calls[i][2][-1]["content"]
    assert text.startswith("[context budget] 50 % of this context window is used")
    assert any(m.get("content") == text for m in calls[i + 1][2])
    p.close()


def test_each_notice_is_an_option(tmp_path):
    p = open_(tmp_path, notice_percents=[], window_notice=False, reminder_threshold=0)
    labels = {n for _, notices, _ in run(p, 40) for n in notices}
    assert not {"window", "remind"} & labels and not any(n.startswith("usage-") for n in labels)
    p.close()


def test_step_trigger_rolls_over_after_max_steps(tmp_path):
    p = open_(tmp_path, max_steps=5, notice_percents=[], window_notice=False)
    calls = run(p, 12, lines=2)  # tiny steps: tokens never trigger
    reasons = [i for i, (_, notices, _) in enumerate(calls) if "rollover:max-steps" in notices]
    assert reasons == [5, 10]
    window = calls[5][2]
    assert window[2]["content"].startswith("<context_handoff>")  # a forced checkpoint, no model call
    p.close()


def test_effective_window_and_ratio_place_the_hard_limit(tmp_path):
    p = open_(tmp_path)
    run(p, 1)
    assert p.last_report.budget == 34_000  # min(38,000 - 4,000, 0.9 x 38,000)
    p.close()
    q = pager.open(tmp_path / "ctx2", session="s", context_window=40_000, mode="rollover", fallback_reserve=4_000,
                   reminder_threshold=4_000, effective_window_percent=100, auto_compact_ratio=0.5,
                   counter=HeuristicCounter(4.0), log_reports=False)
    run(q, 1)
    assert q.last_report.budget == 20_000
    q.close()

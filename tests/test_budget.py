"""Budget layers: every branch of evaluate_budget, its boundaries, and the notices."""

from __future__ import annotations

import json

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sizes import examples

from pager.core.budget import (
    BudgetAction,
    BudgetConfig,
    BudgetState,
    base_limit,
    blocked_tool_result,
    default_output_reserve,
    evaluate_budget,
    fallback_text,
    hard_limit,
    is_allowed,
    prune_tools,
    reminder_text,
    tool_name,
)
from pager.errors import ConfigError, PagerError, ToolError

# window 100_000, output 10_000 -> hard 90_000; fallback 8_000 -> base 82_000;
# reminder 16_000 -> remind from 66_000 (remaining == threshold) up.
CFG = BudgetConfig(100_000, output_reserve=10_000)
HARD, BASE, REMIND = 90_000, 82_000, 66_000


def test_limits_follow_the_seed_formulas():
    assert hard_limit(CFG) == HARD
    assert base_limit(CFG) == BASE
    assert CFG.fallback_reserve == 8_000 and CFG.reminder_threshold == 16_000


@pytest.mark.parametrize(
    "window, expected",
    [(200_000, 8_192), (128_000, 8_192), (81_920, 8_192), (50_000, 5_000), (40_000, 4_000)],
)
def test_default_output_reserve_is_ten_percent_capped(window, expected):
    assert default_output_reserve(window) == expected
    assert BudgetConfig(window).output_reserve == expected


# (current, declared, reminder_claimed, fallback_claimed) -> (type, reason)
TABLE = [
    # 1. model declared: wins at any size, even at 0 and past the hard limit
    ((0, True, False, False), ("rollover", "model")),
    ((HARD + 5, True, True, True), ("rollover", "model")),
    ((BASE, True, False, False), ("rollover", "model")),
    # 2. hard limit: ==, just over; just under is not this branch
    ((HARD, False, False, False), ("rollover", "hard-limit")),
    ((HARD + 1, False, False, False), ("rollover", "hard-limit")),
    ((HARD + 1, False, True, True), ("rollover", "hard-limit")),
    ((HARD - 1, False, False, False), ("fallback", "base-limit")),
    # 3. past base after fallback given: ==, just over, just under hard
    ((BASE, False, False, True), ("rollover", "fallback-exhausted")),
    ((BASE + 1, False, True, True), ("rollover", "fallback-exhausted")),
    ((HARD - 1, False, True, True), ("rollover", "fallback-exhausted")),
    # ... but below base a claimed fallback changes nothing
    ((BASE - 1, False, True, True), ("continue", None)),
    ((BASE - 1, False, False, True), ("remind", "near-limit")),
    # 4. fallback: ==, just over; reminder claimed or not
    ((BASE, False, False, False), ("fallback", "base-limit")),
    ((BASE + 1, False, True, False), ("fallback", "base-limit")),
    # 5. reminder: remaining == threshold, just inside, just outside, claimed
    ((REMIND, False, False, False), ("remind", "near-limit")),
    ((REMIND + 1, False, False, False), ("remind", "near-limit")),
    ((BASE - 1, False, False, False), ("remind", "near-limit")),
    ((REMIND - 1, False, False, False), ("continue", None)),
    ((REMIND, False, True, False), ("continue", None)),
    ((BASE - 1, False, True, False), ("continue", None)),
    # continue
    ((0, False, False, False), ("continue", None)),
]


@pytest.mark.parametrize("facts, expected", TABLE)
def test_evaluate_budget_table(facts, expected):
    current, declared, reminded, fell_back = facts
    state = BudgetState(
        current,
        explicit_rollover_declared=declared,
        reminder_claimed=reminded,
        fallback_claimed=fell_back,
    )
    assert evaluate_budget(CFG, state) == BudgetAction(*expected)


def test_zero_fallback_reserve_goes_straight_to_rollover():
    cfg = BudgetConfig(100_000, output_reserve=10_000, fallback_reserve=0)
    assert evaluate_budget(cfg, BudgetState(HARD - 1)).type == "remind"
    assert evaluate_budget(cfg, BudgetState(HARD)) == BudgetAction("rollover", "hard-limit")


def test_zero_reminder_threshold_never_reminds():
    cfg = BudgetConfig(100_000, output_reserve=10_000, reminder_threshold=0)
    assert evaluate_budget(cfg, BudgetState(BASE - 1)).type == "continue"
    assert evaluate_budget(cfg, BudgetState(BASE)).type == "fallback"


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        (dict(context_window=0), "positive"),
        (dict(context_window=-5), "non-negative"),
        (dict(context_window=100_000, output_reserve=-1), "output_reserve"),
        (dict(context_window=100_000, fallback_reserve=-1), "fallback_reserve"),
        (dict(context_window=100_000, reminder_threshold=-1), "reminder_threshold"),
        (dict(context_window=100_000.0), "context_window"),
        (dict(context_window=True), "context_window"),
        (dict(context_window="100000"), "context_window"),
        (dict(context_window=20_000, output_reserve=12_000), "leave no base budget"),
        (dict(context_window=20_000, output_reserve=12_001), "leave no base budget"),
        (dict(context_window=20_000, effective_window_percent=0), "effective_window_percent"),
        (dict(context_window=20_000, effective_window_percent=101), "effective_window_percent"),
        (dict(context_window=20_000, auto_compact_ratio=0), "auto_compact_ratio"),
        (dict(context_window=20_000, auto_compact_ratio=1.5), "auto_compact_ratio"),
        (dict(context_window=20_000, max_steps=-1), "max_steps"),
        (dict(context_window=20_000, notice_percents=(0,)), "notice_percents"),
        (dict(context_window=25_000), "reminder_threshold (16000) must be below the base"),
    ],
)
def test_config_validation(kwargs, fragment):
    with pytest.raises(ConfigError) as info:
        BudgetConfig(**kwargs)
    assert fragment in str(info.value)
    assert isinstance(info.value, (PagerError, ValueError))


def test_config_is_frozen_and_state_validated():
    with pytest.raises(AttributeError):
        CFG.context_window = 1  # type: ignore[misc]
    with pytest.raises(ConfigError):
        BudgetState(-1)


def claim(state, action):
    """What the rollover controller does with a delivered notice: mark it used for the window."""
    if action.type == "remind":
        return attrs.evolve(state, reminder_claimed=True)
    if action.type == "fallback":
        return attrs.evolve(state, fallback_claimed=True)
    return state


ORDER = {"continue": 0, "remind": 1, "fallback": 2, "rollover": 3}


@settings(max_examples=examples(100, 300))
@given(
    cfg=st.builds(
        BudgetConfig,
        context_window=st.integers(40_000, 300_000),
        output_reserve=st.integers(0, 10_000),
        fallback_reserve=st.integers(0, 10_000),
        reminder_threshold=st.integers(0, 16_000),
    ),
    steps=st.lists(st.integers(0, 20_000), min_size=1, max_size=60),
    declare_at=st.one_of(st.none(), st.integers(0, 59)),
)
def test_one_window_is_monotone_with_at_most_one_reminder(cfg, steps, declare_at):
    """A window whose prompt only grows walks continue -> remind -> fallback -> rollover."""
    state = BudgetState(0)
    actions = []
    for i, grow in enumerate(steps):
        state = BudgetState(
            state.current_tokens + grow,
            explicit_rollover_declared=state.explicit_rollover_declared or i == declare_at,
            reminder_claimed=state.reminder_claimed,
            fallback_claimed=state.fallback_claimed,
        )
        action = evaluate_budget(cfg, state)
        actions.append(action)
        state = claim(state, action)
    kinds = [a.type for a in actions]
    assert kinds.count("remind") <= 1
    assert kinds.count("fallback") <= 1
    assert [ORDER[k] for k in kinds] == sorted(ORDER[k] for k in kinds) or _only_remind_dip(kinds)
    # once rollover, always rollover until a new window
    if "rollover" in kinds:
        first = kinds.index("rollover")
        assert set(kinds[first:]) == {"rollover"}
    # a window that crossed the reminder zone without skipping past it got its reminder
    base = base_limit(cfg)
    if cfg.reminder_threshold and any(
        base - cfg.reminder_threshold <= a.current_tokens < base
        for a in _states(steps)
    ) and declare_at is None:
        assert "remind" in kinds


def _only_remind_dip(kinds):
    # After a reminder, later steps in the same zone are "continue" again: the
    # order is monotone once "continue after remind" is read as "remind".
    seen_remind = False
    levels = []
    for k in kinds:
        if k == "remind":
            seen_remind = True
        levels.append(1 if (k == "continue" and seen_remind) else ORDER[k])
    return levels == sorted(levels)


def _states(steps):
    total = 0
    for grow in steps:
        total += grow
        yield BudgetState(total)


@given(current=st.integers(0, 200_000), r=st.booleans(), f=st.booleans())
def test_fresh_window_after_rollover_is_not_rollover_unless_full(current, r, f):
    """A new window (fresh state) rolls over again only if its own prompt is past a limit."""
    cfg = BudgetConfig(200_000)
    old = BudgetState(current, reminder_claimed=r, fallback_claimed=f)
    action = evaluate_budget(cfg, old)
    if action.type == "rollover":
        fresh = BudgetState(1_000)
        assert evaluate_budget(cfg, fresh).type == "continue"


def test_notices_name_the_tool_and_figures():
    state = BudgetState(70_000)
    text = reminder_text(CFG, state)
    assert "12,000 tokens remain" in text and "`new_context`" in text
    assert "not repeated" in text
    fb = fallback_text(CFG, BudgetState(BASE + 10))
    assert "`new_context`" in fb and "disabled" in fb and "82,000" in fb
    # deterministic: same inputs, same bytes (rendered once, kept verbatim)
    assert reminder_text(CFG, state) == text


def _tool(name):
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


def test_prune_tools_keeps_only_new_context_same_objects_in_order():
    tools = [_tool("bash"), _tool("new_context"), _tool("recall"), {"type": "custom", "name": "x"}]
    kept = prune_tools(tools)
    assert kept == [tools[1]] and kept[0] is tools[1]
    assert prune_tools(tools, keep=("recall", "new_context")) == [tools[1], tools[2]]
    assert prune_tools(tools, keep=("x",)) == [tools[3]]
    assert prune_tools(None) == [] and prune_tools([_tool("bash")]) == []
    assert len(tools) == 4  # input untouched


def test_blocked_tool_result_is_a_paired_openai_tool_message():
    call = {"id": "call_7", "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"cmd": "ls"})}}
    msg = blocked_tool_result(call)
    assert msg["role"] == "tool" and msg["tool_call_id"] == "call_7"
    assert "`bash` was not run" in msg["content"] and "`new_context`" in msg["content"]
    assert set(msg) == {"role", "tool_call_id", "content"}
    assert not is_allowed(call) and is_allowed({"id": "c", "function": {"name": "new_context"}})
    assert tool_name({"name": "flat"}) == "flat" and tool_name({}) is None
    with pytest.raises(ToolError):
        blocked_tool_result({"function": {"name": "bash"}})


def test_budget_and_handoff_import_no_io_modules():
    """budget and handoff pull in no sqlite3, tantivy, tiktoken or subprocess.

    The package ``__init__`` imports the facade, so the check loads the two
    modules under a bare package object, as their own imports see them.
    """
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = (
        "import sys, types;"
        f"pkg = types.ModuleType('pager'); pkg.__path__ = [{str(root / 'pager')!r}];"
        "sys.modules['pager'] = pkg;"
        "import pager.core.budget, pager.core.handoff;"
        "bad = {'sqlite3', 'tantivy', 'tiktoken', 'subprocess', 'numpy'} & set(sys.modules);"
        "print(sorted(bad))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root
    )
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- seed 004's settings and notices


def test_effective_window_and_auto_compact_ratio_place_the_hard_limit():
    from pager.core.budget import effective_window

    seed = BudgetConfig(200_000, effective_window_percent=95, auto_compact_ratio=0.9)
    assert effective_window(seed) == 190_000
    assert hard_limit(seed) == 171_000  # 0.9 x 190,000 comes before 190,000 - 8,192
    assert base_limit(seed) == 163_000
    # without the ratio the output reserve decides, inside the effective window
    assert hard_limit(BudgetConfig(200_000, effective_window_percent=95)) == 190_000 - 8_192
    assert evaluate_budget(seed, BudgetState(171_000)) == BudgetAction("rollover", "hard-limit")
    assert evaluate_budget(BudgetConfig(200_000), BudgetState(171_000)).type == "remind"  # not a rollover


def test_step_trigger_rolls_over_after_max_steps_whatever_the_size():
    cfg = BudgetConfig(100_000, max_steps=30)
    assert evaluate_budget(cfg, BudgetState(1_000, steps=29)).type == "continue"
    assert evaluate_budget(cfg, BudgetState(1_000, steps=30)) == BudgetAction("rollover", "max-steps")
    assert evaluate_budget(BudgetConfig(100_000), BudgetState(1_000, steps=10_000)).type == "continue"
    # a declared handoff still wins: the model's memo beats a forced checkpoint
    assert evaluate_budget(cfg, BudgetState(1_000, steps=30, explicit_rollover_declared=True)).reason == "model"


def test_usage_notices_fire_once_each_highest_first():
    from pager.core.budget import due_notice, usage_percent, usage_text

    cfg = BudgetConfig(100_000, notice_percents=(25, 50, 75), reminder_threshold=0)
    hard = hard_limit(cfg)
    claimed: tuple[int, ...] = ()
    fired = []
    for tokens in range(0, hard, 1_000):
        state = BudgetState(tokens, notices_claimed=claimed)
        p = due_notice(cfg, state, body_after_prefix=False)
        if p is not None:
            fired.append((p, tokens))
            claimed += tuple(q for q in cfg.notice_percents if q <= p and q not in claimed)
    assert [p for p, _ in fired] == [25, 50, 75]
    for p, tokens in fired:
        assert usage_percent(cfg, BudgetState(tokens), False) >= p
        assert usage_percent(cfg, BudgetState(tokens - 1_000), False) < p
    # a jump past two thresholds gives one notice, the higher one
    assert due_notice(cfg, BudgetState(int(hard * 0.6)), body_after_prefix=False) == 50
    assert "50 % of this context window is used" in usage_text(cfg, BudgetState(int(hard * 0.6)), 50)
    assert due_notice(BudgetConfig(100_000), BudgetState(hard - 1), False) is None  # no thresholds: none


def test_body_after_prefix_counts_out_the_fixed_prefix():
    from pager.core.budget import due_notice, usage_percent

    cfg = BudgetConfig(100_000, notice_percents=(25,), reminder_threshold=0)
    hard = hard_limit(cfg)
    big_l1 = BudgetState(30_000, prefix_tokens=30_000)
    assert usage_percent(cfg, big_l1, True) == 0.0
    assert usage_percent(cfg, big_l1, False) > 25
    assert due_notice(cfg, big_l1, body_after_prefix=True) is None
    assert due_notice(cfg, big_l1, body_after_prefix=False) == 25
    quarter = 30_000 + (hard - 30_000) // 4 + 1
    assert due_notice(cfg, BudgetState(quarter, prefix_tokens=30_000), body_after_prefix=True) == 25


def test_window_open_text_names_the_window_and_tokens_left():
    from pager.core.budget import window_open_text

    cfg = BudgetConfig(100_000)
    text = window_open_text(cfg, BudgetState(10_000), 2, "w2-abc", "task-42")
    assert "context window 2 (id w2-abc) of session task-42" in text
    assert f"{hard_limit(cfg) - 10_000:,} tokens remain" in text

"""Counts the steady path never reads are taken when a round first needs them, and are the same (issue 23).

A compact line's token count is read only by a round (the index block of the
units it drops). Recording no longer counts it; the round's scoring counts the
rows not counted yet. What every round reads must be exactly what the eager
count gave: the count of the row's compact line, plus one.
"""

from __future__ import annotations

import pytest

import pager
from pager.core import plan as plan_mod
from pager.core.compact import compact_line

from helpers import assistant, call, coding_session, tool

OPTS = dict(context_window=60_000, output_reserve=1_000, high_watermark=6_000, low_watermark=3_000, recent_units=2,
            compact_tokens=500, objective=False, log_reports=False)


def _steps(n: int, tag: str) -> list[dict]:
    """``n`` more call/result steps, with call ids of their own."""
    out = []
    for m in coding_session(n, output_lines=20)[2:]:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "id": f"{c['id']}-{tag}"} for c in m["tool_calls"]]
        if m.get("tool_call_id"):
            m["tool_call_id"] = f"{m['tool_call_id']}-{tag}"
        out.append(m)
    return out


def _eager(p: pager.Pager, messages: list[dict]) -> list[int]:
    h = p.history
    return [p.counter.count(compact_line(messages[r], h.kind[r], h.handle[r], h.step[r], h.path[r])) + 1
            for r in range(len(h))]


@pytest.fixture
def rounds(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The compact_tokens column of every round's plan input, as the round reads it."""
    seen: list[list[int]] = []
    real = plan_mod._heat_fill

    def spy(inp, *args, **kwargs):
        seen.append(inp.compact_tokens.tolist())
        return real(inp, *args, **kwargs)

    monkeypatch.setattr(plan_mod, "_heat_fill", spy)
    return seen


def test_every_round_reads_the_eager_counts_growing_forking_and_reopened(tmp_path, rounds) -> None:
    history = coding_session(60, output_lines=20)
    with pager.open(tmp_path, session="c", **OPTS) as p:
        for k in range(3, len(history) + 1, 2):
            before = len(rounds)
            p.assemble({"messages": history[:k]})
            if len(rounds) > before:
                assert rounds[-1] == _eager(p, history[:k]), k
        assert len(rounds) >= 3  # the session ran rounds past its first
        # a fork: the history edited at row 40, then grown until rounds run again
        forked = history[:40] + [assistant("another way", call("f1", "bash", command="ls src/"))]
        forked += [tool("f1", "\n".join(f"src/mod_{i}.py" for i in range(30)))]
        forked += _steps(40, "f")
        before = at_fork = len(rounds)
        for k in range(42, len(forked) + 1, 2):
            p.assemble({"messages": forked[:k]})
            if len(rounds) > before:
                assert rounds[-1] == _eager(p, forked[:k]), k
                before = len(rounds)
        assert len(rounds) > at_fork
    with pager.open(tmp_path, session="c", **OPTS) as p:
        before = at_reopen = len(rounds)
        grown = forked + _steps(30, "g")
        for k in range(len(forked), len(grown) + 1, 2):
            p.assemble({"messages": grown[:k]})
            if len(rounds) > before:
                assert rounds[-1] == _eager(p, grown[:k]), k
                before = len(rounds)
        assert len(rounds) > at_reopen


def test_a_call_that_runs_no_round_counts_no_compact_line(tmp_path, rounds) -> None:
    history = coding_session(8, output_lines=5)
    with pager.open(tmp_path, session="c", **OPTS) as p:
        p.assemble({"messages": history[:-2]})
        counted = list(p.history.compact_tokens)
        p.assemble({"messages": history})
        assert len(rounds) == 1  # the first call only
        assert p.history.compact_tokens == counted + [-1, -1]

"""Task clustering that acts: detection, a round at a switch, demotion and restoration."""

from __future__ import annotations

from typing import Any

import pytest
import pager
from pager.core.tasks import detect_task
from pager.core.tokens import HeuristicCounter

from helpers import assistant, call, system, tool, user

A = frozenset({"src/alpha/parser.py", "parser.py", "parse_alpha", "alphaerror"})
B = frozenset({"docs/beta/guide.md", "guide.md", "render_beta"})


def test_detect_continue_switch_return_and_short_messages() -> None:
    tasks = {1: A}
    assert detect_task(A, None, {}, 1) == 1  # the first user message starts a task
    assert detect_task(frozenset({"parse_alpha", "parser.py"}), 1, tasks, 9) == 1  # continues
    assert detect_task(B, 1, tasks, 9) == 9  # nothing in common: a new task
    tasks[9] = B
    assert detect_task(frozenset({"parse_alpha", "src/alpha/parser.py", "new_term"}), 9, tasks, 20) == 1  # back
    assert detect_task(frozenset({"some_name"}), 9, tasks, 20) == 9  # one identifier is no evidence
    assert detect_task(frozenset({"README.md"}), 9, tasks, 20) == 20  # one file name is
    assert detect_task(frozenset(), 9, tasks, 20) == 9


def _steps(tag: str, path: str, fn: str, n: int, start: int) -> list[dict[str, Any]]:
    msgs = []
    for i in range(start, start + n):
        cid = f"{tag}{i}"
        msgs.append(assistant(f"Checking {fn} in {path}, step {i}", call(cid, "bash", command=f"grep -n {fn} {path}")))
        body = "".join(f"{path}:{k}: {fn}_{tag}{i}_{k} = {fn}(value_{tag}{i}_{k})  # output of step {i}\n" for k in range(30))
        msgs.append(tool(cid, body))
    return msgs


def _session() -> tuple[list[dict[str, Any]], int, int]:
    msgs = [system("You are a coding agent."), user("Fix parse_alpha in src/alpha/parser.py: it raises AlphaError (ticket ALPHA-7731)")]
    msgs += _steps("a", "src/alpha/parser.py", "parse_alpha", 6, 0)
    msgs.append(user("Separate job: update render_beta in docs/beta/guide.md for the new layout"))
    switch = len(msgs)
    msgs += _steps("b", "docs/beta/guide.md", "render_beta", 6, 0)
    msgs.append(user("AlphaError is back, ticket ALPHA-7731 again"))
    back = len(msgs)
    return msgs, switch, back


def _prompts(**options: Any) -> tuple[list[list[str]], list[Any]]:
    msgs, _, _ = _session()
    p = pager.open(":memory:", session="tasks", counter=HeuristicCounter(), context_window=100_000,
                   output_reserve=1_000, high_watermark=5_000, low_watermark=2_500, recent_units=1,
                   recall_pages=0, stub_threshold=10_000, inline_max=10_000, task_rounds=True, **options)
    texts, reports = [], []
    for i in range(2, len(msgs) + 1):
        if msgs[i - 1]["role"] == "assistant":
            continue
        out = p.assemble({"model": "m", "messages": msgs[:i]})
        texts.append([str(m.get("content") or "") for m in out["messages"]])
        reports.append(p.last_report)
    return texts, reports


def _outputs(prompt: list[str], tag: str) -> int:
    return sum(1 for t in prompt if f"_{tag}" in t and "# output of step" in t)


def test_a_switch_runs_one_round_and_a_return_restores_the_old_task() -> None:
    # the heat order (the objective off): task_penalty alone moves the working set
    texts, reports = _prompts(policy_params={"task_penalty": 4.0}, objective=False)
    assert [r.reason for r in reports].count("task switch") == 2  # to B, and back to A
    # just before the return, B (the active task) holds most of the working set
    assert _outputs(texts[-2], "b") > _outputs(texts[-2], "a")
    # back on A: the round restores A's older outputs and drops B's newer ones, in one batch
    assert reports[-1].round
    assert _outputs(texts[-1], "a") >= 5
    assert _outputs(texts[-1], "b") == 0


@pytest.mark.parametrize("options", [{"policy_params": {"task_penalty": 0.0}},
                                     {"task_focus": False, "policy_params": {"task_penalty": 4.0}}])
def test_without_the_task_penalty_the_newest_task_stays(options: dict[str, Any]) -> None:
    texts, reports = _prompts(objective=False, **options)  # the heat order
    assert _outputs(texts[-1], "b") > 0
    if options.get("task_focus") is False:
        assert "task switch" not in [r.reason for r in reports]


def test_under_the_objective_b_s_prompt_holds_none_of_a_s_outputs():
    # issue 24: a page of another task is a quarter as likely to be needed, so B's rounds drop
    # A's outputs; A's are not brought back on return (docs/policies.md, "Task clustering")
    texts, reports = _prompts()
    assert [r.reason for r in reports].count("task switch") == 2
    assert _outputs(texts[-2], "a") == 0 and _outputs(texts[-2], "b") > 0

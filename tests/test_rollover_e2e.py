"""Rollover mode end to end, through the public API only.

Small windows (40,000 tokens, 4,000-token reserves) make the budget layers
fire within a few dozen steps; a character-based counter keeps the sizes
predictable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

import pager
from pager.core import pairing
from pager.cli import main as cli_main
from pager.lab.replay.metrics import check_invariants
from pager.lab.replay.strategies import PagerStrategy
from pager.core.tokens import HeuristicCounter, message_tokens

from helpers import assistant, big_text, call, coding_session, system, tool, user

TASK = "Fix the off-by-one in hard_limit (src/budget.py); keep tests/test_budget.py green."
PIN = "INVARIANT: never edit db/schema.sql without a migration file"


def open_rollover(tmp_path: Path, **kw: Any) -> pager.Pager:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    # The mechanics below are measured against the plain limits (hard = window - reserve) and
    # without the window-open and usage notices; tests/test_notices.py covers those defaults.
    opts: dict[str, Any] = dict(
        context_window=40_000, mode="rollover", workspace=str(ws), fallback_reserve=4_000,
        reminder_threshold=4_000, expose_tools=True, counter=HeuristicCounter(4.0),
        window_notice=False, notice_percents=[], effective_window_percent=100, auto_compact_ratio=1.0,
    )
    opts.update(kw)
    return pager.open(tmp_path / "ctx", session=opts.pop("session", "s1"), **opts)


def start() -> list[dict[str, Any]]:
    return [system("You are a coding agent."), user(TASK)]


def add_step(history: list[dict[str, Any]], i: int, lines: int = 40, text: str | None = None) -> None:
    cid = f"call_{i}"
    history.append(assistant(f"Step {i}: run the tests", call(cid, "bash", command=f"pytest -k t{i}")))
    history.append(tool(cid, text if text is not None else big_text(lines, tag=f"out{i}")))


def nc_call(cid: str, next_steps: list[str], related: list[dict[str, str]] | None = None,
            requirements: list[dict[str, str]] | None = None) -> dict[str, Any]:
    args = {
        "handoff": {
            "requirements": requirements or [],
            "inferences": ["the bug is probably in the reserve arithmetic"],
            "conflicts": [],
            "next_steps": next_steps,
        },
        "related_files": related or [],
    }
    return {"id": cid, "type": "function", "function": {"name": "new_context", "arguments": json.dumps(args)}}


def bash_tools() -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


def hand_off(p: pager.Pager, history: list[dict[str, Any]], cid: str, next_steps: list[str],
             **kw: Any) -> dict[str, Any]:
    """Append the model's new_context call and pager's answer to it; return the call."""
    c = nc_call(cid, next_steps, **kw)
    history.append(assistant("Handing off.", c))
    history.append(p.call_tool(c))
    return c


def tool_names(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools") or ()]


# --------------------------------------------------------------------------- two-phase


def test_new_context_records_intent_and_switches_at_next_assemble(tmp_path):
    history = start()
    add_step(history, 0)
    with open_rollover(tmp_path) as p:
        first = p.assemble({"messages": history})["messages"]
        assert first == history  # the first window is the history verbatim
        assert p.last_report.mode == "rollover" and not p.last_report.round

        c = nc_call("nc1", ["Make test_hard_limit pass"])
        answer = p.call_tool(c)
        # phase one: a confirmation and a recorded intent; nothing else happens
        assert answer["role"] == "tool" and answer["tool_call_id"] == "nc1"
        assert answer["content"].startswith("A new context window will start at the next step")
        assert len(p.store.events("s1", "rollover_intent")) == 1
        assert p.store.events("s1", "rollover") == []

        history += [assistant("Handing off.", c), answer]
        out = p.assemble({"messages": history})["messages"]
        rep = p.last_report
        assert rep.round and rep.reason == "rollover: model" and rep.notices == ("rollover:model",)
        assert not rep.prefix_kept
        trigger_row = len(history) - 2
        handle = p.history.handle[trigger_row]
        assert out[:2] == history[:2]
        assert len(out) == 3
        text = out[2]["content"]
        assert text.startswith("Previous context is available in durable storage.\n")
        assert "session_id: s1\n" in text and f"message_uuid: {handle}\n" in text
        assert "- Make test_hard_limit pass" in text
        # the trigger id is a real handle: the model can look at the message that handed off
        assert "new_context" in p.expand(handle)
        assert len(p.store.events("s1", "rollover")) == 1

        # the next window grows verbatim from there
        history.append(assistant("Reading src/budget.py", call("r1", "bash", command="cat src/budget.py")))
        history.append(tool("r1", "def hard_limit(): ..."))
        out2 = p.assemble({"messages": history})["messages"]
        assert out2[:3] == out and out2[3:] == history[-2:]
        assert p.last_report.prefix_kept


def test_parallel_sibling_still_pending_delays_the_switch(tmp_path):
    history = start()
    add_step(history, 0)
    with open_rollover(tmp_path) as p:
        p.assemble({"messages": history})
        c = nc_call("nc1", ["carry on"])
        sibling = call("b1", "bash", command="git status")
        history.append(assistant(None, c, sibling))
        history.append(p.call_tool(c))
        # b1 has no result yet: not a step boundary
        out = p.assemble({"messages": history})["messages"]
        assert not p.last_report.round
        assert out[: len(history)] == history
        assert out[-1] == pairing.synthetic_result("b1")
        assert pairing.check(out) == []
        history.append(tool("b1", "clean"))
        out = p.assemble({"messages": history})["messages"]
        assert p.last_report.round and p.last_report.reason == "rollover: model"
        assert len(out) == 3 and "- carry on" in out[2]["content"]


# --------------------------------------------------------------------------- window shape


def test_new_window_holds_l1_pins_handoff_related_files_and_notes(tmp_path):
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    history = start()
    add_step(history, 0)
    with open_rollover(tmp_path) as p:
        p.pin(PIN)
        p.note("CI runs on Python 3.11")
        p.assemble({"messages": history})
        hand_off(
            p, history, "nc1", ["Make test_hard_limit pass"],
            requirements=[{"text": "A prompt never exceeds the window", "source": "user, turn 1"}],
            related=[
                {"path": "src/budget.py", "role": "implementation", "note": "threshold logic"},
                {"path": str(ws / "tests" / "test_budget.py"), "role": "test"},
            ],
        )
        out = p.assemble({"messages": history})["messages"]
    assert out[0] == history[0] and out[1] == history[1]  # system and turn 1, verbatim
    assert out[2]["role"] == "user" and PIN in out[2]["content"]  # pinned goals
    first = out[3]["content"]
    assert len(out) == 4
    assert "session_id: s1" in first and "message_uuid: pg:" in first
    assert "<handoff>" in first and "</handoff>" in first
    assert "- A prompt never exceeds the window (source: user, turn 1)" in first
    assert "- the bug is probably in the reserve arithmetic" in first
    assert "- src/budget.py (implementation) - threshold logic" in first
    assert "- tests/test_budget.py (test)" in first  # absolute path inside the workspace: made relative
    assert "<notes>\n- CI runs on Python 3.11\n</notes>" in first
    assert "Step 0" not in json.dumps(out)  # the old window is gone from the prompt


def test_old_pages_stay_reachable_through_recall_and_expand(tmp_path):
    secret = "ZEBRA_7731 overflow in hard_limit at budget.py line 42\n" + big_text(10)
    history = start()
    add_step(history, 0, text=secret)
    add_step(history, 1)
    with open_rollover(tmp_path) as p:
        p.assemble({"messages": history})
        hand_off(p, history, "nc1", ["carry on"])
        out = p.assemble({"messages": history})["messages"]
        assert "ZEBRA_7731" not in json.dumps(out)
        found = p.call_tool({"id": "q1", "function": {"name": "recall",
                                                       "arguments": json.dumps({"query": "ZEBRA_7731"})}})
        assert found["tool_call_id"] == "q1" and "pg:" in found["content"]
        handle = next(w for w in found["content"].split() if w.startswith("pg:"))
        full = p.call_tool({"id": "e1", "function": {"name": "expand",
                                                      "arguments": json.dumps({"handle": handle})}})
        assert full["content"] == secret
        assert p.stats()["faults"] >= 1  # a page of an old window was needed again


def test_big_tool_outputs_are_stubbed_on_arrival_and_expandable(tmp_path):
    big = big_text(400)  # about 6,000 tokens, over the 2,000-token stub threshold
    history = start()
    add_step(history, 0, text=big)
    with open_rollover(tmp_path) as p:
        out = p.assemble({"messages": history})["messages"]
        stub = out[-1]["content"]
        assert out[-1]["tool_call_id"] == "call_0" and stub.startswith("[pager: tool output stored off-prompt")
        assert p.last_report.pages_stubbed == 1 and p.last_report.layers["stubs"] > 0
        handle = stub.split(" as ")[1].split(" ")[0]
        assert p.expand(handle) == big
        add_step(history, 1)
        again = p.assemble({"messages": history})["messages"]
        assert again[: len(out)] == out  # the stub is re-sent byte-identical


# --------------------------------------------------------------------------- budget layers


def test_forced_rollover_past_the_hard_limit_builds_a_checkpoint(tmp_path):
    """The host rolls over by itself: pager never calls a model to do it."""
    history = start()
    with open_rollover(tmp_path, fallback_reserve=0, reminder_threshold=0) as p:
        p.note("- [ ] run the migration test")
        p.note("CI runs on Python 3.11")
        p.assemble({"messages": history})
        i = 0
        while True:
            add_step(history, i)
            if i == 3:
                history.append(user("please also handle the empty file case"))
            i += 1
            out = p.assemble({"messages": history, "tools": bash_tools()})["messages"]
            rep = p.last_report
            assert rep.tokens <= rep.budget
            assert pairing.check(out) == []
            if rep.round:
                break
            assert i < 200
        assert rep.reason == "rollover: hard-limit" and rep.notices == ("rollover:hard-limit",)
        assert rep.budget == 36_000
        assert out[:2] == history[:2] and len(out) == 3
        cp = out[2]["content"]
        assert cp.startswith("<context_handoff>") and cp.endswith("</context_handoff>")
        assert f'<objective phase="active">\n{TASK}\n</objective>' in cp
        assert "<remaining_work>\n- [ ] run the migration test\n</remaining_work>" in cp
        assert "<notes>\n- CI runs on Python 3.11\n</notes>" in cp
        assert "<last_human_request>\nplease also handle the empty file case\n</last_human_request>" in cp
        assert f"message_uuid: {p.history.handle[len(history) - 1]}" in cp
        assert p.stats()["demoted"] > 0


def test_fallback_prunes_tools_intercept_blocks_then_host_rolls_over(tmp_path):
    history = start()
    with open_rollover(tmp_path, reminder_threshold=0) as p:
        assert p.intercept(call("x", "bash", command="ls")) is None  # no fallback yet
        i = 0
        while True:
            add_step(history, i)
            i += 1
            req = p.assemble({"messages": history, "tools": bash_tools()})
            assert p.last_report.tokens <= p.last_report.budget
            if "fallback" in p.last_report.notices:
                break
            assert tool_names(req) == ["bash", "recall", "expand", "note", "new_context"]
            assert i < 200
        assert tool_names(req) == ["new_context"]
        assert req["messages"][-1]["content"].startswith("[context budget] This context window is full")
        # the model ignores the fallback and calls bash (and pager's recall): both blocked
        bash_call = call("blocked1", "bash", command="rm -rf build")
        blocked = p.intercept(bash_call)
        assert blocked["role"] == "tool" and blocked["tool_call_id"] == "blocked1"
        assert blocked["content"].startswith("Error: `bash` was not run")
        recall = {"id": "blocked2", "function": {"name": "recall", "arguments": '{"query": "x"}'}}
        assert p.call_tool(recall)["content"].startswith("Error: `recall` was not run")
        assert p.intercept(nc_call("nc", ["go"])) is None  # new_context may run
        history += [assistant(None, bash_call), blocked]
        out = p.assemble({"messages": history, "tools": bash_tools()})
        rep = p.last_report
        assert rep.round and rep.reason == "rollover: fallback-exhausted"
        assert out["messages"][2]["content"].startswith("<context_handoff>")
        # a new window: every tool is back, nothing is intercepted
        assert tool_names(out) == ["bash", "recall", "expand", "note", "new_context"]
        assert p.intercept(bash_call) is None


def test_fallback_then_handoff_uses_the_models_handoff(tmp_path):
    history = start()
    with open_rollover(tmp_path, reminder_threshold=0) as p:
        i = 0
        while "fallback" not in (p.last_report.notices if p.last_report else ()):
            add_step(history, i)
            i += 1
            p.assemble({"messages": history})
        hand_off(p, history, "nc1", ["resume at the reserve arithmetic"])
        out = p.assemble({"messages": history})["messages"]
        assert p.last_report.reason == "rollover: model"
        assert "- resume at the reserve arithmetic" in out[2]["content"]


def test_reminder_is_injected_once_at_the_tail_and_stays_byte_identical(tmp_path):
    history = start()
    prev: list[bytes] | None = None
    reminders = 0
    saw_reminder = False
    with open_rollover(tmp_path) as p:
        i = 0
        while True:
            add_step(history, i)
            i += 1
            out = p.assemble({"messages": history})["messages"]
            rep = p.last_report
            new = [orjson.dumps(m) for m in out]
            if rep.round:
                break
            if prev is not None:
                assert rep.prefix_kept and new[: len(prev)] == prev  # append-only
            if "remind" in rep.notices:
                assert out[-1]["content"].startswith("[context budget] This context window is nearly full")
                saw_reminder = True
            reminders = sum(1 for m in out if "nearly full" in str(m.get("content")))
            assert reminders == (1 if saw_reminder else 0)
            prev = new
            assert i < 200
    assert saw_reminder and reminders == 1


def test_never_over_budget_and_always_paired_over_a_long_session(tmp_path):
    history = coding_session(160, output_lines=60)
    rollovers = 0
    with open_rollover(tmp_path) as p:
        for n in range(3, len(history) + 1):
            if history[n - 1]["role"] != "tool":
                continue
            out = p.assemble({"messages": history[:n]})["messages"]
            rep = p.last_report
            rollovers += rep.round
            assert rep.tokens <= rep.budget
            assert out[0] == history[0] and out[1] == history[1]
            assert pairing.check(out) == []
    assert rollovers >= 2


# --------------------------------------------------------------------------- tool errors


@pytest.mark.parametrize("path, fragment", [
    ("../../etc/passwd", "escapes the workspace"),
    ("/etc/passwd", "outside the workspace"),
])
def test_path_escape_in_new_context_is_an_error_result(tmp_path, path, fragment):
    history = start()
    with open_rollover(tmp_path) as p:
        p.assemble({"messages": history})
        c = nc_call("nc1", ["go"], related=[{"path": path, "role": "spec"}])
        answer = p.call_tool(c)
        assert answer["tool_call_id"] == "nc1" and answer["content"].startswith("Error:")
        assert fragment in answer["content"]
        assert p.store.events("s1", "rollover_intent") == []
        history += [assistant(None, c), answer]
        p.assemble({"messages": history})
        assert not p.last_report.round  # no intent, no switch


def test_new_context_outside_rollover_mode_is_an_error_result(tmp_path):
    with pager.open(tmp_path / "ctx", session="s1", context_window=40_000) as p:
        answer = p.call_tool(nc_call("nc1", ["go"]))
        assert answer["content"].startswith("Error:")
        assert p.intercept(call("x", "bash")) is None


# --------------------------------------------------------------------------- canary


def test_canary_invariant_survives_five_rollovers_and_next_comes_from_latest_handoff(tmp_path):
    history = start()
    with open_rollover(tmp_path) as p:
        p.pin(PIN)
        p.assemble({"messages": history})
        for gen in range(1, 6):
            add_step(history, 10 * gen)
            add_step(history, 10 * gen + 1)
            hand_off(p, history, f"nc{gen}", [f"next action {gen}: run step_{gen}"])
            out = p.assemble({"messages": history})["messages"]
            assert p.last_report.reason == "rollover: model"
            assert out[1] == history[1]  # turn 1, verbatim
            assert f"- {PIN}" in out[2]["content"].splitlines()  # the pin, verbatim
            text = json.dumps(out)
            assert f"step_{gen}" in text
            for old in range(1, gen):
                assert f"step_{old}" not in text  # earlier handoffs are not carried
        assert len(p.store.events("s1", "rollover")) == 5
        state = p.task_state()
        assert state.next == "next action 5: run step_5"
        assert any(inv.text == PIN for inv in state.invariants)


# --------------------------------------------------------------------------- durability


def test_pending_intent_and_claimed_notices_survive_close_and_reopen(tmp_path):
    history = start()
    with open_rollover(tmp_path) as p:
        i = 0
        while "remind" not in (p.last_report.notices if p.last_report else ()):
            add_step(history, i)
            i += 1
            before = p.assemble({"messages": history})["messages"]
    with open_rollover(tmp_path) as p:
        out = p.assemble({"messages": history})["messages"]
        assert out == before and p.last_report.notices == ()  # no second reminder
        assert p.last_report.prefix_kept
        hand_off(p, history, "nc1", ["after the reopen"])
    with open_rollover(tmp_path) as p:
        out = p.assemble({"messages": history})["messages"]
        assert p.last_report.reason == "rollover: model"
        assert "- after the reopen" in out[2]["content"]
    # options are kept with the session: a bare reopen is still in rollover mode
    with pager.open(tmp_path / "ctx", session="s1", counter=HeuristicCounter(4.0)) as p:
        assert p.options.mode == "rollover"
        again = p.assemble({"messages": history})["messages"]
        assert again == out and p.last_report.prefix_kept


def test_state_export_cli_writes_the_checkpoint_files(tmp_path, capsys):
    history = start()
    with open_rollover(tmp_path) as p:
        p.pin(PIN)
        p.note("decision: keep SQLite in WAL mode because readers must not block the writer")
        p.note("rejected: LLM summaries of old turns -- lossy, they turn guesses into facts")
        p.note("- [ ] write the canary test")
        p.assemble({"messages": history})
        hand_off(p, history, "nc1", ["Run tests/test_budget.py", "Then the canary"])
        p.assemble({"messages": history})
    state_dir = tmp_path / "state"
    assert cli_main(["state", "export", str(tmp_path / "ctx"), str(state_dir), "--session", "s1"]) == 0
    printed = capsys.readouterr().out.split()
    assert {Path(x).name for x in printed} == {".wal", "00_goal.md", "10_invariants.md", "99_next.md"}
    assert PIN in (state_dir / "00_goal.md").read_text()
    inv = (state_dir / "10_invariants.md").read_text()
    assert f"- [decision] {PIN}" in inv
    assert "- [decision] keep SQLite in WAL mode\n  reason: readers must not block the writer" in inv
    assert "- [rejected] LLM summaries of old turns\n  reason: lossy, they turn guesses into facts" in inv
    nxt = (state_dir / "99_next.md").read_text()
    assert "- next step: Run tests/test_budget.py\n" in nxt
    assert "- - [ ] write the canary test" in nxt
    # a second export only appends (the invariants file is a latch)
    assert cli_main(["state", "export", str(tmp_path / "ctx"), str(state_dir)]) == 0
    assert cli_main(["state", "resume", str(state_dir)]) == 0
    assert "===== 99_next.md =====" in capsys.readouterr().out


# --------------------------------------------------------------------------- the bench


def test_bench_strategy_runs_rollover_mode_with_sound_prompts(tmp_path):
    """``pager bench --pager mode=rollover`` builds a PagerStrategy with these options."""
    history = coding_session(120, output_lines=60)
    strategy = PagerStrategy("pager[mode=rollover]", mode="rollover", context_window=40_000,
                             fallback_reserve=4_000, reminder_threshold=4_000)
    counter = HeuristicCounter(4.0)
    strategy.reset({"id": "bench-s"})
    try:
        for n in range(2, len(history) + 1, 7):
            prompt = strategy.build([dict(m) for m in history[:n]])
            tokens = sum(message_tokens(m, counter) for m in prompt)
            assert check_invariants(prompt, history[:n], pins_l1=True) == []
            # hard limit: 95 % of the window (38,000) less the 4,000 output reserve (seed 004)
            assert strategy.budget == 34_000 and tokens <= 40_000
            assert "l1" in strategy.layers()
    finally:
        strategy.close()

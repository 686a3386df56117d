"""The facade's seams: where a session's state is persisted, old stores reopening, the session's format.

``Pager`` keeps one state row per session (``pager.session``): its figures
and its scheduler's state under the scheduler's key. Stores written before
the rollover state moved into that row kept it in ``settings["rollover:<s>"]``;
such a store must reopen exactly as it would have.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson

import pager
from pager.storage.sqlite import SQLiteStore

from helpers import big_text, coding_session
from test_rollover_e2e import add_step, bash_tools, hand_off, open_rollover, start

from lazy import lazy_module

at = lazy_module("anthropic.types", skip=False)  # at first use: tests/lazy.py


def _to_old_format(folder: Path, session: str) -> dict[str, Any]:
    """Rewrite a store's state row as the code before the row held the rollover state wrote it."""
    store = SQLiteStore(folder)
    try:
        row = dict(store.load_state(session) or {})
        data = row.pop("rollover")
        with store.transaction():
            store.save_state(session, {"layout": None, **row})
            store.set_setting(f"rollover:{session}", orjson.dumps(data).decode())
        return data
    finally:
        store.close()


def _rollover_history(tmp_path: Path) -> list[dict[str, Any]]:
    """Run a rollover session to a second window with a handoff pending; return its history."""
    history = start()
    tmp_path.mkdir(exist_ok=True)
    with open_rollover(tmp_path) as p:
        for i in range(3):
            add_step(history, i)
            p.assemble({"messages": history, "tools": bash_tools()})
        hand_off(p, history, "nc1", ["run the tests again"])
        p.assemble({"messages": history, "tools": bash_tools()})  # the switch: window 2
        assert p.last_report.reason == "rollover: model"
        add_step(history, 3)
        p.assemble({"messages": history, "tools": bash_tools()})
        hand_off(p, history, "nc2", ["write the migration"])  # pending at close
    return history


def test_a_rollover_store_of_the_old_format_reopens_with_the_same_window(tmp_path):
    history = _rollover_history(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    old = _to_old_format(tmp_path / "b" / "ctx", "s1")
    assert old["window"]["generation"] == 1 and old["pending"]["call_id"] == "nc2"
    outs = {}
    for name in ("a", "b"):
        steps = list(history)
        with open_rollover(tmp_path / name) as p:
            got = [p.assemble({"messages": steps, "tools": bash_tools()})]  # the pending handoff switches
            for i in range(4, 7):
                add_step(steps, i, text=big_text(30, tag=f"o{i}"))
                got.append(p.assemble({"messages": steps, "tools": bash_tools()}))
            outs[name] = (got, p.last_report.notices, p.task_state(), p._mirror.state.scheduler)
    assert outs["b"] == outs["a"]
    assert outs["a"][3].window.generation == 2  # the reopened window went on from the stored one


def test_the_state_row_keeps_the_paging_layout_where_pager_ui_reads_it(tmp_path):
    with pager.open(tmp_path / "ctx", session="s", context_window=200_000) as p:
        p.assemble({"messages": coding_session(4)})
        row = p.store.load_state("s")
    assert set(row) == {"layout", "demoted", "faults", "calls"} and row["layout"]["slots"]


def test_a_session_reopened_in_the_other_mode_and_back_keeps_its_window(tmp_path):
    history = _rollover_history(tmp_path)
    with open_rollover(tmp_path) as p:
        window = p._mirror.state.scheduler.window
    with pager.open(tmp_path / "ctx", session="s1", context_window=200_000, mode="paging") as p:
        p.assemble({"messages": history})
        assert {"rollover", "layout"} <= set(p.store.load_state("s1"))
    with open_rollover(tmp_path) as p:
        assert p._mirror.state.scheduler.window == window


# --------------------------------------------------------------------------- the session's format


def _anthropic_request(messages: list[Any]) -> dict[str, Any]:
    return {"model": "claude", "max_tokens": 512, "system": "You are a coding agent.", "messages": messages,
            "tools": [{"name": "read", "input_schema": {"type": "object"}}]}


def test_tools_calls_and_usage_default_to_the_session_format(tmp_path):
    with pager.open(tmp_path / "ctx", session="a", context_window=200_000) as p:
        assert p.tools()[0]["function"]["name"] == "recall"  # before any request: OpenAI chat
        p.assemble(_anthropic_request([{"role": "user", "content": "fix src/app.py"}]))
        assert [t["name"] for t in p.tools()][:3] == ["recall", "expand", "note"]
        block = at.ToolUseBlock(type="tool_use", id="tu_1", name="note", input={"text": "tests pass"})
        assert p.intercept(block) is None
        answer = p.call_tool(block)
        assert answer["type"] == "tool_result" and answer["tool_use_id"] == "tu_1"
        assert "Noted" in str(answer["content"]) and p.notes() == ["tests pass"]
        usage = at.Usage(input_tokens=30, output_tokens=2, cache_read_input_tokens=100)
        assert p.observe(usage) == {"prompt_tokens": 130, "completion_tokens": 2, "cached_tokens": 100,
                                    "cache_write_tokens": 0}
        # a named format still wins
        assert p.tools(format="openai-chat")[0]["type"] == "function"


def test_intercept_speaks_the_session_format_in_rollover_mode(tmp_path):
    with open_rollover(tmp_path) as p:
        p.assemble(_anthropic_request([{"role": "user", "content": "fix src/app.py"}]))
        block = at.ToolUseBlock(type="tool_use", id="tu_2", name="read", input={"path": "src/app.py"})
        assert p.intercept(block) is None  # no fallback step yet: the harness runs its tool
        answer = p.call_tool(at.ToolUseBlock(type="tool_use", id="tu_3", name="recall", input={"query": "app"}))
        assert answer["type"] == "tool_result" and answer["tool_use_id"] == "tu_3"

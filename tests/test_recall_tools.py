"""L3 recall inside assemble and the agent tools (recall, expand, note) through the public API."""

from __future__ import annotations

import json

import pytest

import pager
from pager.core import pairing
from pager.formats.openai_chat import validate

from helpers import assistant, big_text, call, system, tool, user


def _history(n_filler: int = 30) -> list[dict]:
    """A session that reads a config module early, works on other things, then comes back to it."""
    msgs = [system("You are a coding agent."), user("Make the retry policy configurable.")]
    config_src = "".join(
        f"def helper_{i}(x):\n    return x + {i}\n" for i in range(40)
    ) + "MAX_RETRY_BACKOFF = 17\ndef load_retry_settings(path):\n    return parse_retry_table(path)\n"
    msgs += [assistant("Read the config module.", call("c0", "bash", command="cat src/app/retry_config.py")),
             tool("c0", config_src)]
    for i in range(1, n_filler):
        msgs += [assistant(f"Run unrelated check {i}.", call(f"c{i}", "bash", command=f"pytest tests/test_misc_{i}.py")),
                 tool(f"c{i}", big_text(30, tag=f"misc{i}"))]
    # the agent now refers back to the old file by path and identifier
    msgs += [assistant("Now change load_retry_settings in src/app/retry_config.py",
                       call("cz", "bash", command="grep -n load_retry_settings src/app/retry_config.py")),
             tool("cz", "42:def load_retry_settings(path):")]
    return msgs


def open_small(tmp_path, **kw):
    kw.setdefault("high_watermark", 3_000)
    kw.setdefault("low_watermark", 1_500)
    kw.setdefault("recall_pages", 2)
    kw.setdefault("recall_min_strength", 4)
    return pager.open(tmp_path / "ctx", session="s", context_window=200_000, **kw)


def test_assemble_recalls_a_demoted_page_the_work_refers_to(tmp_path):
    history = _history()
    with open_small(tmp_path) as p:
        for n in range(4, len(history) + 1, 2):
            out = p.assemble({"messages": history[:n]})["messages"]
        recalled = [m for m in out if m["role"] == "user" and "recalled from earlier" in str(m["content"])]
        assert recalled, "the old read of retry_config.py should be recalled"
        block = recalled[-1]["content"]
        assert 'path="src/app/retry_config.py"' in block and "load_retry_settings" in block
        assert 'kind="file"' in block and "handle=" in block and "step=" in block
        assert p.last_report.pages_recalled >= 1 or p.last_report.layers["l3"] > 0
        assert pairing.check(out) == []
        validate(out)
        assert p.stats()["faults"] >= 1  # it had been demoted and was needed again


def test_recall_needs_reference_strength(tmp_path):
    history = _history()
    with open_small(tmp_path, recall_min_strength=100) as p:
        out = p.assemble({"messages": history})["messages"]
        assert not any("recalled from earlier" in str(m.get("content")) for m in out)


def test_recall_can_be_switched_off(tmp_path):
    history = _history()
    with open_small(tmp_path, recall_pages=0) as p:
        out = p.assemble({"messages": history})["messages"]
        assert not any("recalled from earlier" in str(m.get("content")) for m in out)
        assert p.last_report.layers["l3"] == 0


def test_tools_are_openai_function_tools_and_can_be_exposed(tmp_path):
    with open_small(tmp_path) as p:
        specs = p.tools()
        assert [t["function"]["name"] for t in specs] == ["recall", "expand", "note"]
        for t in specs:
            assert t["type"] == "function" and t["function"]["parameters"]["type"] == "object"
        req = p.assemble({"messages": _history(3), "tools": [{"type": "function", "function": {"name": "bash"}}]},
                         expose_tools=True)
        assert [t["function"]["name"] for t in req["tools"]] == ["bash", "recall", "expand", "note"]


def _call(name: str, **args) -> dict:
    return {"id": "t1", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def test_recall_tool_finds_history_and_fails_fast(tmp_path):
    with open_small(tmp_path) as p:
        p.assemble({"messages": _history()})
        hit = p.call_tool(_call("recall", query="load_retry_settings"))
        assert hit["role"] == "tool" and hit["tool_call_id"] == "t1"
        assert "pg:" in hit["content"] and "expand" in hit["content"]
        assert len(hit["content"]) <= 2_600
        miss = p.call_tool(_call("recall", query="zebra_quantum_frobnicator"))
        assert miss["content"].startswith("No match") and "workspace" in miss["content"]


@pytest.mark.parametrize("query", ['a:b "c" (d) [e] {f} ^g ~h *i ?j \\k +l -m !n /o AND OR NOT', "", "x" * 100_000,
                                   "日本語のテキスト", "\ud800 lone", "🙂"])
def test_odd_queries_never_raise(tmp_path, query):
    with open_small(tmp_path) as p:
        p.assemble({"messages": _history(3)})
        res = p.call_tool(_call("recall", query=query))
        assert res["role"] == "tool"


def test_cjk_text_is_searchable(tmp_path):
    msgs = [system("s"), user("任务"), assistant(None, call("a", "bash", command="cat docs/设计.md")),
            tool("a", "上下文换窗：工作记忆与持久层的解耦")]
    with open_small(tmp_path) as p:
        p.assemble({"messages": msgs})
        hits = p.search("换窗")
        assert hits and hits[0].kind == "file"


def test_expand_tool_reports_errors_as_results(tmp_path):
    with open_small(tmp_path) as p:
        p.assemble({"messages": _history(3)})
        handle = p.history.handle[3]
        ok = p.call_tool(_call("expand", handle=handle, start_line=1, end_line=2))
        assert ok["content"] == "def helper_0(x):\n    return x + 0\n"
        bad = p.call_tool(_call("expand", handle="pg:9999-abcdef"))
        assert bad["content"].startswith("Error:") and "unknown handle" in bad["content"]
        junk = p.call_tool({"id": "t2", "function": {"name": "expand", "arguments": "{not json"}})
        assert junk["content"].startswith("Error:") and junk["tool_call_id"] == "t2"
        neg = p.call_tool(_call("expand", handle=handle, start_line=0))
        assert neg["content"].startswith("Error:")


def test_handles_and_searches_never_cross_sessions(tmp_path):
    with pager.open(tmp_path / "ctx", session="alice", context_window=200_000) as a:
        a.assemble({"messages": _history(3)})
        secret_handle = a.history.handle[3]
    with pager.open(tmp_path / "ctx", session="bob", context_window=200_000) as b:
        b.assemble({"messages": [system("s"), user("hello")]})
        res = b.call_tool(_call("expand", handle=secret_handle))
        assert res["content"].startswith("Error:")
        with pytest.raises(pager.HandleError):
            b.expand(secret_handle)
        assert b.search("load_retry_settings") == []
        assert b.search("load_retry_settings", cross_session=True) == []  # session pages are not shared
        miss = b.call_tool(_call("recall", query="load_retry_settings MAX_RETRY_BACKOFF"))
        assert miss["content"].startswith("No match")


def test_note_tool_keeps_a_bounded_number_of_notes_in_the_card(tmp_path):
    with open_small(tmp_path, max_notes=3) as p:
        for i in range(5):
            res = p.call_tool(_call("note", text=f"decision {i}: keep the API stable"))
        assert "3/3" in res["content"]
        out = p.assemble({"messages": _history(2)})["messages"]
        card = out[2]["content"]
        assert "decision 4" in card and "decision 2" in card and "decision 1" not in card
        assert p.notes()[0].startswith("decision 0")  # older notes stay in the store
        empty = p.call_tool(_call("note", text="  "))
        assert empty["content"].startswith("Error:")


def test_unknown_tool_is_an_error_result(tmp_path):
    with open_small(tmp_path) as p:
        res = p.call_tool(_call("rm_rf"))
        assert res["content"].startswith("Error:") and "recall" in res["content"]


def test_cross_session_search_sees_only_shared_pages_and_names_their_session(tmp_path):
    store = tmp_path / "ctx"
    with pager.open(store, session="alice", context_window=200_000, scope="shared") as a:
        a.assemble({"messages": _history(3)})
    with pager.open(store, session="carol", context_window=200_000, scope="private") as c:
        c.assemble({"messages": [system("s"), user("carol keeps load_retry_settings_private_notes to herself")]})
    with pager.open(store, session="bob", context_window=200_000) as b:
        b.assemble({"messages": [system("s"), user("hello")]})
        assert b.search("load_retry_settings") == []  # session-scoped by default
        hits = b.search("load_retry_settings", cross_session=True)
        assert hits and {h.session for h in hits} == {"alice"}
        private = b.search("load_retry_settings_private_notes", cross_session=True)
        assert all(h.session != "carol" for h in private)  # a private page never leaves its session
        assert "load_retry_settings" in b.expand(hits[0].handle)  # a readable foreign page expands
        carol = [r.handle for r, _ in b.store.iter_pages(0) if r.session == "carol"]
        with pytest.raises(pager.HandleError, match="unknown handle"):  # a private one is unknown to bob
            b.expand(carol[-1])
    with pytest.raises(pager.ConfigError):
        pager.open(store, session="dave", context_window=200_000, scope="public")

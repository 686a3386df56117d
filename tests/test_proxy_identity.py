"""The proxy's reading of real clients: whose conversation a request is, which requests pass untouched, refusals."""

from __future__ import annotations

import copy
from typing import Any

import orjson

from pager.proxy.clients import is_refusal, passthrough_kind, serve_refusals
from pager.proxy.dialects import DIALECTS
from pager.proxy.sessions import claude_session_id, session_for

REFUSAL = "Wasted call — file unchanged since your last Read. Refer to that earlier tool_result instead."
ANT = DIALECTS["/v1/messages"]
RESP = DIALECTS["/v1/responses"]
CHAT = DIALECTS["/v1/chat/completions"]


def name(dialect: Any, req: dict[str, Any], headers: dict[str, str] | None = None) -> str:
    return session_for(dialect.session_seed(req), req, headers or {})


def cc(first: str, session_id: str, *, mark: bool) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": first}
    if mark:
        block["cache_control"] = {"type": "ephemeral"}
    return {"system": [{"type": "text", "text": "You are Claude Code."}], "messages": [{"role": "user", "content": [block]}],
            "metadata": {"user_id": orjson.dumps({"device_id": "d", "session_id": session_id}).decode()}}


def test_claude_code_one_conversation_one_session_and_a_subagent_its_own():
    first = name(ANT, cc("fix it", "s-1", mark=True))
    later = cc("fix it", "s-1", mark=False)
    later["messages"] += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    assert name(ANT, later) == first  # the mark on the first request does not split it
    assert name(ANT, cc("search for callers", "s-1", mark=True)) != first  # a subagent: same id, its own root
    assert name(ANT, cc("fix it", "s-2", mark=True)) != first  # another conversation, the same words
    assert claude_session_id({"metadata": {"user_id": "user_ab12_account_cd34_session_0f1e2d3c-4b5a"}}) == "0f1e2d3c-4b5a"
    assert claude_session_id({"metadata": {"user_id": "{not json"}}) is None


def test_codex_conversations_in_one_directory_are_apart():
    env = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context/>"}]}
    a = {"instructions": "You are Codex.", "input": [env], "prompt_cache_key": "conv-a"}
    b = {"instructions": "You are Codex.", "input": [env], "prompt_cache_key": "conv-b"}
    assert name(RESP, a) != name(RESP, b)
    assert RESP.session_seed(a) == RESP.session_seed(b)  # the root alone would merge them
    no_key = {"instructions": "You are Codex.", "input": [env]}
    assert name(RESP, no_key, {"session_id": "conv-a"}) != name(RESP, no_key, {"session_id": "conv-b"})
    assert name(RESP, no_key, {"session-id": "conv-a"}) == name(RESP, no_key, {"thread-id": "conv-a"})
    assert name(RESP, a, {"x-pager-session": "mine"}) == "mine"  # the header wins over everything


def test_the_root_is_read_in_canonical_form():
    plain = {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "q"}]}]}
    marked = copy.deepcopy(plain)
    marked["messages"][1]["content"][0]["cache_control"] = {"type": "ephemeral"}
    assert name(CHAT, plain) == name(CHAT, marked)


def test_compaction_and_side_requests_pass_untouched():
    tools = [{"name": "Read", "input_schema": {"type": "object"}}]
    summary = {"messages": [{"role": "user", "content": "fix"}, {"role": "assistant", "content": "done"},
                            {"role": "user", "content": [{"type": "text", "text": (
                                "Your task is to create a detailed summary of the conversation so far, paying "
                                "close attention to the user's explicit requests")}]}], "tools": tools}
    assert passthrough_kind("anthropic-messages", summary, 10_000) == "compaction"
    assert passthrough_kind("anthropic-messages", {"messages": [], "tools": tools}, 10, helper="compaction") \
        == "compaction"
    codex = {"input": [{"role": "user", "content": "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a "
                                                   "handoff summary for another LLM"}], "tools": [{"name": "shell"}]}
    assert passthrough_kind("openai-responses", codex, 10_000) == "compaction"
    title = {"messages": [{"role": "system", "content": "You are a title generator."}, {"role": "user", "content": "x"}]}
    assert passthrough_kind("openai-chat", title, 2_500) == "side"
    assert passthrough_kind("openai-chat", title, 2_500, named=True) is None  # a named session is a conversation
    assert passthrough_kind("openai-chat", {**title, "tools": [{"type": "function"}]}, 2_500) is None
    with_calls = {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"id": "c"}]},
                               {"role": "tool", "tool_call_id": "c", "content": "y"}]}
    assert passthrough_kind("openai-chat", with_calls, 2_500) is None  # tool traffic: a conversation
    chat = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                         {"role": "user", "content": "what did I say?"}]}
    assert passthrough_kind("openai-chat", chat, 2_500) is None  # a tool-less chat's second call is recorded


def test_refusals_are_recognised():
    assert is_refusal(REFUSAL) and is_refusal([{"type": "text", "text": "File unchanged since last read"}])
    assert is_refusal("File src/a.py has not changed since last read")
    assert not is_refusal("def f():\n    return 'file unchanged since last read'\n" * 40)  # a real file quoting it
    assert not is_refusal("[pager: file a.py stored off-prompt … Wasted call — file unchanged since your last Read.")


def test_a_refused_reread_gets_the_earlier_content_back_in_each_format():
    body = "line 1\nline 2 CONTENT-7\n"
    read = {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "/w/a.py"}}
    again = {**read, "id": "t2"}
    ant = {"messages": [{"role": "user", "content": "go"},
                        {"role": "assistant", "content": [read]},
                        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": body}]},
                        {"role": "assistant", "content": [again]},
                        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": REFUSAL}]}]}
    sent = copy.deepcopy(ant)
    assert serve_refusals("anthropic-messages", ant) == 1
    served = ant["messages"][4]["content"][0]["content"]
    assert served[0]["text"] == body and REFUSAL in served[1]["text"]  # the file, and the refusal's own words
    assert sent["messages"][4]["content"][0]["content"] == REFUSAL  # the client's objects are not mutated
    assert serve_refusals("anthropic-messages", copy.deepcopy(sent)) == 1  # the same every call: no fork
    other = copy.deepcopy(sent)
    other["messages"][3]["content"][0]["input"] = {"file_path": "/w/b.py"}  # another file: nothing to serve
    assert serve_refusals("anthropic-messages", other) == 0

    def call(cid: str) -> dict[str, Any]:
        return {"id": cid, "type": "function", "function": {"name": "read", "arguments": '{"filePath": "/w/a.ts"}'}}

    chat = {"messages": [{"role": "user", "content": "go"},
                         {"role": "assistant", "content": None, "tool_calls": [call("c1")]},
                         {"role": "tool", "tool_call_id": "c1", "content": body},
                         {"role": "assistant", "content": None, "tool_calls": [call("c2")]},
                         {"role": "tool", "tool_call_id": "c2", "content": "File unchanged since last read."}]}
    assert serve_refusals("openai-chat", chat) == 1 and chat["messages"][4]["content"].startswith(body)
    args = orjson.dumps({"command": ["bash", "-lc", "cat a.rs"]}).decode()
    resp = {"input": [{"role": "user", "content": "go"},
                      {"type": "function_call", "name": "shell", "arguments": args, "call_id": "k1"},
                      {"type": "function_call_output", "call_id": "k1", "output": body},
                      {"type": "function_call", "name": "shell", "arguments": args, "call_id": "k2"},
                      {"type": "function_call_output", "call_id": "k2", "output": "File unchanged since last read"}]}
    assert serve_refusals("openai-responses", resp) == 1 and resp["input"][4]["output"].startswith(body)


def test_a_refusal_memo_gives_the_same_answers_and_searches_a_seen_item_once(monkeypatch):
    import pager.proxy.clients as clients

    read = {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "/w/a.py"}}
    history = [{"role": "user", "content": "go"}, {"role": "assistant", "content": [read]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "the file"}]}]
    refused = [{"role": "assistant", "content": [{**read, "id": "t2"}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": REFUSAL}]}]
    memo: dict[int, Any] = {}
    searched: list[Any] = []
    real = clients._refuses
    monkeypatch.setattr(clients, "_refuses", lambda item: searched.append(item) or real(item))
    assert serve_refusals("anthropic-messages", {"messages": list(history)}, memo) == 0
    assert len(searched) == 3
    # the next call resends the same objects and a refused re-read: only the new items are searched
    req = {"messages": [*history, *refused]}
    assert serve_refusals("anthropic-messages", req, memo) == 1 == serve_refusals(
        "anthropic-messages", {"messages": [*history, *refused]})
    assert len(searched) == 5 and req["messages"][4]["content"][0]["content"][0]["text"] == "the file"
    assert serve_refusals("anthropic-messages", {"messages": [*history, *refused]}, memo) == 1  # every call, no fork

"""The proxy's reading of real clients: whose conversation a request is, which requests pass untouched, refusals."""

from __future__ import annotations

import copy
import random
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from sizes import examples

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
    # a summary the user asked for as the task, then an agent's loop: its requests end with tool results
    task = "Your task is to create a detailed summary of the conversation so far"
    looping = {"messages": [{"role": "user", "content": task},
                            {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function"}]},
                            {"role": "tool", "tool_call_id": "c", "content": "log"}], "tools": [{"type": "function"}]}
    assert passthrough_kind("openai-chat", looping, 10_000) is None
    items = [{"role": "user", "content": task}, {"type": "function_call", "call_id": "k", "name": "shell"},
             {"type": "function_call_output", "call_id": "k", "output": "log"}]
    assert passthrough_kind("openai-responses", {"input": items, "tools": [{"name": "shell"}]}, 10_000) is None
    ended = {"input": [*items, {"type": "reasoning", "summary": []}, {"role": "user", "content": task}]}
    assert passthrough_kind("openai-responses", {**ended, "tools": [{"name": "shell"}]}, 10_000) == "compaction"
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


def test_a_refusal_memo_gives_the_same_answers_and_scans_only_new_items(monkeypatch):
    import pager.proxy.refusals as refusals

    tail = refusals.TAIL
    read = {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "/w/a.py"}}
    history: list[Any] = [{"role": "user", "content": "go"}, {"role": "assistant", "content": [read]},
                          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "the file"}]}]
    for k in range(10):  # turns of talk: a history long enough to lie mostly behind the tail
        history += [{"role": "assistant", "content": f"thinking {k}"}, {"role": "user", "content": f"go on {k}"}]
    refused = [{"role": "assistant", "content": [{**read, "id": "t2"}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": REFUSAL}]}]
    memo: dict[Any, Any] = {}
    scanned: list[int] = []
    real = refusals._FORMATS["anthropic-messages"]

    def scan(items, start, end, calls, results):
        scanned.extend(range(start, end))
        real[1](items, start, end, calls, results)

    monkeypatch.setitem(refusals._FORMATS, "anthropic-messages", (real[0], scan, real[2]))
    n = len(history)
    assert serve_refusals("anthropic-messages", {"messages": list(history)}, memo, "c") == 0
    assert scanned == list(range(n))
    # the next call resends the same objects and a refused re-read: only its last items are scanned
    del scanned[:]
    req = {"messages": [*history, *refused]}
    assert serve_refusals("anthropic-messages", req, memo, "c") == 1
    assert scanned == list(range(n - tail, n + 2))
    assert serve_refusals("anthropic-messages", {"messages": [*history, *refused]}) == 1  # as without a memo
    assert req["messages"][n + 1]["content"][0]["content"][0]["text"] == "the file"
    assert refused[1]["content"][0]["content"] == REFUSAL  # the client's objects are not changed
    # a client that moves its cache mark sends the last items as new objects: still no rescan of the history
    del scanned[:]
    moved = [*history, *copy.deepcopy(refused), {"role": "assistant", "content": "done"}]
    later = {"messages": moved}
    assert serve_refusals("anthropic-messages", later, memo, "c") == 1
    assert scanned == list(range(n + 2 - tail, n + 3))  # from where the pass ended: the new item, the tail
    assert later["messages"][n + 1]["content"][0]["content"][0]["text"] == "the file"
    # a request that does not extend the pass (another object where it ends: an edit, a fork) is scanned whole
    del scanned[:]
    forked = {"messages": [*copy.deepcopy(history), *refused]}
    assert serve_refusals("anthropic-messages", forked, memo, "c") == 1
    assert scanned == list(range(n + 2))
    # and one behind it, too (a retried older request): nothing of the longer one's pass leaks into it
    del scanned[:]
    assert serve_refusals("anthropic-messages", {"messages": history[:3]}, memo, "c") == 0
    assert scanned == [0, 1, 2]


def _step(fmt: str, rng: random.Random, k: int) -> list[dict[str, Any]]:
    """One read of one of a few files (sometimes refused, sometimes of no file), in ``fmt``'s shape."""
    path = f"/w/f{rng.randrange(3)}.py"
    out: Any = rng.choice([REFUSAL, f"content {k} of {path}", [{"type": "text", "text": f"parts {k}"}]])
    name = rng.choice(["Read", "Read", "Bash"])
    cid = f"c{k}"
    if fmt == "anthropic-messages":
        use = {"type": "tool_use", "id": cid, "name": name,
               "input": {"file_path": path} if name == "Read" else {"command": "ls"}}
        return [{"role": "assistant", "content": [{"type": "text", "text": "next"}, use]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": cid, "content": out}]}]
    args = orjson.dumps({"file_path": path} if name == "Read" else {"command": "ls"}).decode()
    text = out if isinstance(out, str) else out[0]["text"]
    if fmt == "openai-chat":
        return [{"role": "assistant", "content": None,
                 "tool_calls": [{"id": cid, "type": "function", "function": {"name": name, "arguments": args}}]},
                {"role": "tool", "tool_call_id": cid, "content": text}]
    return [{"type": "function_call", "name": name, "arguments": args, "call_id": cid},
            {"type": "function_call_output", "call_id": cid, "output": text}]


@settings(max_examples=examples(40, 200), deadline=None)
@given(seed=st.integers(0, 10**6))
def test_prop_a_memo_serves_what_a_whole_pass_serves(seed: int) -> None:
    """Growing conversations in each format, now and then a fork or a retry: the memo changes no answer."""
    rng = random.Random(seed)
    memo: dict[Any, Any] = {}
    for fmt in ("anthropic-messages", "openai-chat", "openai-responses"):
        key = "input" if fmt == "openai-responses" else "messages"
        items: list[Any] = [{"role": "user", "content": "go"}]
        older: list[list[Any]] = []
        for k in range(rng.randrange(2, 16)):
            roll = rng.random()
            if roll < 0.1 and older:
                items = list(rng.choice(older))  # a retry of an older request: behind the last one
            elif roll < 0.2:
                items = copy.deepcopy(items)  # the same history as new objects (a restarted client)
            elif roll < 0.5 and items:
                items = [*items[:-1], copy.deepcopy(items[-1])]  # its last item anew (a cache mark moved off it)
            items = [*items, *_step(fmt, rng, k)]
            older.append(items)
            sent = copy.deepcopy(items)
            with_memo, whole = {key: list(items)}, {key: copy.deepcopy(items)}
            n = serve_refusals(fmt, with_memo, memo, fmt)
            assert n == serve_refusals(fmt, whole)
            assert orjson.dumps(with_memo) == orjson.dumps(whole)
            assert orjson.dumps(items) == orjson.dumps(sent)  # the client's objects are not changed


def test_a_refusal_memo_keeps_the_most_recent_conversations_only():
    from pager.proxy.refusals import MEMO_CONVERSATIONS

    memo: dict[Any, Any] = {}
    read = {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "/w/a.py"}}
    for c in range(MEMO_CONVERSATIONS + 10):
        history = [{"role": "user", "content": f"task {c}"}, {"role": "assistant", "content": [read]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]},
                   {"role": "assistant", "content": [{**read, "id": "t2"}]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": REFUSAL}]}]
        assert serve_refusals("anthropic-messages", {"messages": history}, memo, f"conv-{c}") == 1
    assert len(memo) == MEMO_CONVERSATIONS
    assert "conv-0" not in memo and f"conv-{MEMO_CONVERSATIONS + 9}" in memo

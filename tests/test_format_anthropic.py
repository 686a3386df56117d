"""Anthropic Messages: conversion, rendering, cache breakpoints, bad input, SDK objects."""

from __future__ import annotations

import copy

import pytest

from pager.errors import InputError, MessageError
from pager.formats import breakpoints as bp
from pager.formats.anthropic_messages import AnthropicMessages
from pager.formats.base import RenderHints, detect, get_format
from pager.formats.export import export_request, to_chat

from lazy import lazy_module

at = lazy_module("anthropic.types", skip=False)  # at first use: tests/lazy.py


def history(turns: int = 2) -> list[dict]:
    msgs: list[dict] = [{"role": "user", "content": "fix the failing test in src/app.py"}]
    for t in range(turns):
        msgs.append({"role": "assistant", "content": [
            {"type": "thinking", "thinking": f"plan {t}", "signature": f"sig{t}"},
            {"type": "text", "text": f"reading {t}"},
            {"type": "tool_use", "id": f"tu{t}a", "name": "read", "input": {"path": f"src/{t}.py"}},
            {"type": "tool_use", "id": f"tu{t}b", "name": "grep", "input": {"q": "def"}},
        ]})
        msgs.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"tu{t}a", "content": f"contents {t}\n" * 5},
            {"type": "tool_result", "tool_use_id": f"tu{t}b", "is_error": True,
             "content": [{"type": "text", "text": "grep: no match"}]},
        ]})
    msgs.append({"role": "assistant", "content": [{"type": "text", "text": "done"}]})
    msgs.append({"role": "user", "content": [{"type": "text", "text": "thanks, now the docs"}]})
    return msgs


def request(msgs: list[dict] | None = None, **extra) -> dict:
    return {"model": "claude-sonnet-4-5", "max_tokens": 1024, "system": "You are a careful engineer.",
            "tools": [{"name": "read", "description": "read a file", "input_schema": {"type": "object"}}],
            "messages": msgs if msgs is not None else history(), **extra}


def fmt() -> AnthropicMessages:
    return AnthropicMessages()


def test_detect_claims_anthropic_and_leaves_chat():
    assert detect(request()).name == "anthropic-messages"
    assert detect({"messages": [{"role": "user", "content": "hi"}]}).name == "openai-chat"
    chat = {"model": "gpt-4o", "max_tokens": 10, "messages": [{"role": "system", "content": "s"},
                                                             {"role": "user", "content": "hi"}]}
    assert detect(chat).name == "openai-chat"
    assert detect({"model": "gpt-4o", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}).name == "openai-chat"
    blocks = {"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "x"}]}]}
    assert detect(blocks).name == "anthropic-messages"


def test_conversion_maps_turns_to_neutral_messages():
    conv = fmt().to_messages(request())
    roles = [m["role"] for m in conv.messages]
    assert roles[:6] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    asst = conv.messages[2]
    assert [c["id"] for c in asst["tool_calls"]] == ["tu0a", "tu0b"]
    assert asst["tool_calls"][0]["function"]["arguments"] == '{"path":"src/0.py"}'
    # thinking is kept verbatim with its signature, and counted as text
    assert asst["native"][0] == {"type": "thinking", "thinking": "plan 0", "signature": "sig0"}
    assert {"type": "text", "text": "plan 0"} in asst["content"]
    assert conv.messages[4]["native"]["is_error"] is True
    assert conv.tools[0]["name"] == "read"


def test_repeated_calls_return_the_same_neutral_objects():
    f = fmt()
    msgs = history()
    a = f.to_messages(request(msgs)).messages
    msgs.append({"role": "assistant", "content": "ok"})
    b = f.to_messages(request(msgs)).messages
    assert len(b) == len(a) + 1
    assert all(x is y for x, y in zip(a, b))
    # a system prompt rebuilt each call, and another session's in between: still the same object
    other = f.to_messages(request(msgs, system="another session")).messages
    rebuilt = f.to_messages(request(msgs, system="You are a careful " + "engineer.")).messages
    assert rebuilt[0] is a[0] and other[0] is not a[0]


def test_round_trip_is_unchanged():
    f = fmt()
    req = request()
    conv = f.to_messages(req)
    out = f.render(req, conv.messages, tools=None, hints=RenderHints(), cache_marks="caller")
    assert out == req


def test_render_merges_pager_messages_and_orders_results_by_call():
    f = fmt()
    req = request()
    conv = list(f.to_messages(req).messages)
    # a stub replaces the first result; the card is inserted after the first user message
    stub = {"role": "tool", "tool_call_id": "tu0a", "content": "[stub pg:3-abc]"}
    card = {"role": "user", "content": "## Task state\nobjective"}
    scheduled = conv[:2] + [card] + [conv[2], conv[4], stub] + conv[5:]
    out = f.render(req, scheduled, tools=None, hints=RenderHints(), cache_marks="caller")
    first = out["messages"][0]
    assert first["role"] == "user" and first["content"][1]["text"].startswith("## Task state")
    results = out["messages"][2]["content"]
    assert [b["tool_use_id"] for b in results] == ["tu0a", "tu0b"]  # same order as the calls
    assert results[0]["content"] == "[stub pg:3-abc]"
    assert results[1]["is_error"] is True
    roles = [m["role"] for m in out["messages"]]
    assert all(a != b for a, b in zip(roles, roles[1:]))  # turns alternate


def _marks(out: dict) -> list[tuple[str, int, int]]:
    found = []
    for j, b in enumerate(out.get("system") or [] if not isinstance(out.get("system"), str) else []):
        if "cache_control" in b:
            found.append(("system", 0, j))
    for t, tool in enumerate(out.get("tools") or ()):
        if "cache_control" in tool:
            found.append(("tools", 0, t))
    for i, m in enumerate(out["messages"]):
        if isinstance(m["content"], list):
            for j, b in enumerate(m["content"]):
                if "cache_control" in b:
                    found.append(("messages", i, j))
    return found


def test_breakpoints_at_l1_stable_previous_and_end():
    f = fmt()
    req = request(history(6))
    conv = f.to_messages(req).messages
    n = len(conv)
    out = f.render(req, conv, tools=None, hints=RenderHints(l1=2, stable=8, previous=n - 3))
    marks = _marks(out)
    assert len(marks) == 4
    assert marks[0] == ("system", 0, 0)  # end of tools + system
    last = out["messages"][-1]["content"][-1]
    assert last["cache_control"] == {"type": "ephemeral"}
    # nothing mutated in the caller's request
    assert req == request(history(6)) and "cache_control" not in str(req)


def test_never_more_than_four_marks_and_caller_marks_by_mode():
    f = fmt()
    msgs = history(3)
    for m in msgs:
        if isinstance(m["content"], list):
            for b in m["content"]:
                if b["type"] == "text":
                    b["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    req = request(msgs)
    conv = f.to_messages(req).messages
    hints = RenderHints(l1=2, stable=5, previous=9)
    pager_out = f.render(req, conv, tools=None, hints=hints)
    assert len(_marks(pager_out)) <= 4
    assert "1h" not in str(pager_out["messages"])  # pager mode replaces the caller's marks
    caller_out = f.render(req, conv, tools=None, hints=hints, cache_marks="caller")
    assert len(_marks(caller_out)) == 4  # the caller's last four of five
    merged = f.render(req, conv, tools=None, hints=hints, cache_marks="merge")
    assert len(_marks(merged)) == 4
    with pytest.raises(ValueError):
        f.render(req, conv, tools=None, hints=hints, cache_marks="everywhere")


def test_merge_keeps_long_ttl_marks_first():
    f = fmt()
    msgs = history(4)
    msgs[-1]["content"][0]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}  # the caller's, at the end
    req = request(msgs)
    conv = f.to_messages(req).messages
    out = f.render(req, conv, tools=None, hints=RenderHints(l1=2, stable=6, previous=None), cache_marks="merge")
    ttls = [b["cache_control"].get("ttl", "5m") for m in out["messages"] if isinstance(m["content"], list)
            for b in m["content"] if "cache_control" in b]
    ttls = ([out["system"][0]["cache_control"].get("ttl", "5m")] if isinstance(out["system"], list) else []) + ttls
    assert len(ttls) >= 2 and ttls == sorted(ttls, key=lambda t: t != "1h")  # every 1h mark before any 5m


def test_marks_skip_thinking_blocks():
    slots = [bp.Slot(0), bp.Slot(1, markable=False), bp.Slot(1, markable=False)]
    assert bp.place(slots, l1=1, stable=1, previous=None) == [0]


def test_lookback_fills_spare_marks():
    slots = [bp.Slot(k) for k in range(60)]
    got = bp.place(slots, l1=1, stable=1, previous=None)
    assert len(got) == 4 and got[-1] == 59
    assert all(b - a <= bp.LOOKBACK_BLOCKS for a, b in zip(got, got[1:]))


@pytest.mark.parametrize(
    "msgs, index, fragment",
    [
        ([{"role": "user", "content": [{"type": "text"}]}], 0, "content[0] (text)"),
        ([{"role": "user", "content": "a"}, {"role": "assistant", "content": [
            {"type": "text", "text": "x"}, {"type": "tool_use", "name": "r", "input": {}}]}], 1, "content[1] (tool_use) has no id"),
        ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope", "content": "x"}]}], 0,
         "answers no tool_use"),
        ([{"role": "system", "content": "s"}], 0, "top-level 'system'"),
        ([{"role": "user", "content": [{"type": "thinking", "thinking": "x", "signature": "s"}]}], 0,
         "user turn cannot carry a thinking"),
        ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "is_error": "yes"}]}], 0, "is_error"),
        ([{"role": "user", "content": ["plain"]}], 0, "content[0] must be an object"),
        ([{"role": "user", "content": []}], 0, "at least one block"),
    ],
)
def test_malformed_blocks_name_message_and_block(msgs, index, fragment):
    with pytest.raises(MessageError) as exc:
        fmt().to_messages(request(msgs))
    assert exc.value.index == index
    assert fragment in str(exc.value)


def test_unknown_blocks_pass_through_and_are_counted():
    block = {"type": "web_search_tool_result", "tool_use_id": "srv1", "content": [{"type": "web_search_result", "url": "https://x"}]}
    msgs = [{"role": "user", "content": "search"},
            {"role": "assistant", "content": [{"type": "server_tool_use", "id": "srv1", "name": "web_search",
                                                "input": {"query": "q"}}, block, {"type": "text", "text": "found"}]}]
    f = fmt()
    conv = f.to_messages(request(msgs)).messages
    asst = conv[2]
    assert "tool_calls" not in asst  # server tools are answered by the server
    assert any("web_search_result" in p["text"] for p in asst["content"])
    out = f.render(request(msgs), conv, tools=None, hints=RenderHints(), cache_marks="caller")
    assert out["messages"][1]["content"][1] == block


def test_sdk_objects_are_accepted():
    resp = at.Message.model_validate({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "text", "text": "hi"},
                    {"type": "tool_use", "id": "tu1", "name": "read", "input": {"path": "a"}}],
        "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 800,
                  "cache_creation_input_tokens": 20},
    })
    msgs = [{"role": "user", "content": "go"}, resp,
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu1", "content": "A"}]}]
    f = fmt()
    assert detect({"model": "m", "messages": msgs[:2]}).name == "anthropic-messages"  # by the SDK blocks
    conv = f.to_messages(request(msgs)).messages
    assert conv[2]["tool_calls"][0]["id"] == "tu1"
    out = f.render(request(msgs), conv, tools=None, hints=RenderHints())
    assert out["messages"][1] == {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "text", "text": "hi"},
        {"type": "tool_use", "id": "tu1", "name": "read", "input": {"path": "a"}}]}
    usage = f.parse_usage(resp)
    assert (usage.prompt_tokens, usage.cached_tokens, usage.cache_write_tokens) == (830, 800, 20)
    block = at.ToolUseBlock(type="tool_use", id="tu9", name="recall", input={"query": "q"})
    call = f.parse_tool_call(block)
    assert (call.id, call.name, call.arguments) == ("tu9", "recall", {"query": "q"})


def test_tool_shapes():
    f = get_format("anthropic-messages")
    specs = f.tool_specs([{"type": "function", "function": {"name": "recall", "description": "d",
                                                            "parameters": {"type": "object"}}}])
    assert specs == [{"name": "recall", "input_schema": {"type": "object"}, "description": "d"}]
    assert f.tool_name(specs[0]) == "recall"
    assert f.tool_result("tu1", "boom", is_error=True) == {
        "type": "tool_result", "tool_use_id": "tu1", "content": "boom", "is_error": True}


def test_system_blocks_and_bad_system():
    f = fmt()
    req = request(system=[{"type": "text", "text": "A"}, {"type": "text", "text": "B"}])
    conv = f.to_messages(req).messages
    assert conv[0]["role"] == "system"
    out = f.render(req, conv, tools=None, hints=RenderHints(), cache_marks="caller")
    assert out["system"] == req["system"]
    with pytest.raises(InputError):
        f.to_messages(request(system=[{"type": "image"}]))


def test_export_to_chat_keeps_thinking_as_reasoning():
    conv = fmt().to_messages(request()).messages
    chat = to_chat(conv)
    assert chat[2]["reasoning_content"] == "plan 0" and chat[2]["content"] == "reading 0"
    assert chat[3] == {"role": "tool", "content": "contents 0\n" * 5, "tool_call_id": "tu0a"}
    back = export_request(conv, "anthropic-messages", request={"model": "m"})
    assert back["messages"] == request()["messages"]
    assert copy.deepcopy(back) == back

"""Stream turns (pager.proxy.streams) on hand-made provider events: hold, splice, usage. Pure, no server."""

from __future__ import annotations

import orjson

from pager.proxy.app import _split_events
from pager.proxy.dialects import DIALECTS
from pager.proxy.streams import sse_data

TOOLS = frozenset({"recall", "expand", "note"})


def ev(payload, name=None) -> bytes:
    head = f"event: {name}\n".encode() if name else b""
    return head + b"data: " + (payload if isinstance(payload, bytes) else orjson.dumps(payload)) + b"\n\n"


def feed(turn, events) -> list[dict]:
    out = []
    for e in events:
        out += [orjson.loads(sse_data(p)) for p in turn.feed(e) if sse_data(p) != b"[DONE]"]
    return out


def anthropic_round(blocks, stop):
    yield ev({"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 10, "cache_read_input_tokens": 90}}}, "message_start")
    for i, b in enumerate(blocks):
        yield ev({"type": "content_block_start", "index": i, "content_block": b if b["type"] == "text" else {**b, "input": {}}}, "content_block_start")
        if b["type"] == "tool_use":
            yield ev({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": orjson.dumps(b["input"]).decode()}}, "content_block_delta")
        yield ev({"type": "content_block_stop", "index": i}, "content_block_stop")
    yield ev({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 5}}, "message_delta")
    yield ev({"type": "message_stop"}, "message_stop")


def test_anthropic_rounds_splice_into_one_message():
    d = DIALECTS["/v1/messages"]
    first = d.stream_turn(TOOLS, 0, 0, True)
    sent = feed(first, anthropic_round([{"type": "text", "text": "Let me look."},
                                        {"type": "tool_use", "id": "t1", "name": "recall", "input": {"query": "x"}}], "tool_use"))
    assert [e["type"] for e in sent] == ["message_start", "content_block_start", "content_block_stop"]  # held from the tool call
    assert first.calls() == [{"type": "tool_use", "id": "t1", "name": "recall", "input": {"query": "x"}}]
    assert first.usage == {"usage": {"input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 5}}
    assert first.forwarded == 1 and first.ended
    second = d.stream_turn(TOOLS, 1, first.forwarded, True)
    sent = feed(second, anthropic_round([{"type": "text", "text": "Found it."}], "end_turn"))
    assert [e["type"] for e in sent] == ["content_block_start", "content_block_stop", "message_delta", "message_stop"]
    assert {e.get("index") for e in sent if "index" in e} == {1}  # continues after the client's block 0
    assert d.continue_request({"messages": [{"role": "user", "content": "q"}]}, first.assistant_items(),
                              [{"type": "tool_result", "tool_use_id": "t1", "content": "hit"}])["messages"][-1] == \
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "hit"}]}


def test_a_turn_calling_the_clients_tool_is_flushed_whole():
    d = DIALECTS["/v1/messages"]
    turn = d.stream_turn(TOOLS, 0, 0, True)
    events = list(anthropic_round([{"type": "tool_use", "id": "t1", "name": "bash", "input": {"cmd": "ls"}}], "tool_use"))
    sent = feed(turn, events)
    assert [e["type"] for e in sent] == ["message_start"]
    assert [orjson.loads(sse_data(p))["type"] for p in turn.flush()] == [
        "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"]


def test_without_pager_tools_nothing_is_held():
    turn = DIALECTS["/v1/messages"].stream_turn(frozenset(), 0, 0, True)
    events = list(anthropic_round([{"type": "tool_use", "id": "t1", "name": "recall", "input": {}}], "tool_use"))
    assert len(feed(turn, events)) == len(events) and not turn.held


def test_responses_rounds_and_usage():
    d = DIALECTS["/v1/responses"]
    call = {"type": "function_call", "call_id": "c1", "name": "recall", "arguments": "{}"}
    usage = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 80}, "output_tokens": 3}
    first = d.stream_turn(TOOLS, 0, 0, True)
    sent = feed(first, [
        ev({"type": "response.created", "response": {}}),
        ev({"type": "response.output_item.added", "output_index": 0, "item": call}),
        ev({"type": "response.output_item.done", "output_index": 0, "item": call}),
        ev({"type": "response.completed", "response": {"output": [call], "usage": usage}}),
    ])
    assert [e["type"] for e in sent] == ["response.created"] and first.calls() == [call]
    assert first.usage == {"usage": usage}
    msg = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}
    second = d.stream_turn(TOOLS, 1, first.forwarded, True)
    sent = feed(second, [
        ev({"type": "response.created", "response": {}}),
        ev({"type": "response.output_item.added", "output_index": 0, "item": msg}),
        ev({"type": "response.completed", "response": {"output": [msg], "usage": usage}}),
    ])
    assert [e["type"] for e in sent] == ["response.output_item.added", "response.completed"]
    req = d.continue_request({"input": "q"}, first.assistant_items(), [{"type": "function_call_output", "call_id": "c1", "output": "r"}])
    assert [i.get("type", i.get("role")) for i in req["input"]] == ["user", "function_call", "function_call_output"]


def test_chat_usage_chunk_kept_from_a_client_that_did_not_ask():
    d = DIALECTS["/v1/chat/completions"]
    req = {"messages": [], "stream": True}
    assert d.prepare(req, True) is False and req["stream_options"] == {"include_usage": True}
    turn = d.stream_turn(frozenset(), 0, 0, False)
    usage_chunk = ev({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 1}})
    assert turn.feed(usage_chunk) == [] and turn.usage["usage"]["prompt_tokens"] == 9
    assert turn.feed(ev(b"[DONE]")) and turn.ended


def test_split_events():
    events, rest = _split_events(b"data: 1\n\ndata: 2\r\n\r\ndata: 3")
    assert events == [b"data: 1\n\n", b"data: 2\r\n\r\n"] and rest == b"data: 3"

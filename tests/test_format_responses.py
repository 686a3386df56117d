"""OpenAI Responses: conversion, rendering, server-kept history, SDK objects."""

from __future__ import annotations

import openai.types.responses as rt
import pytest

from pager.errors import InputError, MessageError
from pager.formats.base import RenderHints, detect, get_format
from pager.formats.openai_responses import ItemError, OpenAIResponses


def items(turns: int = 2) -> list[dict]:
    out: list[dict] = [{"role": "user", "content": "fix the failing test in src/app.py"}]
    for t in range(turns):
        out += [
            {"type": "reasoning", "id": f"rs_{t}", "summary": [{"type": "summary_text", "text": f"plan {t}"}],
             "encrypted_content": f"ENC{t}"},
            {"type": "message", "id": f"msg_{t}", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": f"reading {t}", "annotations": []}]},
            {"type": "function_call", "id": f"fc_{t}", "call_id": f"call_{t}", "name": "read",
             "arguments": f'{{"path": "src/{t}.py"}}', "status": "completed"},
            {"type": "custom_tool_call", "id": f"ct_{t}", "call_id": f"cust_{t}", "name": "patch", "input": "*** x"},
            {"type": "function_call_output", "call_id": f"call_{t}", "output": f"contents {t}\n" * 4},
            {"type": "custom_tool_call_output", "call_id": f"cust_{t}", "output": "applied"},
        ]
    out.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "now the docs"}]})
    return out


def request(inp=None, **extra) -> dict:
    return {"model": "gpt-5", "instructions": "You are a careful engineer.",
            "tools": [{"type": "function", "name": "read", "parameters": {"type": "object"}}],
            "input": inp if inp is not None else items(), **extra}


def test_detect():
    assert detect(request()).name == "openai-responses"
    assert detect({"messages": [], "input": "x"}).name != "openai-responses"


def test_conversion_groups_a_model_turn():
    conv = OpenAIResponses().to_messages(request())
    roles = [m["role"] for m in conv.messages]
    assert roles[:5] == ["system", "user", "assistant", "tool", "tool"]
    asst = conv.messages[2]
    assert [c["id"] for c in asst["tool_calls"]] == ["call_0", "cust_0"]
    assert asst["tool_calls"][1]["function"]["arguments"] == "*** x"
    # the reasoning item stays with its turn, encrypted content verbatim
    assert asst["native"][0]["encrypted_content"] == "ENC0"
    assert {"type": "text", "text": "reading 0"} in asst["content"]


def test_round_trip_and_same_objects():
    f = OpenAIResponses()
    req = request()
    a = f.to_messages(req).messages
    b = f.to_messages(req).messages
    assert all(x is y for x, y in zip(a, b))
    assert f.render(req, a, tools=None, hints=RenderHints()) == req


def test_stub_and_card_render_as_items():
    f = OpenAIResponses()
    req = request()
    conv = list(f.to_messages(req).messages)
    stub = {"role": "tool", "tool_call_id": "cust_0", "content": "[stub pg:4-aa]"}
    card = {"role": "user", "content": "## Task state"}
    out = f.render(req, conv[:2] + [card, conv[2], conv[3], stub] + conv[5:], tools=None, hints=RenderHints())
    assert out["instructions"] == "You are a careful engineer."
    assert out["input"][1] == {"role": "user", "content": "## Task state"}
    assert {"type": "custom_tool_call_output", "call_id": "cust_0", "output": "[stub pg:4-aa]"} in out["input"]


@pytest.mark.parametrize("extra", [{"previous_response_id": "resp_1"}, {"conversation": "conv_1"}])
def test_server_kept_history_is_refused(extra):
    with pytest.raises(InputError, match="send the full input"):
        OpenAIResponses().to_messages(request(**extra))


def test_partial_history_is_refused_but_store_with_full_input_is_fine():
    f = OpenAIResponses()
    partial = [{"type": "function_call_output", "call_id": "call_9", "output": "x"}]
    with pytest.raises(InputError, match="send the full input"):
        f.to_messages(request(partial, store=True))
    with pytest.raises(InputError, match="item_reference"):
        f.to_messages(request([{"type": "item_reference", "id": "msg_1"}]))
    assert len(f.to_messages(request(store=True)).messages) > 3


def test_malformed_item_names_its_index():
    bad = items(1)
    bad[3] = {"type": "function_call", "call_id": "call_0", "name": "read", "arguments": {"not": "a string"}}
    with pytest.raises(ItemError) as exc:
        OpenAIResponses().to_messages(request(bad))
    assert isinstance(exc.value, MessageError) and exc.value.index == 3
    assert str(exc.value).startswith("input[3]: function_call arguments")


def test_sdk_items_and_tool_calls():
    f = get_format("openai-responses")
    fc = rt.ResponseFunctionToolCall(type="function_call", call_id="c1", name="recall",
                                     arguments='{"query": "x"}', id="fc_1", status="completed")
    rs = rt.ResponseReasoningItem(id="rs_1", type="reasoning", summary=[], encrypted_content="ENC")
    req = request([{"role": "user", "content": "go"}, rs, fc,
                   {"type": "function_call_output", "call_id": "c1", "output": "found"}])
    conv = f.to_messages(req).messages
    assert conv[2]["tool_calls"][0]["id"] == "c1"
    out = f.render(req, conv, tools=None, hints=RenderHints())
    assert out["input"][1] == {"id": "rs_1", "summary": [], "type": "reasoning", "encrypted_content": "ENC"}
    call = f.parse_tool_call(fc)
    assert (call.id, call.name, call.arguments) == ("c1", "recall", '{"query": "x"}')
    assert f.tool_result("c1", "ok") == {"type": "function_call_output", "call_id": "c1", "output": "ok"}
    assert f.tool_specs([{"type": "function", "function": {"name": "recall", "parameters": {"type": "object"}}}]) == [
        {"type": "function", "name": "recall", "parameters": {"type": "object"}}]


def test_string_input_stays_a_string():
    f = OpenAIResponses()
    req = {"model": "gpt-5", "input": "hello"}
    conv = f.to_messages(req).messages
    assert f.render(req, conv, tools=None, hints=RenderHints()) == req

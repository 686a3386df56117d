"""Native formats through a real pager: the store stays neutral, prompts keep every invariant.

Requests go through the public ``pager.open(...).assemble(request)``, the
format detected from the request.
"""

from __future__ import annotations

import orjson
import pytest

import pager
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pager.formats.anthropic_messages import AnthropicMessages
from pager.formats.export import export_request, to_chat
from pager.formats.openai_chat import validate as validate_chat
from pager.formats.openai_responses import OpenAIResponses

from tests.test_format_anthropic import request as anthropic_request
from tests.test_format_responses import request as responses_request


def stored(p) -> list[dict]:
    return [p.store.message(pid)[1] for pid in p.history.page]


def test_anthropic_round_trips_through_the_store():
    with pager.open(":memory:", session="rt-a") as p:
        req = anthropic_request()
        p.assemble(req)
        pages = stored(p)
        back = export_request(pages, "anthropic-messages", request={"model": req["model"]})
        assert back["system"] == req["system"]
        assert back["messages"] == req["messages"]
        # and the same pages in another format: a valid chat history
        validate_chat(to_chat(pages))
        again = export_request(pages, "openai-responses", request={"model": "gpt-5"})
        OpenAIResponses().to_messages(again)


def test_responses_round_trips_through_the_store():
    with pager.open(":memory:", session="rt-r") as p:
        req = responses_request()
        p.assemble(req)
        pages = stored(p)
        back = export_request(pages, "openai-responses", request={"model": "gpt-5"})
        assert back["instructions"] == req["instructions"]
        assert back["input"] == req["input"]
        validate_chat(to_chat(pages))
        AnthropicMessages().to_messages(export_request(pages, "anthropic-messages", request={}))


def test_bad_block_stores_nothing():
    with pager.open(":memory:", session="bad") as p:
        req = anthropic_request()
        p.assemble(req)
        before = len(p.history)
        broken = [*req["messages"], {"role": "assistant", "content": [{"type": "tool_use", "name": "x"}]}]
        with pytest.raises(ValueError, match=r"messages\[\d+\]: content\[0\]"):
            p.assemble({**req, "messages": broken})
        assert len(p.history) == before
        assert p.assemble(req)["messages"] == p.assemble(req)["messages"]  # still works


WORDS = st.lists(st.sampled_from(["alpha", "beta", "src/app.py", "42", "TODO", "error", "def", "x"]),
                 min_size=1, max_size=12).map(" ".join)


@st.composite
def anthropic_histories(draw):
    msgs: list[dict] = [{"role": "user", "content": "goal: " + draw(WORDS)}]
    for t in range(draw(st.integers(1, 14))):
        calls = draw(st.integers(0, 3))
        content: list[dict] = []
        if draw(st.booleans()):
            content.append({"type": "thinking", "thinking": draw(WORDS), "signature": f"sig{t}"})
        if draw(st.booleans()) or not calls:
            content.append({"type": "text", "text": draw(WORDS)})
        ids = [f"tu{t}_{k}" for k in range(calls)]
        content += [{"type": "tool_use", "id": i, "name": "read", "input": {"path": draw(WORDS)}} for i in ids]
        msgs.append({"role": "assistant", "content": content})
        user: list[dict] = [{"type": "tool_result", "tool_use_id": i, "is_error": draw(st.booleans()),
                             "content": (draw(WORDS) + "\n") * draw(st.sampled_from([1, 20, 400]))} for i in ids]
        if draw(st.booleans()) or not ids:
            user.append({"type": "text", "text": draw(WORDS)})
        msgs.append({"role": "user", "content": user})
    return msgs


def _check_anthropic(out: dict, req: dict) -> None:
    assert out["system"], "L1: the system prompt is present"
    marks = orjson.dumps(out).count(b'"cache_control"')
    assert marks <= 4
    AnthropicMessages().to_messages(out)  # pairing and block shapes hold
    msgs = out["messages"]
    first = msgs[0]["content"]
    first_text = first if isinstance(first, str) else first[0]["text"]
    assert first_text == req["messages"][0]["content"], "L1: the first user message is present"
    originals = {orjson.dumps([b.get("id") for b in m["content"] if b.get("type") == "tool_use"]): m["content"]
                 for m in req["messages"] if m["role"] == "assistant"}
    for i, m in enumerate(msgs):
        if m["role"] != "assistant" or isinstance(m["content"], str):
            continue
        blocks = [{k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]]
        key = orjson.dumps([b.get("id") for b in blocks if b.get("type") == "tool_use"])
        if key != b"[]":
            assert blocks == originals[key], "an assistant turn is sent whole, thinking included"
        ids = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        if ids:
            nxt = msgs[i + 1]["content"]
            answered = [b["tool_use_id"] for b in nxt if b.get("type") == "tool_result"]
            assert answered == ids, "every tool_use answered in the next turn, in order"


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(anthropic_histories())
def test_anthropic_invariants_hold(history):
    with pager.open(":memory:", session="prop-a", context_window=6000) as p:
        for end in range(2, len(history) + 1, 2):
            req = anthropic_request(history[:end])
            out = p.assemble(req)
            assert p.last_report.tokens <= p.last_report.budget
            _check_anthropic(out, req)


@st.composite
def responses_histories(draw):
    items: list[dict] = [{"role": "user", "content": "goal: " + draw(WORDS)}]
    for t in range(draw(st.integers(1, 12))):
        if draw(st.booleans()):
            items.append({"type": "reasoning", "id": f"rs_{t}", "summary": [], "encrypted_content": f"ENC{t}"})
        calls = [f"c{t}_{k}" for k in range(draw(st.integers(0, 3)))]
        if draw(st.booleans()) or not calls:
            items.append({"type": "message", "role": "assistant",
                          "content": [{"type": "output_text", "text": draw(WORDS)}]})
        items += [{"type": "function_call", "call_id": c, "name": "read", "arguments": "{}"} for c in calls]
        items += [{"type": "function_call_output", "call_id": c,
                   "output": (draw(WORDS) + "\n") * draw(st.sampled_from([1, 20, 400]))} for c in calls]
        items.append({"role": "user", "content": draw(WORDS)})
    return items


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(responses_histories())
def test_responses_invariants_hold(history):
    with pager.open(":memory:", session="prop-r", context_window=6000) as p:
        req = responses_request(history)
        out = p.assemble(req)
        assert p.last_report.tokens <= p.last_report.budget
        assert out["instructions"] == req["instructions"]
        assert out["input"][0] == history[0]
        OpenAIResponses().to_messages(out)  # every output answers a call in input
        reasoning = {it["id"]: it for it in history if it.get("type") == "reasoning"}
        for k, it in enumerate(out["input"]):
            if it.get("type") == "reasoning":
                assert it == reasoning[it["id"]]
                nxt = out["input"][k + 1]
                assert nxt.get("type") == "function_call" or nxt.get("role") == "assistant"


def test_facade_speaks_anthropic_end_to_end(tmp_path):
    import anthropic.types as at

    import pager

    with pager.open(tmp_path / "ctx", session="a", context_window=200_000, expose_tools=True) as p:
        req = anthropic_request()
        out = p.assemble(req)
        assert out["system"][0]["text"] == req["system"]
        assert {t["name"] for t in out["tools"]} >= {"read", "recall"}  # pager's tools in Anthropic shape
        assert out["messages"][1] == req["messages"][1]
        assert orjson.dumps(out).count(b'"cache_control"') <= 4
        block = at.ToolUseBlock(type="tool_use", id="tu_r", name="recall", input={"query": "src/app.py"})
        answer = p.call_tool(block, format="anthropic-messages")
        assert answer["type"] == "tool_result" and answer["tool_use_id"] == "tu_r"
        resp = at.Message.model_validate({
            "id": "m", "type": "message", "role": "assistant", "model": "claude", "content": [],
            "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 9, "cache_read_input_tokens": 800,
                      "cache_creation_input_tokens": 40}})
        assert p.observe(resp) == {"prompt_tokens": 843, "completion_tokens": 9, "cached_tokens": 800,
                                   "cache_write_tokens": 40}


def test_facade_speaks_responses_end_to_end(tmp_path):
    import pager

    with pager.open(tmp_path / "ctx", session="r", context_window=200_000) as p:
        req = responses_request()
        out = p.assemble(req)
        assert out["input"] == req["input"] and out["instructions"] == req["instructions"]
        with pytest.raises(ValueError, match="send the full input"):
            p.assemble({**req, "previous_response_id": "resp_1"})
        answer = p.call_tool({"type": "function_call", "call_id": "c9", "name": "recall",
                              "arguments": '{"query": "docs"}'}, format="openai-responses")
        assert answer["type"] == "function_call_output" and answer["call_id"] == "c9"


def test_inspect_exports_a_session_in_another_format(tmp_path, capsys):
    import pager
    from pager.cli import main

    with pager.open(tmp_path / "ctx", session="a") as p:
        p.assemble(anthropic_request())
    assert main(["inspect", str(tmp_path / "ctx"), "--format", "anthropic-messages"]) == 0
    line = orjson.loads(capsys.readouterr().out.splitlines()[0])
    assert line["request"]["messages"] == anthropic_request()["messages"]
    assert main(["inspect", str(tmp_path / "ctx"), "--format", "openai-chat"]) == 0
    chat = orjson.loads(capsys.readouterr().out.splitlines()[0])["request"]["messages"]
    validate_chat(chat)
    assert chat[0] == {"role": "system", "content": "You are a careful engineer."}

"""A head memo its caller owns (``Pager`` keeps one per wire format): no copy of the history a call (issue 23).

``to_messages(request, heads=...)`` returns the owned memo's own list, extended in
place by the owner's next call, its first message the system prompt or the
instructions. It must convert exactly what a fresh format converts, whatever
the caller does between calls: grow the list, resend equal copies, change or
drop the system prompt, send a malformed message and then the corrected one.
"""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sizes import examples

import pager
from pager.errors import InputError
from pager.formats.anthropic_messages import AnthropicMessages
from pager.formats.openai_responses import OpenAIResponses

SYSTEMS: list[Any] = [None, "be brief", "be thorough", [{"type": "text", "text": "be brief"}]]


def _anthropic(rng: random.Random, k: int) -> list[dict[str, Any]]:
    cid = f"tu{k}"
    if rng.random() < 0.3:
        return [{"role": "assistant", "content": f"thinking {k}"}, {"role": "user", "content": f"go on {k}"}]
    return [{"role": "assistant", "content": [{"type": "text", "text": f"step {k}"},
                                              {"type": "tool_use", "id": cid, "name": "read", "input": {"k": k}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": cid, "content": f"out {k}"}]}]


def _responses(rng: random.Random, k: int) -> list[dict[str, Any]]:
    cid = f"c{k}"
    out: list[dict[str, Any]] = []
    if rng.random() < 0.3:
        out.append({"type": "reasoning", "summary": [{"type": "summary_text", "text": f"r{k}"}]})
    out += [{"type": "function_call", "call_id": cid, "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": cid, "output": f"out {k}"}]
    if rng.random() < 0.2:
        out.append({"role": "user", "content": f"and {k}"})
    return out


def _request(fmt: str, items: list[Any], system: Any) -> dict[str, Any]:
    if fmt == "anthropic-messages":
        req: dict[str, Any] = {"model": "m", "max_tokens": 64, "messages": items}
        if system is not None:
            req["system"] = system
        return req
    req = {"model": "m", "input": items}
    if system is not None:
        req["instructions"] = system if isinstance(system, str) else system[0]["text"] + "!"
    return req


@settings(max_examples=examples(40, 150), deadline=None)
@given(seed=st.integers(0, 10**6), fmt=st.sampled_from(["anthropic-messages", "openai-responses"]))
def test_prop_an_owned_memo_converts_what_a_fresh_format_converts(seed: int, fmt: str) -> None:
    rng = random.Random(seed)
    cls = AnthropicMessages if fmt == "anthropic-messages" else OpenAIResponses
    step = _anthropic if fmt == "anthropic-messages" else _responses
    shared = cls()
    heads = shared.new_heads()
    items: list[Any] = [{"role": "user", "content": "start"}]
    system = rng.choice(SYSTEMS)
    for k in range(rng.randrange(2, 12)):
        roll = rng.random()
        if roll < 0.15:
            system = rng.choice(SYSTEMS)  # changed, dropped or added
        elif roll < 0.25:
            items = orjson.loads(orjson.dumps(items))  # the same history as new objects
        elif roll < 0.35 and len(items) > 2:
            items = items[: rng.randrange(1, len(items))]  # rewound
        elif roll < 0.45:
            bad = [*items, {"role": "assistant", "content": 7} if fmt == "anthropic-messages"
                   else {"type": "function_call_output", "call_id": "nope", "output": "x"}]
            with pytest.raises(InputError):
                shared.to_messages(_request(fmt, bad, system), heads=heads)
        items = [*items, *step(rng, k)]
        got = shared.to_messages(_request(fmt, items, system), heads=heads)
        want = cls().to_messages(_request(fmt, items, system))
        assert orjson.dumps(got.messages) == orjson.dumps(want.messages)


@pytest.mark.parametrize("fmt", ["anthropic-messages", "openai-responses"])
def test_an_owned_memo_hands_back_the_same_list_extended(fmt: str) -> None:
    """The point of owning it: a growing history is not copied a call; without a memo of one's own it is."""
    rng = random.Random(3)
    cls = AnthropicMessages if fmt == "anthropic-messages" else OpenAIResponses
    step = _anthropic if fmt == "anthropic-messages" else _responses
    f = cls()
    heads = f.new_heads()
    items: list[Any] = [{"role": "user", "content": "start"}, *step(rng, 0)]
    first = f.to_messages(_request(fmt, items, "be brief"), heads=heads).messages
    items += step(rng, 1)
    second = f.to_messages(_request(fmt, items, "be brief"), heads=heads).messages
    assert second is first and first[0]["content"] == "be brief"
    shared_a = f.to_messages(_request(fmt, items, "be brief")).messages
    items += step(rng, 2)
    shared_b = f.to_messages(_request(fmt, items, "be brief")).messages
    assert shared_b is not shared_a and shared_b[: len(shared_a)] == shared_a


def test_a_pager_converts_with_a_memo_of_its_own(tmp_path) -> None:
    """Two Pagers sending one history list each convert it right: neither extends the other's messages."""
    rng = random.Random(5)
    items: list[Any] = [{"role": "user", "content": "start"}]
    with pager.open(tmp_path / "a", session="a") as a, pager.open(tmp_path / "b", session="b") as b:
        for k in range(6):
            items = [*items, *_anthropic(rng, k)]
            req = {"model": "m", "max_tokens": 64, "system": "s", "messages": items}
            outs = [p.assemble(req, format="anthropic-messages") for p in (a, b)]
            assert outs[0]["messages"] == outs[1]["messages"]
        assert a._intake.heads["anthropic-messages"] is not b._intake.heads["anthropic-messages"]
    assert not a._intake.heads and not b._intake.heads  # closed: the conversions they kept are let go

"""OpenAI Responses rendering in O(new) (issue 23): the item memo equals a from-scratch render.

``pager.formats.responses_render`` resumes the last call's fold after the head of
the same message objects. Whatever the scheduler does between calls (append,
stub or edit an old message, drop the tail, insert pager's messages or a late
system message, hand the same prompt over as a new list), the request must be
the very bytes a fresh format renders, and what a caller does to the request it
got must not reach the next call's.
"""

from __future__ import annotations

import random
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from helpers import scheduler_prompts
from sizes import examples

from pager.formats import responses_render
from pager.formats.base import RenderHints
from pager.formats.openai_responses import OpenAIResponses


def _items(rng: random.Random, turns: int) -> list[dict[str, Any]]:
    """A Responses history: reasoning, text, function and custom calls, their outputs, user messages."""
    out: list[dict[str, Any]] = [{"role": "user", "content": "fix the failing test in src/app.py"}]
    for t in range(turns):
        if rng.random() < 0.5:
            out.append({"type": "reasoning", "id": f"rs_{t}", "summary": [{"type": "summary_text", "text": f"plan {t}"}],
                        "encrypted_content": f"ENC{t}"})
        if rng.random() < 0.7:
            out.append({"type": "message", "id": f"msg_{t}", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": f"step {t}", "annotations": []}]})
        calls = []
        for j in range(rng.randrange(0, 3)):
            if rng.random() < 0.7:
                out.append({"type": "function_call", "id": f"fc_{t}_{j}", "call_id": f"call_{t}_{j}", "name": "read",
                            "arguments": f'{{"path": "src/{t}_{j}.py"}}', "status": "completed"})
                calls.append((f"call_{t}_{j}", "function_call_output"))
            else:
                out.append({"type": "custom_tool_call", "id": f"ct_{t}_{j}", "call_id": f"cust_{t}_{j}",
                            "name": "patch", "input": f"*** {t}"})
                calls.append((f"cust_{t}_{j}", "custom_tool_call_output"))
        if out[-1].get("role") == "user":  # a turn with nothing: one text item
            out.append({"type": "message", "id": f"msg_{t}", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": f"ok {t}", "annotations": []}]})
        for cid, otype in calls:
            out.append({"type": otype, "call_id": cid, "output": f"out {cid}\n" * 3})
        if rng.random() < 0.5 or not calls:
            out.append({"type": "message", "role": "user",
                        "content": [{"type": "input_text", "text": f"and then {t}"}]})
    return out


def _steps(seed: int) -> list[list[Any]]:
    """Prompts of neutral messages the way the scheduler hands them over between and across rounds."""
    rng = random.Random(seed)
    req = {"model": "gpt-5", "instructions": "You are careful.", "input": _items(rng, 14)}
    full = list(OpenAIResponses().to_messages(req).messages)

    def edited(m: dict[str, Any], i: int) -> dict[str, Any]:  # a stub, or an edited message
        if m["role"] == "tool":
            return {"role": "tool", "tool_call_id": m["tool_call_id"], "content": f"[stub {i}]"}
        return {**m, "native": None, "content": f"edited {i}"}  # an assistant's calls as function_call items

    return list(scheduler_prompts(full, rng, 14, edited))


@settings(max_examples=examples(40, 120), deadline=None)
@given(seed=st.integers(0, 100_000))
def test_memoised_render_equals_a_fresh_one(seed: int) -> None:
    kept = OpenAIResponses()
    request = {"model": "gpt-5", "input": "x", "tools": [{"type": "function", "name": "read", "parameters": {}}]}
    for messages in _steps(seed):
        got = kept.render(request, messages, tools=None, hints=RenderHints())
        want = OpenAIResponses().render(request, messages, tools=None, hints=RenderHints())
        assert orjson.dumps(got) == orjson.dumps(want)
        # the caller may change the items pager made: nothing it does reaches the next call's prompt (its
        # own native items it gets back as they are, as ever)
        native = {id(x) for m in messages for x in (m["native"] if isinstance(m.get("native"), list)
                                                     else [m.get("native")])}
        for item in got["input"]:
            if isinstance(item, dict) and id(item) not in native:
                item["role"] = "changed by the caller"


def test_a_growing_prompt_renders_only_its_new_messages(monkeypatch) -> None:
    req = {"model": "gpt-5", "instructions": "s", "input": _items(random.Random(3), 30)}
    full = list(OpenAIResponses().to_messages(req).messages)
    added: list[Any] = []
    real = responses_render._Fold.add
    monkeypatch.setattr(responses_render._Fold, "add", lambda self, m, types: (added.append(m), real(self, m, types)))
    f = OpenAIResponses()
    f.render(req, full[:-6], tools=None, hints=RenderHints())
    assert len(added) == len(full) - 6
    added.clear()
    out = f.render(req, full, tools=None, hints=RenderHints())
    assert added == full[-6:]  # the head of the same objects was not walked again
    assert out == OpenAIResponses().render(req, full, tools=None, hints=RenderHints())
    added.clear()
    f.render(req, [dict(full[0])] + full[1:], tools=None, hints=RenderHints())  # another first object: all
    assert len(added) == len(full)

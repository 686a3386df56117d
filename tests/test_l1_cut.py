"""The L1 cap holds when the system prompt or turn 1 is itself huge: its tail goes behind its handle.

A 40k-token system prompt (or first user message) in each provider format: L1
stays under ``l1_cap``, the head is kept in place, the tail is the stored page
(``expand`` returns it, the recall tool finds what only the tail holds), the
request validates against the provider SDK's own request type, and two
consecutive calls send the same bytes for L1 (the provider's cache holds).
"""

from __future__ import annotations

import functools
import re
from typing import Any

import orjson
import pytest
from pydantic import TypeAdapter

import pager
from pager.core.l1guard import PINNED_SHARE, cap_pinned, pinned_rooms
from pager.core.tokens import default_counter

NEEDLE = "zanzibar_quorum_7731"
CAP = 8_000


def huge(tag: str, lines: int = 1_900) -> str:
    """Over 40k tokens (cl100k) of distinct lines; only the last lines name NEEDLE."""
    body = [f"{tag} rule {i}: the module at src/pkg/m{i}.py keeps its public names stable and tested"
            for i in range(lines)]
    body[-3] = f"{tag} rule {lines - 3}: the release checklist ends with {NEEDLE} signed off by ops"
    return "\n".join(body) + "\n"


def _materialise(v: Any) -> Any:
    # the SDK types use Iterable[...]: pydantic validates them lazily, as they are consumed
    if isinstance(v, dict):
        return {k: _materialise(x) for k, x in v.items()}
    if isinstance(v, (str, bytes)):
        return v
    if hasattr(v, "__iter__"):
        return [_materialise(x) for x in v]
    return v


def sdk_valid(fmt: str, out: dict[str, Any]) -> None:
    """Validate ``out`` against the provider SDK's request type (raises on an invalid request)."""
    _materialise(_adapter(fmt).validate_python(out))


@functools.cache  # building one is ~0.25 s of CPU (pydantic compiles the SDK's whole TypedDict tree): once a format
def _adapter(fmt: str) -> TypeAdapter[Any]:
    if fmt == "chat":
        from openai.types.chat import completion_create_params as m

        adapter: Any = TypeAdapter(m.CompletionCreateParamsNonStreaming)
    elif fmt == "anthropic":
        from anthropic.types import message_create_params as m

        adapter = TypeAdapter(m.MessageCreateParamsNonStreaming)
    else:
        from openai.types.responses import response_create_params as m

        adapter = TypeAdapter(m.ResponseCreateParamsNonStreaming)
    return adapter


def request(fmt: str, system: str, turn1: str, more: int = 0) -> dict[str, Any]:
    """A request in ``fmt`` with ``system``, ``turn1`` and ``more`` assistant/user exchanges after it."""
    tail: list[dict[str, Any]] = []
    for i in range(more):
        if fmt == "responses":
            tail.append({"type": "message", "id": f"msg_{i}", "role": "assistant", "status": "completed",
                         "content": [{"type": "output_text", "text": f"step {i} done", "annotations": []}]})
        else:
            tail.append({"role": "assistant", "content": f"step {i} done"})
        tail.append({"role": "user", "content": f"go on with step {i + 1}"})
    if fmt == "chat":
        return {"model": "gpt-4o", "messages": [{"role": "system", "content": system},
                                                {"role": "user", "content": turn1}, *tail]}
    if fmt == "anthropic":
        return {"model": "claude-sonnet-4-5", "max_tokens": 1024, "system": system,
                "messages": [{"role": "user", "content": turn1}, *tail]}
    return {"model": "gpt-5", "instructions": system, "input": [{"role": "user", "content": turn1}, *tail]}


def l1_bytes(fmt: str, out: dict[str, Any]) -> bytes:
    """The bytes of L1 as sent: the system prompt and turn 1 in the provider's own shape."""
    if fmt == "chat":
        return orjson.dumps(out["messages"][:2])
    if fmt == "anthropic":
        return orjson.dumps([out["system"], out["messages"][0]["content"]])
    return orjson.dumps([out["instructions"], out["input"][0]])


def sent_text(fmt: str, out: dict[str, Any]) -> str:
    return orjson.dumps(out).decode()


@pytest.mark.parametrize("which", ["system", "turn1"])
@pytest.mark.parametrize("fmt", ["chat", "anthropic", "responses"])
def test_a_40k_token_system_prompt_or_turn_1_is_cut_to_the_cap(tmp_path, fmt, which):
    big = huge("house" if which == "system" else "task")
    system, turn1 = (big, "fix the flaky test in tests/test_io.py") if which == "system" else (
        "You are a careful coding agent.", big)
    counter = default_counter()
    assert counter.count(big) > 40_000  # the premise, measured
    with pager.open(tmp_path / "ctx", session="s", context_window=200_000, l1_cap=CAP, log_reports=False) as p:
        first = p.assemble(request(fmt, system, turn1))
        r = p.last_report
        assert r.layers["l1"] <= CAP, r.layers
        cut = [n.split(":", 1)[1] for n in r.notices if n.startswith("l1-cut:")]
        assert len(cut) == 1
        handle = cut[0]
        text = sent_text(fmt, first)
        # the head is in place, the tail is not sent, the pointer names the handle and where the tail starts
        assert "rule 0: the module at src/pkg/m0.py" in text and NEEDLE not in text
        m = re.search(r"continues off-prompt: \d+ more tokens, from line (\d+) of (\d+), kept whole as (pg:[\w-]+)",
                      text)
        assert m and m.group(3) == handle and int(m.group(2)) == big.count("\n")
        start = int(m.group(1))
        # the tail is recallable: expand from the named line, and the recall tool finds what only it holds
        rest = p.expand(handle, start_line=start)
        assert NEEDLE in rest and rest.startswith(big.splitlines(keepends=True)[start - 1])
        assert p.expand(handle) == big
        # a chat-shaped call, named as such: without format= a call is read in the session's format
        found = p.call_tool({"id": "r1", "function": {"name": "recall",
                                                      "arguments": orjson.dumps({"query": NEEDLE}).decode()}},
                            format="openai-chat")
        assert handle in found["content"]
        sdk_valid(fmt, first)
        second = p.assemble(request(fmt, system, turn1, more=1))
        assert l1_bytes(fmt, second) == l1_bytes(fmt, first)  # byte-stable: the cache holds
        assert p.last_report.layers["l1"] <= CAP
        sdk_valid(fmt, second)


def test_without_the_cap_the_same_prompt_is_sent_whole(tmp_path):
    """The rule is what keeps it small: ``l1_cap=0`` sends all 40k tokens of L1."""
    big = huge("house")
    with pager.open(tmp_path / "ctx", session="s", context_window=200_000, l1_cap=0, log_reports=False) as p:
        out = p.assemble(request("chat", big, "fix it"))
        assert out["messages"][0]["content"] == big and p.last_report.layers["l1"] > 40_000
        assert not [n for n in p.last_report.notices if n.startswith("l1-cut:")]


def test_rooms_share_the_cap_and_leave_small_messages_whole():
    assert pinned_rooms([100, 200], CAP) == [None, None]  # under the cap: nothing is cut
    assert pinned_rooms([40_000, 300], CAP) == [int(CAP * PINNED_SHARE) - 300, None]
    assert pinned_rooms([40_000, 40_000], CAP) == [3_000, 3_000]
    assert pinned_rooms([40_000], 0) == [None]  # the guard is off


def test_a_message_with_tool_calls_or_one_that_fits_its_room_is_left_alone():
    count = default_counter().count
    call = {"role": "assistant", "content": "x " * 30_000,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    small = {"role": "user", "content": "hello"}
    out = cap_pinned([call, small], [30_000, 5], ["pg:1-a", "pg:2-b"], CAP, count)
    assert out.messages[0] is call and out.messages[1] is small and out.cut == ()

"""Validate a request the way the provider does; each function returns the violations (empty: valid).

These are the rules the providers answer 400 for, as their error messages
state them, plus the rules about the scripted model's own reasoning: a
``thinking`` block (Anthropic) or ``reasoning`` item (Responses) that comes
back must be byte-identical to the one the bed emitted (``emitted`` maps the
signature / item id to the exact JSON the bed sent).

- Anthropic Messages: ``model`` and ``max_tokens`` present; roles strictly
  alternate, user first; no empty text block; every ``tool_use`` answered by a
  ``tool_result`` in the very next (user) message, the results first in it;
  every ``tool_result`` answers a ``tool_use`` of the message just before;
  ids unique; tool blocks need ``tools``; at most 4 ``cache_control`` marks;
  with thinking on, the last assistant message of a tool loop starts with its
  thinking block.
- OpenAI Responses: every ``function_call_output`` / ``custom_tool_call_output``
  answers an earlier call of its kind by ``call_id``; every call has its output;
  no duplicate item id; a reasoning item is followed by an item.
- Chat completions: a ``tool`` message follows its assistant ``tool_calls``
  (only tool messages in between) and names one of its ids; every tool call is
  answered before the next non-tool message.
"""

from __future__ import annotations

from typing import Any, Mapping

import orjson

__all__ = ["anthropic", "canon", "chat", "count_cache_marks", "responses", "self_test"]


def canon(value: Any) -> bytes:
    # clients may add null fields (Codex sends "content": null in a reasoning item); what must not change is
    # every field the provider issued
    if isinstance(value, Mapping):
        value = {k: v for k, v in value.items() if v is not None}
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def count_cache_marks(value: Any) -> int:
    """Return how many ``cache_control`` marks ``value`` carries, at any depth."""
    if isinstance(value, dict):
        return int("cache_control" in value) + sum(count_cache_marks(v) for v in value.values())
    if isinstance(value, list):
        return sum(count_cache_marks(v) for v in value)
    return 0


def _blocks(content: Any) -> list[Mapping[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, Mapping)]


def anthropic(req: Mapping[str, Any], emitted: Mapping[str, bytes]) -> list[str]:
    bad: list[str] = []
    for key in ("model", "max_tokens", "messages"):
        if key not in req:
            bad.append(f"{key}: Field required")
    msgs = req.get("messages") or []
    if not isinstance(msgs, list) or not msgs:
        return bad + ["messages: at least one message is required"]
    marks = count_cache_marks(req.get("system")) + count_cache_marks(req.get("tools")) + count_cache_marks(msgs)
    if marks > 4:
        bad.append(f"A maximum of 4 blocks with cache_control may be provided. Found {marks}.")
    has_tools = bool(req.get("tools"))
    thinking_on = (req.get("thinking") or {}).get("type") in ("enabled", "adaptive")
    seen_ids: set[str] = set()
    prev_uses: list[str] = []
    last_assistant = -1
    for i, m in enumerate(msgs):
        role = m.get("role")
        if role not in ("user", "assistant"):
            bad.append(f"messages.{i}.role: Input should be 'user' or 'assistant'")
            continue
        want = "user" if i % 2 == 0 else "assistant"
        if role != want:
            bad.append(f"messages.{i}: roles must alternate between 'user' and 'assistant', starting with 'user'")
        blocks = _blocks(m.get("content"))
        if not blocks:
            bad.append(f"messages.{i}: all messages must have non-empty content")
        results = [b for b in blocks if b.get("type") == "tool_result"]
        for j, b in enumerate(blocks):
            t = b.get("type")
            if t == "text" and not b.get("text"):
                bad.append(f"messages.{i}.content.{j}: text content blocks must be non-empty")
            if t in ("tool_use", "tool_result") and not has_tools:
                bad.append(f"messages.{i}.content.{j}: requests which include tool_use or tool_result blocks must define tools")
            if t == "tool_use":
                if role != "assistant":
                    bad.append(f"messages.{i}.content.{j}: tool_use only in assistant messages")
                if b.get("id") in seen_ids:
                    bad.append(f"messages.{i}.content.{j}: tool_use ids must be unique ({b.get('id')})")
                seen_ids.add(b.get("id"))
            if t in ("thinking", "redacted_thinking"):
                sig = b.get("signature") or b.get("data") or ""
                if emitted.get(sig) != canon(b):
                    bad.append(f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block")
        if role == "user":
            ids = [b.get("tool_use_id") for b in results]
            for rid in ids:
                if rid not in prev_uses:
                    bad.append(f"messages.{i}: unexpected `tool_use_id` found in `tool_result` blocks: {rid}. Each "
                               f"`tool_result` block must have a corresponding `tool_use` block in the previous message.")
            missing = [u for u in prev_uses if u not in ids]
            if missing:
                bad.append(f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                           f"{', '.join(missing)}")
            if results and any(b.get("type") != "tool_result" for b in blocks[: len(results)]):
                bad.append(f"messages.{i}: tool_result blocks must come first in the user message content")
            prev_uses = []
        else:
            if prev_uses:
                bad.append(f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                           f"{', '.join(prev_uses)}")
            prev_uses = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
            last_assistant = i
    if prev_uses and msgs[-1].get("role") == "assistant":
        pass  # a prefilled assistant turn may end in tool_use only if the client continues it; not ours
    if thinking_on and last_assistant >= 0 and msgs[-1].get("role") == "user":
        blocks = _blocks(msgs[last_assistant].get("content"))
        ours = any(b.get("type") == "tool_use" for b in blocks)
        if ours and blocks and blocks[0].get("type") not in ("thinking", "redacted_thinking"):
            bad.append(f"messages.{last_assistant}.content.0.type: Expected `thinking` or `redacted_thinking`, but "
                       f"found `{blocks[0].get('type')}`. When `thinking` is enabled, a final `assistant` message "
                       f"must start with a thinking block.")
    return bad


def responses(req: Mapping[str, Any], emitted: Mapping[str, bytes]) -> list[str]:
    bad: list[str] = []
    items = req.get("input")
    if isinstance(items, str):
        return bad
    if not isinstance(items, list):
        return ["input: expected a string or a list of items"]
    calls: dict[str, str] = {}
    answered: set[str] = set()
    ids: set[str] = set()
    for i, it in enumerate(items):
        t = it.get("type") or ("message" if "role" in it else None)
        iid = it.get("id")
        if iid and t != "message":
            if iid in ids:
                bad.append(f"Duplicate item found with id {iid}. Remove duplicate items from your input and try again.")
            ids.add(iid)
        if t in ("function_call", "custom_tool_call", "local_shell_call"):
            calls[it.get("call_id")] = t
        elif t in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
            cid = it.get("call_id")
            if calls.get(cid) != t.replace("_output", ""):
                bad.append(f"No tool call found for {t.replace('_', ' ')} with call_id {cid}.")
            answered.add(cid)
        elif t == "reasoning":
            if emitted.get(iid or "") != canon(it):
                bad.append(f"input[{i}]: reasoning item {iid} is not the one returned (encrypted_content changed)")
            nxt = items[i + 1] if i + 1 < len(items) else None
            if nxt is None or nxt.get("type") == "reasoning":
                bad.append(f"Item '{iid}' of type 'reasoning' was provided without its required following item.")
    for cid in calls:
        if cid not in answered:
            bad.append(f"No tool output found for function call {cid}.")
    return bad


def chat(req: Mapping[str, Any]) -> list[str]:
    bad: list[str] = []
    msgs = req.get("messages")
    if not isinstance(msgs, list) or not msgs:
        return ["messages: must be a non-empty array"]
    open_ids: list[str] = []
    block: set[str] = set()
    for i, m in enumerate(msgs):
        role = m.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            bad.append(f"messages[{i}].role: invalid value {role!r}")
        if role == "tool":
            if m.get("tool_call_id") not in block:
                bad.append(f"messages[{i}]: messages with role 'tool' must be a response to a preceeding message "
                           f"with 'tool_calls'.")
            elif m.get("tool_call_id") in open_ids:
                open_ids.remove(m.get("tool_call_id"))
            continue
        if open_ids:
            bad.append(f"messages[{i - 1}]: An assistant message with 'tool_calls' must be followed by tool messages "
                       f"responding to each 'tool_call_id'. The following tool_call_ids did not have response "
                       f"messages: {', '.join(open_ids)}")
        open_ids, block = [], set()
        if role == "assistant" and m.get("tool_calls"):
            open_ids = [c.get("id") for c in m["tool_calls"]]
            block = set(open_ids)
    if open_ids:
        bad.append(f"An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                   f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(open_ids)}")
    return bad


def self_test() -> None:
    """Check the rules catch what they must (and pass a valid request); raise AssertionError if not.

    The bench runs this before any client: a lenient upstream would let every proxy pass.
    """
    think = {"type": "thinking", "thinking": "t", "signature": "s1"}
    emitted = {"s1": canon(think)}
    use = {"type": "tool_use", "id": "u1", "name": "Read", "input": {}}
    res = {"type": "tool_result", "tool_use_id": "u1", "content": "x"}
    good = {"model": "m", "max_tokens": 1, "tools": [{"name": "Read"}], "thinking": {"type": "enabled"},
            "messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": [think, use]},
                         {"role": "user", "content": [res, {"type": "text", "text": "more"}]}]}
    assert anthropic(good, emitted) == [], anthropic(good, emitted)
    mark = {"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}
    bad_cases = {
        "unknown tool_result id": lambda r: r["messages"][2]["content"][0].update(tool_use_id="u9"),
        "unanswered tool_use": lambda r: r["messages"][2].update(content=[{"type": "text", "text": "no"}]),
        "tool_result not first": lambda r: r["messages"][2]["content"].reverse(),
        "two users in a row": lambda r: r["messages"].insert(1, {"role": "user", "content": "again"}),
        "five cache marks": lambda r: r.update(system=[dict(mark) for _ in range(5)]),
        "thinking edited": lambda r: r["messages"][1]["content"][0].update(thinking="T"),
        "thinking dropped": lambda r: r["messages"][1]["content"].pop(0),
        "empty text": lambda r: r["messages"][2]["content"][1].update(text=""),
        "tool blocks without tools": lambda r: r.pop("tools"),
    }
    for name, mutate in bad_cases.items():
        r = orjson.loads(orjson.dumps(good))
        mutate(r)
        assert anthropic(r, emitted), f"anthropic: {name} not caught"
    rs = {"type": "reasoning", "id": "rs1", "summary": [], "encrypted_content": "e"}
    emitted = {"rs1": canon(rs)}
    call = {"type": "function_call", "id": "fc1", "call_id": "c1", "name": "exec_command", "arguments": "{}"}
    out = {"type": "function_call_output", "call_id": "c1", "output": "x"}
    good_r = {"input": [{"role": "user", "content": "go"}, rs, call, out]}
    assert responses(good_r, emitted) == [], responses(good_r, emitted)
    for name, items in {
        "output without call": [{"role": "user", "content": "go"}, out],
        "call without output": [{"role": "user", "content": "go"}, rs, call],
        "reasoning edited": [{"role": "user", "content": "go"}, {**rs, "encrypted_content": "E"}, call, out],
        "reasoning last": [{"role": "user", "content": "go"}, rs],
        "duplicate item": [{"role": "user", "content": "go"}, rs, call, out, call, out],
    }.items():
        assert responses({"input": items}, emitted), f"responses: {name} not caught"
    tc = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                                                                "function": {"name": "read", "arguments": "{}"}}]}
    tool = {"role": "tool", "tool_call_id": "c1", "content": "x"}
    assert chat({"messages": [{"role": "user", "content": "go"}, tc, tool]}) == []
    for name, msgs in {
        "tool without tool_calls": [{"role": "user", "content": "go"}, tool],
        "unanswered tool_calls": [{"role": "user", "content": "go"}, tc, {"role": "user", "content": "x"}],
        "tool after a user message": [{"role": "user", "content": "go"}, tc, tool, {"role": "user", "content": "x"},
                                      tool],
    }.items():
        assert chat({"messages": msgs}), f"chat: {name} not caught"

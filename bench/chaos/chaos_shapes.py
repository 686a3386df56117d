"""Hostile values and requests in every wire format, for the fuzzer (``chaos_fuzz``).

What broke earlier versions at the format boundary (issue 20): a Responses
item with a non-string ``role`` or a non-list ``summary``; lone surrogates in
Anthropic's ``system`` or a block ``type``; non-string dict keys; a
``bytearray`` id; a value nested deeper than any encoder goes. Generalised:

- ``deep``: lists or dicts nested 260 (past orjson's limit), 1,500 (past
  Python's recursion limit) or 50,000 levels;
- ``bad_value``: a value no JSON encoder takes, or of the wrong type;
- ``poison``: a copy of a request with one string position (a value *or* a
  key, anywhere in it) given a lone surrogate, or replaced by a bad value;
- ``shaped_request``: a valid chat, Anthropic Messages or Responses request
  built from a chaos conversation, then poisoned or given one targeted fault.
"""

from __future__ import annotations

import random
from typing import Any, Callable

import chaos_common as cc

__all__ = ["bad_value", "deep", "poison", "shaped_request", "SURROGATES"]

SURROGATES = ("\ud800", "a\udfffb", "\udc80tail", "lead\ud83d")
DEPTHS = (260, 1_500, 50_000)


class _Key:
    """A path step naming a dict *key* (the key itself is the position)."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key


def deep(r: random.Random) -> Any:
    """Return a list or dict nested past orjson's limit, Python's recursion limit, or far past both."""
    n = r.choice(DEPTHS)
    v: Any = r.choice(["leaf", 1, None])
    as_dict = r.random() < 0.5
    for _ in range(n):
        v = {"k": v} if as_dict else [v]
    return v


def bad_value(r: random.Random) -> Any:
    """Return a value of a wrong type for a string field, or one JSON cannot hold."""
    pick = r.randrange(16)
    if pick == 0:
        return deep(r)
    return [bytearray(b"id"), b"bytes", memoryview(b"mv"), {1: "int key"}, {(1, 2): "tuple key"},
            {None: "none key"}, {"k": {2.5: "nested"}}, 5, 1.5, None, [], {}, ["a", "b"], True,
            2**70][pick - 1]


def _positions(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Return the path of every string value and every dict key in ``value``."""
    out: list[tuple[Any, ...]] = []
    stack = [(value, path)]
    while stack:
        v, p = stack.pop()
        if len(p) > 40:
            continue  # inside a value poisoned deep already: nothing real is down there
        if isinstance(v, dict):
            for k, x in v.items():
                out.append(p + (_Key(k),))
                stack.append((x, p + (k,)))
        elif isinstance(v, list):
            stack.extend((x, p + (i,)) for i, x in enumerate(v))
        elif isinstance(v, str):
            out.append(p)
    return out


def _replace(value: Any, path: tuple[Any, ...], fn: Callable[[Any], Any]) -> Any:
    """Return a copy of ``value`` with the position ``path`` replaced by ``fn(old)`` (copies along the path)."""
    if not path:
        return fn(value)
    step, rest = path[0], path[1:]
    if isinstance(step, _Key):
        return {(fn(k) if k is step.key else k): x for k, x in value.items()}
    if isinstance(value, dict):
        out = dict(value)
        out[step] = _replace(value[step], rest, fn)
        return out
    out_l = list(value)
    out_l[step] = _replace(value[step], rest, fn)
    return out_l


def poison(r: random.Random, value: Any, times: int = 1) -> Any:
    """Return ``value`` with ``times`` string positions given a lone surrogate or a bad value."""
    for _ in range(times):
        spots = _positions(value)
        if not spots:
            return value
        path = r.choice(spots)
        if r.random() < 0.6:
            s = r.choice(SURROGATES)
            value = _replace(value, path, lambda old: (old if isinstance(old, str) else "") + s)
        else:
            bad = bad_value(r)
            key = bool(path) and isinstance(path[-1], _Key)
            # a dict key must stay hashable: keys get a non-string key, values any bad value
            value = _replace(value, path, lambda old: r.choice([1, None, 2.5, (1, 2), b"k"]) if key else bad)
    return value


def _chat(r: random.Random) -> list[dict[str, Any]]:
    conv = cc.conversation(r.choice(("fz-a", "fz-b")), 12)
    return [dict(m) for m in conv[: r.choice(cc.boundaries(conv))]]


def anthropic_request(msgs: list[dict[str, Any]]) -> dict[str, Any]:
    """Return chat history ``msgs`` as an Anthropic Messages request (system, blocks, tool_use/tool_result)."""
    import orjson

    system = "\n".join(m["content"] for m in msgs if m["role"] == "system")
    turns: list[dict[str, Any]] = []
    for m in msgs:
        if m["role"] == "system":
            continue
        if m["role"] == "assistant":
            blocks: list[Any] = [{"type": "text", "text": m["content"] or "ok"}]
            blocks += [{"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                        "input": orjson.loads(c["function"]["arguments"])} for c in m.get("tool_calls") or ()]
            turns.append({"role": "assistant", "content": blocks})
            continue
        block = ({"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}
                 if m["role"] == "tool" else {"type": "text", "text": m["content"]})
        if turns and turns[-1]["role"] == "user":
            turns[-1]["content"].append(block)
        else:
            turns.append({"role": "user", "content": [block]})
    return {"model": "claude", "max_tokens": 1024, "system": system, "messages": turns}


def responses_request(msgs: list[dict[str, Any]]) -> dict[str, Any]:
    """Return chat history ``msgs`` as a Responses request (instructions, items, a reasoning item per turn)."""
    items: list[Any] = []
    instructions = ""
    for n, m in enumerate(msgs):
        if m["role"] == "system":
            instructions = m["content"]
        elif m["role"] == "assistant":
            items.append({"type": "reasoning", "id": f"rs_{n}", "summary": [
                {"type": "summary_text", "text": "thinking about it"}], "encrypted_content": "enc"})
            items.append({"type": "message", "role": "assistant",
                          "content": [{"type": "output_text", "text": m["content"] or "ok"}]})
            items += [{"type": "function_call", "call_id": c["id"], "name": c["function"]["name"],
                       "arguments": c["function"]["arguments"]} for c in m.get("tool_calls") or ()]
        elif m["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
        else:
            items.append({"role": "user", "content": [{"type": "input_text", "text": m["content"]}]})
    return {"model": "gpt", "instructions": instructions, "input": items}


def _targeted(r: random.Random, fmt: str, req: dict[str, Any]) -> dict[str, Any]:
    """Apply one fault that broke an earlier version, in the request's own format."""
    if fmt == "responses":
        items = list(req["input"])
        i = r.randrange(len(items))
        item = dict(items[i])
        which = r.randrange(5)
        if which == 0:
            item["role"] = r.choice([["user"], {"r": 1}, 5, None, {"user"}, deep(r)])
        elif which == 1:
            item = {"type": "reasoning", "summary": r.choice([5, "text", {"a": 1}, None, [5], deep(r), 1.5])}
        elif which == 2:
            item["type"] = r.choice([*SURROGATES, 5, ["message"], bytearray(b"message")])
        elif which == 3:
            item["call_id"] = r.choice([bytearray(b"c"), b"c", 5, deep(r), "\ud800"])
        else:
            item["id"] = bytearray(b"id")
        items[i] = item
        return {**req, "input": items}
    if fmt == "anthropic":
        which = r.randrange(5)
        if which == 0:
            return {**req, "system": r.choice([s + "system" for s in SURROGATES])}
        if which == 1:
            return {**req, "system": [{"type": "text", "text": "sys" + r.choice(SURROGATES)}]}
        turns = [dict(t) for t in req["messages"]]
        t = r.randrange(len(turns))
        blocks = list(turns[t]["content"])
        j = r.randrange(len(blocks))
        block = dict(blocks[j])
        if which == 2:
            block["type"] = r.choice(SURROGATES)
        elif which == 3:
            block[r.choice([1, None, 2.5])] = "non-string key"
        else:
            block["id" if block.get("type") != "tool_result" else "tool_use_id"] = bytearray(b"toolu_1")
        blocks[j] = block
        turns[t] = {**turns[t], "content": blocks}
        return {**req, "messages": turns}
    msgs = list(req["messages"])
    i = r.randrange(len(msgs))
    msgs[i] = {**msgs[i], r.choice(["content", "role", "name", "tool_call_id"]): bad_value(r)}
    return {**req, "messages": msgs}


def shaped_request(r: random.Random) -> tuple[dict[str, Any], str | None]:
    """Return a hostile request in one of the three formats, and the ``format=`` to pass (or None)."""
    chat = _chat(r)
    fmt = r.choice(("chat", "anthropic", "responses"))
    req = {"chat": lambda: {"model": "m", "messages": chat}, "anthropic": lambda: anthropic_request(chat),
           "responses": lambda: responses_request(chat)}[fmt]()
    how = r.random()
    if how < 0.45:
        req = poison(r, req, r.choice((1, 1, 2, 3)))
    elif how < 0.9:
        req = _targeted(r, fmt, req)
    else:  # a deep value somewhere a dict is
        spots = [p[:-1] for p in _positions(req) if p and isinstance(p[-1], _Key)]
        if spots:
            req = _replace(req, r.choice(spots), lambda d: {**d, "extra": deep(r)})
    name = {"chat": "openai-chat", "anthropic": "anthropic-messages", "responses": "openai-responses"}[fmt]
    return req, (name if r.random() < 0.3 else None)

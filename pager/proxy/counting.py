"""Anthropic ``count_tokens`` answered locally, with the counter pager budgets with."""

from __future__ import annotations

from typing import Any, Mapping

import orjson

from pager.core.tokens import MESSAGE_OVERHEAD, default_counter

__all__ = ["count_request"]


def _texts(value: Any) -> list[str]:
    # every string a model reads: text, tool input and output, thinking; not images' bytes
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        if value.get("type") in ("image", "document") and isinstance(value.get("source"), Mapping):
            return ["[image]"]
        out: list[str] = []
        for k, v in value.items():
            if k in ("type", "id", "tool_use_id", "signature", "cache_control"):
                continue
            if k == "input" and isinstance(v, Mapping):
                out.append(orjson.dumps(v).decode())
            else:
                out.extend(_texts(v))
        return out
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _texts(v)]
    return []


def count_request(request: Mapping[str, Any]) -> int:
    """Return the input tokens of an Anthropic Messages request (system, messages, tools)."""
    counter = default_counter()
    n = counter.count("\n".join(_texts(request.get("system"))))
    for msg in request.get("messages") or ():
        n += MESSAGE_OVERHEAD + counter.count("\n".join(_texts(msg.get("content") if isinstance(msg, Mapping) else msg)))
    tools = request.get("tools")
    if tools:
        n += counter.count(orjson.dumps(tools, option=orjson.OPT_SORT_KEYS).decode())
    return n

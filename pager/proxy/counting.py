"""Anthropic ``count_tokens`` answered locally, with the counter pager budgets with.

Claude Code asks for a count of its whole conversation; ``CountMemo`` keeps
each message's count by identity (the proxy's bodies hand back the previous
request's objects for a resent history, ``pager.proxy.bodies``) and the system
prompt's and tools' by value, so a call counts only what is new.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from pager.core.tokens import MESSAGE_OVERHEAD, default_counter

__all__ = ["CountMemo", "count_request"]

MEMO_MAX = 200_000  # messages remembered before the memo starts over


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


class CountMemo:
    """Token counts already made: messages by identity, system prompts and tool lists by value."""

    def __init__(self, maxsize: int = MEMO_MAX) -> None:
        self.maxsize = maxsize
        self._messages: dict[int, tuple[Any, int]] = {}
        self._values: dict[bytes, int] = {}

    def message(self, msg: Any, count: Any) -> int:
        hit = self._messages.get(id(msg))
        if hit is not None and hit[0] is msg:
            return hit[1]
        if len(self._messages) >= self.maxsize:
            self._messages.clear()
        n = count(msg)
        self._messages[id(msg)] = (msg, n)  # the message is held: its id cannot name another while it is here
        return n

    def value(self, value: Any, count: Any) -> int:
        key = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        n = self._values.get(key)
        if n is None:
            if len(self._values) >= 64:
                self._values.clear()
            n = self._values[key] = count(value)
        return n


def count_request(request: Mapping[str, Any], memo: CountMemo | None = None) -> int:
    """Return the input tokens of an Anthropic Messages request (system, messages, tools)."""
    counter = default_counter()

    def system(value: Any) -> int:
        return counter.count("\n".join(_texts(value)))

    def message(msg: Any) -> int:
        return MESSAGE_OVERHEAD + counter.count("\n".join(_texts(msg.get("content") if isinstance(msg, Mapping) else msg)))

    def tools(value: Any) -> int:
        return counter.count(orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode())

    sys_value, tool_value = request.get("system"), request.get("tools")
    if memo is None:
        n = system(sys_value) + sum(message(m) for m in request.get("messages") or ())
        return n + (tools(tool_value) if tool_value else 0)
    n = memo.value(sys_value, system) + sum(memo.message(m, message) for m in request.get("messages") or ())
    return n + (memo.value(tool_value, tools) if tool_value else 0)

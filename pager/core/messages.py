"""pager's message model: provider-neutral messages, their text and their page kind.

Inside pager every message is a *neutral message*: a mapping shaped like an
OpenAI chat-completions message, which is the smallest shape that says
everything the scheduler keys on::

    {"role": "system" | "developer" | "user" | "assistant" | "tool",
     "content": str | [part, ...] | None,
     "tool_calls": [{"id": str, "type": "function",
                     "function": {"name": str, "arguments": str}}],   # assistant only
     "tool_call_id": str}                                             # tool only

A wire format (``pager.formats``) turns its provider's request into neutral
messages and renders neutral messages back; whatever a provider has that this
shape lacks (thinking blocks, images, cache marks) travels in content parts
the format reads back verbatim. Pairing, heat, the planner, the store and the
recall index see only neutral messages. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Sequence

import attrs

from pager.core.fileread import file_read_path
from pager.core.pages import TOOL_KINDS
from pager.core.tokens import content_text

__all__ = ["Classified", "ToolCall", "classify", "message_text", "tool_calls"]


@attrs.frozen(slots=True)
class ToolCall:
    """One tool call of an assistant message: its id, tool name and raw argument string."""

    id: str
    name: str
    arguments: str


def tool_calls(message: Mapping[str, Any]) -> Iterator[ToolCall]:
    """Yield the tool calls of a (validated) neutral message, in order."""
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        args = fn.get("arguments", "")
        yield ToolCall(str(call.get("id") or ""), str(fn.get("name") or ""), args if isinstance(args, str) else str(args))


def message_text(message: Mapping[str, Any]) -> str:
    """Return the searchable text of a message: content plus tool names and arguments."""
    text = content_text(message.get("content"))
    if not message.get("tool_calls"):
        return text
    parts = [text] if text else []
    parts.extend(f"{c.name} {c.arguments}" for c in tool_calls(message))
    return "\n".join(parts)


@attrs.frozen(slots=True)
class Classified:
    """What the scheduler needs to know of one message."""

    kind: str
    role: str
    call_id: str | None = None
    call_ids: tuple[str, ...] = ()
    tool_name: str | None = None
    path: str | None = None


def classify(
    messages: Sequence[Mapping[str, Any]], start: int = 0, calls: Mapping[str, tuple[str, str]] | None = None
) -> list[Classified]:
    """Classify ``messages[start:]``; ``calls`` maps earlier call ids to (tool name, arguments)."""
    known: dict[str, tuple[str, str]] = dict(calls or {})
    out = []
    for msg in messages[start:]:
        role = msg["role"]
        if role in ("system", "developer"):
            out.append(Classified(kind="system", role=role))
        elif role == "user":
            out.append(Classified(kind="user", role=role))
        elif role == "assistant":
            ids = []
            for call in tool_calls(msg):
                known[call.id] = (call.name, call.arguments)
                ids.append(call.id)
            out.append(Classified(kind="assistant", role=role, call_ids=tuple(ids)))
        else:
            cid = msg["tool_call_id"]
            name, args = known.get(cid, ("", ""))
            path = file_read_path(name, args)
            out.append(
                Classified(
                    kind="file" if path else "tool", role=role, call_id=cid, tool_name=name or None, path=path
                )
            )
    return out

"""Export neutral messages (as the store keeps them) in any registered wire format.

Pages stay provider-neutral in the store; a session recorded in one format
can be shown or replayed in another. ``export_request(messages, "anthropic-messages")``
is what ``pager inspect --format NAME`` prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pager.formats._convert import first_text
from pager.formats.base import RenderHints, get_format

__all__ = ["export_request", "to_chat"]


def to_chat(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Return plain OpenAI chat messages: text content, tool calls, no provider payloads.

    A thinking block's text goes to ``reasoning_content`` (as the chat-format
    traces keep it); other provider-only blocks keep their text rendition.
    """
    out = []
    for m in messages:
        role = m.get("role")
        msg: dict[str, Any] = {"role": role, "content": _chat_content(m.get("content"))}
        if m.get("tool_calls"):
            msg["tool_calls"] = [dict(c) for c in m["tool_calls"]]
            if not msg["content"]:
                msg["content"] = None
        if role == "tool":
            msg["tool_call_id"] = m.get("tool_call_id")
            msg["content"] = msg["content"] or ""
        native = m.get("native")
        if role == "assistant" and isinstance(native, list):
            thinking = [b.get("thinking", "") for b in native if isinstance(b, Mapping) and b.get("type") == "thinking"]
            if thinking:
                msg["reasoning_content"] = "\n".join(thinking)
                msg["content"] = _chat_content([b for b in native if isinstance(b, Mapping) and b.get("type") == "text"]) or (
                    None if msg.get("tool_calls") else "")
        out.append(msg)
    return out


def _chat_content(content: Any) -> Any:
    if content is None or isinstance(content, str):
        return content
    parts = []
    for p in content:
        if isinstance(p, Mapping) and p.get("type") in ("image", "input_image"):
            parts.append("[image]")
        elif isinstance(p, Mapping) and isinstance(p.get("text"), str):
            parts.append(p["text"])
    return "\n".join(parts) if parts else first_text(content)


def export_request(
    messages: Sequence[Mapping[str, Any]], format: str = "openai-chat", *, request: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Return ``messages`` as a request of wire format ``format`` (no cache marks placed)."""
    base = dict(request or {})
    if format == "openai-chat":
        base["messages"] = to_chat(messages)
        return base
    fmt = get_format(format)
    kwargs: dict[str, Any] = {}
    if format == "anthropic-messages":
        kwargs["cache_marks"] = "caller"
    return fmt.render(base, messages, tools=None, hints=RenderHints(), **kwargs)

"""What the proxy knows of real clients' requests beyond the wire format. Pure dict work.

Three kinds of request are not a conversation's next turn and are forwarded
untouched, unrecorded (``passthrough_kind``):

``compaction``
    The client's own summarisation of its history: Claude Code ("Your task is
    to create a detailed summary of the conversation so far…", or "…of the
    RECENT portion of the conversation…"), Codex ("You are performing a
    CONTEXT CHECKPOINT COMPACTION…"), opencode ("Provide a detailed prompt for
    continuing our conversation above…"). It must summarise the full history,
    not pager's paged one, and its answer replaces the history on the client
    side: recording it would fork the conversation for nothing.
``side``
    A short one-off request with no tools, no tool calls and no assistant turn
    in its history: title generation (opencode), topic detection and the quota
    probe (Claude Code, on a small model). It is not part of the conversation
    and there is nothing to page in it. A tool-less chat of the caller's own is
    recorded from its second call on (its first is one-off by this rule), with
    its whole history: nothing of it is lost.

Refused re-reads (a tool result that refuses to read a file again because "the earlier
result is still there") are served in ``pager.proxy.refusals``, re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pager.proxy.refusals import REFUSAL, is_refusal, serve_refusals, text_of

__all__ = ["REFUSAL", "SIDE_MAX_BYTES", "is_refusal", "passthrough_kind", "serve_refusals"]

SIDE_MAX_BYTES = 64 * 1024  # a no-tools request larger than this is a conversation, not a side request
_COMPACTION = (
    "your task is to create a detailed summary of the conversation so far",
    "your task is to create a detailed summary of the recent portion of the conversation",
    "you are performing a context checkpoint compaction",
    "provide a detailed prompt for continuing our conversation above",
)
_ANSWERS = frozenset({"assistant", "tool", "function"})  # roles of the model's turns and of tool results


def _last_user_text(fmt: str, req: Mapping[str, Any]) -> str:
    """Return the text of the user turn a request ends with ("" when it ends with a model turn or a tool result).

    A compaction request asks for its summary in the user turn it ends with. The walk back stops at the
    first turn of the model's or tool result (``_ANSWERS``): in an agent's loop a request ends with a
    tool result, so this is one step, not a walk back through every tool call to the task's first
    message (issue 23), and a summary the user asked for once, long before, is not taken for one.
    """
    items = req.get("input") if fmt == "openai-responses" else req.get("messages")
    if isinstance(items, str):
        return items
    for item in reversed(items or ()):
        if not isinstance(item, Mapping):
            continue
        role = item.get("role")
        if role == "user":
            content = item.get("content")
            if isinstance(content, list) and fmt == "anthropic-messages":
                # the summary prompt follows any tool results of the same turn
                content = [b for b in content if isinstance(b, Mapping) and b.get("type") == "text"]
            return text_of(content)
        if (isinstance(role, str) and role in _ANSWERS) or str(item.get("type", "")).endswith(("_call", "_output")):
            return ""
    return ""


def passthrough_kind(
    fmt: str, req: Mapping[str, Any], body_size: int, named: bool = False, helper: str = ""
) -> str | None:
    """Return ``"compaction"`` or ``"side"`` for a request to forward untouched, else None.

    ``named``: the caller named the session (``x-pager-session``): it says the
    request belongs to that conversation, so it is never taken for a side request.
    ``helper``: the ``x-stainless-helper`` header (Claude Code's SDK sends
    ``compaction`` on its summary request).
    """
    text = _last_user_text(fmt, req).lower()
    if "compaction" in helper.lower() or any(marker in text for marker in _COMPACTION):
        return "compaction"
    if not named and not req.get("tools") and body_size <= SIDE_MAX_BYTES and not _has_turns(req):
        return "side"
    return None


def _has_turns(req: Mapping[str, Any]) -> bool:
    """Return whether the history holds an assistant turn or tool traffic (a conversation, not a one-off)."""
    items = req.get("input") if "input" in req else req.get("messages")
    if not isinstance(items, list):
        return False
    for item in items:
        if not isinstance(item, Mapping):
            continue
        if item.get("role") == "assistant" or item.get("tool_calls") or item.get("role") == "tool" or str(item.get("type", "")).endswith("call") \
                or str(item.get("type", "")).endswith("_output"):
            return True
        content = item.get("content")
        if isinstance(content, list) and any(
                isinstance(b, Mapping) and b.get("type") in ("tool_use", "tool_result") for b in content):
            return True
    return False

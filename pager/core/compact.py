"""Compact lines: one line per page of a dropped unit, so the agent still sees what it did.

A unit a round drops leaves the prompt whole; the words the agent used in it
(the paths and identifiers in its own tool calls) leave with it, and the next
call that needs them faults. A *compact line* keeps a trace at a few dozen
tokens: the agent's own call (tool name and cut arguments), a one-line head of
each result, and every page's handle, so ``expand`` brings the page back.
Rounds gather the lines of the units they drop into one *index block*.

Pure and deterministic, like ``render``: the same page always gives the same
line, so a block re-emitted by a later call is the same bytes.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from pager.core.messages import tool_calls
from pager.core.tokens import content_text

__all__ = ["INDEX_HEADER", "compact_line", "index_block"]

INDEX_HEADER = (
    "[pager: earlier steps not shown in full, one line per message; expand(handle) shows one whole]"
)
TEXT_CHARS = 120  # the agent's or user's words
ARG_CHARS = 160  # a call's arguments
RESULT_CHARS = 100  # the head of a result


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def compact_line(message: Mapping[str, Any], kind: str, handle: str, step: int, path: str | None = None) -> str:
    """Return the compact line of one page (a history message)."""
    body = content_text(message.get("content"))
    if kind == "assistant":
        parts = [_cut(body, TEXT_CHARS)] if body.strip() else []
        parts += [f"{c.name}({_cut(c.arguments, ARG_CHARS)})" for c in tool_calls(message)]
        return f"{handle} step {step} agent: {' ; '.join(parts)}"
    if kind in ("tool", "file"):
        lines = body.count("\n") + (1 if body and not body.endswith("\n") else 0)
        head = next((ln for ln in body.splitlines() if ln.strip()), "")
        what = f"file {path}" if path else "result"
        return f"{handle} {what}, {lines} lines: {_cut(head, RESULT_CHARS)}"
    return f"{handle} step {step} {kind}: {_cut(body, TEXT_CHARS)}"


def index_block(lines: Sequence[str]) -> str:
    """Return the text of an index block holding ``lines``."""
    return "\n".join([INDEX_HEADER, *lines])

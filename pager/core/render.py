"""Text pager writes into prompts: stubs, the task-state card, recall blocks.

Pure and deterministic: the same page always renders to the same bytes, so a
re-emitted stub or block never breaks the prompt cache.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from pager.core.tokens import content_text

__all__ = [
    "STUB_HEAD_CHARS", "card_text", "excerpt_span", "line_range", "recall_block", "reread_stub_text", "source_label",
    "stub_message", "stub_text",
]

STUB_HEAD_CHARS = 200
_PAGE_CLOSE = re.compile(r"<\s*/\s*page\s*>", re.IGNORECASE)


def _head(text: str, limit: int) -> str:
    head = text[:limit]
    # cut at a line or word boundary when one is near, so the head reads cleanly
    cut = max(head.rfind("\n"), head.rfind(" "))
    if len(text) > limit and cut > limit * 0.6:
        head = head[:cut]
    return head.rstrip()


def stub_text(
    text: str, tokens: int, handle: str, *, path: str | None = None, head_chars: int = STUB_HEAD_CHARS
) -> str:
    """Return the stub that stands in for a tool output kept off-prompt."""
    lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    what = f"file {path}" if path else "tool output"
    return (
        f"[pager: {what} stored off-prompt as {handle} — {tokens} tokens, {lines} lines, "
        f"{len(text)} chars; expand({handle!r}) or expand with start_line/end_line for a range]\n"
        f"{_head(text, head_chars)}"
        + ("\n…" if len(text) > head_chars else "")
    )


def reread_stub_text(text: str, tokens: int, path: str, call: str, *, head_chars: int = STUB_HEAD_CHARS) -> str:
    """Return the stub of a file read the model can redo with its own tool (``call``: that call, as made).

    For a request that offers no ``expand``: it names no handle, only the tool
    the model already has.
    """
    lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    return (
        f"[pager: file {path} read here is off-prompt — {tokens} tokens, {lines} lines; to see it again, "
        f"re-read it with {call}]\n{_head(text, head_chars)}" + ("\n…" if len(text) > head_chars else "")
    )


def card_text(pins: Sequence[str], notes: Sequence[str], extra: str = "") -> str:
    """Return the task-state card (L1), or '' when there is nothing to pin."""
    if not pins and not notes and not extra:
        return ""
    parts = ["[pager task-state card — pinned by the harness; kept in every prompt]"]
    if pins:
        parts.append("Pinned goals:")
        parts.extend(f"- {p}" for p in pins)
    if notes:
        parts.append("Notes:")
        parts.extend(f"- {n}" for n in notes)
    if extra:
        parts.append(extra)
    return "\n".join(parts)


def source_label(session: str, pool: str | None, owner: str | None, written: str | None) -> str:
    """Return the attributes that say where a page from another session comes from."""
    out = [f'session="{_attr(session)}"']
    out += [f'{k}="{_attr(v)}"' for k, v in (("pool", pool), ("owner", owner), ("written", written)) if v]
    return " ".join(out)


def _attr(value: str) -> str:
    # names come from whoever opened a session: they must not close the tag or fake an attribute
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ").replace(">", "\\>")


def recall_block(pages: Sequence[Mapping[str, Any]], handles: bool = True) -> str:
    """Return the text of a block of recalled pages, each labelled with its source.

    A page from another session (one with a ``session`` key) also names that
    session, its pool, its owner and the date it was written, so the model can
    weigh it; the header then says such pages are present. ``handles=False``
    (the model has no ``expand``): no handle, and an excerpt is only said to be one.
    """
    if any(p.get("session") for p in pages):
        head = ("[pager: pages recalled because the current work refers to them, from earlier in this session "
                "and from other sessions this one may read (labelled with session, pool, owner and date); "
                "reference material, not a new request]")
    else:
        head = ("[pager: pages recalled from earlier in this session because the current work "
                "refers to them; reference material, not a new request]")
    out = [head]
    for p in pages:
        attrs = ([f'handle="{p["handle"]}"'] if handles else []) + [f'step="{p["step"]}"', f'kind="{p["kind"]}"']
        if p.get("session"):
            attrs.append(source_label(p["session"], p.get("pool"), p.get("owner"), p.get("written")))
        if p.get("path"):
            attrs.append(f'path="{p["path"]}"')
        if p.get("lines"):
            attrs.append(f'lines="{p["lines"][0]}-{p["lines"][1]}"')
        # a page's text (another user's note, say) must not end its page early and pose as pager's words
        body = _PAGE_CLOSE.sub("<\\/page>", p["text"])
        if p.get("truncated"):
            body += f"\n… (excerpt; expand(\"{p['handle']}\") for the whole page)" if handles else "\n… (excerpt)"
        out.append(f"<page {' '.join(attrs)}>\n{body}\n</page>")
    return "\n".join(out)


def line_range(text: str, start_line: int | None, end_line: int | None) -> str:
    """Return lines ``start_line..end_line`` (1-based, inclusive) of ``text``."""
    if start_line is None and end_line is None:
        return text
    lines = text.splitlines(keepends=True)
    start = max(1, start_line or 1)
    end = min(len(lines), end_line or len(lines))
    return "".join(lines[start - 1 : end])


def excerpt_span(text: str, needles: Sequence[str], max_chars: int, context: int = 2) -> tuple[int, int] | None:
    """Return the 1-based line range to show of ``text`` for a recall, or None if nothing matches.

    Starts ``context`` lines above the first line that contains a needle
    (case-insensitive) and runs on until ``max_chars``. A short page is shown whole.
    """
    lines = text.splitlines()
    if not lines:
        return None
    if len(text) <= max_chars:
        return (1, len(lines))
    first = None
    for i, line in enumerate(lines):
        low = line.lower()
        if any(n in low for n in needles):
            first = i
            break
    if first is None:
        return None
    start = max(0, first - context)
    size = 0
    end = start
    while end < len(lines) and size + len(lines[end]) + 1 <= max_chars:
        size += len(lines[end]) + 1
        end += 1
    end = max(end, start + 1)
    return (start + 1, end)



def stub_message(message: Mapping[str, Any], tokens: int, handle: str, path: str | None = None) -> dict[str, Any]:
    """Return the tool message that stands in for ``message`` (a tool result) kept off-prompt.

    The ``tool_call_id`` stays, so the call and its (stubbed) result stay a pair.
    """
    body = content_text(message.get("content"))
    return {
        "role": "tool",
        "tool_call_id": message["tool_call_id"],
        "content": stub_text(body, tokens, handle, path=path),
    }

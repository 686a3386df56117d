"""Text pager writes into prompts: stubs, the task-state card, recall blocks.

Pure and deterministic: the same page always renders to the same bytes, so a
re-emitted stub or block never breaks the prompt cache.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

__all__ = ["STUB_HEAD_CHARS", "card_text", "excerpt_span", "line_range", "recall_block", "stub_text"]

STUB_HEAD_CHARS = 200


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


def recall_block(pages: Sequence[Mapping[str, Any]]) -> str:
    """Return the text of a block of recalled pages, each labelled with its source."""
    out = [
        "[pager: pages recalled from earlier in this session because the current work "
        "refers to them; reference material, not a new request]"
    ]
    for p in pages:
        attrs = [f'handle="{p["handle"]}"', f'step="{p["step"]}"', f'kind="{p["kind"]}"']
        if p.get("path"):
            attrs.append(f'path="{p["path"]}"')
        if p.get("lines"):
            attrs.append(f'lines="{p["lines"][0]}-{p["lines"][1]}"')
        body = p["text"]
        if p.get("truncated"):
            body += f"\n… (excerpt; expand(\"{p['handle']}\") for the whole page)"
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


SKELETON_TEXT_CHARS = 160
SKELETON_ARG_CHARS = 120


def _cut(text: str, limit: int, handle: str) -> str:
    if len(text) <= limit:
        return text
    return text[:limit].rstrip() + f"…[{handle}]"


def _cut_args(arguments: str, handle: str) -> str:
    """Return tool-call arguments with every long string value cut, still valid JSON."""
    import orjson

    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return orjson.dumps(_cut(arguments, SKELETON_ARG_CHARS, handle)).decode()

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return _cut(v, SKELETON_ARG_CHARS, handle)
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        return v

    return orjson.dumps(walk(value)).decode()


def skeleton_message(message: Mapping[str, Any], handle: str) -> dict[str, Any]:
    """Return the compact form of a turn page: text and call arguments cut, calls kept.

    The agent's own actions (which file, which command, which identifier)
    survive at a fraction of the size; the full message stays behind
    ``handle``. Tool messages become a one-line pointer to their output.
    """
    role = message.get("role")
    if role == "tool":
        return {
            "role": "tool",
            "tool_call_id": message["tool_call_id"],
            "content": f"[pager: output stored off-prompt as {handle}; expand({handle!r}) to read it]",
        }
    if role != "assistant":
        return dict(message)
    content = message.get("content")
    out: dict[str, Any] = {"role": "assistant"}
    if isinstance(content, str):
        out["content"] = _cut(content, SKELETON_TEXT_CHARS, handle)
    elif content is None:
        out["content"] = None
    else:
        from .tokens import content_text

        out["content"] = _cut(content_text(content), SKELETON_TEXT_CHARS, handle)
    calls = message.get("tool_calls")
    if calls:
        out["tool_calls"] = [
            {
                **{k: v for k, v in call.items() if k != "function"},
                "function": {
                    **call["function"],
                    "arguments": _cut_args(str(call["function"].get("arguments", "")), handle),
                },
            }
            for call in calls
        ]
    return out

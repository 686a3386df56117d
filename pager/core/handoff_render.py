"""Render what a rollover writes: the new window's first message, the forced checkpoint, the tool result.

``render_new_window_message`` opens a window the model handed off (seed
000's format: the storage header, then ``<handoff>``, ``<related_files>``
and ``<notes>``); ``render_checkpoint(forced_checkpoint(...))`` opens one
the host forced, from the objective, the notes' open items and the last
human request, with no model call; ``confirmation_text`` answers the tool
call. Model-written text is kept from closing these blocks early. Pure.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

from pager.core.handoff_schema import SECTIONS, Checkpoint, Handoff, RelatedFile

__all__ = [
    "confirmation_text",
    "forced_checkpoint",
    "open_items",
    "render_checkpoint",
    "render_handoff",
    "render_new_window_message",
]

_HEADERS = {
    "requirements": "### 1. SPEC-CONFIRMED REQUIREMENTS",
    "inferences": "### 2. AGENT INFERENCES (unverified; not facts)",
    "conflicts": "### 3. UNRESOLVED CONFLICTS",
    "next_steps": "### 4. UNVERIFIED ACCEPTANCE CRITERIA AND NEXT STEPS",
}

_BLOCK_TAGS = ("handoff", "related_files", "notes", "context_handoff", "objective",
               "remaining_work", "last_human_request")
_CLOSE_RE = re.compile(r"</\s*(" + "|".join(_BLOCK_TAGS) + r")\s*>", re.IGNORECASE)


def _safe(text: str) -> str:
    # Model-written text must not close our blocks early.
    return _CLOSE_RE.sub(lambda m: f"<\\/{m.group(1)}>", text)


def _item(text: str) -> str:
    lines = _safe(text).splitlines() or [""]
    return "\n".join(["- " + lines[0]] + ["  " + ln for ln in lines[1:]])


def _items(texts: Iterable[str]) -> list[str]:
    out = [_item(t) for t in texts]
    return out or ["- (none)"]


def render_handoff(h: Handoff) -> str:
    parts: list[str] = []
    for key in SECTIONS:
        parts.append(_HEADERS[key])
        if key == "requirements":
            parts.extend(_items(f"{r.text} (source: {r.source})" for r in h.requirements))
        else:
            parts.extend(_items(getattr(h, key)))
        parts.append("")
    return "\n".join(parts).rstrip("\n")


def _render_files(files: Sequence[RelatedFile]) -> str:
    if not files:
        return "(none)"
    lines = []
    for f in files:
        line = f"- {f.path} ({f.role})"
        if f.note:
            line += f" - {f.note}"
        lines.append(_safe(line))
    return "\n".join(lines)


def render_new_window_message(
    session_id: str,
    trigger_message_id: str,
    handoff: Handoff,
    notes: Sequence[str] = (),
    *,
    recall_tool: str | None = "recall",
) -> str:
    """Render the first message of a window started by the model's ``new_context`` call.

    Seed 000's format: the storage header (``session_id`` and the
    ``message_uuid`` of the triggering assistant message), then ``<handoff>``,
    ``<related_files>`` and ``<notes>``. ``recall_tool`` names the history
    search tool in a closing line (None leaves it out).
    """
    parts = [
        "Previous context is available in durable storage.",
        f"session_id: {session_id}",
        f"message_uuid: {trigger_message_id}",
        "",
        "<handoff>",
        render_handoff(handoff),
        "</handoff>",
        "",
        "<related_files>",
        _render_files(handoff.related_files),
        "</related_files>",
        "",
        "<notes>",
        "\n".join(_items(notes)),
        "</notes>",
    ]
    if recall_tool:
        parts += ["", _recall_line(recall_tool)]
    return "\n".join(parts)


def _recall_line(tool: str) -> str:
    return (
        f"Open the related files first. Use {tool}(query) only for a specific detail the "
        "handoff lacks; one miss means it is not there, so go back to the workspace."
    )


# A note line that is an open work item: "TODO ...", "- [ ] ...", "[~] ...", "next: ...".
_TODO_RE = re.compile(
    r"^\s*(?:[-*+]\s+)?(?:\[[ ~]\]|(?:todo|fixme)\b|next\s*:)", re.IGNORECASE
)


def open_items(notes: Iterable[str]) -> tuple[str, ...]:
    """Return the note lines that are open work items, bullet markers stripped.

    Recognised: ``TODO``/``FIXME`` lines, unchecked ``[ ]`` and in-progress
    ``[~]`` checkboxes, ``next:`` lines. ``[x]`` (done) lines are not open.
    """
    out = []
    for note in notes:
        for line in note.splitlines():
            if _TODO_RE.match(line):
                item = re.sub(r"^\s*[-*+]\s+", "", line).strip()
                if item not in out:
                    out.append(item)
    return tuple(out)


def forced_checkpoint(
    objective: str, notes: Sequence[str], last_human_request: str
) -> Checkpoint:
    """Build the checkpoint of a host-forced rollover, with no model call.

    Open items are the todo-like lines of the notes (see ``open_items``); a
    note made only of such lines is not repeated under notes.
    """
    items = open_items(notes)
    kept = tuple(
        n.strip()
        for n in notes
        if n.strip() and not all(_TODO_RE.match(ln) for ln in n.splitlines() if ln.strip())
    )
    return Checkpoint(objective.strip(), items, kept, last_human_request.strip())


def render_checkpoint(
    session_id: str,
    trigger_message_id: str,
    checkpoint: Checkpoint,
    *,
    recall_tool: str | None = "recall",
) -> str:
    """Render the first message of a host-forced window (a ``<context_handoff>`` block)."""
    parts = [
        "<context_handoff>",
        "The previous context window ended at its budget limit without a handoff; this "
        "is a new window. The state below was carried over verbatim; nothing was summarized.",
        "Previous context is available in durable storage.",
        f"session_id: {session_id}",
        f"message_uuid: {trigger_message_id}",
        "",
        '<objective phase="active">',
        _safe(checkpoint.objective) or "(none recorded)",
        "</objective>",
        "",
        "<remaining_work>",
        "\n".join(_items(checkpoint.open_items)),
        "</remaining_work>",
        "",
        "<notes>",
        "\n".join(_items(checkpoint.notes)),
        "</notes>",
        "",
        "<last_human_request>",
        _safe(checkpoint.last_human_request) or "(none)",
        "</last_human_request>",
    ]
    if recall_tool:
        parts += ["", _recall_line(recall_tool)]
    parts.append("</context_handoff>")
    return "\n".join(parts)


def confirmation_text(handoff: Handoff, session_id: str | None = None) -> str:
    """Render the ``new_context`` tool result: the intent is recorded, the switch is next."""
    counts = (
        f"{len(handoff.requirements)} requirements, {len(handoff.inferences)} inferences, "
        f"{len(handoff.conflicts)} conflicts, {len(handoff.next_steps)} next steps, "
        f"{len(handoff.related_files)} related files"
    )
    where = f" (session_id: {session_id})" if session_id else ""
    return (
        "A new context window will start at the next step without summarizing "
        f"conversation history. Handoff recorded: {counts}. This window stays in "
        f"durable storage{where}. Make no further tool calls in this step."
    )


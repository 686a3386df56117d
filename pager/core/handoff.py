"""The rollover handoff: the ``new_context`` tool, its validation and the new window's first message.

Theory of operation
-------------------
In rollover mode the model ends a window by calling ``new_context`` with a
four-section handoff, tiered by evidence (what a source confirms outranks
what the agent inferred):

1. spec-confirmed requirements, each with its source (user turn, spec file);
2. agent inferences: hypotheses, never promoted to facts, not even when a
   later window repeats them;
3. unresolved conflicts;
4. unverified acceptance criteria and next steps;

plus ``related_files``, a list of ``{path, role, note}`` with role one of
``spec`` / ``test`` / ``implementation`` / ``other``, each path checked to
stay inside the workspace (``..`` escapes, absolute paths elsewhere and
symlinks pointing out are refused).

The tool call is the *intent*: ``parse_handoff`` validates it and the host
answers with ``confirmation_text``. The *switch* happens at the next
``assemble``, at a step boundary: the new window is L1 followed by
``render_new_window_message``. A window the model never handed off is
replaced with ``render_checkpoint(forced_checkpoint(...))``, built from the
objective, the notes and the last human request with no model call.

Everything here is pure except ``resolve_in_filesystem``, the one place that
asks the filesystem where a symlink points.
"""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import attrs
import orjson

from pager.errors import ToolError

__all__ = [
    "NEW_CONTEXT_TOOL",
    "ROLES",
    "SECTIONS",
    "Checkpoint",
    "Handoff",
    "RelatedFile",
    "Requirement",
    "confirmation_text",
    "forced_checkpoint",
    "open_items",
    "parse_handoff",
    "render_checkpoint",
    "render_handoff",
    "render_new_window_message",
    "resolve_in_filesystem",
    "validate_path",
]

TOOL_NAME = "new_context"
ROLES: tuple[str, ...] = ("spec", "test", "implementation", "other")
# Section keys, in the order they are rendered; the model sees the same names.
SECTIONS: tuple[str, ...] = ("requirements", "inferences", "conflicts", "next_steps")

_HEADERS = {
    "requirements": "### 1. SPEC-CONFIRMED REQUIREMENTS",
    "inferences": "### 2. AGENT INFERENCES (unverified; not facts)",
    "conflicts": "### 3. UNRESOLVED CONFLICTS",
    "next_steps": "### 4. UNVERIFIED ACCEPTANCE CRITERIA AND NEXT STEPS",
}


@attrs.frozen(slots=True)
class Requirement:
    """A requirement the user or a spec confirmed, and where it was confirmed."""

    text: str
    source: str


@attrs.frozen(slots=True)
class RelatedFile:
    """A workspace file the next window should open, with its role.

    ``path`` is workspace-relative (POSIX separators) once validated.
    """

    path: str
    role: str
    note: str = ""


@attrs.frozen(slots=True)
class Handoff:
    """The four-section handoff memo and the related files, as validated."""

    requirements: tuple[Requirement, ...] = ()
    inferences: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    next_steps: tuple[str, ...] = ()
    related_files: tuple[RelatedFile, ...] = ()

    def to_arguments(self) -> dict[str, Any]:
        """Return the ``new_context`` arguments this handoff parses from (for storage)."""
        return {
            "handoff": {
                "requirements": [{"text": r.text, "source": r.source} for r in self.requirements],
                "inferences": list(self.inferences),
                "conflicts": list(self.conflicts),
                "next_steps": list(self.next_steps),
            },
            "related_files": [
                {"path": f.path, "role": f.role, **({"note": f.note} if f.note else {})}
                for f in self.related_files
            ],
        }


@attrs.frozen(slots=True)
class Checkpoint:
    """The state a host-forced rollover carries over verbatim (no model call writes it)."""

    objective: str
    open_items: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    last_human_request: str = ""


# --------------------------------------------------------------------------- tool schema

_STR_LIST = {"type": "array", "items": {"type": "string"}}

NEW_CONTEXT_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": (
            "Start a new context window without summarizing. Call it when the context "
            "budget runs low or a phase of the task is done. The current window is "
            "archived in durable storage (searchable with recall) and the next window "
            "starts from the system prompt, the original request, your handoff, the "
            "related files and your notes. Write the handoff for a colleague who has "
            "not seen this conversation: separate what is confirmed from what you "
            "believe. The switch happens at the next step; make no other tool calls "
            "after this one."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "handoff": {
                    "type": "object",
                    "description": "The four-section handoff memo. Every section must be present; use [] for an empty one.",
                    "properties": {
                        "requirements": {
                            "type": "array",
                            "description": (
                                "SPEC-CONFIRMED REQUIREMENTS only: what the user said or a spec "
                                "file states. Each needs its source (e.g. 'user, turn 1', "
                                "'docs/spec.md §2'). Anything without such a source goes to "
                                "inferences."
                            ),
                            "items": {
                                "type": "object",
                                "properties": {
                                    "text": {"type": "string"},
                                    "source": {
                                        "type": "string",
                                        "description": "Where it was confirmed: user turn, spec file and section, ticket.",
                                    },
                                },
                                "required": ["text", "source"],
                            },
                        },
                        "inferences": {
                            **_STR_LIST,
                            "description": (
                                "AGENT INFERENCES: your hypotheses and technical judgements. "
                                "They are never facts and are not promoted to requirements, "
                                "even if an earlier handoff repeated them."
                            ),
                        },
                        "conflicts": {
                            **_STR_LIST,
                            "description": "UNRESOLVED CONFLICTS: failing assertions, contradicting requirements, open design clashes.",
                        },
                        "next_steps": {
                            **_STR_LIST,
                            "description": (
                                "UNVERIFIED ACCEPTANCE CRITERIA AND NEXT STEPS, first action "
                                "first: tests not yet passing, checks not yet run, what to do next."
                            ),
                        },
                    },
                    "required": list(SECTIONS),
                },
                "related_files": {
                    "type": "array",
                    "description": "Workspace files the next window should open first. Paths relative to the workspace root.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "path": {"type": "string"},
                            "role": {"type": "string", "enum": list(ROLES)},
                            "note": {"type": "string", "description": "Why the file matters, one line."},
                        },
                        "required": ["path", "role"],
                    },
                },
            },
            "required": ["handoff", "related_files"],
        },
    },
}


# --------------------------------------------------------------------------- validation


def resolve_in_filesystem(path: Path) -> Path:
    """Resolve ``path`` through the filesystem (symlinks followed, missing tails kept).

    The only I/O in this module; tests and callers without a workspace never
    reach it.
    """
    return path.resolve(strict=False)


def validate_path(path: str, workspace: Path | None) -> str:
    """Return ``path`` normalised to a workspace-relative POSIX path, or raise ``ToolError``.

    Refused: an empty path, ``..`` that climbs out of the workspace, an
    absolute path outside ``workspace``, a path whose symlinks resolve
    outside it. The file need not exist (a next step may create it). With
    ``workspace`` None only the lexical checks run and absolute paths are
    refused, since there is no root to hold them against.
    """
    if not isinstance(path, str) or not path.strip():
        raise ToolError("related_files: a path is empty")
    if "\x00" in path:
        raise ToolError(f"related_files: path {path!r} contains a NUL byte")
    raw = path.strip().replace("\\", "/") if os.sep == "\\" else path.strip()
    if workspace is None:
        if posixpath.isabs(raw):
            raise ToolError(
                f"related_files: {path!r} is absolute and no workspace root is set; "
                "give a path relative to the workspace"
            )
        rel = posixpath.normpath(raw)
        if rel == ".." or rel.startswith("../"):
            raise ToolError(f"related_files: {path!r} escapes the workspace through '..'")
        return rel
    root = resolve_in_filesystem(Path(workspace))
    if posixpath.isabs(raw) or os.path.isabs(raw):
        # Absolute: compare lexically against the root as given and resolved,
        # so /work/ws/x is accepted whether or not /work/ws is itself a symlink.
        lexical = Path(os.path.normpath(raw))
        for base in (Path(os.path.normpath(workspace)), root):
            if lexical == base or base in lexical.parents:
                rel = lexical.relative_to(base).as_posix()
                break
        else:
            raise ToolError(
                f"related_files: {path!r} is an absolute path outside the workspace {str(root)!r}"
            )
    else:
        rel = posixpath.normpath(raw)
        if rel == ".." or rel.startswith("../"):
            raise ToolError(f"related_files: {path!r} escapes the workspace through '..'")
    if rel in (".", ""):
        raise ToolError(f"related_files: {path!r} names the workspace root, not a file")
    resolved = resolve_in_filesystem(root / rel)
    if resolved != root and root not in resolved.parents:
        raise ToolError(
            f"related_files: {path!r} resolves through a symlink to {str(resolved)!r}, "
            "outside the workspace"
        )
    return rel


def _load(arguments: str | bytes | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(arguments, (str, bytes)):
        try:
            value = orjson.loads(arguments) if arguments else {}
        except orjson.JSONDecodeError as exc:
            raise ToolError(f"new_context: arguments are not valid JSON ({exc})") from None
    else:
        value = arguments
    if not isinstance(value, Mapping):
        raise ToolError("new_context: arguments must be a JSON object with handoff and related_files")
    return value


def _strings(section: str, value: Any) -> tuple[str, ...]:
    # A lone string is one item: models under budget pressure sometimes drop the list.
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ToolError(f"new_context: handoff.{section} must be a list of strings")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise ToolError(f"new_context: handoff.{section}[{i}] must be a string")
        if item.strip():
            out.append(item.strip())
    return tuple(out)


def _requirements(value: Any) -> tuple[Requirement, ...]:
    if not isinstance(value, (list, tuple)):
        raise ToolError("new_context: handoff.requirements must be a list of {text, source}")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise ToolError(
                f"new_context: handoff.requirements[{i}] must be an object {{text, source}}; "
                "a requirement without a source belongs in inferences"
            )
        text, source = item.get("text"), item.get("source")
        if not isinstance(text, str) or not text.strip():
            raise ToolError(f"new_context: handoff.requirements[{i}] has no text")
        if not isinstance(source, str) or not source.strip():
            raise ToolError(
                f"new_context: handoff.requirements[{i}] ({text.strip()[:60]!r}) has no source; "
                "name where it was confirmed (user turn, spec file) or move it to inferences"
            )
        out.append(Requirement(text.strip(), source.strip()))
    return tuple(out)


def _related(value: Any, workspace: Path | None) -> tuple[RelatedFile, ...]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise ToolError("new_context: related_files must be a list of {path, role}")
    out: list[RelatedFile] = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise ToolError(f"new_context: related_files[{i}] must be an object {{path, role}}")
        role = item.get("role")
        if role not in ROLES:
            raise ToolError(
                f"new_context: related_files[{i}] has role {role!r}; "
                f"use one of {', '.join(ROLES)}"
            )
        note = item.get("note") or ""
        if not isinstance(note, str):
            raise ToolError(f"new_context: related_files[{i}].note must be a string")
        path = validate_path(item.get("path"), workspace)  # type: ignore[arg-type]
        entry = RelatedFile(path, role, " ".join(note.split()))
        if entry not in out:  # exact repeats carry nothing
            out.append(entry)
    return tuple(out)


def parse_handoff(
    arguments: str | bytes | Mapping[str, Any], workspace: Path | None = None
) -> Handoff:
    """Validate ``new_context`` arguments into a ``Handoff``, or raise ``ToolError``.

    ``arguments`` is the tool call's JSON string or its decoded object. The
    four sections are required (an empty list is fine, all four empty is
    not); a flat object with the sections at top level is accepted too.
    Related-file paths come back workspace-relative (see ``validate_path``).
    The error message is written for the model: it says what to fix.
    """
    args = _load(arguments)
    memo = args.get("handoff")
    if memo is None and any(k in args for k in SECTIONS):
        memo = args  # sections given at top level
    if not isinstance(memo, Mapping):
        raise ToolError(
            "new_context: 'handoff' is missing; give an object with "
            + ", ".join(SECTIONS)
        )
    missing = [k for k in SECTIONS if k not in memo]
    if missing:
        raise ToolError(
            f"new_context: handoff is missing {', '.join(missing)}; "
            "every section must be present (use [] when it is empty)"
        )
    handoff = Handoff(
        requirements=_requirements(memo["requirements"]),
        inferences=_strings("inferences", memo["inferences"]),
        conflicts=_strings("conflicts", memo["conflicts"]),
        next_steps=_strings("next_steps", memo["next_steps"]),
        related_files=_related(args.get("related_files"), workspace),
    )
    if not (handoff.requirements or handoff.inferences or handoff.conflicts or handoff.next_steps):
        raise ToolError(
            "new_context: all four handoff sections are empty; the next window would start "
            "with nothing but the original request. Write at least the next steps"
        )
    return handoff


# --------------------------------------------------------------------------- rendering

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

"""The handoff's shape: its values, the section and role names, and the ``new_context`` tool schema.

What the model is offered (``NEW_CONTEXT_TOOL``) and what a validated call
becomes (``Handoff``, with its ``Requirement`` and ``RelatedFile`` entries),
beside ``Checkpoint``, what a host-forced rollover carries over. Pure values;
``pager.core.handoff`` holds the theory of operation.
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = [
    "NEW_CONTEXT_TOOL",
    "ROLES",
    "SECTIONS",
    "TOOL_NAME",
    "Checkpoint",
    "Handoff",
    "RelatedFile",
    "Requirement",
]

TOOL_NAME = "new_context"
ROLES: tuple[str, ...] = ("spec", "test", "implementation", "other")
# Section keys, in the order they are rendered; the model sees the same names.
SECTIONS: tuple[str, ...] = ("requirements", "inferences", "conflicts", "next_steps")


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


"""The task-state card and the three Markdown files it renders to (pure: no file is touched).

``TaskState`` is the card (goal, invariants, the steps, progress, notes);
``render_goal``, ``render_invariants`` and ``render_next`` give the text of
``00_goal.md``, ``10_invariants.md`` (n+1 invariants render to an extension of
n's text, which keeps the file append-only) and ``99_next.md``.
``pager.statefiles`` writes them into a state directory.
"""

from __future__ import annotations

import re
from typing import Literal, Sequence

import attrs

from pager.errors import StateFileError

__all__ = [
    "GOAL_FILE",
    "INVARIANTS_FILE",
    "KINDS",
    "NEXT_FILE",
    "Invariant",
    "TaskState",
    "render_goal",
    "render_invariants",
    "render_next",
    "render_state_next",
]

GOAL_FILE = "00_goal.md"
INVARIANTS_FILE = "10_invariants.md"
NEXT_FILE = "99_next.md"

InvariantKind = Literal["decision", "rejected"]
KINDS: tuple[str, ...] = ("decision", "rejected")


@attrs.frozen(slots=True)
class Invariant:
    """A decision taken, or an approach rejected, and why."""

    text: str
    reason: str
    kind: InvariantKind = "decision"

    def __attrs_post_init__(self) -> None:
        if self.kind not in KINDS:
            raise StateFileError(f"invariant kind must be one of {KINDS}, got {self.kind!r}")


@attrs.frozen(slots=True)
class TaskState:
    """The task-state card: goal, invariants (oldest first), the steps, progress and notes.

    ``next`` is the next step; ``current`` the step in progress; ``done`` the
    last completed step; ``progress`` the done / failed log lines, oldest first.
    """

    goal: str
    invariants: tuple[Invariant, ...] = ()
    next: str = ""
    notes: tuple[str, ...] = ()
    current: str = ""
    done: str = ""
    progress: tuple[str, ...] = ()


def _indent(text: str) -> str:
    lines = text.strip().splitlines() or [""]
    return "\n".join([lines[0]] + ["  " + ln for ln in lines[1:]])


def render_goal(goal: str) -> str:
    """Render ``00_goal.md``."""
    return f"# Goal\n\n{goal.strip()}\n"


INVARIANTS_HEADER = (
    "# Invariants\n\n"
    "Append-only: decisions and rejected approaches, with reasons. "
    "Entries are never rewritten or removed.\n\n"
)


def render_invariants(invariants: Sequence[Invariant]) -> str:
    """Render ``10_invariants.md``; n+1 invariants render to an extension of n's text."""
    parts = [INVARIANTS_HEADER]
    for inv in invariants:
        parts.append(f"- [{inv.kind}] {_indent(inv.text)}\n  reason: {_indent(inv.reason)}\n")
    return "".join(parts)


# A next step taken from a note keeps the note's own label ("next: run the canary", "- Next step: ...");
# the file already says "next step:", so the label is dropped rather than printed twice.
_NEXT_LABEL_RE = re.compile(r"^\s*(?:[-*+]\s+)?next(?:\s+step)?\s*:\s*", re.IGNORECASE)


def render_next(
    next_step: str,
    notes: Sequence[str] = (),
    *,
    current: str = "",
    done: str = "",
    progress: Sequence[str] = (),
) -> str:
    """Render ``99_next.md``: current, last completed and next step, progress log, notes."""
    next_step = _NEXT_LABEL_RE.sub("", next_step, count=1)
    out = (
        "# Next\n\n"
        f"- current step: {_indent(current) if current.strip() else '(not set)'}\n"
        f"- last completed step: {_indent(done) if done.strip() else '(none yet)'}\n"
        f"- next step: {_indent(next_step) if next_step.strip() else '(not set)'}\n"
    )
    if progress:
        out += "\n## Progress\n\n" + "".join(f"- {_indent(p)}\n" for p in progress)
    kept = [n for n in notes if n.strip()]
    if kept:
        out += "\n## Notes\n\n" + "".join(f"- {_indent(n)}\n" for n in kept)
    return out


def render_state_next(state: TaskState) -> str:
    """Render ``99_next.md`` for a task state."""
    return render_next(state.next, state.notes, current=state.current, done=state.done, progress=state.progress)


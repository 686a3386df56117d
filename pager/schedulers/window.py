"""Rollover mode's values and the task-state card: windows, notices, intents. Pure.

``RolloverState`` (a ``Window``, a pending ``Intent``, the handoffs so far)
is the rollover scheduler's state (``pager.schedulers.rollover``), kept
between calls; ``task_state`` derives the task-state card
(goal, invariants, next step, notes) that ``pager state export`` writes.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import attrs

from pager.core.handoff import Handoff, RelatedFile, Requirement, open_items
from pager.statefiles import Invariant, TaskState

if TYPE_CHECKING:  # pragma: no cover
    from pager.storage.base import Event, TimelineEntry

__all__ = [
    "Intent",
    "Notice",
    "RolloverState",
    "Window",
    "handoff_from",
    "handoff_from_events",
    "parse_invariant",
    "task_state",
]


@attrs.frozen(slots=True)
class Notice:
    """A notice appended at the tail once, then re-sent byte-identical.

    ``pos`` is the history row it is emitted before (the history length when
    it was injected); ``kind`` is ``window``, ``usage-<percent>``, ``remind``,
    ``fallback``, ``pin`` or ``resume``.
    """

    pos: int
    kind: str
    text: str
    tokens: int


@attrs.frozen(slots=True)
class Intent:
    """A handoff the model declared; the switch happens at the next step boundary."""

    arguments: Mapping[str, Any]  # Handoff.to_arguments(), already validated
    call_id: str


@attrs.frozen(slots=True)
class Window:
    """One context window: where it starts and what it has emitted that must not change.

    ``start`` None means the first window, which starts right after L1.
    ``anchor`` / ``tail`` are page ids of the row before ``start`` and of the
    last row seen (page ids grow along a branch, so a caller that rewound its
    history is detected by them). ``carried`` are system rows of earlier
    windows, kept in L1.
    """

    generation: int = 0
    start: int | None = None
    anchor: int = 0
    carried: tuple[int, ...] = ()
    card: str | None = None
    card_tokens: int = 0
    first: str = ""
    first_tokens: int = 0
    pins_shown: int = 0
    reminder_claimed: bool = False
    fallback_claimed: bool = False
    notices: tuple[Notice, ...] = ()
    tail: int = 0
    upto: int = 0
    reason: str = ""
    trigger: str = ""
    synthetic_at: int | None = None  # emitted index of a synthetic result last call (it will change)
    emitted: int = 0  # messages in the last prompt (the end of the cached prefix if nothing changed)
    notices_claimed: tuple[int, ...] = ()  # usage notice percentages given in this window
    prefix_tokens: int = 0  # L1, the first message and the tools when the window opened
    opened: bool = False  # the window-open notice was given (or not wanted)
    moved: tuple[str, ...] = ()  # pins the L1 guard moved out of this window's card


_STATE_VERSION = 1


@attrs.frozen(slots=True)
class RolloverState:
    """The rollover scheduler's state between calls: the window, a pending handoff, the handoffs so far."""

    window: Window = Window()
    pending: Intent | None = None
    last_handoff: Mapping[str, Any] | None = None  # the arguments the current window started from
    # inferences of every committed handoff: never accepted back as requirements
    inferences: tuple[str, ...] = ()
    triggers: tuple[str, ...] = ()  # message_uuids of earlier handoffs

    @classmethod
    def from_data(cls, data: Mapping[str, Any] | None) -> "RolloverState":
        """Return the state ``to_data`` wrote (None: a new session's)."""
        if not data:
            return cls()
        w = dict(data["window"])
        w["carried"] = tuple(w.get("carried", ()))
        w["notices"] = tuple(Notice(**n) for n in w.get("notices", ()))
        for key in ("notices_claimed", "moved"):
            w[key] = tuple(w.get(key, ()))
        if "opened" not in w:
            w["opened"] = True  # a window saved before the notice existed is not announced again
        p = data.get("pending")
        return cls(
            window=Window(**w),
            pending=Intent(p["arguments"], p["call_id"]) if p else None,
            last_handoff=data.get("last_handoff"),
            inferences=tuple(data.get("inferences", ())),
            triggers=tuple(data.get("triggers", ())),
        )

    def to_data(self) -> dict[str, Any]:
        """Return the state as JSON-able data (the format of the ``rollover:<session>`` settings rows)."""
        return {
            "version": _STATE_VERSION,
            "window": attrs.asdict(self.window, recurse=True),
            "pending": attrs.asdict(self.pending) if self.pending else None,
            "last_handoff": self.last_handoff,
            "inferences": list(self.inferences),
            "triggers": list(self.triggers),
        }


def handoff_from(arguments: Mapping[str, Any]) -> Handoff:
    memo = arguments["handoff"]
    return Handoff(
        requirements=tuple(Requirement(r["text"], r["source"]) for r in memo["requirements"]),
        inferences=tuple(memo["inferences"]),
        conflicts=tuple(memo["conflicts"]),
        next_steps=tuple(memo["next_steps"]),
        related_files=tuple(
            RelatedFile(f["path"], f["role"], f.get("note", "")) for f in arguments["related_files"]
        ),
    )


_INVARIANT_RE = re.compile(r"^\s*(decision|decided|rejected)\s*:\s*(.+)$", re.IGNORECASE | re.DOTALL)
_REASON_RE = re.compile(r"\s+(?:because|reason:|--|—)\s+", re.IGNORECASE)


def parse_invariant(note: str) -> Invariant | None:
    """Return the invariant a note states, or None for an ordinary note.

    Convention: ``decision: TEXT because REASON`` or ``rejected: TEXT because
    REASON`` (``reason:``, ``--`` and an em dash separate the reason too).
    """
    m = _INVARIANT_RE.match(note)
    if not m:
        return None
    kind = "rejected" if m.group(1).lower() == "rejected" else "decision"
    body = m.group(2).strip()
    parts = _REASON_RE.split(body, maxsplit=1)
    text, reason = (parts[0], parts[1]) if len(parts) == 2 else (body, "(no reason recorded)")
    return Invariant(text.strip(), reason.strip(), kind)  # type: ignore[arg-type]


def handoff_from_events(events: Sequence["Event"]) -> Handoff | None:
    """Return the newest handoff intent in a session's events, unless a forced window came after it."""
    for event in reversed(events):
        if event.kind == "rollover_intent" and event.payload:
            return handoff_from(event.payload)
        if event.kind == "rollover" and event.payload and "checkpoint" in event.payload:
            return None  # a forced window after the last handoff: the handoff is stale
    return None


def task_state(
    goal: str, timeline: Sequence["TimelineEntry"], handoff: Handoff | None, max_notes: int
) -> TaskState:
    """Return the session's task-state card (``Pager.task_state``). Pure.

    ``goal``: the pinned goals, else the original first user message (the
    caller decides). ``invariants``: pins and notes written as ``decision:
    ... because ...`` / ``rejected: ... because ...``, oldest first (pins and
    notes interleaved by creation time, so a later export only appends).
    ``next``: the first next step of ``handoff`` (the pending or latest one),
    else the first open item of the notes. Progress lines in notes (``done:
    X`` / ``- [x] X``, ``failed: X``, ``current: X`` / ``- [~] X``) make the
    progress log, the last completed step and the current step. ``notes``:
    the other notes, the newest ``max_notes``.
    """
    invariants: list[Invariant] = []
    plain: list[str] = []
    progress: list[str] = []
    current = ""
    for entry in timeline:
        if entry.kind == "pin":
            invariants.append(Invariant(entry.text, "pinned by the harness"))
            continue
        inv = parse_invariant(entry.text)
        if inv is not None:
            invariants.append(inv)
            continue
        logged = [_progress(line) for line in entry.text.splitlines() if line.strip()]
        for item in logged:
            if item is None:
                continue
            if item[0] == "current":
                current = item[1]
            else:
                progress.append(f"{item[0]}: {item[1]}")
                current = ""  # a step finished (or failed) after it: nothing is in progress now
        if not logged or any(item is None for item in logged):
            plain.append(entry.text)  # a note made only of progress lines lives in the progress log
    if handoff is not None and handoff.next_steps:
        nxt = handoff.next_steps[0]
    else:
        items = [i for i in open_items(plain) if not _IN_PROGRESS_RE.match(i)]
        nxt = items[0] if items else ""
    done = next((p[len("done: "):] for p in reversed(progress) if p.startswith("done: ")), "")
    keep = plain[-max_notes:] if max_notes else []
    return TaskState(goal=goal.strip(), invariants=tuple(invariants), next=nxt, notes=tuple(keep),
                     current=current, done=done, progress=tuple(progress))


# Progress lines: "done: X", "- [x] X", "failed: X", "current: X", "- [~] X".
_PROGRESS_RE = re.compile(
    r"^\s*(?:[-*+]\s+)?(?:(?P<done>done|completed|finished)\s*:|\[(?P<x>[xX])\]|"
    r"(?P<failed>failed|failure)\s*:|(?P<current>current|doing|now)\s*:|\[(?P<wip>~)\])\s*(?P<text>.+)$",
    re.IGNORECASE,
)
_IN_PROGRESS_RE = re.compile(r"^\s*\[~\]")


def _progress(line: str) -> tuple[str, str] | None:
    """Return ``(kind, text)`` for a progress line (kind ``done``, ``failed`` or ``current``), else None."""
    m = _PROGRESS_RE.match(line)
    if not m:
        return None
    kind = "done" if m.group("done") or m.group("x") else "failed" if m.group("failed") else "current"
    return kind, m.group("text").strip()

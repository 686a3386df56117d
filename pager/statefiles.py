"""Checkpoint files: the task-state card exported as a state directory.

Theory of operation
-------------------
A state directory holds three Markdown files whose lexical order is the
order a new session reads them in, and a write-ahead log::

    00_goal.md        written once: what the task is, what counts as done
    10_invariants.md  append-only: decisions and rejected approaches, with reasons
    99_next.md        overwritten atomically: the next step and the current notes
    .wal              one line per state transition: UTC time, git revision, transition

``00`` and ``10`` are latches. A goal already on disk is kept even if the
task state now says something else (the original intent must not drift). An
invariants file on disk that is not a prefix of what the task state renders
means an entry would be dropped or altered: ``export_state`` refuses with
``InvariantRewriteError`` and writes nothing. A rejected approach is worth
something only while it stays rejected.

``99_next.md`` is the program counter; it is replaced with write-to-temp and
``os.replace`` so a crash never leaves half a file. The WAL line is appended
first (write-ahead): if its transition is not reflected in ``99_next.md``,
the export was interrupted and can be re-run.

``resume_text`` prints what a new session reads first, as a resume script
would: the numbered files in order, then the last WAL line only —
recovery reads the tail, not the history.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import subprocess
from pathlib import Path
from typing import Callable, Literal, Sequence

import attrs



__all__ = [
    "GOAL_FILE",
    "INVARIANTS_FILE",
    "NEXT_FILE",
    "WAL_FILE",
    "Invariant",
    "InvariantRewriteError",
    "StateFileError",
    "TaskState",
    "export_state",
    "git_revision",
    "last_wal_line",
    "render_goal",
    "render_invariants",
    "render_next",
    "resume_text",
    "wal_line",
]

GOAL_FILE = "00_goal.md"
INVARIANTS_FILE = "10_invariants.md"
NEXT_FILE = "99_next.md"
WAL_FILE = ".wal"
NO_GIT = "no-git"
GIT_TIMEOUT = 5.0

InvariantKind = Literal["decision", "rejected"]
KINDS: tuple[str, ...] = ("decision", "rejected")


from pager.errors import InvariantRewriteError, StateFileError  # noqa: E402  (re-exported)


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
    """The task-state card: goal, invariants (oldest first), next step, notes."""

    goal: str
    invariants: tuple[Invariant, ...] = ()
    next: str = ""
    notes: tuple[str, ...] = ()


# --------------------------------------------------------------------------- rendering (pure)


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


def render_next(next_step: str, notes: Sequence[str] = ()) -> str:
    """Render ``99_next.md``: the next step, then the current notes."""
    body = next_step.strip() or "(not set)"
    out = f"# Next\n\n{body}\n"
    kept = [n for n in notes if n.strip()]
    if kept:
        out += "\n## Notes\n\n" + "".join(f"- {_indent(n)}\n" for n in kept)
    return out


def wal_line(transition: str, revision: str, now: _dt.datetime) -> str:
    """Render one WAL line: ``<UTC ISO time> <git short rev or no-git> <transition>``."""
    ts = now.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    what = " ".join(transition.split()) or "export"  # one line, whatever was passed
    return f"{ts} {revision} {what}\n"


# --------------------------------------------------------------------------- I/O


def git_revision(directory: Path, timeout: float = GIT_TIMEOUT) -> str:
    """Return ``git rev-parse --short HEAD`` for ``directory``, or ``"no-git"``.

    Any failure (no git binary, not a repository, no commit yet, a hang past
    ``timeout``) gives ``"no-git"``: a WAL line must never fail for it.
    """
    try:
        out = subprocess.run(
            ["git", "-C", str(directory), "rev-parse", "--short", "HEAD"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return NO_GIT
    rev = out.stdout.strip()
    if out.returncode != 0 or not re.fullmatch(r"[0-9a-f]{4,64}", rev):
        return NO_GIT
    return rev


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise StateFileError(f"cannot read {path}: {exc}") from exc


def _first_difference(a: str, b: str) -> int:
    for i, (x, y) in enumerate(zip(a.splitlines(), b.splitlines()), start=1):
        if x != y:
            return i
    return min(len(a.splitlines()), len(b.splitlines())) + 1


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def export_state(
    state: TaskState,
    directory: Path,
    *,
    transition: str,
    now: Callable[[], _dt.datetime] | None = None,
) -> list[Path]:
    """Write ``state`` into ``directory`` and log ``transition``; return the files written.

    ``00_goal.md`` is written only if absent (a different goal on disk is
    kept; an empty goal writes nothing). ``10_invariants.md`` gets the new
    entries appended. ``99_next.md`` is replaced atomically. ``.wal`` gets one
    line. Raises ``InvariantRewriteError`` — before writing anything — if the
    invariants on disk are not a prefix of ``state``'s, and
    ``StateFileError`` if ``directory`` is not a directory. ``now`` returns an
    aware datetime (default: the current UTC time).
    """
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise StateFileError(f"{directory} exists and is not a directory")
    goal_path = directory / GOAL_FILE
    inv_path = directory / INVARIANTS_FILE
    next_path = directory / NEXT_FILE
    wal_path = directory / WAL_FILE

    # Check everything before the first write, so a refusal writes nothing.
    want_inv = render_invariants(state.invariants)
    have_inv = _read(inv_path)
    if have_inv is not None and not want_inv.startswith(have_inv):
        line = _first_difference(have_inv, want_inv)
        raise InvariantRewriteError(
            f"{inv_path} is append-only and the task state would drop or alter an entry "
            f"(first difference at line {line}); pager never rewrites it. Keep the "
            "existing entries in the task state, or move the file away to start over"
        )
    write_goal = bool(state.goal.strip()) and _read(goal_path) is None
    want_next = render_next(state.next, state.notes)

    directory.mkdir(parents=True, exist_ok=True)
    clock = now or (lambda: _dt.datetime.now(_dt.timezone.utc))
    _append(wal_path, wal_line(transition, git_revision(directory), clock()))
    written = [wal_path]
    if write_goal:
        _write_atomic(goal_path, render_goal(state.goal))
        written.append(goal_path)
    if have_inv is None:
        _write_atomic(inv_path, want_inv)
        written.append(inv_path)
    elif len(want_inv) > len(have_inv):
        _append(inv_path, want_inv[len(have_inv):])
        written.append(inv_path)
    if _read(next_path) != want_next:
        _write_atomic(next_path, want_next)
        written.append(next_path)
    return written


def last_wal_line(directory: Path) -> str | None:
    """Return the last line of ``directory/.wal`` without reading the whole log, or None."""
    path = Path(directory) / WAL_FILE
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            end = f.tell()
            chunk = b""
            pos = end
            # Read backwards until the last non-empty line is whole.
            while pos > 0:
                step = min(4096, pos)
                pos -= step
                f.seek(pos)
                chunk = f.read(step) + chunk
                if chunk.rstrip(b"\n").count(b"\n") >= 1:
                    break
    except FileNotFoundError:
        return None
    lines = chunk.rstrip(b"\n").split(b"\n")
    last = lines[-1].decode("utf-8", errors="replace").strip() if lines else ""
    return last or None


def resume_text(directory: Path) -> str:
    """Return what a new session reads first: the numbered files in order, then the last WAL line."""
    directory = Path(directory)
    if not directory.is_dir():
        raise StateFileError(f"no state directory at {directory}")
    parts = []
    for path in sorted(directory.glob("[0-9][0-9]_*.md")):
        text = _read(path) or ""
        parts.append(f"===== {path.name} =====\n{text}")
        if text and not text.endswith("\n"):
            parts.append("\n")
    parts.append("===== last WAL entry =====\n")
    parts.append((last_wal_line(directory) or "(no wal yet)") + "\n")
    return "".join(parts)

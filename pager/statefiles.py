"""Checkpoint files: the task-state card written as a state directory.

Theory of operation
-------------------
A state directory holds three Markdown files whose lexical order is the
order a new session reads them in, and a write-ahead log::

    00_goal.md        written once: what the task is, what counts as done
    10_invariants.md  append-only: decisions and rejected approaches, with reasons
    99_next.md        replaced atomically: current step, last completed step, next step,
                      the progress log (done / failed) and the current notes
    .wal              one line per state transition (rotated by size into .wal.000001, ...)

``00`` and ``10`` are latches. A goal already on disk is kept even if the
task state now says something else (the original intent must not drift). An
invariants file on disk that is not a prefix of what the task state renders
means an entry would be dropped or altered: ``export_state`` refuses with
``InvariantRewriteError`` and writes nothing. A rejected approach is worth
something only while it stays rejected.

A WAL line is ``<UTC time> <git rev>[+dirty] <transition> [files=<names>
sha256=<hash>]``: the git revision (``no-git`` outside a repository, ``+dirty``
when tracked files are modified), the transition, and a content hash of the
files it changed. The line is appended *before* those files are replaced
(write-ahead): if the files on disk do not hash to the last line's hash, the
write was interrupted (or a file was changed since), and the files can be
derived again. The hash is checked on read (``damaged_files``):
``resume_text`` refuses files that do not hash to the newest hashed line
(``StateFileError`` naming them: never a resume from damaged files), and
``pager.statedir`` derives them from the store again at its next write or
reopen, the latched goal included. ``10_invariants.md`` is not re-derived: an
altered entry stays an ``InvariantRewriteError``. The hash covers the files a
line names, not the line's own text: a flipped byte in its ``files=`` or
``sha256=`` part reads as damage too (of every derived file), one elsewhere in
the line changes no file.

Every file operation goes through ``pager.stateio``: no symlink is followed,
replacements are atomic renames inside the directory.

``resume_text`` prints what a new session reads first, as a resume script
would: the numbered files in order, then the last WAL line only — recovery
reads the tail, not the history.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import re
import subprocess
from pathlib import Path
from typing import Callable, Literal, Sequence

import attrs

from pager.errors import InvariantRewriteError, StateFileError
from pager.stateio import StateDirFd

__all__ = [
    "GOAL_FILE",
    "INVARIANTS_FILE",
    "NEXT_FILE",
    "WAL_FILE",
    "Invariant",
    "InvariantRewriteError",
    "StateFileError",
    "TaskState",
    "content_hash",
    "damaged_files",
    "export_state",
    "git_revision",
    "git_state",
    "last_wal_line",
    "render_goal",
    "render_invariants",
    "render_next",
    "resume_text",
    "wal_line",
    "wal_segments",
    "write_state",
]

GOAL_FILE = "00_goal.md"
INVARIANTS_FILE = "10_invariants.md"
NEXT_FILE = "99_next.md"
WAL_FILE = ".wal"
NO_GIT = "no-git"
GIT_TIMEOUT = 5.0
DEFAULT_WAL_MAX_BYTES = 256 * 1024
_SEGMENT_RE = re.compile(r"^\.wal\.(\d{6})$")

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


def content_hash(files: Sequence[tuple[str, str]]) -> str:
    """Return the short SHA-256 of ``(name, text)`` pairs, the WAL's content address of a write."""
    h = hashlib.sha256()
    for name, text in files:
        h.update(name.encode("utf-8") + b"\0" + text.encode("utf-8") + b"\0")
    return h.hexdigest()[:16]


def wal_line(
    transition: str, revision: str, now: _dt.datetime, files: Sequence[tuple[str, str]] = ()
) -> str:
    """Render one WAL line: ``<UTC time> <rev> <transition>[ files=a,b sha256=<hash>]``."""
    ts = now.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    what = " ".join(transition.split()) or "export"  # one line, whatever was passed
    tail = ""
    if files:
        tail = f" files={','.join(n for n, _ in files)} sha256={content_hash(files)}"
    return f"{ts} {revision} {what}{tail}\n"


_HASH_RE = re.compile(r" files=(\S+) sha256=([0-9a-f]{16})$")
_LOOSE_HASH_RE = re.compile(r" files=\S+ sha256=\S*$")  # a hash tail, whether or not it still parses


def parse_wal_hash(line: str) -> tuple[tuple[str, ...], str] | None:
    """Return the (file names, hash) a WAL line records, or None for a line that changed no file."""
    m = _HASH_RE.search(line.rstrip("\n"))
    return (tuple(m.group(1).split(",")), m.group(2)) if m else None


def damaged_files(d: StateDirFd) -> tuple[str, ...]:
    """Return the files of the newest hashed WAL line if they no longer hash to it, else ``()``.

    Rotated segments are searched too. Only the newest line that hashes
    files is checkable: an older line's hash covers files a newer line has
    since changed. A line whose ``files=`` / ``sha256=`` part no longer
    parses returns the segment's name (what it hashed is unknown).
    """
    for name in reversed(wal_segments(d)):
        data = d.read_bytes(name) or b""
        for raw in reversed(data.split(b"\n")):
            line = raw.decode("utf-8", errors="replace")
            found = parse_wal_hash(line)
            if found is None and _LOOSE_HASH_RE.search(line.rstrip("\r")):
                return (name,)
            if found is not None:
                names, digest = found
                if not set(names) <= {GOAL_FILE, INVARIANTS_FILE, NEXT_FILE} or any(d.is_symlink(n) for n in names):
                    return names  # not what pager wrote (never read through a symlink)
                return () if content_hash([(n, d.read_text(n) or "") for n in names]) == digest else names
    return ()


# --------------------------------------------------------------------------- git


def _git(directory: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(
            ["git", "-C", str(directory), *args], stdin=subprocess.DEVNULL, capture_output=True,
            text=True, timeout=timeout, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None


def git_revision(directory: Path, timeout: float = GIT_TIMEOUT) -> str:
    """Return ``git rev-parse --short HEAD`` for ``directory``, or ``"no-git"``.

    Any failure (no git binary, not a repository, no commit yet, a hang past
    ``timeout``) gives ``"no-git"``: a WAL line must never fail for it.
    """
    out = _git(directory, "rev-parse", "--short", "HEAD", timeout=timeout)
    rev = out.stdout.strip() if out is not None else ""
    if out is None or out.returncode != 0 or not re.fullmatch(r"[0-9a-f]{4,64}", rev):
        return NO_GIT
    return rev


def git_state(directory: Path, timeout: float = GIT_TIMEOUT) -> str:
    """Return the short revision, with ``+dirty`` when tracked files differ from it; or ``"no-git"``."""
    rev = git_revision(directory, timeout)
    if rev == NO_GIT:
        return rev
    out = _git(directory, "status", "--porcelain", "--untracked-files=no", timeout=timeout)
    return rev + "+dirty" if out is not None and out.returncode == 0 and out.stdout.strip() else rev


# --------------------------------------------------------------------------- writing


def wal_segments(directory: Path | StateDirFd) -> list[str]:
    """Return the rotated WAL segments of a state directory, oldest first (``.wal`` itself last if present)."""
    if isinstance(directory, StateDirFd):
        names = list(directory.names())
    else:
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            return []
    out = sorted(n for n in names if _SEGMENT_RE.match(n))
    return out + ([WAL_FILE] if WAL_FILE in names else [])


def rotate_wal(d: StateDirFd, max_bytes: int) -> str | None:
    """Move ``.wal`` to the next ``.wal.NNNNNN`` when it has reached ``max_bytes``; return the segment name."""
    if max_bytes <= 0 or d.size(WAL_FILE) < max_bytes:
        return None
    numbers = [int(m.group(1)) for n in d.names() if (m := _SEGMENT_RE.match(n))]
    segment = f"{WAL_FILE}.{max(numbers, default=0) + 1:06d}"
    d.rename(WAL_FILE, segment)
    return segment


def planned_writes(
    d: StateDirFd, state: TaskState, damaged: Sequence[str] = ()
) -> list[tuple[str, str, str]]:
    """Return ``(name, how, text)`` for each file ``state`` changes; ``how`` is ``replace`` or ``append``.

    Raises ``InvariantRewriteError`` when the invariants on disk are not a
    prefix of what ``state`` renders (checked before anything is written).
    ``damaged`` files (``damaged_files``) are derived again: the goal's latch
    holds what pager wrote, not a file that no longer hashes to it; a name
    that is no state file (a WAL segment's, a garbled one) means the goal
    too. With any damage ``99_next.md`` is rewritten, so a new WAL line
    hashes the directory as it now is. The invariants are never derived
    again (an altered entry is an ``InvariantRewriteError``).
    """
    if any(n not in (GOAL_FILE, INVARIANTS_FILE, NEXT_FILE) for n in damaged):
        damaged = (GOAL_FILE, NEXT_FILE)
    elif damaged:
        damaged = (*damaged, NEXT_FILE)
    want_inv = render_invariants(state.invariants)
    have_inv = d.read_text(INVARIANTS_FILE)
    if have_inv is not None and not want_inv.startswith(have_inv):
        line = _first_difference(have_inv, want_inv)
        raise InvariantRewriteError(
            f"{d.path / INVARIANTS_FILE} is append-only and the task state would drop or alter an entry "
            f"(first difference at line {line}); pager never rewrites it. Keep the "
            "existing entries in the task state, or move the file away to start over"
        )
    out: list[tuple[str, str, str]] = []
    if state.goal.strip() and (GOAL_FILE in damaged or d.read_text(GOAL_FILE) is None):
        out.append((GOAL_FILE, "replace", render_goal(state.goal)))
    if have_inv is None:
        out.append((INVARIANTS_FILE, "replace", want_inv))
    elif len(want_inv) > len(have_inv):
        out.append((INVARIANTS_FILE, "append", want_inv[len(have_inv):]))
    want_next = render_state_next(state)
    # a symlink in 99_next.md's place is replaced by the rename, never read or written through
    have_next = None if d.is_symlink(NEXT_FILE) or NEXT_FILE in damaged else d.read_text(NEXT_FILE)
    if have_next != want_next:
        out.append((NEXT_FILE, "replace", want_next))
    return out


def write_state(
    d: StateDirFd,
    state: TaskState,
    transition: str,
    *,
    now: _dt.datetime,
    revision: str,
    wal_max_bytes: int = DEFAULT_WAL_MAX_BYTES,
    damaged: Sequence[str] = (),
) -> tuple[list[str], str]:
    """Write ``state`` into an open state directory; return (names written, the WAL line).

    Order: the WAL rotates if full, the WAL line (with the hash of the files'
    new contents) is appended, then each file is written. A crash after the
    line and before the files leaves files whose hash differs from the line's.
    """
    plan = planned_writes(d, state, damaged)
    rotated = rotate_wal(d, wal_max_bytes)
    if rotated:
        d.append(WAL_FILE, wal_line(f"rotated previous={rotated}", revision, now))
    # the hash covers each changed file's full new content, not the appended part
    full = []
    for name, how, text in plan:
        full.append((name, text if how == "replace" else (d.read_text(name) or "") + text))
    line = wal_line(transition, revision, now, full)
    d.append(WAL_FILE, line)
    for name, how, text in plan:
        if how == "append":
            d.append(name, text)
        else:
            d.replace(name, text)
    return [WAL_FILE] + [name for name, _, _ in plan], line


def _first_difference(a: str, b: str) -> int:
    for i, (x, y) in enumerate(zip(a.splitlines(), b.splitlines()), start=1):
        if x != y:
            return i
    return min(len(a.splitlines()), len(b.splitlines())) + 1


def export_state(
    state: TaskState,
    directory: Path,
    *,
    transition: str,
    now: Callable[[], _dt.datetime] | None = None,
    wal_max_bytes: int = DEFAULT_WAL_MAX_BYTES,
) -> list[Path]:
    """Write ``state`` into ``directory`` and log ``transition``; return the files written.

    ``00_goal.md`` is written only if absent (a different goal on disk is
    kept; an empty goal writes nothing). ``10_invariants.md`` gets the new
    entries appended. ``99_next.md`` is replaced atomically. ``.wal`` gets one
    line (and rotates past ``wal_max_bytes``). Raises ``InvariantRewriteError``
    — before writing anything — if the invariants on disk are not a prefix of
    ``state``'s, and ``StateFileError`` if ``directory`` is not a directory or
    a state file is a symlink. ``now`` returns an aware datetime (default: the
    current UTC time).
    """
    directory = Path(directory)
    clock = now or (lambda: _dt.datetime.now(_dt.timezone.utc))
    with StateDirFd(directory) as d:
        names, _line = write_state(
            d, state, transition, now=clock(), revision=git_state(directory), wal_max_bytes=wal_max_bytes,
            damaged=damaged_files(d),
        )
    return [directory / n for n in names]


# --------------------------------------------------------------------------- reading


def last_wal_line(directory: Path) -> str | None:
    """Return the last line of ``directory/.wal`` (never through a symlink), or None."""
    if not Path(directory).is_dir():
        return None
    with StateDirFd(directory) as d:
        data = d.read_bytes(WAL_FILE)
    if not data:
        return None
    lines = data.rstrip(b"\n").split(b"\n")
    last = lines[-1].decode("utf-8", errors="replace").strip()
    return last or None


def resume_text(directory: Path) -> str:
    """Return what a new session reads first: the numbered files in order, then the last WAL line."""
    directory = Path(directory)
    if not directory.is_dir():
        raise StateFileError(f"no state directory at {directory}")
    parts = []
    with StateDirFd(directory) as d:
        damaged = damaged_files(d)
        if damaged:
            raise StateFileError(
                f"{directory}: {', '.join(damaged)} do not hash to the last WAL line that wrote them (an "
                "interrupted write, or a file changed since): reopen the session with this state_dir, or run "
                "`pager state export STORE DIR`, to derive them from the store again"
            )
        for name in d.names():
            if not re.fullmatch(r"[0-9][0-9]_.*\.md", name) or d.is_symlink(name):
                continue
            text = d.read_text(name) or ""
            parts.append(f"===== {name} =====\n{text}")
            if text and not text.endswith("\n"):
                parts.append("\n")
        segments = wal_segments(d)
    parts.append("===== last WAL entry =====\n")
    parts.append((last_wal_line(directory) or "(no wal yet)") + "\n")
    if len(segments) > 1:
        parts.append(f"(WAL segments, oldest first: {', '.join(segments)})\n")
    return "".join(parts)

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

This module owns the directory: what a write changes (``planned_writes``, the
latches), writing it WAL-first (``write_state``, ``export_state``) and reading
it back (``resume_text``). The card and its rendering are
``pager.statecard``'s, the WAL's lines, hashes, segments and the git revision
``pager.statewal``'s; their names are importable from here too.
"""

from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path
from typing import Callable, Sequence

from pager.errors import InvariantRewriteError, StateFileError
from pager.statecard import (
    GOAL_FILE,
    INVARIANTS_FILE,
    NEXT_FILE,
    Invariant,
    TaskState,
    render_goal,
    render_invariants,
    render_next,
    render_state_next,
)
from pager.stateio import StateDirFd
from pager.statewal import (
    DEFAULT_WAL_MAX_BYTES,
    WAL_FILE,
    content_hash,
    damaged_files,
    git_revision,
    git_state,
    last_wal_line,
    parse_wal_hash,
    rotate_wal,
    wal_line,
    wal_segments,
)

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

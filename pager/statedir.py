"""The live checkpoint directory: ``pager.open(..., state_dir=DIR)`` keeps the state files current.

Theory of operation
-------------------
The store is the source of truth; the directory is its readable shadow
(``pager.statefiles`` describes the files). Every state transition of the
session — the session opening (``session-opened`` on a fresh directory,
``resume`` on a reopen), a rollover window opening, a notice, a note, a pin,
a handoff intent, a handoff committed, a rollover — is written in this
order::

    1. the store transaction commits           (the facade)
    2. one WAL line: time, git rev[+dirty], the transition, the store mark,
       the files it changes and their content hash
    3. the changed files, each replaced atomically (or appended, 10_invariants.md)

The *store mark* (``mark=p<pins>.n<notes>.e<events>``) names the store state
the line reflects. A crash between 1 and 2 leaves the store a mark ahead of
the WAL; a crash between 2 and 3 leaves files that differ from what the store
derives. Either way, the next ``open`` with the same ``state_dir`` notices it,
derives the files from the store again and logs a ``recover`` line naming the
two marks, before its ``resume`` line: after a reopen, files and store agree.

A reopened session starts from the files. The facade hands them to its
scheduler with every call (``schedulers.base.Checkpoint``: the files now,
as read back on reopen, and whether the model has seen them yet): the
paging card carries the ones read back (read once, so the prompt prefix
stays byte-stable); in rollover mode they are shown once at the tail and
every new window's card carries the latest ones, all within the L1 cap
(``pager.core.l1guard``). What the directory needs of the facade is
``CheckpointHost``.

One directory per session; writers of one directory are serialised with an
advisory lock on it.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

from pager.statefiles import (
    GOAL_FILE,
    damaged_files,
    planned_writes,
    resume_text,
    wal_segments,
    write_state,
    git_state,
)
from pager.errors import ConfigError, StateFileError
from pager.stateio import StateDirFd

if TYPE_CHECKING:  # pragma: no cover
    from pager.core.history import History
    from pager.options import Options
    from pager.statefiles import TaskState
    from pager.storage.base import Store

__all__ = ["CheckpointHost", "NullStateDir", "StateDir", "attach_state_dir", "checked_path", "store_mark"]

_MARK_RE = re.compile(r" mark=(p\d+\.n\d+\.e\d+)")


class CheckpointHost(Protocol):
    """What the checkpoint directory needs of a session (``pager.Pager`` is one)."""

    session: str
    store: "Store"
    options: "Options"  # state_dir, wal_max_bytes

    @property
    def history(self) -> "History": ...

    def pins(self) -> list[str]: ...

    def notes(self) -> list[str]: ...

    def task_state(self) -> "TaskState": ...


def store_mark(host: CheckpointHost) -> str:
    """Return the store state a WAL line reflects: pins, notes and events of the session."""
    return f"p{len(host.pins())}.n{len(host.notes())}.e{len(host.store.events(host.session))}"


def _event_transitions(kind: str, payload: Any) -> list[str]:
    """Return the WAL transitions one scheduler event stands for."""
    p = payload if isinstance(payload, dict) else {}
    if kind == "rollover":
        out = []
        if "handoff" in p:
            out.append("handoff-committed")
        out.append(f"rollover generation={p.get('generation')} reason={p.get('reason')}")
        return out
    if kind == "rollover_intent":
        return [f"handoff-intent call={p.get('call_id')}"]
    if kind == "window_opened":
        return [f"window-opened generation={p.get('generation')} id={p.get('id')} tokens_left={p.get('tokens_left')}"]
    if kind == "notice":
        if p.get("kind") == "window":
            return []  # the window_opened event that follows says it, with the window's id
        return [f"notice kind={p.get('kind')} generation={p.get('generation')}"]
    return [kind]


class NullStateDir:
    """The no-op stand-in when a session has no ``state_dir``."""

    path: Path | None = None
    text = ""
    opened = ""
    reopened = False

    def record(self, transition: str) -> None:
        return None

    def after_assemble(self, events: Sequence[tuple[str, Any]]) -> None:
        return None


class StateDir:
    """One session's live checkpoint directory. Build it with ``attach_state_dir``."""

    def __init__(
        self,
        host: CheckpointHost,
        path: str | Path,
        *,
        wal_max_bytes: int,
        clock: Callable[[], _dt.datetime] | None = None,
    ) -> None:
        self.host = host
        self.path = Path(path)
        self.wal_max_bytes = wal_max_bytes
        self.clock = clock or (lambda: _dt.datetime.now(_dt.timezone.utc))
        self.text = ""  # what a new window reads: the files in order and the last WAL line
        self.opened = ""  # the text when a reopened session opened ("" for a fresh directory)
        self.reopened = False
        self.recovered: str | None = None  # the recover line written at open, if any
        self.goal_written = False

    # -- writing ------------------------------------------------------------------------------

    def record(self, transition: str) -> list[str]:
        """Log ``transition`` and bring the files in line with the store; return the names written.

        Files that no longer hash to their WAL line (``damaged_files``) are
        derived again, latches included: the hash is checked on every write.
        """
        with StateDirFd(self.path) as d:
            fcntl.flock(d.fd, fcntl.LOCK_EX)
            try:
                names, _line = write_state(
                    d, self.host.task_state(), f"{transition} mark={store_mark(self.host)}",
                    now=self.clock(), revision=git_state(self.path), wal_max_bytes=self.wal_max_bytes,
                    damaged=damaged_files(d),
                )
                self.goal_written = self.goal_written or d.read_bytes(GOAL_FILE) is not None
            finally:
                fcntl.flock(d.fd, fcntl.LOCK_UN)
        self.text = resume_text(self.path)  # the next window's card carries the latest files
        return names

    def after_assemble(self, events: Sequence[tuple[str, Any]]) -> None:
        """Log the transitions one ``assemble`` committed (its scheduler's events), in order.

        The first call that brings turn 1 (the goal, when nothing is pinned)
        is a transition of its own when no event says so: ``00_goal.md`` is
        written then.
        """
        logged = False
        for kind, payload in events:
            for transition in _event_transitions(kind, payload):
                self.record(transition)
                logged = True
        if not self.goal_written and not logged and self.host.history.first_user is not None:
            self.goal_written = True  # tried once: an empty turn 1 must not cost a WAL line per call
            self.record("goal")

    # -- opening -------------------------------------------------------------------------------

    def last_mark(self) -> str | None:
        """Return the store mark of the newest WAL line that has one (rotated segments included)."""
        for name in reversed(wal_segments(self.path)):
            with StateDirFd(self.path) as d:
                data = d.read_text(name) or ""
            for line in reversed(data.splitlines()):
                m = _MARK_RE.search(line)
                if m:
                    return m.group(1)
        return None

    def open(self) -> bool:
        """Reconcile the files with the store and log the opening; return whether the session was reopened."""
        reopened = bool(wal_segments(self.path))
        if reopened:
            was = self.last_mark()
            now = store_mark(self.host)
            with StateDirFd(self.path) as d:
                # files that no longer hash to their WAL line are damage, not what pager wrote
                damaged = damaged_files(d)
                stale = planned_writes(d, self.host.task_state(), damaged)
            if was != now or stale:
                # a crash between the store's commit and the WAL line, or between the line and the files
                self.recovered = f"recover store={now} wal={was} files={','.join(n for n, _, _ in stale) or '-'}"
                self.record(self.recovered)
            self.record(f"resume session={self.host.session}")
        else:
            self.record(f"session-opened session={self.host.session}")
        self.reopened = reopened
        self.opened = self.text if reopened else ""
        return reopened


def checked_path(where: str | os.PathLike[str]) -> Path:
    """Return ``where`` made absolute; ``ConfigError`` for a path no file system can hold.

    Over-long paths (a component past ``NAME_MAX`` bytes or the whole past
    ``PATH_MAX``) and names that are not valid Unicode are refused up front,
    before anything is created.
    """
    path = Path(where).absolute()
    try:
        raw = os.fsencode(path)
    except UnicodeEncodeError:
        raise ConfigError(f"state_dir {str(path)[:200]!r} is not valid Unicode (a lone surrogate)") from None
    name_max, path_max = _limits(path)
    if len(raw) >= path_max:
        raise ConfigError(f"state_dir is {len(raw)} bytes long; this file system takes paths under {path_max}")
    for part in path.parts:
        if len(os.fsencode(part)) > name_max:
            raise ConfigError(f"state_dir has a {len(os.fsencode(part))}-byte name {part[:40]!r}...; this file "
                              f"system takes names of at most {name_max} bytes")
    return path


def _limits(path: Path) -> tuple[int, int]:
    """Return ``(NAME_MAX, PATH_MAX)`` for the nearest existing ancestor of ``path`` (255 / 4096 if unknown)."""
    probe = path
    while probe != probe.parent:
        try:
            if probe.is_dir():
                break
        except OSError:  # too long to even look at: its parents say what the file system takes
            pass
        probe = probe.parent
    try:
        return os.pathconf(probe, "PC_NAME_MAX"), os.pathconf(probe, "PC_PATH_MAX")
    except (OSError, ValueError, AttributeError):
        return 255, 4096


def attach_state_dir(host: CheckpointHost) -> StateDir | NullStateDir:
    """Return the live checkpoint directory of a session (a no-op without ``state_dir``).

    Opens it (reconciling after a crash, logging ``resume`` or
    ``session-opened``). ``StateFileError`` when the file system refuses
    it; the caller closes the session on any error.
    """
    where = host.options.state_dir
    if not where:
        return NullStateDir()
    try:
        # absolute now: a harness that changes directory later must not move the checkpoint files
        sd = StateDir(host, checked_path(where), wal_max_bytes=host.options.wal_max_bytes)
        sd.open()
    except OSError as exc:  # the file system refused it (permissions, a full disk): typed, with the reason
        raise StateFileError(f"cannot use state_dir {str(where)[:200]!r}: {exc.strerror or exc}") from exc
    return sd

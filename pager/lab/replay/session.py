"""Replay sessions: find, load and check session files.

A session file is JSON lines: a header object ``{"type": "session", "id": ...,
"source": ...}``, then one OpenAI chat-completions message per line. Loading
checks each message's shape (role, content, tool calls, tool call ids) and
raises ``MessageError`` naming the first bad one; a file that is not a session
at all (no header) raises ``InputError``. Pairing is not checked here: a
recorded session is what it is, and the benchmark's invariant checks report
pairing per built prompt.

``discover`` walks directories for ``*.jsonl`` and skips ``raw/`` folders,
which by convention hold the original, unconverted logs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import attrs
import orjson

from pager.formats.openai_chat import check_message
from pager.errors import InputError, MessageError

__all__ = [
    "Session",
    "discover",
    "load_session",
    "load_sessions",
    "parse_session",
]

SKIP_DIRS = frozenset({"raw", ".git", "__pycache__", "node_modules"})


@attrs.frozen(slots=True)
class Session:
    """One recorded agent session: its header and its messages, in order."""

    id: str
    header: Mapping[str, Any]
    messages: tuple[dict[str, Any], ...]
    path: str = ""

    @property
    def source(self) -> str:
        """Return the header's ``source`` (the agent that recorded it), or ``""``."""
        return str(self.header.get("source", ""))

    @property
    def n_assistant(self) -> int:
        """Return how many assistant messages the session has (calls to replay)."""
        return sum(1 for m in self.messages if m.get("role") == "assistant")


def _check_message(i: int, msg: Any) -> None:
    # the same shape rules assemble() applies; a session file holds plain dicts
    if not isinstance(msg, dict):
        raise MessageError(i, f"must be an object, got {type(msg).__name__}")
    check_message(i, msg)


def parse_session(lines: Iterable[bytes | str], *, name: str = "<session>") -> Session:
    """Parse the lines of a session file; raise ``InputError`` or ``MessageError``.

    ``name`` is used in error messages and as the id when the header has none.
    Blank lines are ignored.
    """
    header: dict[str, Any] | None = None
    messages: list[dict[str, Any]] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            if header is None:
                raise InputError(f"{name}: not a session file (line {lineno} is not JSON)") from exc
            raise MessageError(len(messages), f"{name} line {lineno}: invalid JSON: {exc}") from exc
        if header is None:
            if not isinstance(obj, dict) or obj.get("type") != "session":
                raise InputError(
                    f'{name}: not a session file (line {lineno} is not a {{"type": "session"}} header)'
                )
            header = obj
            continue
        try:
            _check_message(len(messages), obj)
        except MessageError as exc:
            raise MessageError(exc.index, f"{name} line {lineno}: {exc.reason}") from None
        messages.append(obj)
    if header is None:
        raise InputError(f"{name}: empty file, not a session")
    sid = header.get("id")
    if not isinstance(sid, str) or not sid:
        sid = Path(name).stem
    return Session(id=sid, header=header, messages=tuple(messages), path=name)


def load_session(path: str | os.PathLike[str]) -> Session:
    """Load one session file; raise ``InputError`` (not a session, unreadable) or ``MessageError``."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise InputError(f"{p}: cannot read: {exc.strerror or exc}") from exc
    try:
        return parse_session(data.splitlines(), name=str(p))
    except InputError as exc:
        # an original agent log (Claude Code, OpenAI Responses): import it (pager.lab.replay.importers)
        from pager.lab.replay.importers import chat_messages, load_native

        try:
            native = load_native(p)
        except InputError:
            raise exc from None
        return Session(id=native.id, header=dict(native.header), messages=tuple(chat_messages(native)), path=str(p))


def discover(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """Return the session files under ``paths``, sorted, without duplicates.

    A file is taken as given; a directory is searched recursively for
    ``*.jsonl``, skipping ``raw/`` (original logs) and hidden folders. A path
    that does not exist raises ``InputError``.
    """
    found: dict[Path, None] = {}
    for raw in paths:
        p = Path(raw)
        if p.is_file():
            found[p] = None
        elif p.is_dir():
            for f in _walk(p):
                found[f] = None
        else:
            raise InputError(f"{p}: no such file or directory")
    return list(found)


def _walk(root: Path) -> Iterator[Path]:
    files: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        # prune in place so os.walk does not descend into skipped folders
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")]
        files.extend(Path(dirpath, f) for f in filenames if f.endswith(".jsonl"))
    yield from sorted(files)


def load_sessions(
    paths: Sequence[str | os.PathLike[str]],
    *,
    on_skip: Callable[[Path, Exception], None] | None = None,
) -> list[Session]:
    """Load every session under ``paths``, skipping files that are not valid sessions.

    ``on_skip(path, error)`` is called for each skipped file (``InputError`` or
    ``MessageError``); by default they are skipped silently.
    """
    sessions = []
    for f in discover(paths):
        try:
            sessions.append(load_session(f))
        except InputError as exc:  # MessageError is an InputError
            if on_skip is not None:
                on_skip(f, exc)
    return sessions

"""The write-ahead log of a state directory: its lines, content hashes, segments, damage and git revision.

A WAL line is ``<UTC time> <git rev>[+dirty] <transition> [files=<names>
sha256=<hash>]`` (``wal_line``; ``git_state`` gives the revision, ``no-git``
outside a repository). ``.wal`` rotates by size into ``.wal.000001``, ...
(``rotate_wal``, ``wal_segments``). ``damaged_files`` checks the files of the
newest hashed line against its hash. Every file operation goes through
``pager.stateio``; ``pager.statefiles`` holds the theory of operation.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import re
import subprocess
from pathlib import Path
from typing import Sequence

from pager.statecard import GOAL_FILE, INVARIANTS_FILE, NEXT_FILE
from pager.stateio import StateDirFd

__all__ = [
    "DEFAULT_WAL_MAX_BYTES",
    "NO_GIT",
    "WAL_FILE",
    "content_hash",
    "damaged_files",
    "git_revision",
    "git_state",
    "last_wal_line",
    "parse_wal_hash",
    "rotate_wal",
    "wal_line",
    "wal_segments",
]

WAL_FILE = ".wal"
NO_GIT = "no-git"
GIT_TIMEOUT = 5.0
DEFAULT_WAL_MAX_BYTES = 256 * 1024
_SEGMENT_RE = re.compile(r"^\.wal\.(\d{6})$")


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


"""What the SQLite store acknowledged, kept outside its WAL: lost writes are noticed on open.

Theory of operation
-------------------
In WAL mode a committed transaction lives in ``pager.db-wal`` until a
checkpoint copies it into ``pager.db``. A WAL that is deleted or cut short
(a backup that copies ``pager.db`` alone, a cleanup script, a disk that loses
the file) takes those transactions with it, and SQLite opens the older state
without a word: a hostile campaign lost 59 of 139, then 139 of 139,
acknowledged messages that way.

So after each write transaction commits, the store records in a small sidecar
file, ``pager.acked`` (JSON, 0600, never through a symlink), the highest page
id it holds, the version of each session that transaction wrote (every write to
a session raises it) and the range of page ids it added to each. Writers of one store in
several processes merge into it under ``flock``. It is written after the
commit, never before, so a writer killed in between leaves it *behind* the
database (a loss may then go unnoticed), never ahead of it (no false alarm).
It is not fsynced: it survives a killed process, as the WAL does; after a
power loss both may be stale (``synchronous=NORMAL``).

On open the store compares: a page id or a session version the sidecar
recorded that the database no longer reaches means committed writes were
lost. The store then warns (``LostWritesWarning``, and an error in the
``pager.store`` log) naming each session, how many versions and pages it lost,
records a ``lost-writes`` event in each, and resets the sidecar to what the
database holds, so the loss is reported once. The sidecar keeps the versions of
the ``MAX_SESSIONS`` most recently written sessions and the page ranges of the
last ``MAX_RANGES`` commits: a larger loss is still noticed (by the store-wide
highest page id), its per-session page counts are then lower bounds.
"""

from __future__ import annotations

import collections
import errno
import fcntl
import logging
import os
import sqlite3
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping

import attrs
import orjson

from pager.errors import LostWritesWarning
from pager.stateio import open_private

__all__ = ["ACKED_NAME", "MAX_RANGES", "MAX_SESSIONS", "AckedMark", "LostSession", "LostWrites", "check_acked",
           "mark_acked"]

log = logging.getLogger("pager.store")

ACKED_NAME = "pager.acked"
MAX_SESSIONS = 256
MAX_RANGES = 512


def _read_data(fd: int) -> Any:
    """Return the file's JSON value ({} when empty or torn: the next commit writes it whole again)."""
    raw = b""
    while chunk := os.read(fd, 1 << 16):
        raw += chunk
    try:
        return orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        return {}


@attrs.frozen(slots=True)
class LostSession:
    """One session's lost writes: versions (writes of any kind) and pages (messages, notes, pins)."""

    session: str
    versions: int  # how many writes behind the acknowledged version
    pages: int  # its acknowledged pages (messages, notes, pins) the database no longer has
    missing: bool = False  # the session itself is not in the database any more


@attrs.frozen(slots=True)
class LostWrites:
    """What a lost or cut WAL took: pages store-wide and, per session, versions and pages."""

    pages: int  # page ids acknowledged past the database's highest one
    acknowledged_max_page: int
    store_max_page: int
    sessions: tuple[LostSession, ...]

    def describe(self) -> str:
        parts = []
        for s in self.sessions:
            what = f"session {s.session!r} " + ("is gone" if s.missing else f"lost {s.versions} write(s)")
            parts.append(what + (f", {s.pages} page(s) (messages, notes, pins)" if s.pages else ""))
        head = (f"{self.pages} acknowledged page(s) (ids {self.store_max_page + 1}..{self.acknowledged_max_page})"
                if self.pages else "acknowledged writes")
        return f"{head} are missing: " + ("; ".join(parts) if parts else "sessions unknown")


class AckedMark:
    """The sidecar of one store folder (see the module docstring)."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / ACKED_NAME
        # what this object last wrote, and the file's (inode, size, mtime) then: while no other
        # process wrote since, the next commit skips reading and parsing it again
        self._last: tuple[tuple[int, int, int], dict[str, Any]] | None = None
        # the same, as ``record`` keeps it between its own commits: the ranges already serialised
        self._mine: tuple[tuple[int, int, int], _Pieces] | None = None

    def _locked(self, fn: Callable[[dict[str, Any]], dict[str, Any] | None]) -> None:
        fd = open_private(self.path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            st = os.fstat(fd)
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            data = self._last[1] if self._last is not None and self._last[0] == key else _read_data(fd)
            new = fn(data if isinstance(data, dict) else {})
            if new is not None:
                self._last = (_write(fd, orjson.dumps(new)), new)
                self._mine = None
        finally:
            os.close(fd)  # closing releases the lock

    def read(self) -> dict[str, Any]:
        got: dict[str, Any] = {}

        def take(data: dict[str, Any]) -> None:
            got.update(data)

        try:
            self._locked(take)
        except OSError:
            return {}
        return got

    def record(self, max_page: int, versions: Mapping[str, int], ranges: Mapping[str, tuple[int, int]]) -> None:
        """Merge what a commit acknowledged: the highest page id, versions, and page id ranges per session.

        Runs after every write transaction. While no other process wrote the
        file since this object did, it is neither read nor parsed, and the
        ranges already written are not serialised again (``_Pieces``): only
        what this commit adds is (issue 23: re-encoding 512 ranges cost
        ~0.3 ms a call, on a cold cache).
        """
        try:
            fd = open_private(self.path, os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                st = os.fstat(fd)
                key = (st.st_ino, st.st_size, st.st_mtime_ns)
                mine = self._mine
                if mine is not None and mine[0] == key:
                    pieces = mine[1]
                else:
                    last = self._last
                    data = last[1] if last is not None and last[0] == key else _read_data(fd)
                    pieces = _Pieces.of(data if isinstance(data, dict) else {})
                self._mine = None  # until the file holds what ``pieces`` says
                pieces.merge(max_page, versions, ranges)
                self._mine = (_write(fd, pieces.render(time.time())), pieces)
                self._last = None
            finally:
                os.close(fd)  # closing releases the lock
        except OSError as exc:  # the mark is a safety net: a full disk must not fail the commit
            if exc.errno == errno.ELOOP:
                log.warning("%s is a symlink; pager never writes through one", self.path)

    def check(self, top: Callable[[], int], versions: Callable[[list[str]], dict[str, int]]) -> LostWrites | None:
        """Return what the database lost against the sidecar (None when nothing), and reset the sidecar.

        ``top()`` returns the database's highest page id and ``versions(names)``
        its version of each of ``names`` that exists. Both are read under the
        sidecar's lock: a writer records its commit only after it committed, so
        whatever the sidecar holds then is visible in the database, unless lost.
        """
        found: list[LostWrites] = []

        def compare(data: dict[str, Any]) -> dict[str, Any] | None:
            if not data:
                return None
            max_page = top()
            acked_max = int(data.get("max_page") or 0)
            known: dict[str, int] = data.get("versions") or {}
            pages: dict[str, int] = {}
            for a, b, name in data.get("ranges") or ():
                if int(b) > max_page:
                    pages[name] = pages.get(name, 0) + int(b) - max(int(a), max_page + 1) + 1
            have = versions(sorted(set(known) | set(pages)))
            lost = []
            for name in dict.fromkeys([*known, *pages]):
                if name not in have:
                    lost.append(LostSession(name, int(known.get(name, 0)), pages.get(name, 0), missing=True))
                elif have[name] < int(known.get(name, 0)) or pages.get(name):
                    lost.append(LostSession(name, max(0, int(known.get(name, 0)) - have[name]), pages.get(name, 0)))
            if acked_max <= max_page and not lost:
                return None
            found.append(LostWrites(max(0, acked_max - max_page), acked_max, max_page, tuple(lost)))
            # said once: from now on the database's state is the acknowledged one
            return {"v": 1, "max_page": max_page, "versions": {n: have[n] for n in known if n in have},
                    "ranges": [], "at": time.time()}

        try:
            self._locked(compare)
        except OSError:
            return None
        return found[0] if found else None


def _write(fd: int, out: bytes) -> tuple[int, int, int]:
    """Replace the file's content with ``out``; return its (inode, size, mtime) after."""
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, out)
    os.ftruncate(fd, len(out))
    st = os.fstat(fd)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class _Pieces:
    """The sidecar's content as ``AckedMark.record`` keeps it: the ranges as the JSON bytes they are written as.

    ``render`` returns exactly what ``orjson.dumps`` of the whole mapping
    returns (a test holds the two equal), so a reader cannot tell them apart.
    """

    __slots__ = ("max_page", "versions", "spans", "sizes")

    def __init__(self, max_page: int, versions: dict[str, int], spans: list[Any]) -> None:
        self.max_page = max_page
        self.versions = versions
        pieces = [orjson.dumps(s) for s in spans[-MAX_RANGES:]]
        self.spans = b",".join(pieces)  # the inside of the "ranges" array
        self.sizes = collections.deque(len(p) for p in pieces)

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> "_Pieces":
        return cls(int(data.get("max_page") or 0), dict(data.get("versions") or {}), list(data.get("ranges") or []))

    def merge(self, max_page: int, versions: Mapping[str, int], ranges: Mapping[str, tuple[int, int]]) -> None:
        known = self.versions
        for name, version in versions.items():
            old = int(known.pop(name, 0) or 0)
            known[name] = max(old, int(version))  # most recently written last
        if len(known) > MAX_SESSIONS:
            self.versions = dict(list(known.items())[-MAX_SESSIONS:])
        self.max_page = max(self.max_page, max_page)
        for name, (a, b) in ranges.items():
            piece = orjson.dumps([a, b, name])
            self.spans = self.spans + b"," + piece if self.sizes else piece
            self.sizes.append(len(piece))
        while len(self.sizes) > MAX_RANGES:
            self.spans = self.spans[self.sizes.popleft() + 1:]

    def render(self, at: float) -> bytes:
        return b"".join((b'{"v":1,"max_page":', orjson.dumps(self.max_page), b',"versions":',
                         orjson.dumps(self.versions), b',"ranges":[', self.spans, b'],"at":', orjson.dumps(at), b"}"))


def _versions(db: sqlite3.Connection, names: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in range(0, len(names), 900):
        chunk = names[i : i + 900]
        marks = ",".join("?" * len(chunk))
        out.update((n, int(v)) for n, v in db.execute(
            f"SELECT name, version FROM sessions WHERE name IN ({marks})", chunk))
    return out


def mark_acked(db: sqlite3.Connection, mark: AckedMark, touched: Mapping[str, tuple[int, int] | None],
               known: Mapping[str, int] | None = None, top: int | None = None) -> None:
    """Record what a commit that wrote ``touched`` (session -> its new page id range) acknowledged.

    ``known``: the versions the commit left, as the writer kept them (a
    session missing from it is read); ``top``: the highest page id it knows
    committed (the store's own last id; 0 when it added none: the mark keeps
    the highest it has). Without them both are read after the commit; the
    mark may then name a later writer's commit too, which is committed as well.
    """
    try:
        versions = {n: known[n] for n in touched if n in known} if known is not None else {}
        missing = [n for n in touched if n not in versions]
        if missing:
            versions.update(_versions(db, missing))
        if top is None:
            top = int(db.execute("SELECT MAX(id) FROM pages").fetchone()[0] or 0)
    except sqlite3.Error:
        return  # the commit stands; the mark only lags (it never runs ahead of the database)
    mark.record(top, versions, {n: span for n, span in touched.items() if span})


def check_acked(db: sqlite3.Connection, mark: AckedMark, where: str,
                transaction: Callable[[], Any]) -> LostWrites | None:
    """Compare the database with the mark; on a loss warn, record ``lost-writes`` events, return it."""
    lost = mark.check(lambda: int(db.execute("SELECT MAX(id) FROM pages").fetchone()[0] or 0),
                      lambda names: _versions(db, names))
    if lost is None:
        return None
    warn_lost(where, lost)
    now = time.time()
    with transaction():  # said in each session, where `pager inspect` and events show it
        for s in lost.sessions:
            db.execute("INSERT INTO events (session, kind, payload, created) VALUES (?, ?, ?, ?)",
                       (s.session, "lost-writes", orjson.dumps({
                           "versions": s.versions, "pages": s.pages, "missing": s.missing,
                           "store_pages_lost": lost.pages, "detected": now}), now))
    return lost


def warn_lost(where: str, lost: LostWrites) -> None:
    """Say it loudly: an error in the log and a ``LostWritesWarning`` the caller can catch or escalate."""
    text = f"store {where}: its write-ahead log was lost or cut short; {lost.describe()}"
    log.error("%s", text)
    warnings.warn(LostWritesWarning(text, lost), stacklevel=5)

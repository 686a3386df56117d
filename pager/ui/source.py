"""What ``pager ui`` reads: a store it cannot write to, and the store's report log, followed as it grows.

``ReadOnlyStore`` passes the ``Store`` protocol's reads and refuses every
other method, so no code path of the viewer can write; on SQLite the
connection is also switched to ``PRAGMA query_only``, so even a read method
that wrote would fail. ``ReportTail`` reads ``reports.jsonl`` (and its rotated
copies, once) and then only the bytes appended since the last poll: a viewer
polling every two seconds reads a few hundred bytes per model call.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from pager.errors import StoreError
from pager.report import ReportLog

__all__ = ["ReadOnlyStore", "ReportTail", "polite", "store_label"]


def store_label(where: str) -> str:
    """Return how to print a store: a folder as a path, a URL without its password."""
    if "://" in where:
        from urllib.parse import urlsplit

        u = urlsplit(where)
        host = u.hostname or ""
        user = f"{u.username}@" if u.username else ""
        port = f":{u.port}" if u.port else ""
        return f"{u.scheme}://{user}{host}{port}{u.path}"
    return str(Path(where))


def polite(items: Any, every: int = 32) -> Any:
    """Yield ``items``, handing the interpreter to other threads every ``every`` items.

    The viewer shares a process with the proxy: a thread computing a page
    map holds the GIL until Python's switch interval (5 ms) takes it away,
    and every model call whose thread comes back from a database read waits
    that long. Giving it up every few dozen rows keeps that wait well under
    a millisecond.
    """
    for i, item in enumerate(items):
        if i and not i % every:
            time.sleep(0)
        yield item

# the Store protocol's methods that only read (pager.storage.base.Store)
_READS = frozenset(
    "sessions has_session branches branch_page_ids load_state load_pages page_by_handle message iter_pages "
    "max_page_id count_pages pages_by_handle pool_acls notes pins timeline events setting aside_pages "
    "open_index close path".split()
)


class ReadOnlyStore:
    """A view of a ``Store`` through which nothing can be written."""

    def __init__(self, store: Any) -> None:
        self._store = store
        # the viewer's requests run in a thread pool; one SQLite connection serves them one at a time
        self._lock = threading.RLock()
        db = getattr(store, "_db", None)
        if isinstance(db, sqlite3.Connection):
            db.execute("PRAGMA query_only=ON")  # SQLite refuses any write on this connection

    def __getattr__(self, name: str) -> Any:
        if name not in _READS:
            raise StoreError(f"pager ui reads the store only; {name!r} is not a read")
        value = getattr(self._store, name)
        if not callable(value):
            return value

        def locked(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return value(*args, **kwargs)
        return locked

    def head(self, session: str) -> int:
        """Return the head branch of a session that exists (never creating one, as ``ensure_session`` would)."""
        with self._lock:
            if not self._store.has_session(session):
                raise KeyError(session)
            return int(self._store.ensure_session(session))


class ReportTail:
    """The records of a store's ``reports.jsonl``, read incrementally.

    ``poll()`` returns the records appended since the last call (all of
    them, rotated copies first, the first time). A rotation is noticed by the
    file's inode: the rest of the old file is read from its new name first.
    """

    def __init__(self, folder: str | os.PathLike[str] | None) -> None:
        self.path = Path(folder) / "reports.jsonl" if folder is not None else None
        self._inode: int | None = None
        self._offset = 0
        self._started = False
        self._lock = threading.Lock()

    def stamp(self) -> tuple[int, int]:
        """Return (size, mtime) of the log: changes whenever a record is appended."""
        try:
            st = os.stat(self.path) if self.path is not None else None
        except OSError:
            return (0, 0)
        return (st.st_size, st.st_mtime_ns) if st is not None else (0, 0)

    def poll(self) -> list[dict[str, Any]]:
        if self.path is None:
            return []
        with self._lock:
            out: list[dict[str, Any]] = []
            if not self._started:
                self._started = True
                for i in range(ReportLog.KEEP, 0, -1):  # the rotated copies, oldest first
                    out += _parse(_read(self.path.with_name(f"{self.path.name}.{i}"), 0)[0])
            try:
                st = os.stat(self.path)
            except OSError:
                return out
            if self._inode is not None and st.st_ino != self._inode:
                # rotated since the last poll: finish the old file (now .1), then start the new one
                old = self.path.with_name(f"{self.path.name}.1")
                try:
                    if os.stat(old).st_ino == self._inode:
                        out += _parse(_read(old, self._offset)[0])
                except OSError:
                    pass
                self._offset = 0
            elif st.st_size < self._offset:
                self._offset = 0  # truncated or replaced: read it again
            self._inode = st.st_ino
            data, self._offset = _read(self.path, self._offset)
            return out + _parse(data)


def _read(path: Path, offset: int) -> tuple[bytes, int]:
    """Return the complete lines of ``path`` from ``offset`` on, and the offset after them."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except OSError:
        return b"", offset
    end = data.rfind(b"\n") + 1  # a line still being written is read next time
    return data[:end], offset + end


def _parse(data: bytes) -> list[dict[str, Any]]:
    out = []
    for line in data.splitlines():
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a torn line (a crash mid-write): ReportLog's readers skip it too
        if isinstance(rec, dict) and isinstance(rec.get("session"), str):
            out.append(rec)
    return out

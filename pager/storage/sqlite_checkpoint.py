"""WAL checkpoints off the writer's path: one thread per process copies committed pages into the database.

Theory of operation
-------------------
In WAL mode a COMMIT appends the transaction's pages to ``pager.db-wal``; a
*checkpoint* copies them into ``pager.db`` so that the log can start over.
By default SQLite runs one inside the COMMIT that takes the log past 1,000
pages (``wal_autocheckpoint``): that one call copies ~4 MB and syncs the
file. Measured replaying the six conversations of
``bench/proxy_overhead.py`` in one process (issue 23): 14 of 396 COMMITs
took 5-50 ms, most of the time all of them took, and they fell on the calls
that wrote the most (a new 30-50 KB tool output), whose answers wait for
their COMMIT (``docs/integrations.md``, "Forwarded before the bookkeeping").

So a store's writer connection turns that off (``wal_autocheckpoint=0``)
and says after each COMMIT that it wrote (``Checkpoints.committed``); one
thread per process, with a connection of its own per database, runs
``PRAGMA wal_checkpoint(PASSIVE)`` once the oldest commit it has not copied
is ``DELAY`` seconds old. A passive checkpoint takes no lock a writer or a
reader waits for; what a reader's snapshot still needs stays in the log for
the next one, as with SQLite's own. ``sqlite3`` releases the interpreter
while it runs, so the copying overlaps the process's Python work.

Nothing about durability changes: a committed transaction is in the log
whoever copies it and whenever; a crash before the copy leaves it there for
the next open, as before. The log holds what ``DELAY`` seconds of commits
wrote, plus what readers hold back (as before).

Per process and per database file (device and inode), like the term numbers
(``sqlite_words``); a forked child starts its own thread and connections
(the parent's are not its to use, and a store it inherited is not either).
The last store of a file to close in a process closes the checkpointer's
connection, after any checkpoint in progress; the thread ends when no
database is left and starts again when one opens. A checkpoint that fails
(the disk full, the file gone) is logged and tried again after the next
commit; the log grows meanwhile, as it would under SQLite's own.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from pathlib import Path

__all__ = ["DELAY", "Checkpoints", "checkpoints"]

log = logging.getLogger("pager.storage")

# How long after a commit its pages are copied: commits in between are copied by the same checkpoint
# (the proxy bench commits ~100 times a second: a checkpoint per 20 of them, not one per COMMIT). Read
# when the process's checkpointer is made (its first store): a test that must see a log no checkpoint
# has touched sets it high before that.
DELAY = 0.2


class _Db:
    """One database file's checkpoints: its connection (opened on first use), its stores, its oldest uncopied commit."""

    __slots__ = ("path", "key", "users", "conn", "since", "lock", "runs")

    def __init__(self, path: Path, key: tuple[int, int]) -> None:
        self.path = path
        self.key = key  # the file's (device, inode): its entry in ``Checkpoints``
        self.users = 0
        self.conn: sqlite3.Connection | None = None
        self.since: float | None = None  # monotonic time of the oldest commit not yet copied
        self.lock = threading.Lock()  # held while a checkpoint runs: closing waits for it
        self.runs = 0  # checkpoints run (tests read it)

    def checkpoint(self) -> None:
        with self.lock:
            if self.users <= 0:
                return  # closed meanwhile
            try:
                if self.conn is None:
                    # mode=rw: a database deleted meanwhile is an error here, not a new empty file
                    self.conn = sqlite3.connect(self.path.resolve().as_uri() + "?mode=rw", uri=True,
                                                isolation_level=None, timeout=30.0, check_same_thread=False)
                self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                self.runs += 1
            except sqlite3.Error as exc:
                log.warning("store %s: background WAL checkpoint failed (tried again after the next commit): %s",
                            self.path, exc)

    def close(self) -> None:
        with self.lock:
            if self.conn is not None:
                self.conn.close()
                self.conn = None


class Checkpoints:
    """This process's checkpointer (see the module docstring): ``open`` a database, ``committed``, ``release``."""

    def __init__(self, delay: float | None = None) -> None:
        self.pid = os.getpid()
        self.delay = DELAY if delay is None else delay  # read when made: a test may set the module's
        self._cond = threading.Condition()
        self._dbs: dict[tuple[int, int], _Db] = {}
        self._thread: threading.Thread | None = None

    def open(self, path: str | os.PathLike[str]) -> _Db:
        """Register a store of database file ``path``; return the handle its commits and close pass back."""
        st = os.stat(path)
        key = (st.st_dev, st.st_ino)
        with self._cond:
            db = self._dbs.get(key)
            if db is None:
                db = self._dbs[key] = _Db(Path(path), key)
            db.users += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="pager-wal-checkpoints", daemon=True)
                self._thread.start()
            return db

    def committed(self, db: _Db) -> None:
        """Say a transaction of ``db`` committed: its pages are copied within ``delay`` seconds."""
        if os.getpid() != self.pid:
            return  # a store inherited across fork: not this process's to use (see the module docstring)
        with self._cond:
            if db.since is None and db.users > 0:
                db.since = time.monotonic()
                self._cond.notify()

    def release(self, db: _Db) -> None:
        """Say a store of ``db`` closed; the last one closes the checkpointer's connection."""
        if os.getpid() != self.pid:
            return
        with self._cond:
            db.users -= 1
            if db.users > 0:
                return
            if self._dbs.get(db.key) is db:
                del self._dbs[db.key]
            db.since = None
            self._cond.notify()
        db.close()

    def flush(self) -> None:
        """Copy every open database's committed pages now, in the caller's thread (what the thread does later)."""
        with self._cond:
            dbs = list(self._dbs.values())
            for db in dbs:
                db.since = None
            self._cond.notify()  # the thread waits again from now, with the delay as it is now
        for db in dbs:
            db.checkpoint()

    def _due(self) -> list[_Db] | None:
        """Wait (holding the condition) until some database is due; None once none is open."""
        while True:
            if not self._dbs:
                self._thread = None  # ``open`` starts another
                return None
            now = time.monotonic()
            waiting = [db.since for db in self._dbs.values() if db.since is not None]
            due = [db for db in self._dbs.values() if db.since is not None and now - db.since >= self.delay]
            if due:
                for db in due:
                    db.since = None  # a commit from now on waits for the next checkpoint
                return due
            self._cond.wait(min(waiting) + self.delay - now if waiting else None)

    def _run(self) -> None:
        while True:
            with self._cond:
                due = self._due()
            if due is None:
                return
            for db in due:
                db.checkpoint()


_checkpoints: Checkpoints | None = None
_LOCK = threading.Lock()


def checkpoints() -> Checkpoints:
    """Return this process's checkpointer (a forked child makes its own)."""
    global _checkpoints
    with _LOCK:
        if _checkpoints is None or _checkpoints.pid != os.getpid():
            _checkpoints = Checkpoints()
        return _checkpoints


def _forget_in_child() -> None:
    global _checkpoints, _LOCK
    _checkpoints = None
    _LOCK = threading.Lock()  # it may have been held by another thread at the fork


if hasattr(os, "register_at_fork"):  # POSIX; elsewhere no process forks a running interpreter
    os.register_at_fork(after_in_child=_forget_in_child)

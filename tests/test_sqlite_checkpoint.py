"""WAL checkpoints run in the process's checkpointer thread, not inside a COMMIT (``pager.storage.sqlite_checkpoint``).

A commit leaves its pages in ``pager.db-wal``; the checkpointer copies them
into ``pager.db`` ``DELAY`` seconds later. The tests read ``pager.db`` alone
(copied without its log) to see what reached it.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from pager.core.pages import NewPage
from pager.storage import sqlite_checkpoint
from pager.storage.sqlite import SQLiteStore
from pager.storage.sqlite_checkpoint import Checkpoints, checkpoints

PATIENCE = 60.0  # seconds a test waits for the thread before it fails: a liveness bound, not a timing


def _page(text: str) -> NewPage:
    return NewPage(hash=text, kind="turn", role="user", step=0, tokens=1, stub_tokens=1, chars=len(text),
                   call_id=None, call_ids=(), tool_name=None, path=None, labels=(), scope="session",
                   handle=text, message=b'{"role":"user","content":"' + text.encode() + b'"}', terms=())


def _write(store: SQLiteStore, texts: list[str], start: int = 0) -> None:
    store.ensure_session("s")
    with store.transaction():
        store.record("s", 0, None, start, [_page(t) for t in texts])


def _in_database_file(folder: Path, tmp: Path) -> int:
    """Return how many pages ``pager.db`` holds by itself: what checkpoints copied (the log is left behind)."""
    copy = tmp / f"copy{time.monotonic_ns()}"
    copy.mkdir()
    shutil.copy(folder / "pager.db", copy / "pager.db")
    db = sqlite3.connect(copy / "pager.db")
    try:
        return int(db.execute("SELECT count(*) FROM pages").fetchone()[0])
    finally:
        db.close()


def _wait(cond, what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"the checkpointer did not {what} within {PATIENCE} s")
        time.sleep(0.02)


def test_a_commit_is_copied_into_the_database_file_by_the_checkpointer_not_by_the_commit(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "ctx")
    cps = checkpoints()
    delay = cps.delay
    try:
        assert store._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        store.ensure_session("s")
        cps.flush()  # the schema and the session are in pager.db
        assert _in_database_file(tmp_path / "ctx", tmp_path) == 0
        cps.delay = 3600.0  # the thread waits: whatever reaches pager.db now, a COMMIT copied
        _write(store, [f"page {i} " + "x" * 3000 for i in range(2000)])  # ~1,500 log pages: SQLite's own would copy
        assert _in_database_file(tmp_path / "ctx", tmp_path) == 0
        runs = store._wal.runs
        cps.flush()
        assert store._wal.runs == runs + 1 and _in_database_file(tmp_path / "ctx", tmp_path) == 2000
        cps.delay = delay
        _write(store, ["one more"], start=2000)  # and the thread copies it, after its delay
        _wait(lambda: _in_database_file(tmp_path / "ctx", tmp_path) == 2001, "copy the next commit")
    finally:
        cps.delay = delay
        store.close()


def test_the_last_store_of_a_file_to_close_closes_the_checkpointer_connection(tmp_path: Path) -> None:
    a, b = SQLiteStore(tmp_path / "ctx"), SQLiteStore(tmp_path / "ctx")
    assert a._wal is b._wal and a._wal.users == 2  # one per file in a process
    _write(a, ["hello"])
    _wait(lambda: a._wal.runs > 0, "run a checkpoint")
    wal = a._wal
    a.close()
    assert wal.users == 1 and wal.conn is not None
    b.close()
    b.close()  # twice: released once
    assert wal.users == 0 and wal.conn is None
    assert all(db is not wal for db in checkpoints()._dbs.values())
    c = SQLiteStore(tmp_path / "ctx")  # opened again: a new handle, and checkpoints again
    try:
        assert c._wal is not wal
        _write(c, ["again"], start=1)
        _wait(lambda: c._wal.runs > 0, "checkpoint a reopened store")
    finally:
        c.close()


def test_the_thread_ends_when_no_database_is_open_and_starts_with_the_next(tmp_path: Path) -> None:
    cps = Checkpoints(delay=0.0)
    (tmp_path / "a").mkdir()
    path = tmp_path / "a" / "x.db"
    sqlite3.connect(path).execute("PRAGMA journal_mode=WAL").fetchall()
    db = cps.open(path)
    thread = cps._thread
    assert thread is not None and thread.is_alive()
    cps.committed(db)
    _wait(lambda: db.runs == 1, "checkpoint")
    cps.release(db)
    thread.join(PATIENCE)
    assert not thread.is_alive() and cps._thread is None
    again = cps.open(path)
    assert cps._thread is not None and cps._thread is not thread
    cps.committed(again)
    _wait(lambda: again.runs == 1, "checkpoint after a restart")
    cps.release(again)


def test_a_failed_checkpoint_is_logged_and_tried_after_the_next_commit(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database, " * 512)
    cps = Checkpoints(delay=0.0)
    db = cps.open(junk)
    try:
        with caplog.at_level(logging.WARNING, logger="pager.storage"):
            cps.committed(db)
            _wait(lambda: "background WAL checkpoint failed" in caplog.text, "log the failure")
        assert db.runs == 0
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="pager.storage"):
            cps.committed(db)
            _wait(lambda: "background WAL checkpoint failed" in caplog.text, "try again after the next commit")
    finally:
        cps.release(db)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_forked_child_checkpoints_with_its_own_thread(tmp_path: Path) -> None:
    parent = checkpoints()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's exit handlers
        code = 1
        try:
            mine = checkpoints()
            ok = mine is not parent and mine.pid == os.getpid() and not mine._dbs
            store = SQLiteStore(tmp_path / "child")
            _write(store, ["from the child"])
            deadline = time.monotonic() + PATIENCE
            while store._wal.runs == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
            ok = ok and store._wal.runs > 0
            store.close()
            code = 0 if ok else 1
        finally:
            os.write(write, bytes([code]))
            os._exit(code)
    os.close(write)
    got = os.read(read, 1)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    assert got == b"\x00" and os.WEXITSTATUS(status) == 0
    assert checkpoints() is parent  # the parent's own is untouched
    assert sqlite_checkpoint._checkpoints is parent


def test_a_store_dropped_without_close_lets_go_of_its_checkpoints(tmp_path: Path) -> None:
    import gc

    store = SQLiteStore(tmp_path / "ctx")
    _write(store, ["hello"])
    wal = store._wal
    assert wal.users == 1
    del store
    gc.collect()
    assert wal.users == 0 and wal.conn is None  # the checkpointer holds no connection to a store nobody has
    assert all(db is not wal for db in checkpoints()._dbs.values())


def test_a_database_deleted_meanwhile_is_not_created_again_by_the_checkpointer(tmp_path: Path,
                                                                                 caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "odd name %20 [x].db"  # a path a URI has to quote
    sqlite3.connect(path).execute("PRAGMA journal_mode=WAL").fetchall()
    cps = Checkpoints(delay=0.0)
    db = cps.open(path)
    try:
        cps.committed(db)
        _wait(lambda: db.runs == 1, "checkpoint a database whose path needs quoting")
        db.close()  # as if the first checkpoint had not run yet
        path.unlink()
        with caplog.at_level(logging.WARNING, logger="pager.storage"):
            cps.committed(db)
            _wait(lambda: "background WAL checkpoint failed" in caplog.text, "report the missing database")
        assert not path.exists()
    finally:
        cps.release(db)

"""The durable store: SQLite in WAL mode, one file per store folder.

Every original message is kept here byte for byte (orjson), forever; pages
are only ever demoted in the prompt, never deleted here. Writes happen in
``BEGIN IMMEDIATE`` transactions, retried while another process holds the
lock, so a process killed mid-write leaves the last committed state and the
store reopens. The schema version lives in the ``settings`` table; a store
written by a newer schema is refused with ``SchemaError`` rather than
misread.

Histories are kept as *branches*: an ordered list of page ids per branch. A
caller history that diverges from the recorded one (a rewind, an edited
message) forks a new branch that shares the common prefix; the old branch is
kept as it was.

``SQLiteStore`` and every public method are here; the tables, migrations
and row layout are in ``sqlite_schema``, the transaction and the caches
it keeps valid between commits in ``sqlite_tx`` (a mixin).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from itertools import repeat
from pathlib import Path
from typing import Any, Iterator, Sequence

import orjson

from pager.errors import StoreError
from pager.stateio import PRIVATE_DIR
from pager.storage.sqlite_snapshot import read_snapshot, write_snapshot
from pager.storage.sqlite_terms import TermVocab
from pager.storage.sqlite_checkpoint import checkpoints
from pager.storage.sqlite_words import release_words, store_words
from pager.storage.acked import AckedMark, LostWrites
# DB_NAME, SCHEMA_VERSION, STORE_FILES and PAGE_COLUMNS were defined here: still importable from here
from pager.storage.sqlite_schema import (DB_NAME, PAGE_COLUMNS, SCHEMA_VERSION, STATS_JOIN, STORE_FILES, _COLS,
                                         _DEMOTED_KEY, _private_db, _record, branch_rows, migrate, present_on,
                                         rows_columns)
from pager.storage.sqlite_tx import TransactionMixin, _translated
from pager.core.aside import ASIDE_KINDS
from pager.core.pages import PageColumns
from pager.core.pools import PoolAcl
from pager.storage.base import Branch, Event, NewPage, PageRecord, StatUpdate, TimelineEntry

__all__ = ["DB_NAME", "SCHEMA_VERSION", "SQLiteStore"]


def _into_wal(db: sqlite3.Connection) -> None:
    """Switch a new database to WAL, waiting while another process creates or switches it.

    Turning a rollback-journal database into WAL needs its exclusive lock, and SQLite answers
    "database is locked" at once rather than calling the busy handler: two processes opening a
    new store together saw it (the chaos load test, 1 run in ~20). Waits as long as a
    transaction would (``connect(timeout=30)``).
    """
    deadline = time.monotonic() + 30.0
    delay = 0.002
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


class SQLiteStore(TransactionMixin):
    """Open (creating if needed) the store in folder ``path``: ``pager.db``, WAL mode.

    Implements ``pager.storage.base.Store``; the recall index lives beside the
    database in ``index/``.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self.path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
            _private_db(self.path)
            self._db = sqlite3.connect(
                self.path / DB_NAME, isolation_level=None, timeout=30.0, check_same_thread=False
            )
            self._reader: sqlite3.Connection | None = None  # present_pages' own (see there)
            self._reader_lock = threading.Lock()
            _into_wal(self._db)
            self._db.execute("PRAGMA synchronous=NORMAL")
            # checkpoints run in this process's checkpointer thread, not inside a COMMIT (sqlite_checkpoint)
            self._db.execute("PRAGMA wal_autocheckpoint=0")
            self._checkpoints = checkpoints()
            self._wal = self._checkpoints.open(self.path / DB_NAME)
            # a store dropped without ``close`` lets go of its database's checkpoints too (once: close calls it)
            self._unwal = weakref.finalize(self, self._checkpoints.release, self._wal)
            self._db.execute("PRAGMA foreign_keys=OFF")
            self._start_caches()  # the transaction and what it knows (sqlite_tx)
            # the store's term numbers, as far as this process has read them: one copy for all its stores
            self._vocab = TermVocab(store_words(self.path / DB_NAME))
            self._released = False
            self._acked = AckedMark(self.path)
            self.lost_writes: LostWrites | None = None
            with self.transaction():
                migrate(self._db, self.path)
            self._check_acked()
        except BaseException as exc:
            self._abandon()
            if isinstance(exc, StoreError) or not isinstance(exc, (sqlite3.DatabaseError, OSError)):
                raise
            raise StoreError(f"cannot open store {self.path}: {exc}") from exc

    def _abandon(self) -> None:
        """Let go of what a failed open had taken (the connection, the share of the term numbers, the checkpoints)."""
        db = getattr(self, "_db", None)
        if db is not None:
            db.close()
        vocab = getattr(self, "_vocab", None)
        if vocab is not None:
            release_words(vocab.shared)
        unwal = getattr(self, "_unwal", None)
        if unwal is not None:
            unwal()

    def close(self) -> None:
        with self._reader_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
        self._db.close()
        if not self._released:  # closed twice: let go of the numbers once
            self._released = True
            release_words(self._vocab.shared)
        self._unwal()  # a finalizer: runs once, however often it is called

    def open_index(self) -> Any:
        """Return the Tantivy recall index kept beside the database (``index/``)."""
        from pager.storage.index import shared_index

        return shared_index(self.path / "index")

    def setting(self, key: str, default: str | None = None) -> str | None:
        row = self._db.execute("SELECT value FROM settings WHERE key=?", (key,)).fetchone()
        return row[0] if row else default

    def set_setting(self, key: str, value: str) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)", (key, value))

    # -- sessions and branches --------------------------------------------------------

    def sessions(self) -> list[str]:
        """Return session names, most recently created last."""
        return [r[0] for r in self._db.execute("SELECT name FROM sessions ORDER BY created, name")]

    def has_session(self, session: str) -> bool:
        return self._db.execute("SELECT 1 FROM sessions WHERE name=?", (session,)).fetchone() is not None

    def ensure_session(self, session: str) -> int:
        """Create the session (with an empty first branch) if needed; return its head branch."""
        row = self._db.execute("SELECT head_branch FROM sessions WHERE name=?", (session,)).fetchone()
        if row:
            return int(row[0])
        with self.transaction() as db:
            # another process may have created it since the read above: look again under the lock
            row = db.execute("SELECT head_branch FROM sessions WHERE name=?", (session,)).fetchone()
            if row:
                return int(row[0])
            now = time.time()
            cur = db.execute(
                "INSERT INTO branches (session, parent, fork_seq, created) VALUES (?, NULL, 0, ?)",
                (session, now),
            )
            branch = int(cur.lastrowid or 0)
            db.execute("INSERT INTO sessions VALUES (?, ?, ?, NULL, 0)", (session, branch, now))
            self._versions[session] = 0
        return branch

    def branches(self, session: str) -> list[Branch]:
        return [
            Branch(int(a), b, int(c))
            for a, b, c in self._db.execute(
                "SELECT id, parent, fork_seq FROM branches WHERE session=? ORDER BY id", (session,)
            )
        ]

    def branch_page_ids(self, branch: int) -> list[int]:
        return [r[0] for r in self._db.execute(
            "SELECT page FROM branch_pages WHERE branch=? ORDER BY seq", (branch,))]

    def lock_session(self, session: str) -> int:
        """Return the session's version; inside a transaction, no other writer changes it until commit.

        ``BEGIN IMMEDIATE`` already holds SQLite's write lock for the whole
        transaction, so reading is enough here. Inside one, a version this
        connection read or wrote since another connection last committed
        (``_check_seen``) is not read again.
        """
        mine = self._depth and self._tx_thread == threading.get_ident()
        if mine:
            got = self._versions.get(session)
            if got is not None:
                return got
        row = self._db.execute("SELECT version FROM sessions WHERE name=?", (session,)).fetchone()
        version = int(row[0]) if row else 0
        if mine and row:
            version += self._raises.get(session, 0)  # this transaction's raises not yet written (``_bump``)
            self._versions[session] = version
        return version

    def load_state(self, session: str) -> Any:
        row = self._db.execute("SELECT state FROM sessions WHERE name=?", (session,)).fetchone()
        state = orjson.loads(row[0]) if row and row[0] else None
        if isinstance(state, dict) and "demoted" not in state:  # kept apart (save_state); a row saved before holds it
            got = self._db.execute("SELECT value FROM settings WHERE key=?", (_DEMOTED_KEY + session,)).fetchone()
            if got is not None:
                state["demoted"] = orjson.loads(got[0])
        return state

    # -- pages ---------------------------------------------------------------------------

    def load_pages(self, ids: Sequence[int]) -> list[PageRecord]:
        """Return page records (without message bytes) for ``ids``, in that order."""
        if not ids:
            return []
        rows: dict[int, PageRecord] = {}
        for i in range(0, len(ids), 900):
            chunk = list(ids[i : i + 900])
            marks = ",".join("?" * len(chunk))
            for r in self._db.execute(f"SELECT {_COLS} FROM {STATS_JOIN} WHERE p.id IN ({marks})", chunk):
                rows[r[0]] = _record(r)
        missing = [i for i in ids if i not in rows]
        if missing:
            raise StoreError(f"store {self.path}: no page with id {missing[0]}")
        return [rows[i] for i in ids]

    def branch_columns(self, branch: int) -> PageColumns:
        """Return the pages of ``branch`` in order, as columns (``load_pages`` of its ids, without the objects).

        From the session's snapshot (``pager.core.snapshot``) when it has a
        sound one for a prefix of this branch, and from the rows for the
        pages it does not cover or whose statistics changed since; from the
        rows alone otherwise. The terms come as the store's numbers
        (``sqlite_terms``) with a ``TermTable``: no string per term. Pages
        without numbers (none once migrated) are read from their JSON.
        """
        with self._reading():
            got = self._snapshot_columns(branch)
            if got is not None:
                return got
            cols, blobs, texts = self._branch_rows(branch, 0)
            return rows_columns(self._db, self._vocab, cols, blobs, texts)

    def _branch_rows(self, branch: int, start: int) -> tuple[dict[str, Any], list[Any], list[Any]]:
        """Return the rows of ``branch`` from seq ``start`` on (``sqlite_schema.branch_rows``).

        A method so that the snapshot's reader (``read_snapshot``) and a test
        counting the rows a reopen reads both go through the store.
        """
        return branch_rows(self._db, branch, start)

    def _snapshot_columns(self, branch: int) -> PageColumns | None:
        """Return the branch's columns from its session's snapshot and the rows it does not cover (None: none)."""
        return read_snapshot(self._db, self._vocab, branch, self._branch_rows)

    def save_snapshot(self, session: str, version: int, history: Any) -> bool:
        """Keep the snapshot of ``history`` (the session's mirror, at session ``version``); return whether it did.

        Called at close (``SessionMirror.save_snapshot``); skipped when the
        store moved on since the mirror (another writer: the version
        differs). See ``sqlite_snapshot.write_snapshot``.
        """
        with self.transaction() as db:
            if self.lock_session(session) != version:
                return False
            self._moved.discard(session)  # the snapshot drops the session's mark
            return write_snapshot(db, self._vocab, session, history)

    def page_by_handle(self, session: str, handle: str) -> int | None:
        """Return the newest page id with ``handle`` in ``session`` (None when unknown)."""
        row = self._db.execute(
            "SELECT MAX(id) FROM pages WHERE handle=? AND session=?", (handle, session)
        ).fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def message(self, page_id: int) -> tuple[str, dict[str, Any]]:
        """Return ``(session, original message)`` of a page; ``StoreError`` when unknown."""
        row = self._db.execute("SELECT session, message FROM pages WHERE id=?", (page_id,)).fetchone()
        if row is None:
            raise StoreError(f"store {self.path}: no page with id {page_id}")
        return row[0], orjson.loads(row[1])

    def iter_pages(self, after_id: int = 0, batch: int = 500) -> Iterator[tuple[PageRecord, dict[str, Any]]]:
        """Yield ``(record, message)`` for every page with id > ``after_id``, in id order."""
        last = after_id
        while True:
            got = self._db.execute(
                f"SELECT {_COLS}, p.message FROM {STATS_JOIN} WHERE p.id>? ORDER BY p.id LIMIT ?", (last, batch)
            ).fetchall()
            if not got:
                return
            for r in got:
                yield _record(r[:-1]), orjson.loads(r[-1])
            last = got[-1][0]

    def page_ids_after(self, after_id: int) -> list[int]:
        """Return the ids of the pages with id > ``after_id``, ascending (the id index alone: no message read)."""
        return [r[0] for r in self._db.execute("SELECT id FROM pages WHERE id>? ORDER BY id", (after_id,))]

    def max_page_id(self) -> int:
        row = self._db.execute("SELECT MAX(id) FROM pages").fetchone()
        return int(row[0] or 0)

    def count_pages(self, session: str | None = None) -> int:
        if session is None:
            return int(self._db.execute("SELECT COUNT(*) FROM pages").fetchone()[0])
        return int(self._db.execute("SELECT COUNT(*) FROM pages WHERE session=?", (session,)).fetchone()[0])

    def record(
        self,
        session: str,
        branch: int,
        fork: tuple[int, int] | None,
        start_seq: int,
        pages: Sequence[NewPage],
    ) -> tuple[int, list[int]]:
        """Record new pages in one transaction; return ``(branch, new page ids)``.

        ``fork`` is ``(parent_branch, fork_seq)`` when the history diverged: a new
        branch is created sharing the parent's first ``fork_seq`` pages.
        """
        ids: list[int] = []
        with self.transaction() as db:
            self._bump(db, session)
            if fork is not None:
                self._run_deferred()  # the fork copies the parent's rows: those this transaction kept first
                parent, fork_seq = fork
                cur = db.execute(
                    "INSERT INTO branches (session, parent, fork_seq, created) VALUES (?, ?, ?, ?)",
                    (session, parent, fork_seq, time.time()),
                )
                branch = int(cur.lastrowid or 0)
                db.execute(
                    "INSERT INTO branch_pages SELECT ?, seq, page FROM branch_pages "
                    "WHERE branch=? AND seq<?",
                    (branch, parent, fork_seq),
                )
                db.execute("UPDATE sessions SET head_branch=? WHERE name=?", (branch, session))
            seqs = range(start_seq, start_seq + len(pages))
            # the rows wait for the end of the transaction (sqlite_tx: the proxy sends the request first)
            ids = self._insert_pages(db, session, seqs, pages, defer=True)
            rows = list(zip(repeat(branch), seqs, ids))
            self._defer(lambda d: d.executemany("INSERT INTO branch_pages VALUES (?, ?, ?)", rows))
            self._touch(session, ids)
        return branch, ids

    def record_aside(self, session: str, seq: int, pages: Sequence[NewPage]) -> list[int]:
        """Record pages outside every branch (pins, notes, handoffs); return their ids."""
        with self.transaction() as db:
            self._bump(db, session)
            ids = self._insert_pages(db, session, [seq] * len(pages), pages)
            self._touch(session, ids)
            return ids

    def aside_pages(self, session: str) -> list[int]:
        """Return the ids of the session's pins, notes and handoffs kept as pages, oldest first."""
        marks = ",".join("?" * len(ASIDE_KINDS))
        return [int(r[0]) for r in self._db.execute(
            f"SELECT id FROM pages WHERE session=? AND kind IN ({marks}) ORDER BY id", (session, *ASIDE_KINDS))]

    def pages_by_handle(self, handle: str) -> list[int]:
        """Return the ids of pages with ``handle`` in any session, newest first."""
        return [int(r[0]) for r in self._db.execute(
            "SELECT id FROM pages WHERE handle=? ORDER BY id DESC", (handle,))]

    def present_pages(self, page_ids: Sequence[int]) -> set[int]:
        """Return which of ``page_ids`` are committed pages (a recall hit without one is a phantom).

        Safe from any thread: a process shares one recall index among its
        Pagers, and the index asks the store it was bound to while that store's
        own Pager may be mid-call on its connection, so this reads on a
        connection of its own, under a lock of its own.
        """
        ids = list(page_ids)
        if self._depth and self._tx_thread == threading.get_ident():  # our own transaction: see its pages
            return present_on(self._db, ids)
        with self._reader_lock:
            if self._reader is None:
                self._reader = sqlite3.connect(self.path / DB_NAME, isolation_level=None, timeout=30.0,
                                               check_same_thread=False)
            return present_on(self._reader, ids)

    def set_scope(self, page_id: int, scope: str, pool: str | None) -> None:
        """Move a page to another scope (and pool); the page's session version rises."""
        with self.transaction() as db:
            row = db.execute("SELECT session FROM pages WHERE id=?", (page_id,)).fetchone()
            if row is None:
                raise StoreError(f"store {self.path}: no page with id {page_id}")
            db.execute("UPDATE pages SET scope=?, pool=? WHERE id=?", (scope, pool, page_id))
            self._bump(db, row[0])

    def set_pool_acl(self, pool: str, readers: Sequence[str], writers: Sequence[str]) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO pools VALUES (?, ?, ?, ?)",
                (pool, orjson.dumps(sorted(readers)).decode(), orjson.dumps(sorted(writers)).decode(), time.time()),
            )
            self._acls = None

    def pool_acls(self) -> dict[str, PoolAcl]:
        """Return every pool's ACL: read once while no other connection commits (``_check_seen``).

        A grant by another process is seen by the next call that reads
        them: outside a transaction, or in the next write transaction.
        """
        if not (self._depth and self._tx_thread == threading.get_ident()):
            self._check_seen()  # outside our transaction: a statement of its own, before the read
        acls = self._acls
        if acls is None:
            acls = {n: PoolAcl(orjson.loads(r), orjson.loads(w))
                    for n, r, w in self._db.execute("SELECT name, readers, writers FROM pools")}
            self._acls = acls
        return dict(acls)

    def update_stats(self, stats: Sequence[StatUpdate], session: str | None = None) -> None:
        """Store what later messages changed of pages: last reference, reference count, staleness.

        Into ``page_stats`` (one small row a page), not the page's own row:
        rewriting that one rewrote its message too. Their sessions are marked
        in ``snapshot_moved`` (the snapshot's statistics are then read from the
        rows at the next reopen). Given the pages' ``session``, once, while
        this connection knows it is marked (``_moved``); else looked up page
        by page.
        """
        if not stats:
            return
        rows = [(u.page_id, int(u.stale), u.last_ref, u.ref_count) for u in stats]
        with self.transaction() as db:  # the statements run at its end (sqlite_tx's ``_defer``)
            self._defer(lambda d: d.executemany("INSERT OR REPLACE INTO page_stats VALUES (?, ?, ?, ?)", rows))
            if session is None:  # one statement text whatever the number of pages: prepared once
                ids = [(pid,) for pid in dict.fromkeys(u.page_id for u in stats)]
                self._defer(lambda d: d.executemany(
                    "INSERT OR IGNORE INTO snapshot_moved SELECT session FROM pages WHERE id=?", ids))
            elif session not in self._moved:
                self._defer(lambda d: d.execute("INSERT OR IGNORE INTO snapshot_moved VALUES (?)", (session,)))
                self._moved.add(session)

    def save_state(self, session: str, state: Any) -> None:
        """Save the session's state row (pager's ``SessionState.row``: any JSON value).

        Its ``demoted`` list (every demoted page id: O(history), changed at
        rounds only) is kept apart, in the ``settings`` row
        ``demoted:<session>``, and written only when it is another list than
        the one this store last wrote for the session (``pager.session`` hands
        the same list while the set holds): a call writes a row of a few
        hundred bytes, not the whole list again (issue 23: 0.6 ms a call at
        40k ids). ``load_state`` puts it back.
        """
        with self.transaction() as db:  # the statements run at its end (sqlite_tx's ``_defer``)
            state = self._save_demoted(db, session, state)
            raises = 1 + self._raises.pop(session, 0)  # this one and those of the transaction not yet written
            row = (orjson.dumps(state), raises, session)
            self._defer(lambda d: d.execute("UPDATE sessions SET state=?, version=version+? WHERE name=?", row))
            self._raised(session, 1)

    # -- notes, pins, events --------------------------------------------------------------

    def add_note(self, session: str, text: str, step: int) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO notes (session, text, step, created) VALUES (?, ?, ?, ?)",
                (session, text, step, time.time()),
            )
            self._bump(db, session)

    def notes(self, session: str) -> list[str]:
        """Return the session's notes, oldest first."""
        return [r[0] for r in self._db.execute("SELECT text FROM notes WHERE session=? ORDER BY id", (session,))]

    def add_pin(self, session: str, text: str) -> None:
        with self.transaction() as db:
            db.execute("INSERT INTO pins (session, text, created) VALUES (?, ?, ?)", (session, text, time.time()))
            self._bump(db, session)

    def pins(self, session: str) -> list[str]:
        """Return the session's pinned goals, oldest first."""
        return [r[0] for r in self._db.execute("SELECT text FROM pins WHERE session=? ORDER BY id", (session,))]

    def timeline(self, session: str) -> list[TimelineEntry]:
        """Return the session's pins and notes in creation order (pins first on a tie)."""
        rows = self._db.execute(
            "SELECT created, 'pin', id, text FROM pins WHERE session=? "
            "UNION ALL SELECT created, 'note', id, text FROM notes WHERE session=? ORDER BY 1, 2 DESC, 3",
            (session, session),
        ).fetchall()
        return [TimelineEntry(float(c or 0.0), k, int(i), t) for c, k, i, t in rows]

    def add_event(self, session: str, kind: str, payload: Any) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO events (session, kind, payload, created) VALUES (?, ?, ?, ?)",
                (session, kind, orjson.dumps(payload), time.time()),
            )

    def events(self, session: str, kind: str | None = None) -> list[Event]:
        q = "SELECT kind, payload, created FROM events WHERE session=?"
        args: tuple[Any, ...] = (session,)
        if kind:
            q += " AND kind=?"
            args += (kind,)
        return [Event(k, orjson.loads(p) if p else None, c) for k, p, c in self._db.execute(q + " ORDER BY id", args)]


# sqlite3's errors never leave the store untranslated (transaction() translates its own)
for _name, _method in list(vars(SQLiteStore).items()):
    if callable(_method) and not _name.startswith("_") and _name not in ("transaction", "open_index"):
        setattr(SQLiteStore, _name, _translated(_method))

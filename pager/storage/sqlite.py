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
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import sys
import threading
import time
from itertools import repeat
from pathlib import Path
from typing import Any, Iterator, Sequence

import attrs
import numpy as np
import orjson

from pager.errors import SchemaError, StoreError
from pager.stateio import PRIVATE_DIR, open_private, refuse_symlinks
from pager.storage.sqlite_snapshot import SNAPSHOT_SCHEMA, read_snapshot, write_snapshot
from pager.storage.sqlite_terms import VOCAB_SCHEMA, TermVocab, decode, fill_term_ids
from pager.storage.acked import ACKED_NAME, AckedMark, LostWrites, check_acked, mark_acked
from pager.core.aside import ASIDE_KINDS
from pager.core.pages import PageColumns, page_record
from pager.core.termload import TermTable
from pager.core.pools import PoolAcl
from pager.storage.base import (
    Branch,
    Event,
    NewPage,
    PageRecord,
    StatUpdate,
    TimelineEntry,

)

__all__ = ["DB_NAME", "SCHEMA_VERSION", "SQLiteStore", "Store"]

SCHEMA_VERSION = 5
DB_NAME = "pager.db"
_BUSY_RETRIES = 50

_SCHEMA = """
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    name TEXT PRIMARY KEY, head_branch INTEGER, created REAL NOT NULL, state BLOB,
    version INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS branches (
    id INTEGER PRIMARY KEY, session TEXT NOT NULL, parent INTEGER, fork_seq INTEGER,
    created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS pages (
    id INTEGER PRIMARY KEY, session TEXT NOT NULL, hash TEXT NOT NULL, kind TEXT NOT NULL,
    role TEXT NOT NULL, seq INTEGER NOT NULL, step INTEGER NOT NULL, tokens INTEGER NOT NULL,
    stub_tokens INTEGER NOT NULL, chars INTEGER NOT NULL, call_id TEXT, call_ids TEXT,
    tool_name TEXT, path TEXT, stale INTEGER NOT NULL DEFAULT 0, labels TEXT,
    last_ref INTEGER NOT NULL, ref_count INTEGER NOT NULL DEFAULT 0,
    scope TEXT NOT NULL DEFAULT 'session', handle TEXT NOT NULL, message BLOB NOT NULL, owner TEXT,
    terms TEXT, pool TEXT, created REAL, digest TEXT, term_ids BLOB);
CREATE TABLE IF NOT EXISTS pools (name TEXT PRIMARY KEY, readers TEXT NOT NULL, writers TEXT NOT NULL,
    updated REAL NOT NULL);
CREATE INDEX IF NOT EXISTS pages_session_path ON pages(session, path);
CREATE INDEX IF NOT EXISTS pages_handle ON pages(handle);
CREATE TABLE IF NOT EXISTS branch_pages (
    branch INTEGER NOT NULL, seq INTEGER NOT NULL, page INTEGER NOT NULL,
    PRIMARY KEY (branch, seq));
CREATE TABLE IF NOT EXISTS notes (
    id INTEGER PRIMARY KEY, session TEXT NOT NULL, text TEXT NOT NULL, step INTEGER, created REAL);
CREATE TABLE IF NOT EXISTS pins (
    id INTEGER PRIMARY KEY, session TEXT NOT NULL, text TEXT NOT NULL, created REAL);
CREATE TABLE IF NOT EXISTS vocab (id INTEGER PRIMARY KEY, term TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY, session TEXT NOT NULL, kind TEXT NOT NULL, payload BLOB,
    created REAL NOT NULL);
"""

# Columns of a page row as loaded (message bytes excluded: they are read on demand).
PAGE_COLUMNS = (
    "id", "session", "hash", "kind", "role", "seq", "step", "tokens", "stub_tokens", "chars",
    "call_id", "call_ids", "tool_name", "path", "stale", "labels", "last_ref", "ref_count", "scope",
    "handle", "owner", "terms", "pool", "created", "digest",
)
_COLS = ", ".join(PAGE_COLUMNS)
_BRANCH_FIELDS = tuple(a.name for a in attrs.fields(PageColumns) if a.name not in ("terms", "term_table"))
_BRANCH_COLS = ", ".join("p." + c for c in _BRANCH_FIELDS)
# Migrations from each older schema version to the next, applied in one transaction at open.
_MIGRATIONS = {
    1: ("ALTER TABLE pages ADD COLUMN owner TEXT", "ALTER TABLE pages ADD COLUMN terms TEXT",
        "ALTER TABLE pages ADD COLUMN pool TEXT",
        "ALTER TABLE sessions ADD COLUMN version INTEGER NOT NULL DEFAULT 0"),
    # when each page was stored: a recalled page from another session is labelled with its date
    2: ("ALTER TABLE pages ADD COLUMN created REAL",),
    # the running digest of the branch, on the last page of each record (pager.core.digest); older
    # pages read NULL: a reopen matches them message by message, as before
    # and each page's terms as numbers into the store's vocab (pager.storage.sqlite_terms), filled at open
    3: ("ALTER TABLE pages ADD COLUMN digest TEXT", "ALTER TABLE pages ADD COLUMN term_ids BLOB", VOCAB_SCHEMA),
    # snapshots of each session's columns (a reopen reads one blob, not every row): tables, triggers, an index
    4: SNAPSHOT_SCHEMA,
}


# Files of the store folder that pager opens by name: never through a symlink (someone who can
# write the folder could point pager.db or reports.jsonl anywhere the agent's user may write).
STORE_FILES = (DB_NAME, DB_NAME + "-wal", DB_NAME + "-shm", "reports.jsonl", ACKED_NAME)


def _private_db(folder: Path) -> None:
    """Refuse symlinked store files; create a new ``pager.db`` 0600 (SQLite gives -wal/-shm its mode)."""
    planted = refuse_symlinks(folder, STORE_FILES)
    if planted is not None:
        raise StoreError(f"{folder / planted} is a symlink; pager never opens its store files through one")
    try:
        os.close(open_private(folder / DB_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        pass  # an existing store (or another process created it just now) keeps its mode


def _record(row: Sequence[Any]) -> PageRecord:
    return page_record(dict(zip(PAGE_COLUMNS, row)))


class SQLiteStore:
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
            self._tx_thread = 0
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=OFF")
            self._depth = 0
            self._touched: dict[str, tuple[int, int] | None] = {}  # sessions this transaction wrote
            self._vocab = TermVocab()  # the store's term numbers, as far as this process has read them
            self._demoted_saved: dict[str, Any] = {}  # session -> the demoted list save_state last wrote (committed)
            # What this connection knows of the store without reading it again (see ``_check_seen``): valid
            # while ``PRAGMA data_version`` is ``_seen`` (no other connection committed since), kept up to
            # date by this connection's own writes, forgotten on a rollback.
            self._seen: int | None = None
            self._versions: dict[str, int] = {}  # session -> its version (read or written in a write transaction)
            self._acls: dict[str, PoolAcl] | None = None  # the pools table
            self._top: int | None = None  # the highest page id
            self._raises: dict[str, int] = {}  # session -> the version raises of this transaction not yet written
            self._acked = AckedMark(self.path)
            self.lost_writes: LostWrites | None = None
            with self.transaction():
                row = self._db.execute(
                    "SELECT name FROM sqlite_master WHERE type='table' AND name='settings'"
                ).fetchone()
                version = None
                if row is not None:
                    got = self._db.execute("SELECT value FROM settings WHERE key='schema_version'").fetchone()
                    version = int(got[0]) if got else None
                if version is not None and version > SCHEMA_VERSION:
                    raise SchemaError(
                        f"{self.path / DB_NAME} has schema version {version}, this pager reads "
                        f"up to {SCHEMA_VERSION}; upgrade pager"
                    )
                if version is not None:
                    for v in range(version, SCHEMA_VERSION):
                        for stmt in _MIGRATIONS.get(v, ()):
                            self._db.execute(stmt)
                    if version < 4:
                        fill_term_ids(self._db)
                for stmt in _SCHEMA.strip().split(";"):
                    if stmt.strip():
                        self._db.execute(stmt)
                for stmt in SNAPSHOT_SCHEMA:
                    self._db.execute(stmt)
                self._db.execute(
                    "INSERT OR REPLACE INTO settings VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
                )
            self._check_acked()
        except StoreError:
            raise
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open store {self.path}: {exc}") from exc
        except OSError as exc:
            raise StoreError(f"cannot open store {self.path}: {exc}") from exc

    # -- plumbing -------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """Run a write transaction (``BEGIN IMMEDIATE``), retrying while the database is locked.

        Re-entrant: a transaction opened inside another joins it, and the
        outermost one commits (or rolls back everything).
        """
        if self._depth:
            self._depth += 1
            try:
                yield self._db
            finally:
                self._depth -= 1
            return
        for attempt in range(_BUSY_RETRIES):
            try:
                self._db.execute("BEGIN IMMEDIATE")
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise StoreError(f"store {self.path}: {exc}") from exc
                time.sleep(min(0.01 * 2**attempt, 0.5))
        else:  # pragma: no cover - needs a writer holding the lock for minutes
            raise StoreError(f"store {self.path} stayed locked; another process is writing")
        self._depth = 1
        self._tx_thread = threading.get_ident()
        self._touched.clear()
        try:
            self._vocab.begin(self._check_seen())
            yield self._db
            self._write_raises()
        except BaseException as exc:
            self._depth = 0
            self._touched.clear()
            self._rolled_back()
            self._db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.DatabaseError):
                raise StoreError(f"store {self.path}: {exc}") from exc
            raise
        else:
            self._depth = 0
            try:
                self._db.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                self._touched.clear()
                self._rolled_back()
                raise StoreError(f"store {self.path}: commit failed: {exc}") from exc
            self._vocab.committed()
            if self._touched:
                self._mark_acked()

    def _rolled_back(self) -> None:
        """Forget what this transaction wrote and every cache it may have changed (the rows are as before)."""
        self._raises.clear()
        self._vocab.rolled_back()
        self._demoted_saved.clear()  # what this transaction wrote is gone: write it again next time
        self._seen = None
        self._versions.clear()
        self._acls = None
        self._top = None

    def _check_seen(self) -> int:
        """Read ``PRAGMA data_version``; forget what this connection knew if another connection committed since.

        Other processes (and other connections of this one) write the same
        store. SQLite changes a connection's ``data_version`` whenever another
        connection commits, never for its own commits, so while it stays the
        same the session versions and the pool ACLs this connection read or
        wrote are still the store's: a steady call reads neither again
        (issue 23). Called after ``BEGIN IMMEDIATE``, when no one else can
        commit until this transaction ends, and before a read outside one.
        """
        version = int(self._db.execute("PRAGMA data_version").fetchone()[0])
        if version != self._seen:
            self._versions.clear()
            self._acls = None
            self._top = None
            self._seen = version
        return version

    # -- what was acknowledged (pager.storage.acked) ----------------------------------------

    def _touch(self, session: str, ids: Sequence[int] = ()) -> None:
        span = self._touched.get(session)
        if ids:
            lo, hi = min(ids), max(ids)
            span = (min(lo, span[0]), max(hi, span[1])) if span else (lo, hi)
        self._touched[session] = span

    def _mark_acked(self) -> None:
        """Record, after the commit, what it acknowledged (outside the WAL, so a lost WAL shows)."""
        touched, self._touched = self._touched, {}
        # each session's version as this transaction left it, and (when it added pages) the store's highest
        # page id: the write lock was held, so its own last id. Nothing read back after the commit.
        top = max((span[1] for span in touched.values() if span), default=0)
        mark_acked(self._db, self._acked, touched, dict(self._versions), top)

    def _check_acked(self) -> None:
        """Warn when the database no longer holds writes it acknowledged (a lost or cut WAL)."""
        self.lost_writes = check_acked(self._db, self._acked, str(self.path), self.transaction)

    def close(self) -> None:
        with self._reader_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
        self._db.close()

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

    def _bump(self, db: sqlite3.Connection, session: str) -> None:
        """Raise the session's version: written with the transaction's state row, or just before its commit.

        A steady call records pages and then saves the state, two raises:
        one ``UPDATE`` of the session row instead of two (``save_state``,
        ``_write_raises``). Nothing reads the row's version inside the
        transaction but ``lock_session``, which counts the raises not yet
        written; nobody outside sees it before the commit.
        """
        self._raises[session] = self._raises.get(session, 0) + 1
        self._raised(session, 1)

    def _write_raises(self) -> None:
        """Write the version raises ``save_state`` did not carry (inside the transaction, before its commit)."""
        raises, self._raises = self._raises, {}
        for session, n in raises.items():
            self._db.execute("UPDATE sessions SET version=version+? WHERE name=?", (n, session))

    def _raised(self, session: str, n: int) -> None:
        """Count a raise of the session's version by ``n`` in what this connection knows of it.

        Under the write lock nobody else raises it, so a known version is
        ``n`` more now; an unknown one stays unknown (read when asked).
        """
        known = self._versions.get(session)
        if known is not None:
            self._versions[session] = known + n
        self._touch(session)

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
            for r in self._db.execute(f"SELECT {_COLS} FROM pages WHERE id IN ({marks})", chunk):
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
            if not cols["id"]:
                return PageColumns.of([])
            self._vocab.refresh(self._db)
            vocab = self._vocab
            if None not in blobs:
                lens = np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs)) // 4
                table = TermTable(vocab.words, vocab.ids, decode(blobs), lens)
                return PageColumns(**cols, terms=table.rows(), term_table=table)
            loads, intern = orjson.loads, sys.intern
            cols["terms"] = [tuple(map(intern, loads(t))) if t is not None else
                             (tuple(map(vocab.words.__getitem__, decode((b,)).tolist())) if b is not None else None)
                             for t, b in zip(texts, blobs)]
            return PageColumns(**cols)

    def _branch_rows(self, branch: int, start: int) -> tuple[dict[str, Any], list[Any], list[Any]]:
        """Return the rows of ``branch`` from seq ``start`` on: the columns, the term number blobs, the term JSON.

        One query; the label and call lists repeat, so each distinct one is
        decoded once.
        """
        rows = self._db.execute(
            f"SELECT {_BRANCH_COLS}, p.term_ids, CASE WHEN p.term_ids IS NULL THEN p.terms END "
            "FROM branch_pages b JOIN pages p ON p.id = b.page WHERE b.branch=? AND b.seq>=? ORDER BY b.seq",
            (branch, start)).fetchall()
        if not rows:
            return {name: [] for name in _BRANCH_FIELDS}, [], []
        cols = dict(zip((*_BRANCH_FIELDS, "term_ids", "terms"), map(list, zip(*rows))))
        del rows
        for name in ("call_ids", "labels"):
            memo: dict[str, tuple[str, ...]] = {}
            for text in set(cols[name]):
                memo[text] = tuple(orjson.loads(text or "[]"))
            cols[name] = list(map(memo.__getitem__, cols[name]))
        return cols, cols.pop("term_ids"), cols.pop("terms")

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """Read in one read transaction (one consistent view across statements), unless one is open."""
        if self._depth or self._db.in_transaction:
            yield
            return
        self._db.execute("BEGIN")
        try:
            yield
        finally:
            self._db.execute("COMMIT")

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
                f"SELECT {_COLS}, message FROM pages WHERE id>? ORDER BY id LIMIT ?", (last, batch)
            ).fetchall()
            if not got:
                return
            for r in got:
                yield _record(r[:-1]), orjson.loads(r[-1])
            last = got[-1][0]

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
            ids = self._insert_pages(db, session, seqs, pages)
            db.executemany("INSERT INTO branch_pages VALUES (?, ?, ?)", zip(repeat(branch), seqs, ids))
            self._touch(session, ids)
        return branch, ids

    def record_aside(self, session: str, seq: int, pages: Sequence[NewPage]) -> list[int]:
        """Record pages outside every branch (pins, notes, handoffs); return their ids."""
        with self.transaction() as db:
            self._bump(db, session)
            ids = self._insert_pages(db, session, [seq] * len(pages), pages)
            self._touch(session, ids)
            return ids

    def _insert_pages(self, db: sqlite3.Connection, session: str, seqs: Sequence[int],
                      pages: Sequence[NewPage]) -> list[int]:
        """Insert ``pages`` (inside a write transaction) in one statement; return their ids.

        The ids are the ones SQLite would give (the highest plus one, in
        order: the write lock is held), numbered here so that one
        ``executemany`` inserts them all; the highest is read once, then
        kept while no other connection commits (``_check_seen``).
        """
        if not pages:
            return []
        top = self._top
        if top is None:
            top = int(db.execute("SELECT MAX(id) FROM pages").fetchone()[0] or 0)
        term_ids = self._vocab.encode_many(db, [p.terms for p in pages])
        db.executemany(_INSERT_PAGE, _page_rows(top + 1, session, seqs, pages, term_ids))
        self._top = top + len(pages)
        return list(range(top + 1, top + 1 + len(pages)))

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
            return self._present_on(self._db, ids)
        with self._reader_lock:
            if self._reader is None:
                self._reader = sqlite3.connect(self.path / DB_NAME, isolation_level=None, timeout=30.0,
                                               check_same_thread=False)
            return self._present_on(self._reader, ids)

    @staticmethod
    def _present_on(db: sqlite3.Connection, ids: list[int]) -> set[int]:
        out: set[int] = set()
        for i in range(0, len(ids), 900):
            chunk = ids[i : i + 900]
            marks = ",".join("?" * len(chunk))
            out.update(int(r[0]) for r in db.execute(f"SELECT id FROM pages WHERE id IN ({marks})", chunk))
        return out

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

    def update_stats(self, stats: Sequence[StatUpdate]) -> None:
        """Store what later messages changed of pages: last reference, reference count, staleness."""
        if not stats:
            return
        with self.transaction() as db:
            db.executemany(
                "UPDATE pages SET last_ref=?, ref_count=?, stale=? WHERE id=?",
                [(u.last_ref, u.ref_count, int(u.stale), u.page_id) for u in stats],
            )

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
        with self.transaction() as db:
            if isinstance(state, dict) and "demoted" in state:
                demoted = state["demoted"]
                if self._demoted_saved.get(session) is not demoted:
                    db.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)",
                               (_DEMOTED_KEY + session, orjson.dumps(demoted).decode()))
                    self._demoted_saved[session] = demoted
                state = {k: v for k, v in state.items() if k != "demoted"}
            else:
                db.execute("DELETE FROM settings WHERE key=?", (_DEMOTED_KEY + session,))
                self._demoted_saved.pop(session, None)
            raises = 1 + self._raises.pop(session, 0)  # this one and those of the transaction not yet written
            db.execute("UPDATE sessions SET state=?, version=version+? WHERE name=?",
                       (orjson.dumps(state), raises, session))
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


# The settings row that holds a session's demoted page ids, apart from its state row (``save_state``).
_DEMOTED_KEY = "demoted:"


def _translated(method: Any) -> Any:
    @functools.wraps(method)
    def call(self: SQLiteStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as exc:  # a read that hit a locked, corrupt or closed database
            raise StoreError(f"store {self.path}: {exc}") from exc

    return call


# sqlite3's errors never leave the store untranslated (transaction() translates its own)
for _name, _method in list(vars(SQLiteStore).items()):
    if callable(_method) and not _name.startswith("_") and _name not in ("transaction", "open_index"):
        setattr(SQLiteStore, _name, _translated(_method))


_INSERT_PAGE = (
    "INSERT INTO pages (id, session, hash, kind, role, seq, step, tokens, stub_tokens, chars,"
    " call_id, call_ids, tool_name, path, stale, labels, last_ref, ref_count, scope, handle,"
    " message, owner, terms, pool, created, digest, term_ids)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)


def _page_rows(first: int, session: str, seqs: Sequence[int], pages: Sequence[NewPage],
               term_ids: Sequence[bytes]) -> list[tuple[Any, ...]]:
    """Return the rows of ``pages`` for ``_INSERT_PAGE``, numbered from ``first``."""
    dumps, now = orjson.dumps, time.time()
    return [
        (
            first + k, session, p.hash, p.kind, p.role, seq, p.step, p.tokens, p.stub_tokens, p.chars, p.call_id,
            dumps(list(p.call_ids)).decode(), p.tool_name, p.path, 0, dumps(list(p.labels)).decode(),
            p.step, 0, p.scope, p.handle, p.message, p.owner, dumps(list(p.terms)).decode(), p.pool,
            now, p.digest, tid,
        )
        for k, (seq, p, tid) in enumerate(zip(seqs, pages, term_ids))
    ]

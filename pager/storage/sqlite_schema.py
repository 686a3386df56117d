"""The SQLite store's layout: its tables, their migrations, and a page row as written and as read.

``SQLiteStore`` (``pager.storage.sqlite``) runs the statements; this module
says what the rows are. The schema version lives in the ``settings`` table:
``migrate`` brings an older store up to ``SCHEMA_VERSION`` at open, in the
opening transaction, and refuses one written by a newer schema with
``SchemaError`` rather than misread it. A page is inserted as one
``_INSERT_PAGE`` row (``_page_rows``) and read back without its message
bytes (``PAGE_COLUMNS``, ``_record``), or as a branch's columns
(``branch_rows``, ``rows_columns``). A page's statistics (staleness, last
reference, reference count) change after it is recorded; the changed ones
live in ``page_stats`` (``STATS_JOIN``), a small row apart, so that
changing them does not rewrite the row that holds the whole message. Kept
apart from the store so that what a row holds is written down once, beside
the tables that hold it.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import attrs
import numpy as np
import orjson

from pager.errors import SchemaError, StoreError
from pager.stateio import open_private, refuse_symlinks
from pager.storage.sqlite_snapshot import SNAPSHOT_SCHEMA
from pager.storage.sqlite_terms import VOCAB_SCHEMA, TermVocab, decode, fill_term_ids
from pager.storage.acked import ACKED_NAME
from pager.core.pages import PageColumns, page_record
from pager.core.termload import TermTable
from pager.storage.base import NewPage, PageRecord

__all__ = [
    "DB_NAME", "PAGE_COLUMNS", "SCHEMA_VERSION", "STATS_JOIN", "STORE_FILES", "branch_rows", "migrate", "present_on",
    "rows_columns",
]

SCHEMA_VERSION = 6
DB_NAME = "pager.db"

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
CREATE TABLE IF NOT EXISTS page_stats (
    id INTEGER PRIMARY KEY, stale INTEGER NOT NULL, last_ref INTEGER NOT NULL, ref_count INTEGER NOT NULL);
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
# A page's statistics as they are now: its ``page_stats`` row once they changed (schema 6), else its own
# columns, as recorded. Every read of them goes through this join (``_col``), as ``pages p``.
STATS_JOIN = "pages p LEFT JOIN page_stats s ON s.id = p.id"
_STATS = frozenset({"stale", "last_ref", "ref_count"})


def _col(name: str) -> str:
    """Return the SQL of page column ``name`` read from ``STATS_JOIN``."""
    return f"COALESCE(s.{name}, p.{name})" if name in _STATS else "p." + name


_COLS = ", ".join(map(_col, PAGE_COLUMNS))
_BRANCH_FIELDS = tuple(a.name for a in attrs.fields(PageColumns) if a.name not in ("terms", "term_table"))
_BRANCH_COLS = ", ".join(map(_col, _BRANCH_FIELDS))
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
    # the statistics that changed since a page was recorded, in a row of their own: updating them rewrote
    # the page's row, message and all (12-20 us a page, and its pages written again at the commit; issue 23).
    # Nothing is copied: a page with no row here has the statistics its own columns hold, as before.
    5: ("CREATE TABLE IF NOT EXISTS page_stats (id INTEGER PRIMARY KEY, stale INTEGER NOT NULL,"
        " last_ref INTEGER NOT NULL, ref_count INTEGER NOT NULL)",),
}

# The settings row that holds a session's demoted page ids, apart from its state row (``save_state``).
_DEMOTED_KEY = "demoted:"


def migrate(db: sqlite3.Connection, folder: Path) -> None:
    """Create or bring up to ``SCHEMA_VERSION`` the store in ``db`` (inside the opening write transaction).

    ``SchemaError`` when a newer pager wrote it: its rows may mean what
    this one cannot read.
    """
    row = db.execute(
        "SELECT name FROM sqlite_master WHERE type='table' AND name='settings'"
    ).fetchone()
    version = None
    if row is not None:
        got = db.execute("SELECT value FROM settings WHERE key='schema_version'").fetchone()
        version = int(got[0]) if got else None
    if version is not None and version > SCHEMA_VERSION:
        raise SchemaError(
            f"{folder / DB_NAME} has schema version {version}, this pager reads "
            f"up to {SCHEMA_VERSION}; upgrade pager"
        )
    if version is not None:
        for v in range(version, SCHEMA_VERSION):
            for stmt in _MIGRATIONS.get(v, ()):
                db.execute(stmt)
        if version < 4:
            fill_term_ids(db)
    for stmt in _SCHEMA.strip().split(";"):
        if stmt.strip():
            db.execute(stmt)
    for stmt in SNAPSHOT_SCHEMA:
        db.execute(stmt)
    db.execute(
        "INSERT OR REPLACE INTO settings VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
    )


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


def branch_rows(db: sqlite3.Connection, branch: int, start: int) -> tuple[dict[str, Any], list[Any], list[Any]]:
    """Return the rows of ``branch`` from seq ``start`` on: the columns, the term number blobs, the term JSON.

    One query; the label and call lists repeat, so each distinct one is
    decoded once.
    """
    rows = db.execute(
        f"SELECT {_BRANCH_COLS}, p.term_ids, CASE WHEN p.term_ids IS NULL THEN p.terms END "
        "FROM branch_pages b JOIN pages p ON p.id = b.page LEFT JOIN page_stats s ON s.id = p.id "
        "WHERE b.branch=? AND b.seq>=? ORDER BY b.seq",
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


def rows_columns(db: sqlite3.Connection, vocab: TermVocab, cols: dict[str, Any], blobs: list[Any],
                 texts: list[Any]) -> PageColumns:
    """Return what ``branch_rows`` read as ``PageColumns``: the terms from their numbers, else their JSON.

    The numbers make a ``TermTable`` (no string per term); pages without
    numbers (none once migrated) are read from their JSON.
    """
    if not cols["id"]:
        return PageColumns.of([])
    vocab.refresh()
    if None not in blobs:
        lens = np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs)) // 4
        table = TermTable(vocab.words, vocab.ids, decode(blobs), lens)
        return PageColumns(**cols, terms=table.rows(), term_table=table)
    loads, intern = orjson.loads, sys.intern
    cols["terms"] = [tuple(map(intern, loads(t))) if t is not None else
                     (tuple(map(vocab.words.__getitem__, decode((b,)).tolist())) if b is not None else None)
                     for t, b in zip(texts, blobs)]
    return PageColumns(**cols)


def present_on(db: sqlite3.Connection, ids: list[int]) -> set[int]:
    """Return which of ``ids`` are pages in ``db`` (900 a statement: under SQLite's bound on parameters)."""
    out: set[int] = set()
    for i in range(0, len(ids), 900):
        chunk = ids[i : i + 900]
        marks = ",".join("?" * len(chunk))
        out.update(int(r[0]) for r in db.execute(f"SELECT id FROM pages WHERE id IN ({marks})", chunk))
    return out


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

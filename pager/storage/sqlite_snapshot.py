"""The SQLite store's snapshots: a session's columns as one blob, read at open instead of every page row.

``pager.core.snapshot`` encodes and decodes the blob; this module keeps it
in tables ``snapshots`` (one row a session: its head branch at the last
close) and ``vocab_snapshot`` (the store's term numbering,
``sqlite_terms``), and says when it may be trusted. A reopen
(``read_snapshot``, from ``SQLiteStore.branch_columns``) checks the blob's
SHA-256, then the branch's page ids: the snapshot serves the pages it
shares with the head branch, in order; the pages after them are read from
their rows, and so are the statistics of every page when the session is
marked in ``snapshot_moved`` (some page's last reference, reference count
or staleness changed since: ``SQLiteStore.update_stats`` marks it, and a
trigger does for a write to the statistics in a page's own row). Any other change to a page's row drops
the session's snapshot. Whatever does not hold falls back to the rows: a
snapshot is derived data, never the only copy of anything (issue 23).
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any, Callable

import attrs
import numpy as np
import orjson

from pager.core import snapshot
from pager.core.pages import PageColumns
from pager.core.termload import TermTable
from pager.storage.sqlite_terms import TermVocab, decode
from pager.storage.sqlite_words import VOCAB_SNAPSHOT_SCHEMA, save_vocab_snapshot

__all__ = ["SNAPSHOT_SCHEMA", "read_snapshot", "write_snapshot"]

_FIELDS = tuple(a.name for a in attrs.fields(PageColumns) if a.name not in ("terms", "term_table"))
_PAGE_IDS = "SELECT json_group_array(page) FROM (SELECT page FROM branch_pages WHERE branch=? ORDER BY seq)"

# The tables (schema 5): each session's head branch as one blob, written at close,
# what a reopen reads instead of every page row. Derived data: validated on open against the branch's page
# ids; a session whose pages' statistics changed since is listed in ``snapshot_moved`` (by a trigger, whoever
# changes them) and read from their rows, and so are the pages recorded after it. Any other change to a
# page's columns drops the session's snapshot.
SNAPSHOT_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS snapshots (session TEXT PRIMARY KEY, branch INTEGER NOT NULL, rows INTEGER NOT NULL,"
    " data BLOB NOT NULL, created REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS snapshot_moved (session TEXT PRIMARY KEY) WITHOUT ROWID",
    VOCAB_SNAPSHOT_SCHEMA,
    # the running digests of a session, read when a snapshot is written (one page in each record has one)
    "CREATE INDEX IF NOT EXISTS pages_digest ON pages(session) WHERE digest IS NOT NULL",
    # one row a session, written once. Since schema 6 the statistics are written to page_stats and
    # update_stats marks the session itself; this trigger still catches a write to a page's own columns
    "CREATE TRIGGER IF NOT EXISTS pages_stats_moved AFTER UPDATE OF stale, last_ref, ref_count ON pages"
    " BEGIN INSERT OR IGNORE INTO snapshot_moved VALUES (NEW.session); END",
    "CREATE TRIGGER IF NOT EXISTS pages_changed AFTER UPDATE OF id, session, hash, kind, role, step, tokens,"
    " stub_tokens, call_id, call_ids, tool_name, path, labels, handle, terms, term_ids, digest ON pages"
    " BEGIN DELETE FROM snapshots WHERE session IN (OLD.session, NEW.session); END",
    "CREATE TRIGGER IF NOT EXISTS pages_deleted AFTER DELETE ON pages"
    " BEGIN DELETE FROM snapshots WHERE session = OLD.session; END",
    "CREATE TRIGGER IF NOT EXISTS vocab_changed AFTER UPDATE ON vocab BEGIN DELETE FROM vocab_snapshot; END",
    "CREATE TRIGGER IF NOT EXISTS vocab_deleted AFTER DELETE ON vocab BEGIN DELETE FROM vocab_snapshot; END",
)


BranchRows = Callable[[int, int], "tuple[dict[str, Any], list[Any], list[Any]]"]


def read_snapshot(db: sqlite3.Connection, vocab: TermVocab, branch: int, rows_from: BranchRows) -> PageColumns | None:
    """Return the branch's columns from its session's snapshot and the rows it does not cover (None: no use).

    ``rows_from(branch, seq)`` reads the rows from ``seq`` on
    (``SQLiteStore._branch_rows``). Inside one read transaction (the caller's).
    """
    row = db.execute("SELECT s.session, s.data FROM branches b JOIN snapshots s ON s.session = b.session "
                     "WHERE b.id=?", (branch,)).fetchone()
    if row is None:
        return None
    session, data = row
    try:
        snap = snapshot.decode(data)
    except snapshot.SnapshotError:
        return None
    del data, row
    pages = np.asarray(orjson.loads(db.execute(_PAGE_IDS, (branch,)).fetchone()[0]), dtype=np.int64)
    m = min(len(pages), snap.rows)
    differ = np.flatnonzero(pages[:m] != np.asarray(snap.columns["id"][:m], dtype=np.int64))
    k = int(differ[0]) if len(differ) else m  # the branch and the snapshot share their first k pages
    if k == 0:
        return None
    snap = snap.cut(k)
    vocab.refresh()
    if snap.words > len(vocab.words):
        return None  # numbers the store does not have: not this store's snapshot
    cols = snap.columns
    if db.execute("SELECT 1 FROM snapshot_moved WHERE session=?", (session,)).fetchone():
        # statistics changed since (a process that died without closing): those of every page it covers
        cols["stale"], cols["last_ref"], cols["ref_count"] = branch_stats(db, branch, k)
    tid, lens = snap.tid, snap.lens
    if len(pages) > k:
        tail, blobs, _texts = rows_from(branch, k)
        if None in blobs or len(blobs) != len(pages) - k:
            return None  # pages without term numbers (a store not yet migrated): the rows alone
        for name in _FIELDS:
            cols[name].extend(tail[name])
        tid = np.concatenate([tid, decode(blobs)])
        lens = np.concatenate([lens, np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs)) // 4])
        vocab.refresh()
    table = TermTable(vocab.words, vocab.ids, tid, lens, snap.posted if len(pages) == k else None)
    return PageColumns(**{name: cols[name] for name in _FIELDS}, terms=table.rows(), term_table=table)


def write_snapshot(db: sqlite3.Connection, vocab: TermVocab, session: str, history: Any) -> bool:
    """Keep the snapshot of ``history`` (the session's mirror), inside the caller's write transaction.

    Skipped (False) when the mirror is not the head branch's pages. When
    statistics changed since the last snapshot (``snapshot_moved``) they are
    taken from the rows, not the mirror (the same, unless a writer other
    than a ``Pager`` changed them).
    """
    head = db.execute("SELECT head_branch FROM sessions WHERE name=?", (session,)).fetchone()
    if head is None or int(head[0]) != history.branch or not len(history.page):
        return False
    if orjson.loads(db.execute(_PAGE_IDS, (history.branch,)).fetchone()[0]) != history.page:
        return False
    vocab.refresh()
    digests = dict(db.execute("SELECT id, digest FROM pages WHERE session=? AND digest IS NOT NULL", (session,)))
    moved = db.execute("SELECT 1 FROM snapshot_moved WHERE session=?", (session,)).fetchone()
    stats = branch_stats(db, history.branch, len(history.page)) if moved else None
    blob = snapshot.history_snapshot(history, vocab.ids, len(vocab.words), digests, stats)
    db.execute("DELETE FROM snapshots WHERE session=?", (session,))
    if blob is None:
        return False
    save_vocab_snapshot(db)
    db.execute("INSERT INTO snapshots VALUES (?, ?, ?, ?, ?)",
               (session, history.branch, len(history.page), blob, time.time()))
    db.execute("DELETE FROM snapshot_moved WHERE session=?", (session,))
    return True


def branch_stats(db: sqlite3.Connection, branch: int, rows: int) -> tuple[list[bool], list[int], list[int]]:
    """Return the statistics (stale, last_ref, ref_count) of the branch's first ``rows`` pages, from their rows."""
    got = db.execute(
        "SELECT json_group_array(st), json_group_array(l), json_group_array(r) FROM (SELECT "
        "COALESCE(s.stale, p.stale) AS st, COALESCE(s.last_ref, p.last_ref) AS l, "
        "COALESCE(s.ref_count, p.ref_count) AS r FROM branch_pages b JOIN pages p ON p.id = b.page "
        "LEFT JOIN page_stats s ON s.id = p.id WHERE b.branch=? AND b.seq<? ORDER BY b.seq)",
        (branch, rows)).fetchone()
    stale, last_ref, ref_count = (orjson.loads(g) for g in got)
    return list(map(bool, stale)), last_ref, ref_count

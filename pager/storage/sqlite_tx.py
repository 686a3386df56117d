"""The SQLite store's write transactions, and what its connection knows between them.

A mixin of ``SQLiteStore`` (``pager.storage.sqlite``): it owns the
transaction (``BEGIN IMMEDIATE``, retried while another process holds the
lock; re-entrant; ``sqlite3`` errors translated to ``StoreError``) and the
per-connection caches that spare a steady call its reads (issue 23).

Theory of operation. SQLite changes a connection's ``PRAGMA data_version``
whenever another connection commits, never for its own commits. So what
this connection read or wrote (each session's version, the pool ACLs, the
highest page id) stays the store's while ``data_version`` stays ``_seen``:
``_check_seen`` forgets it all when the number moved, and ``_rolled_back``
when a transaction's writes are undone. A session's version rises at every
write to it (``_bump``); the raises are counted in ``_raises`` and written
with the transaction's state row (``save_state``) or, for those it did not
carry, just before the commit (``_write_raises``): one ``UPDATE`` of the
session row a call, not one a write. After the commit, what it acknowledged
(``_touched``: the sessions written, the page ids added) goes to the sidecar
outside the WAL (``pager.storage.acked``), so a lost WAL is noticed on open.
New pages are numbered from the highest id it knows (``_insert_pages``), and
a session's demoted list is written only when it is another list than the
one this connection last wrote (``_save_demoted``): caches of the same kind.

Writes at the end of the transaction. Inside a write transaction, a call's
own writes (its pages' rows with their term numbers, their statistics, the
state row: ``DEFERS``) are kept as statements to run (``_defer``) and run in
order just before the COMMIT, or before any other method of the store runs
(``_translated``: a read sees every write before it, and writes keep their
order; ``APART``: the methods that read none of what those write). Nothing
is read back from them: the page ids are numbered here, the version raises
counted here. So a call's request is rendered and sent on before its rows
are written (``Pager._assemble``'s ``ready``: the proxy forwards then); a
statement that fails when run rolls the whole transaction back, as it would
have where it was called.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import orjson

from pager.errors import StoreError
from pager.core.pools import PoolAcl
from pager.storage.acked import AckedMark, LostWrites, check_acked, mark_acked
from pager.storage.base import NewPage
from pager.storage.sqlite_checkpoint import Checkpoints
from pager.storage.sqlite_schema import _DEMOTED_KEY, _INSERT_PAGE, _page_rows
from pager.storage.sqlite_terms import TermVocab

__all__ = ["APART", "DEFERS", "TransactionMixin"]

_BUSY_RETRIES = 50

# The store methods whose statements wait for the end of the transaction (see the module docstring):
# what a steady call writes before its request is rendered. Every other method runs those first, but
# for the ones that read only what they never write (the pools' ACLs, which a call's recall reads).
DEFERS = frozenset({"record", "update_stats", "save_state"})
APART = frozenset({"pool_acls"})


class TransactionMixin:
    """The transactions and change detection of ``SQLiteStore``."""

    path: Path
    _db: sqlite3.Connection
    _vocab: TermVocab
    _acked: AckedMark
    _checkpoints: Checkpoints
    _wal: Any  # the database's handle in ``_checkpoints``
    lost_writes: LostWrites | None

    def _start_caches(self) -> None:
        """Start with no transaction open and nothing known of the store (read when first needed)."""
        self._tx_thread = 0
        self._depth = 0
        self._touched: dict[str, tuple[int, int] | None] = {}  # sessions this transaction wrote
        # What this connection knows of the store without reading it again (see ``_check_seen``): valid
        # while ``PRAGMA data_version`` is ``_seen`` (no other connection committed since), kept up to
        # date by this connection's own writes, forgotten on a rollback.
        self._seen: int | None = None
        self._versions: dict[str, int] = {}  # session -> its version (read or written in a write transaction)
        self._acls: dict[str, PoolAcl] | None = None  # the pools table
        self._top: int | None = None  # the highest page id
        self._raises: dict[str, int] = {}  # session -> the version raises of this transaction not yet written
        self._demoted_saved: dict[str, Any] = {}  # session -> the demoted list save_state last wrote (committed)
        self._moved: set[str] = set()  # sessions known to be in snapshot_moved (``update_stats``)
        self._deferred: list[Callable[[sqlite3.Connection], None]] = []  # statements to run before the COMMIT

    def _defer(self, write: Callable[[sqlite3.Connection], None]) -> None:
        """Run ``write(db)`` just before the open transaction's COMMIT, or before the store's next other method.

        Called inside ``transaction()``, on its thread.
        """
        self._deferred.append(write)

    def _run_deferred(self) -> None:
        """Run the statements ``_defer`` kept, in order (a failure leaves the rest to the rollback)."""
        writes, self._deferred = self._deferred, []
        for write in writes:
            write(self._db)

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
            self._check_seen()
            self._vocab.begin()
            yield self._db
            self._run_deferred()
            self._write_raises()
            self._vocab.write(self._db)
        except BaseException as exc:
            self._depth = 0
            self._touched.clear()
            self._deferred = []  # unwritten: the rollback undoes the rest of the transaction
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
            self._checkpoints.committed(self._wal)  # its pages reach the database file in the background
            if self._touched:
                self._mark_acked()

    def _rolled_back(self) -> None:
        """Forget what this transaction wrote and every cache it may have changed (the rows are as before)."""
        self._raises.clear()
        self._vocab.rolled_back()
        self._demoted_saved.clear()  # what this transaction wrote is gone: write it again next time
        self._moved.clear()
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
            self._moved.clear()  # another connection's snapshot may have dropped a mark
            self._acls = None
            self._top = None
            self._seen = version
        return version

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

    # -- session versions ---------------------------------------------------------------

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

    # -- page ids and the demoted list: written knowing what this connection wrote ------------

    def _insert_pages(self, db: sqlite3.Connection, session: str, seqs: Sequence[int],
                      pages: Sequence[NewPage], *, defer: bool = False) -> list[int]:
        """Insert ``pages`` (inside a write transaction) in one statement; return their ids.

        The ids are the ones SQLite would give (the highest plus one, in
        order: the write lock is held), numbered here so that one
        ``executemany`` inserts them all; the highest is read once, then
        kept while no other connection commits (``_check_seen``). ``defer``:
        the insert, and the numbering of the pages' terms, wait for the end
        of the transaction (``_defer``).
        """
        if not pages:
            return []
        top = self._top
        if top is None:
            top = int(db.execute("SELECT MAX(id) FROM pages").fetchone()[0] or 0)
        self._top = top + len(pages)
        seqs, pages = list(seqs), list(pages)

        def insert(db: sqlite3.Connection) -> None:
            term_ids = self._vocab.encode_many(db, [p.terms for p in pages])
            db.executemany(_INSERT_PAGE, _page_rows(top + 1, session, seqs, pages, term_ids))

        if defer:
            self._defer(insert)
        else:
            insert(db)
        return list(range(top + 1, top + 1 + len(pages)))

    def _save_demoted(self, db: sqlite3.Connection, session: str, state: Any) -> Any:
        """Write the ``demoted`` list of ``state`` apart if it is another list than the last written; return the rest.

        The statement waits for the end of the transaction (``_defer``), as ``save_state``'s own.

        See ``SQLiteStore.save_state``. A state without one drops the row.
        """
        if isinstance(state, dict) and "demoted" in state:
            demoted = state["demoted"]
            if self._demoted_saved.get(session) is not demoted:
                row = (_DEMOTED_KEY + session, orjson.dumps(demoted).decode())
                self._defer(lambda d: d.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)", row))
                self._demoted_saved[session] = demoted
            return {k: v for k, v in state.items() if k != "demoted"}
        key = (_DEMOTED_KEY + session,)
        self._defer(lambda d: d.execute("DELETE FROM settings WHERE key=?", key))
        self._demoted_saved.pop(session, None)
        return state


def _translated(method: Any) -> Any:
    """Wrap a store method so that a ``sqlite3`` error leaves it as ``StoreError`` (the boundary's rule).

    A method not in ``DEFERS`` or ``APART`` first runs the statements deferred on its thread's open transaction.
    """
    defers = method.__name__ in DEFERS or method.__name__ in APART

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            if self._deferred and not defers and self._tx_thread == threading.get_ident():
                self._run_deferred()
            return method(self, *args, **kwargs)
        except sqlite3.Error as exc:  # a read that hit a locked, corrupt or closed database
            raise StoreError(f"store {self.path}: {exc}") from exc

    return call

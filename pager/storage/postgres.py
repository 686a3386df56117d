"""The PostgreSQL store: one database shared by many processes, threads and hosts.

Theory of operation
-------------------
A ``PostgresStore`` holds a ``psycopg_pool.ConnectionPool``. Connections run
in autocommit; ``transaction()`` checks one out for the calling thread and
opens a transaction on it, and every store call made by that thread inside it
joins it (re-entrant, per thread), so one ``assemble`` commits or rolls back
as a whole. Calls outside a transaction borrow a connection for one statement
(reads) or run in a transaction of their own (writes), retried on a deadlock
or serialization failure, which PostgreSQL resolves by aborting one side.

Page ids come from an identity column: unique and growing with insertion
order, but *not* with commit order (a transaction that took id 10 may commit
after one that took id 11). Whoever follows the store page by page (a per-host
index, a replica) reads the change feed instead: ``pager_feed.seq`` is
assigned at commit, under a transaction-scoped advisory lock held through the
commit, so feed numbers become visible in order and a reader that has seen
``seq = n`` has seen every page with a smaller one (``changes``).

Every statement is parameterised; the only SQL built from strings is fixed
column lists. Schema changes are numbered migrations applied in order under
an advisory lock (two processes opening a fresh database do not race); a
database migrated by a newer pager is refused with ``SchemaError``.

Every page row carries ``owner`` and ``scope`` (pools and their ACL build on them).
The recall index of record lives in the same rows: the ``tsv`` column, written
with the page in ``record`` and searched by ``pager.storage.pg_index.PgIndex``.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import threading
import time
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

import orjson

from pager.errors import ConfigError, SchemaError, StoreError
from pager.storage.base import Branch, Event, NewPage, PageRecord, StatUpdate, TimelineEntry

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the PostgreSQL store needs psycopg 3 and its pool: pip install 'pager[postgres]'"
    ) from exc

__all__ = ["SCHEMA_VERSION", "PostgresStore", "open_store"]

SCHEMA_VERSION = 2
# Recall indexes open_index() can give: the database's own full-text index of
# record, or a per-process Tantivy index following the change feed.
INDEXES = ("postgres", "tantivy")
_RETRIES = 8
_RECENT_MAX = 100_000
_T = TypeVar("_T")

# Numbered migrations: a database at version n runs n+1, n+2, ... in one transaction.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE pager_sessions (
            name TEXT PRIMARY KEY, head_branch BIGINT NOT NULL, created DOUBLE PRECISION NOT NULL,
            state BYTEA)""",
        """CREATE TABLE pager_branches (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, session TEXT NOT NULL, parent BIGINT,
            fork_seq INTEGER NOT NULL, created DOUBLE PRECISION NOT NULL)""",
        "CREATE INDEX pager_branches_session ON pager_branches (session, id)",
        """CREATE TABLE pager_pages (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, session TEXT NOT NULL,
            hash TEXT NOT NULL, kind TEXT NOT NULL, role TEXT NOT NULL, seq INTEGER NOT NULL,
            step INTEGER NOT NULL, tokens INTEGER NOT NULL, stub_tokens INTEGER NOT NULL,
            chars INTEGER NOT NULL, call_id TEXT, call_ids TEXT[] NOT NULL DEFAULT '{}',
            tool_name TEXT, path TEXT, stale BOOLEAN NOT NULL DEFAULT false,
            labels TEXT[] NOT NULL DEFAULT '{}', last_ref INTEGER NOT NULL,
            ref_count INTEGER NOT NULL DEFAULT 0, scope TEXT NOT NULL DEFAULT 'session', owner TEXT,
            handle TEXT NOT NULL, message BYTEA NOT NULL, tsv TSVECTOR)""",
        "CREATE INDEX pager_pages_session ON pager_pages (session, id)",
        "CREATE INDEX pager_pages_handle ON pager_pages (handle, session)",
        "CREATE INDEX pager_pages_owner ON pager_pages (owner) WHERE owner IS NOT NULL",
        "CREATE INDEX pager_pages_shared ON pager_pages (id) WHERE scope = 'shared'",
        "CREATE INDEX pager_pages_tsv ON pager_pages USING GIN (tsv)",
        "CREATE INDEX pager_pages_unindexed ON pager_pages (id) WHERE tsv IS NULL",
        """CREATE TABLE pager_branch_pages (
            branch BIGINT NOT NULL, seq INTEGER NOT NULL, page BIGINT NOT NULL,
            PRIMARY KEY (branch, seq))""",
        "CREATE SEQUENCE pager_feed_seq",
        "CREATE TABLE pager_feed (seq BIGINT PRIMARY KEY, page BIGINT NOT NULL)",
        """CREATE TABLE pager_notes (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, session TEXT NOT NULL,
            text TEXT NOT NULL, step INTEGER, created DOUBLE PRECISION NOT NULL)""",
        "CREATE INDEX pager_notes_session ON pager_notes (session, id)",
        """CREATE TABLE pager_pins (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, session TEXT NOT NULL,
            text TEXT NOT NULL, created DOUBLE PRECISION NOT NULL)""",
        "CREATE INDEX pager_pins_session ON pager_pins (session, id)",
        """CREATE TABLE pager_events (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, session TEXT NOT NULL,
            kind TEXT NOT NULL, payload BYTEA, created DOUBLE PRECISION NOT NULL)""",
        "CREATE INDEX pager_events_session ON pager_events (session, id)",
    ),
    # every write to a session raises its version (Store.lock_session)
    2: ("ALTER TABLE pager_sessions ADD COLUMN version BIGINT NOT NULL DEFAULT 0",),
}
_BUMP = "UPDATE pager_sessions SET version = version + 1 WHERE name = %s"

_PAGE_COLS = (
    "id, session, hash, kind, role, seq, step, tokens, stub_tokens, chars, call_id, call_ids, "
    "tool_name, path, stale, labels, last_ref, ref_count, scope, handle, owner"
)
_INSERT_PAGE = (
    "INSERT INTO pager_pages (session, hash, kind, role, seq, step, tokens, stub_tokens, chars, call_id,"
    " call_ids, tool_name, path, labels, last_ref, scope, owner, handle, message, tsv)"
    " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s::tsvector) RETURNING id"
)
# SQLSTATEs PostgreSQL resolves by aborting one transaction: retrying it is the cure.
_RETRYABLE = ("40001", "40P01")


def _lock_key(*parts: str) -> int:
    """Return a signed 64-bit advisory-lock key for ``parts``."""
    digest = hashlib.blake2b("\0".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _translate(exc: BaseException, what: str) -> StoreError:
    if isinstance(exc, PoolTimeout):
        return StoreError(f"PostgreSQL store: {what}: no connection free in the pool ({exc})")
    return StoreError(f"PostgreSQL store: {what}: {exc}")


class PostgresStore:
    """Open the store in the PostgreSQL database at ``dsn`` (creating its tables if needed).

    ``index`` picks what ``open_index`` returns (see ``INDEXES``).
    ``min_size`` / ``max_size`` bound the connection pool: one connection per
    thread that writes at once is enough (a transaction holds one for its
    length). ``timeout`` is how long a caller waits for a free connection.
    Tables live in the connection's ``search_path`` schema (``public``
    unless the DSN says ``options=-csearch_path=...``).
    """

    def __init__(
        self, dsn: str, *, min_size: int = 1, max_size: int = 8, timeout: float = 30.0, index: str = "postgres"
    ) -> None:
        from pager.storage.pg_index import page_vector  # the index builds the tsv column

        if index not in INDEXES:
            raise ConfigError(f"index must be one of {', '.join(INDEXES)}, not {index!r}")
        self.index_kind = index
        self._follower: Any = None
        self.dsn = dsn
        self.path = None  # not a folder on this host: per-store files (report logs) have no home
        self._vector = page_vector
        self._local = threading.local()
        # ids this process recorded (with their vectors), so the index's add() skips a query
        self._recent: collections.OrderedDict[int, None] = collections.OrderedDict()
        self._recent_lock = threading.Lock()
        try:
            self._pool = ConnectionPool(
                dsn, min_size=min_size, max_size=max(min_size, max_size), timeout=timeout,
                # no check on checkout: it costs a round trip per statement; the pool
                # already drops connections returned broken, and a dead one fails loudly
                kwargs={"autocommit": True}, open=False,
                name="pager",
            )
            self._pool.open(wait=True, timeout=timeout)
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(f"cannot connect to PostgreSQL store {_redact(dsn)}: {exc}") from exc
        try:
            self._migrate()
        except BaseException:
            self._pool.close()
            raise

    # -- plumbing ---------------------------------------------------------------------

    def _migrate(self) -> None:
        try:
            with self._pool.connection() as conn, conn.transaction():
                schema = conn.execute("SELECT current_schema()").fetchone()
                if schema is None or schema[0] is None:
                    raise StoreError("PostgreSQL store: the search_path names no existing schema")
                self._schema = str(schema[0])
                self._feed_lock = _lock_key(self._schema, "pager-feed")
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(self._schema, "pager-migrate"),))
                conn.execute("CREATE TABLE IF NOT EXISTS pager_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                row = conn.execute("SELECT value FROM pager_settings WHERE key = 'schema_version'").fetchone()
                version = int(row[0]) if row else 0
                if version > SCHEMA_VERSION:
                    raise SchemaError(
                        f"PostgreSQL store {_redact(self.dsn)} has schema version {version}, this pager "
                        f"reads up to {SCHEMA_VERSION}; upgrade pager"
                    )
                for v in range(version + 1, SCHEMA_VERSION + 1):
                    for stmt in MIGRATIONS[v]:
                        conn.execute(stmt)
                if version < SCHEMA_VERSION:
                    conn.execute(
                        "INSERT INTO pager_settings VALUES ('schema_version', %s) "
                        "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                        (str(SCHEMA_VERSION),),
                    )
        except StoreError:
            raise
        except (psycopg.Error, PoolTimeout) as exc:
            raise _translate(exc, "cannot create or migrate the schema") from exc

    @contextlib.contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        """Yield this thread's transaction connection, or a pooled one for one statement."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            yield conn
            return
        with self._pool.connection() as conn:
            yield conn

    def _rows(
        self, sql: str, params: Sequence[Any] | dict[str, Any] = (), *, prepare: bool | None = None
    ) -> list[tuple[Any, ...]]:
        try:
            with self._conn() as conn:
                return conn.execute(sql, params, prepare=prepare).fetchall()
        except (psycopg.Error, PoolTimeout) as exc:
            raise _translate(exc, "read failed") from exc

    def _dicts(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        try:
            with self._conn() as conn, conn.cursor(row_factory=dict_row) as cur:
                return cur.execute(sql, params).fetchall()
        except (psycopg.Error, PoolTimeout) as exc:
            raise _translate(exc, "read failed") from exc

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Run one write transaction; inside one already open on this thread, join it."""
        if getattr(self._local, "conn", None) is not None:
            yield
            return
        try:
            with self._pool.connection() as conn:
                self._local.conn = conn
                self._local.new_pages = []
                try:
                    with conn.transaction():
                        yield
                        self._stamp_feed(conn)
                finally:
                    committed, self._local.new_pages = self._local.new_pages, []
                    self._local.conn = None
            if committed:
                with self._recent_lock:
                    self._recent.update(dict.fromkeys(committed))
                    while len(self._recent) > _RECENT_MAX:
                        self._recent.popitem(last=False)
        except (psycopg.Error, PoolTimeout) as exc:
            raise _translate(exc, "transaction failed") from exc

    def vectorized(self, ids: Iterable[int]) -> bool:
        """Return whether this process recorded every page of ``ids`` (so each has its vector).

        Pages recorded by this thread's open transaction count too.
        """
        pending = set(getattr(self._local, "new_pages", None) or ())
        with self._recent_lock:
            return all(i in self._recent or i in pending for i in ids)

    def forget_vectorized(self) -> None:
        """Forget which pages have vectors (the index was cleared)."""
        with self._recent_lock:
            self._recent.clear()

    def _stamp_feed(self, conn: psycopg.Connection[Any]) -> None:
        """Give the pages this transaction recorded their feed numbers, at commit."""
        pages = self._local.new_pages
        if not pages:
            return
        # the lock is held until COMMIT returns, so feed numbers become visible in
        # order; it is taken (the CTE's one row) before the first nextval runs
        conn.execute(
            "WITH lock AS (SELECT pg_advisory_xact_lock(%s)) INSERT INTO pager_feed (seq, page) "
            "SELECT nextval('pager_feed_seq'), p FROM lock, unnest(%s::bigint[]) AS p",
            (self._feed_lock, pages),
        )

    def _write(self, fn: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        """Run ``fn(conn)`` in the open transaction, or in its own one, retried on deadlock."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            try:
                return fn(conn)
            except psycopg.Error as exc:
                raise _translate(exc, "write failed") from exc
        for attempt in range(_RETRIES):
            try:
                with self.transaction():
                    return fn(self._local.conn)
            except StoreError as exc:
                cause = exc.__cause__
                if not (isinstance(cause, psycopg.Error) and cause.sqlstate in _RETRYABLE) or attempt == _RETRIES - 1:
                    raise
                time.sleep(0.005 * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        """Close the pool and the index follower, if any (idempotent)."""
        follower, self._follower = self._follower, None
        if follower is not None:
            follower.shutdown()
        self._pool.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def setting(self, key: str, default: str | None = None) -> str | None:
        rows = self._rows("SELECT value FROM pager_settings WHERE key = %s", (key,))
        return rows[0][0] if rows else default

    def set_setting(self, key: str, value: str) -> None:
        self._write(lambda c: c.execute(
            "INSERT INTO pager_settings VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            (key, value),
        ))

    def open_index(self) -> Any:
        """Return the recall index: full-text search in the database (``index="postgres"``, the
        default), or a Tantivy index in this process following the change feed (``"tantivy"``)."""
        if self.index_kind == "tantivy":
            from pager.storage.pg_follow import FeedIndex

            # one follower per store, shared by its sessions: each would
            # otherwise index the whole store again when it opens
            with self._recent_lock:
                if self._follower is None:
                    self._follower = FeedIndex(self)
                return self._follower
        from pager.storage.pg_index import PgIndex

        return PgIndex(self)

    # -- sessions and branches ---------------------------------------------------------

    def sessions(self) -> list[str]:
        """Return session names, oldest first."""
        return [r[0] for r in self._rows("SELECT name FROM pager_sessions ORDER BY created, name")]

    def has_session(self, session: str) -> bool:
        return bool(self._rows("SELECT 1 FROM pager_sessions WHERE name = %s", (session,)))

    def ensure_session(self, session: str) -> int:
        """Create the session (with an empty first branch) if needed; return its head branch."""
        rows = self._rows("SELECT head_branch FROM pager_sessions WHERE name = %s", (session,))
        if rows:
            return int(rows[0][0])

        def create(conn: psycopg.Connection[Any]) -> int:
            # two processes opening the same new session: the second waits, then finds it
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(self._schema, "session", session),))
            row = conn.execute("SELECT head_branch FROM pager_sessions WHERE name = %s", (session,)).fetchone()
            if row:
                return int(row[0])
            now = time.time()
            got = conn.execute(
                "INSERT INTO pager_branches (session, parent, fork_seq, created) VALUES (%s, NULL, 0, %s) RETURNING id",
                (session, now),
            ).fetchone()
            assert got is not None
            conn.execute("INSERT INTO pager_sessions VALUES (%s, %s, %s, NULL)", (session, got[0], now))
            return int(got[0])

        return self._write(create)

    def branches(self, session: str) -> list[Branch]:
        return [
            Branch(id=int(a), parent=None if b is None else int(b), fork_seq=int(c))
            for a, b, c in self._rows(
                "SELECT id, parent, fork_seq FROM pager_branches WHERE session = %s ORDER BY id", (session,)
            )
        ]

    def branch_page_ids(self, branch: int) -> list[int]:
        return [int(r[0]) for r in self._rows(
            "SELECT page FROM pager_branch_pages WHERE branch = %s ORDER BY seq", (branch,))]

    def lock_session(self, session: str) -> int:
        """Return the session's version; inside a transaction, lock the session's row until commit.

        A second writer of the same session waits here for the first to
        commit, then reads the version the first one raised.
        """
        lock = " FOR UPDATE" if getattr(self._local, "conn", None) is not None else ""
        rows = self._rows("SELECT version FROM pager_sessions WHERE name = %s" + lock, (session,))
        return int(rows[0][0]) if rows else 0

    def load_state(self, session: str) -> Any:
        rows = self._rows("SELECT state FROM pager_sessions WHERE name = %s", (session,))
        return orjson.loads(rows[0][0]) if rows and rows[0][0] else None

    def save_state(self, session: str, state: Any) -> None:
        blob = orjson.dumps(state)
        self._write(lambda c: c.execute(
            "UPDATE pager_sessions SET state = %s, version = version + 1 WHERE name = %s", (blob, session)))

    # -- pages -----------------------------------------------------------------------------

    def record(
        self, session: str, branch: int, fork: tuple[int, int] | None, start_seq: int, pages: Sequence[NewPage]
    ) -> tuple[int, list[int]]:
        """Record ``pages`` in one transaction; return ``(branch, new page ids)``.

        ``fork`` is ``(parent_branch, fork_seq)`` when the history diverged: a
        new branch is created sharing the parent's first ``fork_seq`` pages.
        """
        rows = [self._page_row(session, start_seq + i, p) for i, p in enumerate(pages)]

        def write(conn: psycopg.Connection[Any]) -> tuple[int, list[int]]:
            b = branch
            if fork is not None:
                parent, fork_seq = fork
                got = conn.execute(
                    "INSERT INTO pager_branches (session, parent, fork_seq, created) VALUES (%s, %s, %s, %s) "
                    "RETURNING id",
                    (session, parent, fork_seq, time.time()),
                ).fetchone()
                assert got is not None
                b = int(got[0])
                conn.execute(
                    "INSERT INTO pager_branch_pages SELECT %s, seq, page FROM pager_branch_pages "
                    "WHERE branch = %s AND seq < %s",
                    (b, parent, fork_seq),
                )
                conn.execute("UPDATE pager_sessions SET head_branch = %s WHERE name = %s", (b, session))
            ids: list[int] = []
            if rows:
                with conn.cursor() as cur:
                    cur.executemany(_INSERT_PAGE, rows, returning=True)
                    while True:
                        ids.append(int(cur.fetchone()[0]))  # type: ignore[index]
                        if not cur.nextset():
                            break
                conn.execute(
                    "INSERT INTO pager_branch_pages SELECT %s, s, p FROM unnest(%s::int[], %s::bigint[]) AS u(s, p)",
                    (b, list(range(start_seq, start_seq + len(ids))), ids),
                )
                self._local.new_pages.extend(ids)
            conn.execute(_BUMP, (session,))
            return b, ids

        return self._write(write)

    def _page_row(self, session: str, seq: int, p: NewPage) -> tuple[Any, ...]:
        from pager.core.messages import message_text

        try:
            text = message_text(orjson.loads(p.message))
        except orjson.JSONDecodeError as exc:
            raise StoreError(f"page {p.handle}: message bytes are not JSON: {exc}") from exc
        vector = self._vector(text, p.labels, p.path, p.handle)
        return (
            session, p.hash, p.kind, p.role, seq, p.step, p.tokens, p.stub_tokens, p.chars, p.call_id,
            list(p.call_ids), p.tool_name, p.path, list(p.labels), p.step, p.scope, p.owner, p.handle,
            p.message, vector,
        )

    def load_pages(self, ids: Sequence[int]) -> list[PageRecord]:
        """Return the pages ``ids`` in that order; ``StoreError`` if one is unknown."""
        if not ids:
            return []
        found = {
            int(r["id"]): page_record(r)
            for r in self._dicts(f"SELECT {_PAGE_COLS} FROM pager_pages WHERE id = ANY(%s)", (list(ids),))
        }
        missing = [i for i in ids if i not in found]
        if missing:
            raise StoreError(f"unknown page id(s): {missing[:5]}")
        return [found[i] for i in ids]

    def page_by_handle(self, session: str, handle: str) -> int | None:
        """Return the newest page id with ``handle`` in ``session`` (None when unknown)."""
        rows = self._rows("SELECT max(id) FROM pager_pages WHERE handle = %s AND session = %s", (handle, session))
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    def message(self, page_id: int) -> tuple[str, dict[str, Any]]:
        """Return ``(session, original message)`` of a page; ``StoreError`` when unknown."""
        rows = self._rows("SELECT session, message FROM pager_pages WHERE id = %s", (page_id,))
        if not rows:
            raise StoreError(f"unknown page id {page_id}")
        return rows[0][0], orjson.loads(rows[0][1])

    def iter_pages(self, after_id: int = 0, batch: int = 500) -> Iterator[tuple[PageRecord, dict[str, Any]]]:
        """Yield ``(page, message)`` for every page with id > ``after_id``, in id order."""
        last = after_id
        while True:
            got = self._dicts(
                f"SELECT {_PAGE_COLS}, message FROM pager_pages WHERE id > %s ORDER BY id LIMIT %s", (last, batch)
            )
            if not got:
                return
            for r in got:
                yield page_record(r), orjson.loads(r["message"])
            last = int(got[-1]["id"])

    def changes(self, after: int = 0, limit: int = 500) -> list[tuple[int, PageRecord, dict[str, Any]]]:
        """Return up to ``limit`` ``(feed seq, page, message)`` committed after feed number ``after``.

        Feed numbers are given at commit, in commit order: a follower that
        stores the last ``seq`` it applied and asks again from it misses no page.
        """
        got = self._dicts(
            f"SELECT f.seq AS feed, {', '.join('p.' + c.strip() for c in _PAGE_COLS.split(','))}, p.message "
            "FROM pager_feed f JOIN pager_pages p ON p.id = f.page WHERE f.seq > %s ORDER BY f.seq LIMIT %s",
            (after, limit),
        )
        return [(int(r["feed"]), page_record(r), orjson.loads(r["message"])) for r in got]

    def max_page_id(self) -> int:
        return int(self._rows("SELECT coalesce(max(id), 0) FROM pager_pages")[0][0])

    def count_pages(self, session: str | None = None) -> int:
        if session is None:
            return int(self._rows("SELECT count(*) FROM pager_pages")[0][0])
        return int(self._rows("SELECT count(*) FROM pager_pages WHERE session = %s", (session,))[0][0])

    def update_stats(self, stats: Sequence[StatUpdate]) -> None:
        """Store what later messages changed of pages: last reference, count, staleness."""
        if not stats:
            return
        cols = (
            [s.last_ref for s in stats], [s.ref_count for s in stats], [bool(s.stale) for s in stats],
            [s.page_id for s in stats],
        )
        self._write(lambda c: c.execute(
            "UPDATE pager_pages AS p SET last_ref = u.lr, ref_count = u.rc, stale = u.st "
            "FROM unnest(%s::int[], %s::int[], %s::bool[], %s::bigint[]) AS u(lr, rc, st, id) WHERE p.id = u.id",
            cols,
        ))

    # -- pins, notes, events ----------------------------------------------------------------

    def add_note(self, session: str, text: str, step: int) -> None:
        def write(c: psycopg.Connection[Any]) -> None:
            c.execute("INSERT INTO pager_notes (session, text, step, created) VALUES (%s, %s, %s, %s)",
                      (session, text, step, time.time()))
            c.execute(_BUMP, (session,))

        self._write(write)

    def notes(self, session: str) -> list[str]:
        """Return the session's notes, oldest first."""
        return [r[0] for r in self._rows("SELECT text FROM pager_notes WHERE session = %s ORDER BY id", (session,))]

    def add_pin(self, session: str, text: str) -> None:
        def write(c: psycopg.Connection[Any]) -> None:
            c.execute("INSERT INTO pager_pins (session, text, created) VALUES (%s, %s, %s)",
                      (session, text, time.time()))
            c.execute(_BUMP, (session,))

        self._write(write)

    def pins(self, session: str) -> list[str]:
        """Return the session's pinned goals, oldest first."""
        return [r[0] for r in self._rows("SELECT text FROM pager_pins WHERE session = %s ORDER BY id", (session,))]

    def timeline(self, session: str) -> list[TimelineEntry]:
        """Return pins and notes in creation order."""
        rows = self._rows(
            "SELECT created, 'pin' AS kind, id, text FROM pager_pins WHERE session = %(s)s "
            "UNION ALL SELECT created, 'note', id, text FROM pager_notes WHERE session = %(s)s "
            "ORDER BY 1, 2, 3",
            {"s": session},
        )
        return [TimelineEntry(created=float(c), kind=k, id=int(i), text=t) for c, k, i, t in rows]

    def add_event(self, session: str, kind: str, payload: Any) -> None:
        blob = orjson.dumps(payload)
        self._write(lambda c: c.execute(
            "INSERT INTO pager_events (session, kind, payload, created) VALUES (%s, %s, %s, %s)",
            (session, kind, blob, time.time()),
        ))

    def events(self, session: str, kind: str | None = None) -> list[Event]:
        rows = self._rows(
            "SELECT kind, payload, created FROM pager_events WHERE session = %s "
            "AND (%s::text IS NULL OR kind = %s) ORDER BY id",
            (session, kind, kind),
        )
        return [Event(kind=k, payload=orjson.loads(p) if p else None, created=float(c)) for k, p, c in rows]


def page_record(r: dict[str, Any]) -> PageRecord:
    """Return the ``PageRecord`` of a page row read with ``_PAGE_COLS``."""
    return PageRecord(
        id=int(r["id"]), session=r["session"], hash=r["hash"], kind=r["kind"], role=r["role"], seq=int(r["seq"]),
        step=int(r["step"]), tokens=int(r["tokens"]), stub_tokens=int(r["stub_tokens"]), chars=int(r["chars"]),
        call_id=r["call_id"], call_ids=tuple(r["call_ids"] or ()), tool_name=r["tool_name"], path=r["path"],
        stale=bool(r["stale"]), labels=tuple(r["labels"] or ()), last_ref=int(r["last_ref"]),
        ref_count=int(r["ref_count"]), scope=r["scope"], handle=r["handle"], owner=r["owner"],
    )


def _redact(dsn: str) -> str:
    """Return ``dsn`` without its password (for error messages)."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "<unparsable DSN>"
    info.pop("password", None)
    return psycopg.conninfo.make_conninfo(**info)


def open_store(dsn: str, **pool: Any) -> PostgresStore:
    """Return a ``PostgresStore`` on ``dsn`` (``pool`` keywords go to the constructor)."""
    return PostgresStore(dsn, **pool)

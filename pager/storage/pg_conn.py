"""Connections for the PostgreSQL store: the pool, re-entrant transactions, migrations, the feed stamp.

Theory of operation
-------------------
A ``PgConnection`` holds a ``psycopg_pool.ConnectionPool``. Connections run
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
assigned at commit (``_stamp_feed``), under a transaction-scoped advisory
lock held through the commit, so feed numbers become visible in order and a
reader that has seen ``seq = n`` has seen every page with a smaller one.

Schema changes are the numbered ``MIGRATIONS`` of ``pg_schema``, applied in
order at open under an advisory lock (two processes opening a fresh database
do not race); a database migrated by a newer pager is refused with
``SchemaError``.

Stores of one process on one DSN share one pool (``_SharedPool``): a proxy opens a
store per session, and a pool each held a server connection per open session
(PostgreSQL's default ``max_connections`` is 100, a proxy keeps 256 sessions
open) and paid two connections and the migration check at every open, ~30 ms of
wall time. The shared pool holds at most the largest ``max_size`` any of its
stores asked for, or their sum up to ``SHARED_MAX``, whichever is larger; the
last store to close it closes it. Each store keeps its own per-thread
transactions. The registry is keyed by process id too: a forked child never
uses its parent's connections.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import threading
import time
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

try:
    import psycopg
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the PostgreSQL store needs psycopg 3 and its pool: pip install 'llm-context-pager[postgres]'"
    ) from exc

from pager.errors import ConfigError, SchemaError, StoreError
from pager.storage.pg_schema import _RETRYABLE, MIGRATIONS, SCHEMA_VERSION, lock_key, redact, translate

__all__ = ["CONNECT_TIMEOUT", "SHARED_MAX", "PgConnection", "resolve_connect_timeout"]

# Seconds to wait for the server to answer a connection, unless the DSN's own
# ``connect_timeout`` (libpq's parameter) or the ``connect_timeout`` keyword says
# otherwise, or ``PGCONNECT_TIMEOUT`` is set. libpq's default is to wait forever,
# and the pool then retried for its whole 30 s timeout: an unreachable server
# blocked ``pager.open`` 30-34 s before the error.
CONNECT_TIMEOUT = 5.0
_RETRIES = 8
_RECENT_MAX = 100_000
# the most connections a pool shared by several stores grows to by adding their ``max_size``es
SHARED_MAX = 32
_T = TypeVar("_T")


class _SharedPool:
    """One pool, the stores of this process that use it, and what the migration check found."""

    def __init__(self, key: tuple[Any, ...], pool: ConnectionPool, schema: str, feed_lock: int) -> None:
        self.key = key
        self.pool = pool
        self.schema = schema
        self.feed_lock = feed_lock
        self.sizes: list[tuple[int, int]] = []  # (min_size, max_size) of each store using it

    def fit(self) -> None:
        """Size the pool for the stores using it (see the module docstring)."""
        if not self.sizes:
            return
        low = max(m for m, _x in self.sizes)
        high = max(max(x for _m, x in self.sizes), min(sum(x for _m, x in self.sizes), SHARED_MAX))
        if (self.pool.min_size, self.pool.max_size) != (low, max(low, high)):
            self.pool.resize(low, max(low, high))


_SHARED: dict[tuple[Any, ...], _SharedPool] = {}
_OPENING: dict[tuple[Any, ...], threading.Lock] = {}  # per key: held while a pool is opened and checked
_SHARED_LOCK = threading.Lock()


def resolve_connect_timeout(dsn: str, given: float | None = None) -> int:
    """Return the connect timeout (whole seconds) for ``dsn``: its own, else ``given``, else the environment's, else 5.

    Checked before any connection: a bad DSN or timeout is a ``ConfigError``.
    """
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        raise ConfigError(f"not a PostgreSQL connection string {redact(dsn)}: {exc}") from None
    for source, value in (("the DSN's connect_timeout", info.get("connect_timeout")),
                          ("connect_timeout", given),
                          ("PGCONNECT_TIMEOUT", os.environ.get("PGCONNECT_TIMEOUT") or None)):
        if value is None:
            continue
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{source} must be a number of seconds, got {value!r}") from None
        if not seconds > 0 or seconds != seconds or seconds == float("inf"):
            raise ConfigError(f"{source} must be a positive number of seconds, got {value!r}")
        return max(1, math.ceil(seconds))  # libpq reads whole seconds
    return int(CONNECT_TIMEOUT)


class PgConnection:
    """A pool of connections to one database, with the store's transactions (see the module docstring).

    ``connect_timeout`` (seconds) bounds each connection attempt; a
    ``connect_timeout`` in the DSN wins over it, and ``PGCONNECT_TIMEOUT``
    applies when neither is given (default ``CONNECT_TIMEOUT``, 5 s).
    """

    def __init__(self, dsn: str, *, min_size: int = 1, max_size: int = 8, timeout: float = 30.0,
                 connect_timeout: float | None = None) -> None:
        self.dsn = dsn
        self._local = threading.local()
        # ids this process recorded (with their vectors), so the index's add() skips a query
        self._recent: collections.OrderedDict[int, None] = collections.OrderedDict()
        self._recent_lock = threading.Lock()
        self.connect_timeout = seconds = resolve_connect_timeout(dsn, connect_timeout)
        self._size = (min_size, max(min_size, max_size))
        self._shared: _SharedPool | None = None
        key = (os.getpid(), dsn, seconds, timeout)
        with _SHARED_LOCK:
            opening = _OPENING.setdefault(key, threading.Lock())
        # one store of the process opens a DSN's pool at a time; opens of other DSNs do not wait for it
        with opening:
            with _SHARED_LOCK:
                shared = _SHARED.get(key)
                if shared is not None and not shared.pool.closed:
                    self._join(shared)
                    return
            self._open_pool(key, dsn, seconds, min_size, max_size, timeout)

    def _open_pool(self, key: tuple[Any, ...], dsn: str, seconds: int, min_size: int, max_size: int,
                   timeout: float) -> None:
        """Open a pool of this process on ``dsn``, check the schema, and share it (see the module docstring)."""
        kwargs = {"autocommit": True, "connect_timeout": seconds}
        try:
            # one connection first, bounded by the connect timeout: an unreachable server is
            # reported at once with libpq's reason, not after the pool's retries
            psycopg.connect(dsn, **kwargs).close()
            self._pool = ConnectionPool(
                dsn, min_size=min_size, max_size=max(min_size, max_size), timeout=timeout,
                # no check on checkout: it costs a round trip per statement; the pool
                # already drops connections returned broken, and a dead one fails loudly
                kwargs=kwargs, open=False,
                name="pager",
            )
            self._pool.open(wait=True, timeout=timeout)
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(f"cannot connect to PostgreSQL store {redact(dsn)}: {exc}") from exc
        try:
            self._migrate()
        except BaseException:
            self._pool.close()
            raise
        with _SHARED_LOCK:
            shared = _SHARED[key] = _SharedPool(key, self._pool, self._schema, self._feed_lock)
            self._join(shared)

    def _join(self, shared: _SharedPool) -> None:
        """Use ``shared``'s pool (under ``_SHARED_LOCK``)."""
        self._pool, self._schema, self._feed_lock = shared.pool, shared.schema, shared.feed_lock
        shared.sizes.append(self._size)
        shared.fit()
        self._shared = shared


    # -- plumbing ---------------------------------------------------------------------

    def _migrate(self) -> None:
        try:
            with self._pool.connection() as conn, conn.transaction():
                schema = conn.execute("SELECT current_schema()").fetchone()
                if schema is None or schema[0] is None:
                    raise StoreError("PostgreSQL store: the search_path names no existing schema")
                self._schema = str(schema[0])
                self._feed_lock = lock_key(self._schema, "pager-feed")
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(self._schema, "pager-migrate"),))
                conn.execute("CREATE TABLE IF NOT EXISTS pager_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                row = conn.execute("SELECT value FROM pager_settings WHERE key = 'schema_version'").fetchone()
                version = int(row[0]) if row else 0
                if version > SCHEMA_VERSION:
                    raise SchemaError(
                        f"PostgreSQL store {redact(self.dsn)} has schema version {version}, this pager "
                        f"reads up to {SCHEMA_VERSION}; upgrade pager"
                    )
                # one round trip for all of them: without parameters psycopg sends the simple query protocol,
                # which takes several statements (a new store ran 26 round trips here)
                steps = [stmt for v in range(version + 1, SCHEMA_VERSION + 1) for stmt in MIGRATIONS[v]]
                if steps:
                    conn.execute(";\n".join(steps))
                if version < SCHEMA_VERSION:
                    conn.execute(
                        "INSERT INTO pager_settings VALUES ('schema_version', %s) "
                        "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                        (str(SCHEMA_VERSION),),
                    )
        except StoreError:
            raise
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc, "cannot create or migrate the schema") from exc

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
        self, sql: str, params: Sequence[Any] | dict[str, Any] = (), *, prepare: bool | None = None,
        apart: bool = False,
    ) -> list[tuple[Any, ...]]:
        """Return the rows ``sql`` reads (``apart``: it reads no table a kept write changes, ``_write_later``)."""
        if not apart:
            self._run_deferred()
        try:
            with self._conn() as conn:
                return conn.execute(sql, params, prepare=prepare).fetchall()
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc, "read failed") from exc

    def _dicts(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        self._run_deferred()
        try:
            with self._conn() as conn, conn.cursor(row_factory=dict_row) as cur:
                return cur.execute(sql, params).fetchall()
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc, "read failed") from exc

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
                self._local.deferred = []
                try:
                    with conn.transaction():
                        yield
                        self._run_deferred()
                        self._stamp_feed(conn)
                finally:
                    committed, self._local.new_pages = self._local.new_pages, []
                    self._local.deferred = []  # unwritten when it failed: rolled back with the rest
                    self._local.conn = None
            if committed:
                with self._recent_lock:
                    self._recent.update(dict.fromkeys(committed))
                    while len(self._recent) > _RECENT_MAX:
                        self._recent.popitem(last=False)
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc, "transaction failed") from exc

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

    def _write_later(self, fn: Callable[[psycopg.Connection[Any]], Any]) -> None:
        """Run ``fn(conn)`` at the end of this thread's open transaction; with none open, now (``_write``).

        Inside a transaction the statement waits until just before the COMMIT, or until this thread's
        next read or other write (``_run_deferred``), which runs it first: a read sees it, writes keep
        their order. A call's rows, statistics and state wait so (``pager.storage.postgres``): the
        request it renders is forwarded first (``Pager._assemble``'s ``ready``, the proxy's), and the
        round trips they cost come after; a statement that fails then rolls the transaction back.
        """
        if getattr(self._local, "conn", None) is None:
            self._write(fn)
        else:
            self._local.deferred.append(fn)

    def _run_deferred(self) -> None:
        """Run the statements ``_write_later`` kept on this thread's open transaction, in order."""
        fns = getattr(self._local, "deferred", None)
        if not fns or getattr(self._local, "conn", None) is None:
            return
        self._local.deferred = []
        try:
            for fn in fns:
                fn(self._local.conn)
        except psycopg.Error as exc:
            raise translate(exc, "write failed") from exc

    def _write(self, fn: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        """Run ``fn(conn)`` in the open transaction, or in its own one, retried on deadlock."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            self._run_deferred()  # the writes kept before it first, in order
            try:
                return fn(conn)
            except psycopg.Error as exc:
                raise translate(exc, "write failed") from exc
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
        """Stop using the pool; the last store of the process using it closes it (idempotent)."""
        with _SHARED_LOCK:
            shared, self._shared = self._shared, None
            if shared is None:
                return
            # this store's calls now fail as on a closed pool of its own, though others go on using it
            self._pool = ConnectionPool("", min_size=0, max_size=1, open=False, name="pager-closed")
            shared.sizes.remove(self._size)
            if shared.sizes:
                shared.fit()
                return
            if _SHARED.get(shared.key) is shared:
                del _SHARED[shared.key]
        shared.pool.close()

    def __enter__(self) -> PgConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

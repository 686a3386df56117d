"""The PostgreSQL store: one database shared by many processes, threads and hosts.

``PostgresStore`` implements the ``Store`` protocol over the connections,
transactions and change feed of ``pager.storage.pg_conn`` and the schema of
``pager.storage.pg_schema``. Every statement is parameterised; the only SQL
built from strings is fixed column lists. Errors of the database surface as
``StoreError`` (the psycopg error is its ``__cause__``).

Every page row carries ``owner`` and ``scope`` (pools and their ACL build on
them). The recall index of record lives in the same rows: the ``tsv`` column,
written with the page in ``record`` and searched by
``pager.storage.pg_index.PgIndex``; ``index="tantivy"`` gives a per-process
Tantivy index following the change feed instead (``pager.storage.pg_follow``).
"""

from __future__ import annotations

import time
from typing import Any, Iterator, Sequence

import orjson

from pager.core.aside import ASIDE_KINDS
from pager.core.pools import PoolAcl
from pager.errors import ConfigError, StoreError
from pager.storage.base import Branch, Event, NewPage, PageRecord, StatUpdate, TimelineEntry
from pager.storage.pg_conn import PgConnection  # imported first: without the extra it names the install line

import psycopg  # noqa: E402,I001 - after pg_conn (see above)

from pager.storage.pg_schema import (  # noqa: E402
    _BUMP, _INSERT_PAGE, _INSERT_PAGE_ID, _PAGE_COLS, _RESERVE_IDS, INDEXES, SCHEMA_VERSION, lock_key, page_record,
)

__all__ = ["SCHEMA_VERSION", "PostgresStore", "open_store"]


class PostgresStore(PgConnection):
    """Open the store in the PostgreSQL database at ``dsn`` (creating its tables if needed).

    ``index`` picks what ``open_index`` returns (see ``INDEXES``).
    ``min_size`` / ``max_size`` bound the connection pool: one connection per
    thread that writes at once is enough (a transaction holds one for its
    length). ``timeout`` is how long a caller waits for a free connection;
    ``connect_timeout`` how long one connection attempt may take (default 5 s;
    a ``connect_timeout`` in the DSN wins, ``PGCONNECT_TIMEOUT`` applies when
    neither is given).
    Tables live in the connection's ``search_path`` schema (``public``
    unless the DSN says ``options=-csearch_path=...``).
    """

    def __init__(
        self, dsn: str, *, min_size: int = 1, max_size: int = 8, timeout: float = 30.0, index: str = "postgres",
        connect_timeout: float | None = None,
    ) -> None:
        from pager.storage.pg_index import page_vector  # the index builds the tsv column

        if index not in INDEXES:
            raise ConfigError(f"index must be one of {', '.join(INDEXES)}, not {index!r}")
        self.index_kind = index
        self._follower: Any = None
        self.path = None  # not a folder on this host: per-store files (report logs) have no home
        self._vector = page_vector
        super().__init__(dsn, min_size=min_size, max_size=max_size, timeout=timeout, connect_timeout=connect_timeout)

    def close(self) -> None:
        """Close the index follower, if any, and the pool (idempotent)."""
        follower, self._follower = self._follower, None
        if follower is not None:
            follower.shutdown()
        super().close()

    def __enter__(self) -> PostgresStore:
        return self

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
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(self._schema, "session", session),))
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
        self._write_later(lambda c: c.execute(  # at the transaction's end (pg_conn._write_later)
            "UPDATE pager_sessions SET state = %s, version = version + 1 WHERE name = %s", (blob, session)))

    # -- pages -----------------------------------------------------------------------------

    def record(
        self, session: str, branch: int, fork: tuple[int, int] | None, start_seq: int, pages: Sequence[NewPage]
    ) -> tuple[int, list[int]]:
        """Record ``pages`` in one transaction; return ``(branch, new page ids)``.

        ``fork`` is ``(parent_branch, fork_seq)`` when the history diverged: a
        new branch is created sharing the parent's first ``fork_seq`` pages.
        """
        inside = getattr(self._local, "conn", None) is not None

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
            # the ids now, from the pages' sequence; the rows (their text's vector made here too) at the end
            # of the transaction, after the request is forwarded (pg_conn._write_later)
            ids = [int(r[0]) for r in conn.execute(_RESERVE_IDS, (len(pages),)).fetchall()] if pages else []
            self._local.new_pages.extend(ids)

            def rows(conn: psycopg.Connection[Any]) -> None:
                if ids:
                    data = built if built is not None else [
                        self._page_row(session, start_seq + i, p) for i, p in enumerate(pages)]
                    with conn.cursor() as cur:
                        cur.executemany(_INSERT_PAGE_ID, [(pid, *row) for pid, row in zip(ids, data)])
                    conn.execute(
                        "INSERT INTO pager_branch_pages SELECT %s, s, p FROM unnest(%s::int[], %s::bigint[]) AS u(s, p)",
                        (b, list(range(start_seq, start_seq + len(ids))), ids),
                    )
                conn.execute(_BUMP, (session,))

            if inside:
                self._write_later(rows)
            else:
                rows(conn)
            return b, ids

        # outside a transaction the rows are made first: a page whose message is not JSON is refused before
        # anything is written (inside one, when they are written, and the transaction rolls back)
        built = None if inside else [self._page_row(session, start_seq + i, p) for i, p in enumerate(pages)]
        return self._write(write)

    def record_aside(self, session: str, seq: int, pages: Sequence[NewPage]) -> list[int]:
        """Record pages outside every branch (pins, notes, handoffs); return their ids."""
        rows = [self._page_row(session, seq, p) for p in pages]

        def write(conn: psycopg.Connection[Any]) -> list[int]:
            ids = [int(conn.execute(_INSERT_PAGE, row).fetchone()[0]) for row in rows]  # type: ignore[index]
            self._local.new_pages.extend(ids)
            conn.execute(_BUMP, (session,))
            return ids

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
            list(p.call_ids), p.tool_name, p.path, list(p.labels), p.step, p.scope, p.owner, p.pool,
            list(p.terms), p.handle, p.message, p.digest, vector,
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

    def aside_pages(self, session: str) -> list[int]:
        """Return the ids of the session's pins, notes and handoffs kept as pages, oldest first."""
        rows = self._rows("SELECT id FROM pager_pages WHERE session = %s AND kind = ANY(%s) ORDER BY id",
                          (session, list(ASIDE_KINDS)))
        return [int(r[0]) for r in rows]

    def pages_by_handle(self, handle: str) -> list[int]:
        """Return the ids of the pages with ``handle`` in any session, newest first (callers check access)."""
        return [int(r[0]) for r in self._rows(
            "SELECT id FROM pager_pages WHERE handle = %s ORDER BY id DESC", (handle,))]

    def present_pages(self, page_ids: Sequence[int]) -> set[int]:
        """Return which of ``page_ids`` are stored pages (one query)."""
        if not page_ids:
            return set()
        return {int(r[0]) for r in self._rows(
            "SELECT id FROM pager_pages WHERE id = ANY(%s)", ([int(i) for i in page_ids],))}

    def set_scope(self, page_id: int, scope: str, pool: str | None) -> None:
        """Move a page to another scope and pool (its session's version rises)."""
        def write(conn: psycopg.Connection[Any]) -> None:
            row = conn.execute(
                "UPDATE pager_pages SET scope = %s, pool = %s WHERE id = %s RETURNING session", (scope, pool, page_id)
            ).fetchone()
            if row is None:
                raise StoreError(f"PostgreSQL store: no page with id {page_id}")
            conn.execute(_BUMP, (row[0],))

        self._write(write)

    def set_pool_acl(self, pool: str, readers: Sequence[str], writers: Sequence[str]) -> None:
        """Say who may read and who may write ``pool`` (replacing what was said before)."""
        self._write(lambda c: c.execute(
            "INSERT INTO pager_pools VALUES (%s, %s, %s, %s) ON CONFLICT (name) DO UPDATE "
            "SET readers = EXCLUDED.readers, writers = EXCLUDED.writers, updated = EXCLUDED.updated",
            (pool, sorted(readers), sorted(writers), time.time()),
        ))

    def pool_acls(self) -> dict[str, PoolAcl]:
        # apart: no write a call keeps for its transaction's end touches the pools (pg_conn._write_later)
        return {name: PoolAcl(readers=r, writers=w)
                for name, r, w in self._rows("SELECT name, readers, writers FROM pager_pools", apart=True)}

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

    def page_ids_after(self, after_id: int) -> list[int]:
        """Return the ids of the pages with id > ``after_id``, ascending (no message read)."""
        return [int(r[0]) for r in self._rows("SELECT id FROM pager_pages WHERE id > %s ORDER BY id", (after_id,))]

    def max_page_id(self) -> int:
        return int(self._rows("SELECT coalesce(max(id), 0) FROM pager_pages")[0][0])

    def count_pages(self, session: str | None = None) -> int:
        if session is None:
            return int(self._rows("SELECT count(*) FROM pager_pages")[0][0])
        return int(self._rows("SELECT count(*) FROM pager_pages WHERE session = %s", (session,))[0][0])

    def update_stats(self, stats: Sequence[StatUpdate], session: str | None = None) -> None:
        """Store what later messages changed of pages: last reference, count, staleness."""
        if not stats:
            return
        cols = (
            [s.last_ref for s in stats], [s.ref_count for s in stats], [bool(s.stale) for s in stats],
            [s.page_id for s in stats],
        )
        self._write_later(lambda c: c.execute(  # at the transaction's end (pg_conn._write_later)
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


def open_store(dsn: str, **pool: Any) -> PostgresStore:
    """Return a ``PostgresStore`` on ``dsn`` (``pool`` keywords go to the constructor)."""
    return PostgresStore(dsn, **pool)

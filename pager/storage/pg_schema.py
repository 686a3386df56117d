"""The PostgreSQL store's schema: numbered migrations, the page row, error translation.

``pager.storage.postgres`` applies ``MIGRATIONS`` in order at open (see its
docstring); everything here is data or a pure function.
"""

from __future__ import annotations

import hashlib
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout

from pager.errors import StoreError
from pager.storage.base import PageRecord

__all__ = ["INDEXES", "MIGRATIONS", "SCHEMA_VERSION", "page_record"]

SCHEMA_VERSION = 5
# Recall indexes open_index() can give: the database's own full-text index of
# record, or a per-process Tantivy index following the change feed.
INDEXES = ("postgres", "tantivy")

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
    # shared pools: a project page's pool, who may read and write each pool; the page's terms
    3: (
        "ALTER TABLE pager_pages ADD COLUMN pool TEXT, ADD COLUMN terms TEXT[]",
        "CREATE INDEX pager_pages_pool ON pager_pages (pool) WHERE pool IS NOT NULL",
        """CREATE TABLE pager_pools (
            name TEXT PRIMARY KEY, readers TEXT[] NOT NULL, writers TEXT[] NOT NULL,
            updated DOUBLE PRECISION NOT NULL)""",
    ),
    # when each page was stored (older rows stay NULL: unknown): recalled foreign pages show their date
    4: (
        "ALTER TABLE pager_pages ADD COLUMN created DOUBLE PRECISION",
        "ALTER TABLE pager_pages ALTER COLUMN created SET DEFAULT extract(epoch FROM clock_timestamp())",
    ),
    # the running digest of the branch on the last page of each record (pager.core.digest); NULL before
    5: ("ALTER TABLE pager_pages ADD COLUMN digest TEXT",),
}
_BUMP = "UPDATE pager_sessions SET version = version + 1 WHERE name = %s"

_PAGE_COLS = (
    "id, session, hash, kind, role, seq, step, tokens, stub_tokens, chars, call_id, call_ids, "
    "tool_name, path, stale, labels, last_ref, ref_count, scope, handle, owner, pool, terms, created, digest"
)
_INSERT_PAGE = (
    "INSERT INTO pager_pages (session, hash, kind, role, seq, step, tokens, stub_tokens, chars, call_id,"
    " call_ids, tool_name, path, labels, last_ref, scope, owner, pool, terms, handle, message, digest, tsv)"
    " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s::tsvector) RETURNING id"
)
# The same, with ids taken from the identity's sequence beforehand (_RESERVE_IDS): a call inside a
# transaction knows its pages' ids at once and writes their rows at its end (pg_conn._write_later).
_INSERT_PAGE_ID = (
    "INSERT INTO pager_pages (id, session, hash, kind, role, seq, step, tokens, stub_tokens, chars, call_id,"
    " call_ids, tool_name, path, labels, last_ref, scope, owner, pool, terms, handle, message, digest, tsv)"
    " OVERRIDING SYSTEM VALUE"
    " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s::tsvector)"
)
_RESERVE_IDS = ("SELECT nextval(pg_get_serial_sequence('pager_pages', 'id')) AS id FROM generate_series(1, %s) "
                "ORDER BY id")
# SQLSTATEs PostgreSQL resolves by aborting one transaction: retrying it is the cure.
_RETRYABLE = ("40001", "40P01")


def lock_key(*parts: str) -> int:
    """Return a signed 64-bit advisory-lock key for ``parts``."""
    digest = hashlib.blake2b("\0".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def translate(exc: BaseException, what: str) -> StoreError:
    if isinstance(exc, PoolTimeout):
        return StoreError(f"PostgreSQL store: {what}: no connection free in the pool ({exc})")
    return StoreError(f"PostgreSQL store: {what}: {exc}")



def page_record(r: dict[str, Any]) -> PageRecord:
    """Return the ``PageRecord`` of a page row read with ``_PAGE_COLS``."""
    return PageRecord(
        id=int(r["id"]), session=r["session"], hash=r["hash"], kind=r["kind"], role=r["role"], seq=int(r["seq"]),
        step=int(r["step"]), tokens=int(r["tokens"]), stub_tokens=int(r["stub_tokens"]), chars=int(r["chars"]),
        call_id=r["call_id"], call_ids=tuple(r["call_ids"] or ()), tool_name=r["tool_name"], path=r["path"],
        stale=bool(r["stale"]), labels=tuple(r["labels"] or ()), last_ref=int(r["last_ref"]),
        ref_count=int(r["ref_count"]), scope=r["scope"], handle=r["handle"], owner=r["owner"], pool=r["pool"],
        terms=None if r["terms"] is None else tuple(r["terms"]),
        created=None if r.get("created") is None else float(r["created"]),
        digest=r.get("digest"),
    )


def redact(dsn: str) -> str:
    """Return ``dsn`` without its password (for error messages)."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "<unparsable DSN>"
    info.pop("password", None)
    return psycopg.conninfo.make_conninfo(**info)

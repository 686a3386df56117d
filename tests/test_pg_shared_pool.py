"""Stores of one process on one PostgreSQL DSN share one connection pool (``pager.storage.pg_conn``).

A proxy opens a store per session: a pool each held a server connection per
open session, so a PostgreSQL server with its default ``max_connections`` (100)
refused the proxy's hundredth session, and every open paid two new connections
and the migration check. On a real server (the ``pg_server`` fixture), counted
by the server itself (``pg_stat_activity``, under an ``application_name`` of
the test's own).
"""

from __future__ import annotations

import os
import time
import uuid

import psycopg
import pytest

import pager
from pager.errors import StoreError
from pager.storage.pg_conn import SHARED_MAX
from pager.storage.postgres import PostgresStore


@pytest.fixture
def tagged(pg_dsn, pg_server):
    """Return (this test's DSN, a function counting the server connections made with it)."""
    name = "pager-test-" + uuid.uuid4().hex[:12]
    dsn = f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}application_name={name}"

    def connections() -> int:
        with psycopg.connect(pg_server.dsn, autocommit=True) as c:
            return int(c.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                                 (name,)).fetchone()[0])

    return dsn, connections


def _until(cond, seconds: float = 10.0) -> bool:
    """Poll ``cond`` (a backend leaves pg_stat_activity a moment after its client closed)."""
    end = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def test_sessions_of_one_process_share_one_pool_of_connections(tagged) -> None:
    dsn, connections = tagged
    opened = []
    try:
        for k in range(12):
            p = pager.open(dsn, session=f"s{k}", log_reports=False)
            p.assemble({"messages": [{"role": "system", "content": "agent"},
                                     {"role": "user", "content": f"look at file{k}.py"}]})
            opened.append(p)
        assert opened[0].store._pool is opened[-1].store._pool
        assert 1 <= connections() <= 2  # one at a time was used: one per session before
        pool = opened[0].store._pool
        assert pool.max_size == SHARED_MAX  # 12 stores of 8 each, up to the cap
        for p in opened[:11]:
            p.close()
        assert pool.max_size == 8 and not pool.closed  # the last store's own size; still open for it
        assert opened[11].store.count_pages() > 0
    finally:
        for p in opened:
            p.close()
    assert opened[0].store._pool.closed
    assert _until(lambda: connections() == 0)  # the last store to close closed the pool


def test_a_closed_store_fails_while_its_siblings_go_on(tagged) -> None:
    dsn, _connections = tagged
    a, b = PostgresStore(dsn), PostgresStore(dsn)
    try:
        a.ensure_session("a")
        a.close()
        a.close()  # idempotent
        with pytest.raises(StoreError):
            a.count_pages()
        assert b.count_pages() == 0 and b.has_session("a")
    finally:
        b.close()


def test_a_larger_max_size_is_kept_and_a_new_pool_follows_the_last_close(tagged) -> None:
    dsn, _connections = tagged
    big = PostgresStore(dsn, max_size=48)
    small = PostgresStore(dsn, max_size=2)
    try:
        assert big._pool is small._pool and big._pool.max_size == 48  # above SHARED_MAX: one store's own
    finally:
        big.close()
    assert small._pool.max_size == 2
    first = small._pool
    small.close()
    again = PostgresStore(dsn)
    try:
        assert again._pool is not first and not again._pool.closed
    finally:
        again.close()


def test_a_forked_child_opens_a_pool_of_its_own(tagged) -> None:
    dsn, _connections = tagged
    parent = PostgresStore(dsn)
    try:
        parent.ensure_session("p")
        pid = os.fork()
        if pid == 0:  # the child: the parent's pool (its sockets) must not be used here
            code = 1
            try:
                child = PostgresStore(dsn)
                code = 0 if child._pool is not parent._pool and child.has_session("p") else 2
                child.close()
            finally:
                os._exit(code)
        _pid, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert parent.has_session("p")  # the parent's connections were left alone
    finally:
        parent.close()

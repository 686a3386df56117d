"""The stores write a call's rows at the end of its transaction (``sqlite_tx._defer``, ``pg_conn._write_later``).

Inside a write transaction, ``record``, ``update_stats`` and ``save_state``
keep their statements until just before the COMMIT, so the request a call
renders is forwarded (``Pager._assemble``'s ``ready``, the proxy's) before its
rows are written. What must hold: every other method of the store sees those
writes (they run first), writes keep their order, a write that fails when it
runs rolls the whole call back with a ``StoreError`` and loses nothing, and
outside a transaction a write is committed when its method returns. On a
real PostgreSQL server too (the page ids come from the sequence at once, the
rows later).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import pager
from pager.errors import StoreError
from pager.storage.base import StatUpdate
from pager.storage.sqlite import DB_NAME, SQLiteStore
from pager.testing import new_page

OPTS = {"context_window": 8000}


def _chat(n: int) -> list[dict]:
    msgs = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "fix src/app.py"}]
    for i in range(n):
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "read", "arguments": f'{{"path": "f{i}.py"}}'}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"def handler_{i}(): return {i}\n" * 20})
    return msgs


def test_a_calls_rows_are_written_after_its_request_is_ready(tmp_path: Path) -> None:
    with pager.open(tmp_path / "st", "s", **OPTS) as p:
        p.assemble({"messages": _chat(2)})
        statements: list[str] = []
        p.store._db.set_trace_callback(statements.append)
        try:
            p._assemble({"messages": _chat(3)}, ready=lambda out: statements.append("READY"))
        finally:
            p.store._db.set_trace_callback(None)
        ready = statements.index("READY")
        writes = [i for i, sql in enumerate(statements) if sql.startswith(("INSERT", "UPDATE"))]
        inserted = [i for i, sql in enumerate(statements) if sql.startswith("INSERT INTO pages")]
        assert inserted and min(writes) > ready  # the pages, their statistics, the state: all after
        assert statements.index("COMMIT") > max(writes)
        assert p.store.count_pages("s") == len(_chat(3))


def test_other_methods_see_the_writes_in_order(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "st")
    try:
        head = store.ensure_session("s")
        with store.transaction():
            branch, ids = store.record("s", head, None, 0, [new_page(1, terms=("alpha_one",)), new_page(2)])
            # a write that reads the page first: it must find the row record() has not written yet
            store.set_scope(ids[0], "pool", "repo")
            assert store.count_pages("s") == 2
            (first, _second) = store.load_pages(ids)
            assert first.scope == "pool" and set(first.terms or ()) == {"alpha_one"}
            store.update_stats([StatUpdate(ids[1], 7, 2, False)], "s")
            assert store.load_pages([ids[1]])[0].ref_count == 2
            store.save_state("s", {"calls": 3})
            assert store.load_state("s") == {"calls": 3}
        assert store.branch_page_ids(branch) == ids
    finally:
        store.close()


def test_outside_a_transaction_a_write_is_committed_when_its_method_returns(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "st")
    try:
        head = store.ensure_session("s")
        _branch, ids = store.record("s", head, None, 0, [new_page(1)])
        store.save_state("s", {"calls": 1})
        other = sqlite3.connect(tmp_path / "st" / DB_NAME)
        try:
            assert other.execute("SELECT id FROM pages").fetchall() == [(ids[0],)]
            assert other.execute("SELECT state FROM sessions WHERE name='s'").fetchone()[0] is not None
        finally:
            other.close()
    finally:
        store.close()


def test_a_write_that_fails_at_the_end_rolls_the_call_back_and_loses_nothing(tmp_path: Path) -> None:
    with pager.open(tmp_path / "st", "s", **OPTS) as p:
        p.assemble({"messages": _chat(2)})
        before = p.store.count_pages("s")
        # the page rows are written after the request is ready: make that write fail there
        p.store._db.execute("CREATE TEMP TRIGGER refuse BEFORE INSERT ON pages BEGIN SELECT RAISE(ABORT, 'disk says no'); END")
        readied: list[dict] = []
        with pytest.raises(StoreError, match="disk says no"):
            p._assemble({"messages": _chat(3)}, ready=readied.append)
        assert len(readied) == 1  # the request had gone out; the call is rolled back all the same
        assert p.store.count_pages("s") == before
        p.store._db.execute("DROP TRIGGER refuse")
        out = p.assemble({"messages": _chat(3)})  # the client resends its history: recorded now
        assert p.store.count_pages("s") == len(_chat(3))
        assert out["messages"][-1]["role"] == "tool"
    with pager.open(tmp_path / "st", "s", **OPTS) as p:  # and it reopens with every message
        assert p.store.count_pages("s") == len(_chat(3))


# -- PostgreSQL ------------------------------------------------------------------------------------


def _pg_rows(p: "pager.Pager") -> int:
    """The session's page rows as the open transaction sees them, read past the store's own methods."""
    return int(p.store._local.conn.execute("SELECT count(*) FROM pager_pages WHERE session = 's'").fetchone()[0])


# PostgreSQL's recall index is the pages' own rows: a call that searches runs the kept writes first, so
# that it finds this call's pages as it did; these calls do not search (recall off)
PG_OPTS = {**OPTS, "recall_pages": 0}


def test_on_postgresql_a_calls_rows_are_written_after_its_request_is_ready(pg_dsn: str) -> None:
    with pager.open(pg_dsn, "s", **PG_OPTS) as p:
        p.assemble({"messages": _chat(2)})
        before = p.store.count_pages("s")
        seen: list[int] = []
        p._assemble({"messages": _chat(3)}, ready=lambda out: seen.append(_pg_rows(p)))
        assert seen == [before]  # the new rows were not written yet when the request went out
        assert p.store.count_pages("s") == len(_chat(3))
    with pager.open(pg_dsn, "s", **PG_OPTS) as p:
        assert [r.seq for r in p.store.load_pages(p.history.page)] == list(range(len(_chat(3))))


def test_on_postgresql_a_read_in_the_transaction_sees_the_kept_writes(pg_dsn: str) -> None:
    from pager.storage.postgres import PostgresStore

    store = PostgresStore(pg_dsn, max_size=2)
    try:
        head = store.ensure_session("s")
        with store.transaction():
            _branch, ids = store.record("s", head, None, 0, [new_page(1, terms=("alpha_one",)), new_page(2)])
            store.update_stats([StatUpdate(ids[1], 7, 2, False)], "s")
            store.save_state("s", {"calls": 3})
            assert store.count_pages("s") == 2
            assert [r.ref_count for r in store.load_pages(ids)] == [0, 2]
            assert store.load_state("s") == {"calls": 3}
        assert ids == sorted(ids)
        assert store.branch_page_ids(head) == ids
    finally:
        store.close()


def test_on_postgresql_a_write_that_fails_at_the_end_rolls_the_call_back(pg_dsn: str) -> None:
    with pager.open(pg_dsn, "s", **PG_OPTS) as p:
        p.assemble({"messages": _chat(2)})
        before = p.store.count_pages("s")
        p.store._write(lambda c: c.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
            "$$BEGIN RAISE EXCEPTION 'disk says no'; END$$; "
            "CREATE TRIGGER refuse BEFORE INSERT ON pager_pages FOR EACH ROW EXECUTE FUNCTION refuse()"))
        readied: list[dict] = []
        with pytest.raises(StoreError, match="disk says no"):
            p._assemble({"messages": _chat(3)}, ready=readied.append)
        assert len(readied) == 1 and p.store.count_pages("s") == before
        p.store._write(lambda c: c.execute("DROP TRIGGER refuse ON pager_pages"))
        p.assemble({"messages": _chat(3)})
        assert p.store.count_pages("s") == len(_chat(3))


def test_a_fork_in_the_same_transaction_copies_the_rows_kept_before_it(tmp_path: Path, pg_dsn: str) -> None:
    from pager.storage.postgres import PostgresStore

    for store in (SQLiteStore(tmp_path / "st"), PostgresStore(pg_dsn, max_size=2)):
        try:
            head = store.ensure_session("s")
            with store.transaction():
                branch, ids = store.record("s", head, None, 0, [new_page(1), new_page(2), new_page(3)])
                fork, more = store.record("s", branch, (branch, 2), 2, [new_page(4)])
            assert fork != branch
            assert store.branch_page_ids(fork) == ids[:2] + more
            assert store.branch_page_ids(branch) == ids
        finally:
            store.close()

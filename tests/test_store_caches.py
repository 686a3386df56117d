"""What the SQLite store keeps between transactions, and that another connection's commit makes it read again.

``SQLiteStore`` does not read a session's version, the pool ACLs or the term
numbers again while ``PRAGMA data_version`` says no other connection
committed (issue 23). Each test here has a second connection (a second
``SQLiteStore`` on the same folder: what another process is) change the
cached thing, and fails if the first one answers from its cache.
"""

from __future__ import annotations

import sqlite3

import pytest

import pager
from pager.core.pages import NewPage
from pager.storage.sqlite import SQLiteStore

from helpers import coding_session


def _page(text: str, terms: tuple[str, ...] = ()) -> NewPage:
    return NewPage(hash=text, kind="turn", role="user", step=0, tokens=1, stub_tokens=1, chars=len(text),
                   call_id=None, call_ids=(), tool_name=None, path=None, labels=(), scope="session",
                   handle=text, message=b'{"role":"user","content":"x"}', terms=terms)


@pytest.fixture
def two(tmp_path):
    a, b = SQLiteStore(tmp_path / "ctx"), SQLiteStore(tmp_path / "ctx")
    yield a, b
    a.close()
    b.close()


def _statements(store: SQLiteStore) -> list[str]:
    seen: list[str] = []
    store._db.set_trace_callback(seen.append)
    return seen


def test_a_version_another_connection_raised_is_read_again(two):
    a, b = two
    a.ensure_session("s")
    with a.transaction():
        a.add_note("s", "mine", 0)
        mine = a.lock_session("s")
    with a.transaction():
        seen = _statements(a)
        assert a.lock_session("s") == mine
        assert not [s for s in seen if "FROM sessions" in s]  # nobody else wrote: not read again
    b.add_note("s", "theirs", 0)  # another process writes the session
    with a.transaction():
        assert a.lock_session("s") == mine + 1


def test_a_rolled_back_version_is_forgotten(two):
    a, _b = two
    a.ensure_session("s")
    with a.transaction():
        before = a.lock_session("s")
    with pytest.raises(RuntimeError):
        with a.transaction():
            a.add_note("s", "gone", 0)
            assert a.lock_session("s") == before + 1
            raise RuntimeError("rolled back")
    with a.transaction():
        assert a.lock_session("s") == before


def test_pool_acls_another_connection_granted_are_seen_inside_and_outside_a_transaction(two):
    a, b = two
    a.set_pool_acl("repo", ["alice"], ["alice"])
    assert a.pool_acls()["repo"].readers == {"alice"}
    seen = _statements(a)
    with a.transaction():
        assert a.pool_acls()["repo"].readers == {"alice"}
    assert not [s for s in seen if "FROM pools" in s]  # read once, while nobody else committed
    b.set_pool_acl("repo", ["alice", "bob"], ["alice"])
    assert a.pool_acls()["repo"].readers == {"alice", "bob"}  # outside a transaction
    b.set_pool_acl("repo", ["carol"], ["carol"])
    with a.transaction():
        assert a.pool_acls()["repo"].readers == {"carol"}  # inside the next write transaction


def test_a_grant_of_this_connection_is_seen_at_once_and_a_rolled_back_one_is_not(two):
    a, _b = two
    assert a.pool_acls() == {}
    with a.transaction():
        a.set_pool_acl("repo", ["alice"], ["alice"])
        assert "repo" in a.pool_acls()
    with pytest.raises(RuntimeError):
        with a.transaction():
            a.set_pool_acl("other", ["bob"], ["bob"])
            assert "other" in a.pool_acls()
            raise RuntimeError("rolled back")
    assert sorted(a.pool_acls()) == ["repo"]


def test_term_numbers_another_connection_gave_are_read_before_numbering(two):
    a, b = two
    a.ensure_session("s")
    ids = a.record_aside("s", 0, [_page("p1", ("alpha", "beta"))])  # a's copy is whole: alpha 1, beta 2
    ids += b.record_aside("s", 0, [_page("p2", ("gamma",))])  # b numbers gamma 3
    ids += a.record_aside("s", 0, [_page("p3", ("gamma", "delta"))])  # a must not number gamma (or delta 3) again
    rows = dict(a._db.execute("SELECT term, id FROM vocab"))
    assert rows == {"alpha": 1, "beta": 2, "gamma": 3, "delta": 4}
    assert [r.terms for r in a.load_pages(ids)] == [("alpha", "beta"), ("gamma",), ("gamma", "delta")]


def test_term_numbers_are_not_read_again_while_nobody_else_committed(two):
    a, _b = two
    a.ensure_session("s")
    a.record_aside("s", 0, [_page("p1", ("alpha",))])
    seen = _statements(a)
    a.record_aside("s", 0, [_page("p2", ("beta",))])
    assert not [s for s in seen if "FROM vocab" in s]
    assert dict(a._db.execute("SELECT term, id FROM vocab")) == {"alpha": 1, "beta": 2}


def test_the_acked_mark_holds_the_versions_and_ids_the_commit_left(two):
    a, b = two
    a.ensure_session("s")
    b.ensure_session("t")
    ids = a.record_aside("s", 0, [_page("p1")])
    b.add_note("t", "theirs", 0)
    a.add_note("s", "mine", 0)
    data = a._acked.read()
    versions = dict(a._db.execute("SELECT name, version FROM sessions"))
    assert data["versions"] == versions and data["max_page"] == ids[0]


def test_steady_calls_read_nothing_again_until_another_process_writes(tmp_path):
    history = coding_session(12)
    ends = [k for k in range(2, len(history) + 1) if k == len(history) or history[k]["role"] == "assistant"]
    with pager.open(tmp_path / "ctx", session="s") as p:
        for k in ends[:-2]:
            p.assemble({"messages": history[:k]})
        seen = _statements(p.store)
        p.assemble({"messages": history[: ends[-2]]})
        assert not [s for s in seen if "FROM sessions" in s or "FROM pools" in s or "MAX(id)" in s], seen
        other = SQLiteStore(tmp_path / "ctx")  # another process grants a pool and writes the session
        other.set_pool_acl("repo", ["s"], ["s"])
        other.add_note("s", "from elsewhere", 0)
        other.close()
        seen.clear()
        p.assemble({"messages": history[: ends[-1]]})
        assert [s for s in seen if "SELECT version FROM sessions" in s]
        assert [s for s in seen if "FROM pools" in s]
        assert "from elsewhere" in p.notes()  # caught up with the other writer
        assert p.store.count_pages("s") == len(history)  # no page recorded twice


def test_data_version_moves_for_another_connection_only(tmp_path):
    """The SQLite behaviour the store relies on (``SQLiteStore._check_seen``), on this machine's SQLite."""
    path = tmp_path / "x.db"
    a = sqlite3.connect(path, isolation_level=None)
    b = sqlite3.connect(path, isolation_level=None)
    a.execute("PRAGMA journal_mode=WAL")
    a.execute("CREATE TABLE t (x)")

    def version() -> int:
        return int(a.execute("PRAGMA data_version").fetchone()[0])

    v = version()
    a.execute("INSERT INTO t VALUES (1)")
    assert version() == v  # its own commit
    b.execute("INSERT INTO t VALUES (2)")
    a.execute("BEGIN IMMEDIATE")
    assert version() != v  # another connection's, seen inside the next write transaction
    a.execute("COMMIT")
    a.close()
    b.close()


def test_page_ids_follow_another_connections_pages(two):
    a, b = two
    a.ensure_session("s")
    first = a.record_aside("s", 0, [_page("p1")])  # a knows the highest id now
    theirs = b.record_aside("s", 0, [_page("p2"), _page("p3")])
    mine = a.record_aside("s", 0, [_page("p4")])  # numbered after b's, not over them
    assert theirs == [first[0] + 1, first[0] + 2] and mine == [first[0] + 3]
    assert a.max_page_id() == mine[0] and a.load_pages(mine)[0].hash == "p4"


def test_the_ids_of_a_rolled_back_insert_are_given_again(two):
    a, _b = two
    a.ensure_session("s")
    (first,) = a.record_aside("s", 0, [_page("p1")])
    with pytest.raises(RuntimeError):
        with a.transaction():
            assert a.record_aside("s", 0, [_page("gone")]) == [first + 1]
            raise RuntimeError("rolled back")
    assert a.record_aside("s", 0, [_page("p2")]) == [first + 1]  # what SQLite gives: no gap


def test_version_raises_are_written_by_the_commit_and_counted_inside_the_transaction(two):
    a, b = two
    a.ensure_session("s")

    def version(store: SQLiteStore) -> int:
        return int(store._db.execute("SELECT version FROM sessions WHERE name='s'").fetchone()[0])

    start = version(b)
    with a.transaction():
        a.record("s", a.ensure_session("s"), None, 0, [_page("p1")])  # a raise with no state row after it
        a.add_note("s", "n", 0)
        assert a.lock_session("s") == start + 2
    assert version(b) == start + 2  # another connection sees both
    c = SQLiteStore(a.path)  # a connection that knows no version yet, inside a transaction with a raise
    try:
        with c.transaction():
            c.add_pin("s", "p")
            assert c.lock_session("s") == start + 3
            c.save_state("s", {"x": 1})
            assert c.lock_session("s") == start + 4
        assert version(b) == start + 4 and b.load_state("s") == {"x": 1}
    finally:
        c.close()

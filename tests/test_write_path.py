"""The per-call write half of ``assemble`` does only what is new, and writes what it wrote before (issue 23).

Each test holds a shortcut of the write path to the result of the long way:
the acknowledged-writes sidecar kept in pieces writes the very bytes the whole
mapping serialises to; a term numbered without reading the table back gets the
number SQLite would have given it.
"""

from __future__ import annotations

import orjson
import pytest

from pager.storage import acked as acked_mod
from pager.storage.acked import MAX_RANGES, MAX_SESSIONS, AckedMark
from pager.storage.base import branch_columns

from helpers import run_threads


def _reference_merge(data: dict, max_page: int, versions: dict, ranges: dict, at: float) -> dict:
    """The sidecar's merge as the module docstring states it: the mapping a commit leaves behind."""
    known = dict(data.get("versions") or {})
    for name, version in versions.items():
        old = int(known.pop(name, 0) or 0)
        known[name] = max(old, int(version))
    if len(known) > MAX_SESSIONS:
        known = dict(list(known.items())[-MAX_SESSIONS:])
    spans = list(data.get("ranges") or []) + [[a, b, name] for name, (a, b) in ranges.items()]
    return {"v": 1, "max_page": max(int(data.get("max_page") or 0), max_page), "versions": known,
            "ranges": spans[-MAX_RANGES:], "at": at}


def test_the_sidecar_kept_in_pieces_writes_what_the_whole_mapping_serialises_to(tmp_path, monkeypatch):
    clock = iter(range(1, 10**6))
    monkeypatch.setattr(acked_mod.time, "time", lambda: next(clock) + 0.25)
    mine, other = AckedMark(tmp_path), AckedMark(tmp_path)  # two writers of one store
    expect: dict = {}
    pid = 0
    for i in range(MAX_RANGES + 300):
        writer = other if i % 97 == 0 else mine  # another process writes now and then: re-read, not assumed
        names = [f"s{i % (MAX_SESSIONS + 40)}"] + ([f"t{i}"] if i % 5 == 0 else [])
        versions = {n: i + 1 for n in names}
        ranges = {n: (pid + 1 + k, pid + 1 + k) for k, n in enumerate(names) if i % 3}
        pid += len(names)
        writer.record(pid, versions, ranges)
        expect = _reference_merge(expect, pid, versions, ranges, i + 1.25)
        raw = (tmp_path / acked_mod.ACKED_NAME).read_bytes()
        assert raw == orjson.dumps(expect), i
    assert len(expect["ranges"]) == MAX_RANGES and len(expect["versions"]) == MAX_SESSIONS
    assert mine.read() == expect and other.read() == expect


def test_a_sidecar_reset_by_a_check_is_read_again_before_the_next_mark(tmp_path):
    mark = AckedMark(tmp_path)
    mark.record(10, {"a": 3}, {"a": (1, 10)})
    # the database lost everything: the check resets the file to what the database holds
    assert mark.check(lambda: 0, lambda names: {}) is not None
    mark.record(2, {"b": 1}, {"b": (1, 2)})
    got = mark.read()
    assert got["ranges"] == [[1, 2, "b"]] and got["versions"] == {"b": 1} and got["max_page"] == 2


# -- the store's numbering of new terms ------------------------------------------------------------

def _vocab_db(path):
    import sqlite3

    from pager.storage.sqlite_terms import VOCAB_SCHEMA

    db = sqlite3.connect(path, isolation_level=None)
    db.execute(VOCAB_SCHEMA)
    return db


def _numbered(db, vocab, terms):
    from pager.storage.sqlite_terms import decode

    return [vocab.words[i] for i in decode([vocab.encode(db, terms)])]


def test_new_terms_take_the_numbers_sqlite_gives_and_the_table_is_read_once_a_transaction(tmp_path):
    from pager.storage.sqlite_terms import TermVocab
    from pager.storage.sqlite_words import StoreWords

    path = tmp_path / "v.db"
    a_db, b_db = _vocab_db(path), _vocab_db(path)  # two writers (processes) of one store
    a, b = TermVocab(StoreWords(path)), TermVocab(StoreWords(path))  # each process its own copy
    reads: list[str] = []
    a.shared._reader.db.set_trace_callback(lambda sql: reads.append(sql) if "json_group_array" in sql else None)
    pages = [["alpha", "beta"], ["beta", "gamma", "delta"], ["delta", "alpha", "eps"]]
    a_db.execute("BEGIN IMMEDIATE")
    for terms in pages:  # one call: several pages with new terms
        assert _numbered(a_db, a, terms) == terms
    a.write(a_db)
    a_db.execute("COMMIT")
    a.committed()
    assert len(reads) == 1  # read once, numbered without reading back
    b_db.execute("BEGIN IMMEDIATE")
    assert _numbered(b_db, b, ["gamma", "zeta"]) == ["gamma", "zeta"]  # learns a's numbers, adds its own
    b.write(b_db)
    b_db.execute("COMMIT")
    b.committed()
    a_db.execute("BEGIN IMMEDIATE")
    assert _numbered(a_db, a, ["zeta", "eta"]) == ["zeta", "eta"]  # a new transaction reads b's numbers
    a.write(a_db)
    a_db.execute("COMMIT")
    a.committed()
    table = dict(a_db.execute("SELECT term, id FROM vocab"))
    assert table == {"alpha": 1, "beta": 2, "gamma": 3, "delta": 4, "eps": 5, "zeta": 6, "eta": 7}
    assert all(a.ids[t] == i for t, i in table.items()) and all(b.words[i] == t for t, i in table.items() if i < 7)


def test_numbers_of_a_rolled_back_transaction_are_forgotten_and_reused(tmp_path):
    from pager.storage.sqlite_terms import TermVocab
    from pager.storage.sqlite_words import StoreWords

    path = tmp_path / "v.db"
    a_db, b_db = _vocab_db(path), _vocab_db(path)
    a, b = TermVocab(StoreWords(path)), TermVocab(StoreWords(path))
    a_db.execute("BEGIN IMMEDIATE")
    _numbered(a_db, a, ["alpha", "beta"])
    a_db.execute("ROLLBACK")
    a.rolled_back()
    b_db.execute("BEGIN IMMEDIATE")
    _numbered(b_db, b, ["gamma"])  # takes number 1, which a had given alpha in its rolled-back transaction
    b.write(b_db)
    b_db.execute("COMMIT")
    b.committed()
    a_db.execute("BEGIN IMMEDIATE")
    assert _numbered(a_db, a, ["beta", "gamma"]) == ["beta", "gamma"]
    a.write(a_db)
    a_db.execute("COMMIT")
    assert dict(a_db.execute("SELECT term, id FROM vocab")) == {"gamma": 1, "beta": 2}


def test_the_connections_of_one_process_share_one_copy_of_the_committed_numbers(tmp_path):
    # many sessions of one store in one process (a proxy, a worker pool): one copy, and no session reads
    # again the numbers another committed; a rolled-back transaction's numbers never reach the others
    from pager.storage.sqlite import SQLiteStore
    from pager.testing import new_page

    a, b = SQLiteStore(tmp_path / "ctx"), SQLiteStore(tmp_path / "ctx")
    assert a._vocab.shared is b._vocab.shared
    reads: list[str] = []
    a._vocab.shared._reader.db.set_trace_callback(lambda sql: reads.append(sql) if "FROM vocab WHERE id" in sql
                                                   else None)
    ha, hb = a.ensure_session("a"), b.ensure_session("b")
    a.record("a", ha, None, 0, [new_page(1, terms=("alpha", "beta"))])
    with pytest.raises(RuntimeError):
        with b.transaction():
            b.record("b", hb, None, 0, [new_page(2, terms=("beta", "taken_back"))])
            b.max_page_id()  # another method runs the transaction's deferred writes (the numbering among them)
            assert b._vocab.ids["taken_back"] == 3 and "taken_back" not in a._vocab.ids
            raise RuntimeError("the call failed")
    assert "taken_back" not in b._vocab.ids and len(b._vocab.words) == 3
    before = len(reads)
    b.record("b", hb, None, 0, [new_page(3, terms=("alpha", "gamma"))])  # one read: nothing new to learn
    assert len(reads) == before + 1
    (got,) = reads[before:]
    a.record("a", ha, None, 1, [new_page(4, terms=("gamma", "delta"))])
    assert a._vocab.ids["gamma"] == 3 and a._vocab.ids["delta"] == 4  # b's number, learnt at b's commit
    table = dict(a._db.execute("SELECT term, id FROM vocab"))
    assert table == {"alpha": 1, "beta": 2, "gamma": 3, "delta": 4}
    for s, session, head in ((a, "a", ha), (b, "b", hb)):
        want = [p.terms for p in s.load_pages(s.branch_page_ids(head))]
        assert [set(t) for t in branch_columns(s, head).terms] == [set(t) for t in want]
    a.close()
    assert b._vocab.ids["delta"] == 4  # the copy outlives one store while another is open
    b.close()
    assert b._vocab.shared._reader.db is None  # the last store closed it
    c = SQLiteStore(tmp_path / "ctx")
    assert c._vocab.shared is not b._vocab.shared  # a store opened afterwards starts a new copy
    c.close()


def test_new_numbers_are_written_at_the_end_of_the_transaction_and_rolled_back_with_it(tmp_path):
    # the proxy sends a request on before the call's transaction ends: the vocab rows wait for its end
    from pager.storage.sqlite import SQLiteStore
    from pager.testing import new_page

    store = SQLiteStore(tmp_path / "ctx")
    head = store.ensure_session("s")
    sql: list[str] = []
    store._db.set_trace_callback(sql.append)
    with store.transaction():
        store.record("s", head, None, 0, [new_page(1, terms=("alpha", "beta"))])
        store.record("s", head, None, 1, [new_page(2, terms=("beta", "gamma"))])
        assert not [q for q in sql if "INTO vocab" in q]
        sql.clear()
    writes = [q for q in sql if "INTO vocab" in q]
    assert len(writes) == 3 and sql[-1] == "COMMIT"  # one statement, its three rows, then COMMIT
    assert dict(store._db.execute("SELECT term, id FROM vocab")) == {"alpha": 1, "beta": 2, "gamma": 3}
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.record("s", head, None, 2, [new_page(3, terms=("delta",))])
            raise RuntimeError("the call failed after its request was sent")
    store.record("s", head, None, 2, [new_page(4, terms=("eps", "delta"))])
    assert dict(store._db.execute("SELECT term, id FROM vocab")) == {"alpha": 1, "beta": 2, "gamma": 3, "eps": 4,
                                                                     "delta": 5}
    assert [set(t) for t in branch_columns(store, head).terms] == [{"alpha", "beta"}, {"beta", "gamma"},
                                                                   {"eps", "delta"}]
    store.close()


def test_sessions_in_threads_numbering_the_same_new_terms_with_failures_read_back_what_they_wrote(tmp_path):
    import contextlib
    import random

    from pager.storage.sqlite import SQLiteStore
    from pager.storage.sqlite_terms import TermVocab, decode
    from pager.storage.sqlite_words import StoreWords
    from pager.testing import new_page

    stores = [SQLiteStore(tmp_path / "ctx") for _ in range(4)]
    errors: list[BaseException] = []

    def work(k: int) -> None:
        rng = random.Random(k)
        store, session = stores[k], f"s{k}"
        head, n = store.ensure_session(session), 0
        try:
            for step in range(40):
                terms = tuple(dict.fromkeys(f"w{rng.randrange(120)}" for _ in range(6)))
                page = new_page(1000 * k + step, terms=terms)
                if rng.random() < 0.25:  # a call that fails after numbering its terms
                    with contextlib.suppress(RuntimeError), store.transaction():
                        store.record(session, head, None, n, [page])
                        raise RuntimeError("failed")
                else:
                    store.record(session, head, None, n, [page])
                    n += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    run_threads(work, 4)
    assert not errors
    table = dict(stores[0]._db.execute("SELECT id, term FROM vocab"))
    assert sorted(table) == list(range(1, len(table) + 1))  # dense: no number lost to a rollback
    fresh = TermVocab(StoreWords(tmp_path / "ctx" / "pager.db"))  # another process's view, from the table
    fresh.refresh()
    for k, store in enumerate(stores):
        head = store.ensure_session(f"s{k}")
        want = [set(p.terms) for p in store.load_pages(store.branch_page_ids(head))]
        assert [set(t) for t in branch_columns(store, head).terms] == want
        blobs = [b for (b,) in store._db.execute("SELECT term_ids FROM pages WHERE session=? ORDER BY id",
                                                  (f"s{k}",))]
        assert [{fresh.words[i] for i in decode([b])} for b in blobs] == want
    for store in stores:
        store.close()


def test_a_store_dropped_without_closing_lets_its_copy_of_the_numbers_go(tmp_path):
    import gc

    from pager.storage import sqlite_words
    from pager.storage.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "ctx")
    reader = store._vocab.shared._reader
    assert len([w for w in list(sqlite_words._OPEN.values()) if w.path.parent == tmp_path / "ctx"]) == 1
    del store
    gc.collect()
    assert not [w for w in list(sqlite_words._OPEN.values()) if w.path.parent == tmp_path / "ctx"]
    assert reader.db is not None  # still someone's (this test's): closed when that goes too


def test_a_forked_child_neither_shares_nor_closes_the_parent_s_copy(tmp_path):
    import os
    import sqlite3

    from pager.storage.sqlite import SQLiteStore
    from pager.storage.sqlite_words import _close_in, store_words
    from pager.testing import new_page

    store = SQLiteStore(tmp_path / "ctx")
    head = store.ensure_session("s")
    store.record("s", head, None, 0, [new_page(1, terms=("alpha",))])
    parent = store._vocab.shared
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a copy of its own, and the parent's connection left alone
        ok = store_words(tmp_path / "ctx" / "pager.db") is not parent
        _close_in(parent._reader.db, os.getppid())  # what a finalizer run at the child's exit does
        try:
            parent._reader.db.total_changes  # raises once closed
        except Exception:  # noqa: BLE001 - any failure says closed
            ok = False
        os.write(w, b"1" if ok else b"0")
        os._exit(0)
    os.close(w)
    got = os.read(r, 1)
    os.waitpid(pid, 0)
    os.close(r)
    assert got == b"1"
    assert parent._reader.all("SELECT count(*) FROM vocab") == [(1,)]
    own = sqlite3.connect(tmp_path / "ctx" / "pager.db")
    _close_in(own, os.getpid())  # in the process that opened it: closed
    with pytest.raises(sqlite3.ProgrammingError):
        own.total_changes
    store.close()


def test_a_database_replaced_under_an_open_store_is_refused_not_renumbered(tmp_path):
    import sqlite3

    from pager.errors import StoreError
    from pager.storage.sqlite import SQLiteStore
    from pager.testing import new_page

    store = SQLiteStore(tmp_path / "ctx")
    head = store.ensure_session("s")
    store.record("s", head, None, 0, [new_page(1, terms=("alpha", "beta", "gamma"))])
    assert len(store._vocab.words) == 4
    raw = sqlite3.connect(tmp_path / "ctx" / "pager.db", isolation_level=None)
    raw.execute("DELETE FROM vocab WHERE id > 1")  # an older copy put back: the numbers it lacks are free again
    raw.execute("INSERT INTO vocab VALUES (2, 'delta'), (3, 'eps')")
    raw.close()
    with pytest.raises(StoreError, match="replaced while open"):
        store.record("s", head, None, 1, [new_page(2, terms=("zeta",))])  # would have numbered zeta 4, after eps
    store.close()


# -- the state row --------------------------------------------------------------------------------

def test_the_demoted_list_is_written_when_it_changes_and_read_back_with_the_state(tmp_path):
    from pager.storage.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "ctx")
    store.ensure_session("s")
    writes: list[str] = []
    store._db.set_trace_callback(lambda sql: writes.append(sql) if "INTO settings" in sql else None)
    demoted = [3, 5, 8]
    states = [
        ({"layout": {"a": 1}, "demoted": demoted, "faults": 0, "calls": 1}, 1),
        ({"layout": {"a": 2}, "demoted": demoted, "faults": 0, "calls": 2}, 0),  # the same list: not again
        ({"layout": {"a": 2}, "demoted": [3, 5, 8, 13], "faults": 1, "calls": 3}, 1),  # a round: a new list
        ({"layout": {"a": 2}, "demoted": [], "faults": 1, "calls": 4}, 1),
        ({"calls": 5}, 0),  # a row without the list: none read back
        ({"calls": 6, "demoted": demoted}, 1),
    ]
    for state, written in states:
        before = len(writes)
        store.save_state("s", state)
        assert len(writes) - before == written
        assert store.load_state("s") == state
        (raw,) = store._db.execute("SELECT state FROM sessions WHERE name='s'").fetchone()
        assert b"demoted" not in raw and len(raw) < 64  # the row stays small
    store.close()
    again = SQLiteStore(tmp_path / "ctx")  # another process reads what was saved
    assert again.load_state("s") == states[-1][0]
    again.close()


def test_a_state_saved_in_a_rolled_back_transaction_is_written_again(tmp_path):
    import pytest

    from pager.storage.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "ctx")
    store.ensure_session("s")
    store.save_state("s", {"calls": 1, "demoted": [1]})
    demoted = [1, 2]
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.save_state("s", {"calls": 2, "demoted": demoted})
            raise RuntimeError("the call failed")
    assert store.load_state("s") == {"calls": 1, "demoted": [1]}
    store.save_state("s", {"calls": 2, "demoted": demoted})  # the same list object: written this time
    assert store.load_state("s") == {"calls": 2, "demoted": [1, 2]}
    store.close()


def test_a_state_row_saved_with_its_list_inside_still_reads(tmp_path):
    from pager.storage.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "ctx")
    store.ensure_session("s")
    old = {"layout": None, "demoted": [4, 9], "faults": 2, "calls": 7}  # as pager wrote it before
    store._db.execute("UPDATE sessions SET state=? WHERE name='s'", (orjson.dumps(old),))
    assert store.load_state("s") == old
    store.close()


def test_a_session_state_row_follows_its_demoted_set_and_shares_the_sorted_list_while_it_holds():
    import types

    from pager.session import SessionState

    sched = types.SimpleNamespace(key="layout", dump=lambda state: None)  # only its key and dump are read
    state = SessionState(demoted=frozenset({9, 2, 5}))
    first = state.row(sched)["demoted"]
    assert first == [2, 5, 9]
    same = attrs_evolve(state, calls=4).row(sched)["demoted"]
    assert same is first  # the set did not change: not sorted again
    changed = attrs_evolve(state, demoted=state.demoted | {1}).row(sched)["demoted"]
    assert changed == [1, 2, 5, 9]
    assert attrs_evolve(state, demoted=frozenset()).row(sched)["demoted"] == []


def attrs_evolve(inst, **kw):
    import attrs

    return attrs.evolve(inst, **kw)

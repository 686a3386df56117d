"""The PostgreSQL store on a real server (started by the ``pg_server`` fixture): the store
contract, many writers at once, the change feed, migrations and the full-text recall index."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest
import zygote

import pager

from pager.core.pools import owner_audience, pool_audience
from pager.errors import RecallIndexError, SchemaError, StoreError
from pager.storage import pg_index
from pager.storage.base import RecallIndex
from pager.storage.pg_index import PgIndex, page_vector
from pager.storage.postgres import SCHEMA_VERSION, PostgresStore, open_store
from pager.testing import StoreContract, new_page


class TestPostgresStore(StoreContract):
    @pytest.fixture
    def make_store(self, pg_dsn):
        return lambda: PostgresStore(pg_dsn, max_size=2)


@pytest.fixture
def store(pg_dsn):
    s = open_store(pg_dsn, max_size=8)
    yield s
    s.close()


# -- many writers -------------------------------------------------------------------------


_WRITER = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from helpers import write_pg_sessions
print(json.dumps(write_pg_sessions(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))))
"""


def test_many_processes_and_threads_lose_and_duplicate_nothing(pg_dsn):
    procs, threads, batches = 3, 4, 8
    tests = str(Path(__file__).resolve().parent)
    writers = [zygote.popen([sys.executable, "-c", _WRITER, tests, pg_dsn, f"p{p}", str(threads), str(batches)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for p in range(procs)]
    results = []
    for w in writers:  # each a process of its own (tests/zygote.py), its threads writing at once
        out, err = w.communicate(timeout=120)
        assert w.returncode == 0, err[-2000:]
        results.append(json.loads(out))
    ids = [i for r in results for i in r]
    expected = procs * threads * batches * 3
    assert len(ids) == expected and len(set(ids)) == expected
    store = PostgresStore(pg_dsn)
    try:
        assert store.count_pages() == expected
        assert len(store.sessions()) == procs * threads
        for session in store.sessions():
            pages = store.load_pages(store.branch_page_ids(store.ensure_session(session)))
            assert [p.seq for p in pages] == list(range(3 * batches))
            assert {p.session for p in pages} == {session}
            assert store.load_state(session) == {"calls": batches}
        feed = store.changes(0, limit=10 * expected)
        assert sorted(p.id for _seq, p, _m in feed) == sorted(ids)  # every page exactly once
        assert [seq for seq, _p, _m in feed] == sorted({seq for seq, _p, _m in feed})
    finally:
        store.close()


def test_change_feed_follows_commit_order_not_id_order(store):
    """A page whose id is older but whose transaction commits later is not skipped."""
    a, b = store.ensure_session("a"), store.ensure_session("b")
    recorded, release = threading.Event(), threading.Event()
    slow_ids: list[int] = []

    def slow_writer() -> None:
        with store.transaction():
            slow_ids.extend(store.record("a", a, None, 0, [new_page(1)])[1])
            recorded.set()
            release.wait(30)

    t = threading.Thread(target=slow_writer)
    t.start()
    assert recorded.wait(30)
    _, fast_ids = store.record("b", b, None, 0, [new_page(2)])
    assert fast_ids[0] > slow_ids[0]  # the later id commits first
    first = store.changes(0)
    assert [p.id for _s, p, _m in first] == fast_ids
    release.set()
    t.join()
    # an id-based follower would now ask for ids > fast_ids[0] and miss slow_ids[0]
    after = store.changes(first[-1][0])
    assert [p.id for _s, p, _m in after] == slow_ids
    assert after[0][0] > first[-1][0]


def test_concurrent_opens_of_a_fresh_database_migrate_once(pg_dsn):
    errors: list[BaseException] = []

    def open_close() -> None:
        try:
            PostgresStore(pg_dsn, max_size=1).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_close) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with PostgresStore(pg_dsn) as s:
        assert s.setting("schema_version") == str(SCHEMA_VERSION)


# -- schema, errors, parameters ------------------------------------------------------------


def test_a_newer_schema_is_refused(pg_dsn):
    with PostgresStore(pg_dsn) as s:
        s.set_setting("schema_version", "99")
    with pytest.raises(SchemaError, match="schema version 99"):
        PostgresStore(pg_dsn)


def test_unreachable_server_is_a_store_error():
    with pytest.raises(StoreError):
        PostgresStore("postgresql://pager@127.0.0.1:1/none?connect_timeout=1", timeout=1)


def _closed_port() -> int:
    import socket

    with socket.socket() as s:  # bound then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_closed_port_is_a_store_error_from_the_first_attempt():
    """Issue 20: the pool's retries are skipped; the error names libpq's reason (it waited 30 s before)."""
    with pytest.raises(StoreError, match="refused|failed"):
        pager.open(f"postgresql://pager@127.0.0.1:{_closed_port()}/none")


def test_a_bad_option_is_refused_before_connecting():
    """Options are checked first: against a server that is not there, a bad option is a ConfigError."""
    where = f"postgresql://pager@127.0.0.1:{_closed_port()}/none"
    with pytest.raises(pager.ConfigError, match="unknown option"):
        pager.open(where, no_such_option=1)
    with pytest.raises(pager.ConfigError):
        pager.open(where, context_window="big")
    with pytest.raises(pager.ConfigError, match="connect_timeout"):
        PostgresStore(where, connect_timeout=-1)
    with pytest.raises(pager.ConfigError, match="connect_timeout"):
        PostgresStore(where + "?connect_timeout=soon")


def _timeouts(store: PostgresStore) -> set[str]:
    with store._pool.connection() as conn:
        return {conn.info.get_parameters().get("connect_timeout") or
                psycopg.conninfo.conninfo_to_dict(conn.info.dsn).get("connect_timeout")}


def test_the_connect_timeout_reaches_psycopg_and_the_dsn_wins(pg_dsn, monkeypatch):
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    with PostgresStore(pg_dsn, max_size=1) as s:
        assert s.connect_timeout == 5 and _timeouts(s) == {"5"}  # the default
    with PostgresStore(pg_dsn, max_size=1, connect_timeout=7.5) as s:
        assert s.connect_timeout == 8 and _timeouts(s) == {"8"}  # whole seconds, rounded up
    sep = "&" if "?" in pg_dsn else "?"
    with PostgresStore(pg_dsn + sep + "connect_timeout=3", max_size=1, connect_timeout=7) as s:
        assert s.connect_timeout == 3 and _timeouts(s) == {"3"}  # the DSN's own wins
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "11")
    with PostgresStore(pg_dsn, max_size=1) as s:
        assert _timeouts(s) == {"11"}


def test_database_errors_are_translated(store):
    b = store.ensure_session("s")
    store.record("s", b, None, 0, [new_page(1)])
    with pytest.raises(StoreError) as info:  # the same seq twice on one branch
        store.record("s", b, None, 0, [new_page(2)])
    assert isinstance(info.value.__cause__, psycopg.errors.UniqueViolation)
    assert store.count_pages() == 1  # the failed record left nothing behind


def test_hostile_strings_are_data(store, plan):
    name = "s'; DROP TABLE pager_pages; --"
    b = store.ensure_session(name)
    page = new_page(1, handle="pg:1-'\"\\", path="a'b/c\\d.py", labels=("x'y",))
    _, (pid,) = store.record(name, b, None, 0, [page])
    store.add_note(name, "it's 100% \\ fine", 0)
    assert store.sessions() == [name] and store.page_by_handle(name, page.handle) == pid
    assert store.load_pages([pid])[0].path == "a'b/c\\d.py" and store.notes(name) == ["it's 100% \\ fine"]
    hits = store.open_index().search("'; DROP TABLE x -- a'b/c\\d.py \\ ' \" & | ! :*", session=name)
    assert [h.page_id for h in hits] == [pid]


# -- the recall index --------------------------------------------------------------------


@pytest.fixture(params=["one probe", "per term"])
def plan(request, monkeypatch):
    """Run a recall test through both query plans (the second is otherwise used only past PROBE_EACH pages)."""
    if request.param == "per term":
        monkeypatch.setattr(pg_index, "PROBE_EACH", 0)
    return request.param


def _text_page(i: int, text: str, **kw):
    import orjson

    msg = orjson.dumps({"content": text, "role": "tool", "tool_call_id": f"c{i}"}, option=orjson.OPT_SORT_KEYS)
    return new_page(i, kind="tool", message=msg, chars=len(text), **kw)


def test_index_is_current_as_soon_as_pages_commit(store, plan):
    index = store.open_index()
    assert isinstance(index, RecallIndex) and isinstance(index, PgIndex)
    b = store.ensure_session("s")
    _, ids = store.record("s", b, None, 0, [_text_page(1, "ValueError: bad frobnicator config")])
    assert [h.page_id for h in index.search("frobnicator", session="s")] == ids
    assert index.indexed_upto() == store.max_page_id() and len(index) == 1


def test_rare_words_outrank_common_ones(store, plan):
    b = store.ensure_session("s")
    pages = [_text_page(i, f"build log line {i} ok ok ok") for i in range(20)]
    pages.append(_text_page(20, "build failed: zygomorphic linker error"))
    _, ids = store.record("s", b, None, 0, pages)
    hits = store.open_index().search_terms(["build", "zygomorphic"], session="s", k=3)
    assert hits[0].page_id == ids[20] and "zygomorphic" in hits[0].snippet


def test_exact_path_beats_a_mention(store, plan):
    b = store.ensure_session("s")
    _, ids = store.record("s", b, None, 0, [
        _text_page(1, "see src/app/config.py and other files"),
        _text_page(2, "contents", path="src/app/config.py"),
    ])
    index = store.open_index()
    assert index.search_terms(["src/app/config.py"], session="s")[0].page_id == ids[1]
    assert index.search("config.py", session="s")[0].page_id == ids[1]  # the file name alone is a key


def test_visibility_sessions_private_and_shared(store, plan):
    a, b = store.ensure_session("a"), store.ensure_session("b")
    _, (pa,) = store.record("a", a, None, 0, [_text_page(1, "quokka in session a")])
    _, (shared, private) = store.record("b", b, None, 0, [
        _text_page(2, "quokka shared by b", scope="shared"),
        _text_page(3, "quokka private to carol", scope="private", owner="carol"),
    ])
    index = store.open_index()
    assert [h.page_id for h in index.search("quokka", session="a")] == [pa]
    assert {h.page_id for h in index.search("quokka", session="a", cross_session=True)} == {pa, shared}
    assert [h.page_id for h in index.search("quokka", session="b")] == [shared]  # carol's page is not b's
    assert {h.page_id for h in index.search("quokka", session="carol", cross_session=True,
                                                audiences=[owner_audience("carol")])} == {shared, private}
    # a session named like the owner holds the session's audience, not the owner's
    assert {h.page_id for h in index.search("quokka", session="carol", cross_session=True)} == {shared}


def test_a_pool_hit_carries_its_pool_owner_and_scope(store, plan):
    a, b = store.ensure_session("a"), store.ensure_session("b")
    _, (pooled,) = store.record("a", a, None, 0, [
        _text_page(1, "capybara notes for the team", scope="project", pool="repo", owner="alice")])
    _, (own,) = store.record("b", b, None, 0, [_text_page(2, "capybara in session b")])
    index = store.open_index()
    hits = {h.page_id: h for h in index.search("capybara", session="b", audiences=[pool_audience("repo")])}
    assert set(hits) == {pooled, own}
    assert (hits[pooled].session, hits[pooled].pool, hits[pooled].owner, hits[pooled].scope) == (
        "a", "repo", "alice", "project")
    assert (hits[own].pool, hits[own].owner, hits[own].scope) == (None, None, "session")
    assert [h.page_id for h in index.search("capybara", session="b")] == [own]  # the pool is not b's to read


def test_per_term_plan_ranks_as_scoring_every_candidate(store, monkeypatch):
    import random

    r = random.Random(5)
    vocab = [f"w{i}" for i in range(60)]
    b = store.ensure_session("s")
    pages = [_text_page(i, " ".join(r.choices(vocab, k=r.randint(3, 120)))) for i in range(300)]
    store.record("s", b, None, 0, pages)
    queries = [" ".join(r.sample(vocab, r.randint(1, 6))) for _ in range(30)]

    def run(index: PgIndex) -> list[list[tuple[int, float]]]:
        return [[(h.page_id, h.score) for h in index.search(q, session="s", k=7)] for q in queries]

    every = run(store.open_index())
    # per term, with bounds only: a bar set by 3 pages, no cap on the rest, the audience's size cached
    monkeypatch.setattr(pg_index, "PROBE_EACH", 0)
    monkeypatch.setattr(pg_index, "EXACT_FIRST", 3)
    monkeypatch.setattr(pg_index, "EXACT_MORE", 10**6)
    monkeypatch.setattr(pg_index, "AUDIENCE_CACHE_MIN", 0)
    index = store.open_index()
    for got in (run(index), run(index)):
        assert [[p for p, _ in hs] for hs in got] == [[p for p, _ in hs] for hs in every]
        assert [[round(x, 6) for _, x in hs] for hs in got] == [[round(x, 6) for _, x in hs] for hs in every]
    assert index._audiences  # the second pass reused the audience's size


def test_exclude_kinds_and_odd_queries(store, plan):
    b = store.ensure_session("s")
    _, ids = store.record("s", b, None, 0, [_text_page(i, f"walrus number {i}") for i in range(4)])
    index = store.open_index()
    got = index.search_terms(["walrus"], session="s", k=2, exclude={ids[3]})
    assert len(got) == 2 and ids[3] not in {h.page_id for h in got}
    assert index.search("walrus", session="s", kinds=["user"]) == []
    assert len(index.search("walrus", session="s", kinds=["tool"], k=10)) == 4
    for q in ["", "   ", "the of and", "*:()&|!'", "x" * 10_000, "上下文换窗", "🙂"]:
        assert isinstance(index.search(q, session="s"), list)
    assert index.search("walrus", session="s", k=0) == []


def test_cjk_is_matched_by_bigrams(store, plan):
    b = store.ensure_session("s")
    _, (pid,) = store.record("s", b, None, 0, [_text_page(1, "我们讨论了上下文换窗的方案")])
    assert [h.page_id for h in store.open_index().search("换窗", session="s")] == [pid]


def test_clear_and_rebuild(store, plan):
    b = store.ensure_session("s")
    _, ids = store.record("s", b, None, 0, [_text_page(i, f"narwhal {i}") for i in range(3)])
    index = store.open_index()
    index.clear()
    assert len(index) == 0 and index.indexed_upto() == ids[0] - 1 and index.search("narwhal", session="s") == []
    assert index.rebuild() == 3
    assert len(index) == 3 and index.indexed_upto() == store.max_page_id()
    assert len(index.search("narwhal", session="s", k=5)) == 3


def test_index_errors_are_recall_index_errors(pg_dsn):
    store = PostgresStore(pg_dsn)
    index = store.open_index()
    store.close()
    with pytest.raises(RecallIndexError):
        index.search("anything", session="s")


def test_page_vector_is_bounded():
    text = " ".join(f"w{i}" for i in range(60_000)) + " same" * 1000
    vec = page_vector(text, labels=("task:1",), path="a/b.py", handle="pg:1")
    assert len(vec.encode()) < 1_000_000
    assert "'=a/b.py':1A" in vec and "'=b.py':1A" in vec and "'=pg:1':1A" in vec


# -- through the facade ------------------------------------------------------------------


def test_pager_open_on_a_postgresql_url(pg_dsn):
    import pager

    history = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test in src/flux_capacitor.py"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "src/flux_capacitor.py"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "def charge():\n    raise GigawattError('1.21 needed')\n"},
        {"role": "assistant", "content": "The GigawattError comes from charge()."},
        {"role": "user", "content": "Go on."},
    ]
    p = pager.open(pg_dsn, session="e2e", context_window=20_000)
    try:
        out = p.assemble({"model": "m", "messages": history})
        assert [m["role"] for m in out["messages"]][:2] == ["system", "user"]
        hits = p.search("GigawattError")
        assert hits and hits[0].session == "e2e"
    finally:
        p.close()
    p = pager.open(pg_dsn, session="e2e", context_window=20_000)
    try:
        assert p.stats()["pages"] == len(history)  # reloaded from PostgreSQL
    finally:
        p.close()


def test_words_on_most_pages_are_dropped_from_big_queries(store, plan):
    b = store.ensure_session("s")
    pages = [_text_page(i, f"common filler {i}") for i in range(2100)] + [_text_page(2100, "common okapi")]
    _, ids = store.record("s", b, None, 0, pages)
    store._write(lambda c: c.execute("ANALYZE pager_pages"))  # what autovacuum does after a bulk load
    index = store.open_index()
    assert index._prune(["common", "okapi"]) == ["okapi"]
    assert sorted(index._prune(["common", "filler"])) == ["common", "filler"]  # all common: keep the rarest 3
    assert [h.page_id for h in index.search("common okapi", session="s", k=1)] == [ids[-1]]


def test_two_processes_serving_one_session_on_postgresql(pg_dsn):
    """Two proxy-like processes take turns on one conversation: each message recorded once."""
    import pager
    from helpers import take_turns

    history = take_turns(pg_dsn, "same", 10)
    with pager.open(pg_dsn, session="same") as p:
        assert p.store.count_pages("same") == len(history) and len(p.store.branches("same")) == 1


def test_two_pagers_of_one_session_interleave_on_postgresql(pg_dsn):
    import pager
    from helpers import coding_session

    history = coding_session(6)
    with pager.open(pg_dsn, session="s") as a, pager.open(pg_dsn, session="s") as b:
        for n in range(3, len(history) + 1):
            (a if n % 2 else b).assemble({"messages": history[:n]})
        a.note("from a")
        b.assemble({"messages": history})
        assert "from a" in b.notes()
        # the note is a page too, beside the history
        assert a.store.count_pages("s") == len(history) + 1 and len(a.store.branches("s")) == 1


def test_index_follows_a_rolled_back_transaction(store):
    b = store.ensure_session("s")
    index = store.open_index()
    with pytest.raises(RuntimeError):
        with store.transaction():
            _, ids = store.record("s", b, None, 0, [_text_page(1, "ephemeral gnu")])
            assert index.add([]) == 0 and [h.page_id for h in index.search("gnu", session="s")] == ids
            raise RuntimeError("rolled back")
    index.delete(ids)  # what the facade does after a rollback: nothing left to drop
    assert index.search("gnu", session="s") == [] and index.page_ids() == set()


def test_a_tantivy_follower_sees_every_host_s_pages(pg_dsn):
    from pager.storage.pg_follow import FeedIndex

    writer, reader = PostgresStore(pg_dsn), PostgresStore(pg_dsn, index="tantivy")
    try:
        b = writer.ensure_session("s")
        _, first = writer.record("s", b, None, 0, [_text_page(1, "axolotl habitat")])
        follower = reader.open_index()
        assert isinstance(follower, FeedIndex) and isinstance(follower, RecallIndex)
        assert [h.page_id for h in follower.search("axolotl", session="s")] == first  # caught up at open
        _, later = writer.record("s", b, None, 1, [_text_page(2, "axolotl diet", scope="shared")])
        assert follower.sync() == 1  # a search does this itself once its last poll is POLL_EVERY old
        assert {h.page_id for h in follower.search("axolotl", session="s")} == {*first, *later}  # before a search
        assert [h.page_id for h in follower.search("axolotl", session="t", cross_session=True)] == later
        assert len(follower) == 2 and follower.indexed_upto() == later[0]
        follower.close()  # shared by the store's sessions: still usable, the store shuts it down
        assert reader.open_index() is follower and len(follower) == 2
    finally:
        writer.close()
        reader.close()
    with pytest.raises(ValueError, match="index must be one of"):
        PostgresStore(pg_dsn, index="elastic")


def test_pager_on_postgresql_with_the_tantivy_follower(pg_dsn):
    import pager
    from helpers import coding_session

    history = coding_session(6)
    store = PostgresStore(pg_dsn, index="tantivy")
    try:
        with pager.open(store, session="f") as p:
            for n in range(3, len(history) + 1):
                p.assemble({"messages": history[:n]})
            assert p.search("parse_config") and p.store.count_pages("f") == len(history)
    finally:
        store.close()


# -- the pools' leak suite, on PostgreSQL ------------------------------------------------

from test_pools import (  # noqa: E402,F401 - run here too
    test_automatic_recall_shows_exactly_the_readable_pages,
    test_inspect_as_a_reader_shows_exactly_the_specified_set,
    test_the_visible_set_is_exactly_the_specified_one,
)


@pytest.fixture
def store_factory(pg_dsn):
    """The leak suite's store (tests/test_pools.py), here a PostgresStore."""
    s = PostgresStore(pg_dsn, max_size=2)
    yield s
    s.close()


@pytest.fixture
def located_store(pg_dsn):
    """The leak suite's store for ``pager inspect``: a PostgresStore and its URL."""
    s = PostgresStore(pg_dsn, max_size=2)
    yield s, pg_dsn
    s.close()


def test_both_recall_indexes_clean_a_query_the_same_way(pg_dsn, plan):
    # one clean-up (index_schema.clean_query) serves both: duplicates, stopwords, quotes and
    # brackets, case, CJK and a path as an exact key find the same pages in Tantivy and PostgreSQL
    from pager.storage.index_schema import analyze_query, clean_query

    writer, follower_store = PostgresStore(pg_dsn), PostgresStore(pg_dsn, index="tantivy")
    try:
        b = writer.ensure_session("q")
        texts = ["the walrus ate the fish", "Walrus tusks are long", "a page about pager/index.py", "上下文换窗的方案",
                 "the of and", "fish fish fish", "(frobnicator) [config]"]
        _, ids = writer.record("q", b, None, 0, [_text_page(i, t) for i, t in enumerate(texts)])
        writer.record("q", b, None, len(texts), [new_page(99, kind="file", path="pager/index.py")])
        pg, tv = writer.open_index(), follower_store.open_index()
        tv.sync()
        for q in ["walrus walrus WALRUS", "the of and", "the walrus", "'pager/index.py'", "(frobnicator)",
                  "换窗", "fish, fish!", "", "x" * 10_000, " ".join(f"w{i}" for i in range(200)) + " walrus"]:
            got_pg = {h.page_id for h in pg.search(q, session="q", k=20)}
            got_tv = {h.page_id for h in tv.search(q, session="q", k=20)}
            assert got_pg == got_tv, q
        assert clean_query(*analyze_query("the of and")) == (["the", "of", "and"], [], ["=the", "=of", "=and"])
        assert clean_query(*analyze_query("'Pager/Index.py' pager")) == (
            ["pager", "index", "py"], [], ["=pager/index.py", "=pager"])
        assert clean_query(*analyze_query("  ")) is None
    finally:
        writer.close()
        follower_store.close()

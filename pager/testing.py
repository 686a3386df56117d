"""The store conformance suite: every rule of the Store protocol, as pytest tests.

A store passes when a subclass of ``StoreContract`` that provides a
``make_store`` fixture passes::

    import pytest
    from pager.testing import StoreContract

    class TestMyStore(StoreContract):
        @pytest.fixture
        def make_store(self, tmp_path):
            def make():                     # a new, empty store each call ...
                return MyStore(tmp_path / "s")
            return make                     # ... or the same one reopened, for durable stores

``make_store()`` returns a store; durable stores return the same storage
reopened on a second call (``durable = True``, the default), so the suite also
checks what survives a close. Set ``durable = False`` for stores that forget.
pager runs this suite against SQLite, memory and PostgreSQL.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import attrs
import orjson
import pytest

from pager.errors import StoreError
from pager.storage.base import NewPage, PageColumns, PageRecord, StatUpdate, Store, branch_columns

__all__ = ["StoreContract", "new_page"]


def new_page(i: int, *, kind: str = "user", step: int = 0, **kw: Any) -> NewPage:
    """Return a small ``NewPage`` numbered ``i`` (a user message unless ``kind`` says otherwise)."""
    role = {"tool": "tool", "file": "tool", "assistant": "assistant", "system": "system"}.get(kind, "user")
    msg: dict[str, Any] = {"role": role, "content": f"message {i}"}
    if role == "tool":
        msg["tool_call_id"] = kw.get("call_id") or f"c{i}"
    fields: dict[str, Any] = {
        "hash": f"h{i:08d}", "kind": kind, "role": role, "step": step, "tokens": 10 + i, "stub_tokens": 5,
        "chars": 9, "handle": f"pg:{i}-abc{i:03d}", "message": orjson.dumps(msg, option=orjson.OPT_SORT_KEYS),
    }
    fields.update(kw)
    return NewPage(**fields)


class StoreContract:
    """Mix into a test class that defines a ``make_store`` fixture (see the module docstring)."""

    durable = True

    # -- helpers ------------------------------------------------------------------------

    @pytest.fixture
    def store(self, make_store: Callable[[], Store]) -> Any:
        s = make_store()
        yield s
        s.close()

    def _reopen(self, make_store: Callable[[], Store], store: Store) -> Store:
        store.close()
        return make_store()

    # -- the contract ---------------------------------------------------------------------

    def test_is_a_store(self, store: Store) -> None:
        assert isinstance(store, Store)

    def test_sessions_and_head_branch(self, store: Store) -> None:
        assert store.sessions() == [] and not store.has_session("a")
        b = store.ensure_session("a")
        assert store.ensure_session("a") == b
        store.ensure_session("b")
        assert store.sessions() == ["a", "b"] and store.has_session("a")
        assert [x.id for x in store.branches("a")] == [b]
        assert store.branch_page_ids(b) == []

    def test_record_and_read_back(self, store: Store) -> None:
        b = store.ensure_session("s")
        branch, ids = store.record("s", b, None, 0, [new_page(1), new_page(2, kind="assistant", step=0)])
        assert branch == b and len(ids) == 2 and ids[0] < ids[1] and ids[0] > 0
        assert store.branch_page_ids(b) == ids
        recs = store.load_pages(ids)
        assert all(isinstance(r, PageRecord) for r in recs)
        assert [r.seq for r in recs] == [0, 1] and recs[1].kind == "assistant"
        assert recs[0].last_ref == recs[0].step and recs[0].ref_count == 0 and not recs[0].stale
        session, msg = store.message(ids[0])
        assert session == "s" and msg == {"role": "user", "content": "message 1"}
        assert store.max_page_id() == ids[1]
        assert store.count_pages() == 2 and store.count_pages("s") == 2 and store.count_pages("x") == 0

    def test_fields_round_trip(self, store: Store) -> None:
        b = store.ensure_session("s")
        page = new_page(3, kind="file", call_id="c9", path="src/a.py", labels=("task:0", "goal:x"),
                        tool_name="read_file", scope="shared", owner="alice", call_ids=(),
                        terms=("src/a.py", "load_config"))
        _, (pid,) = store.record("s", b, None, 0, [page])
        rec = store.load_pages([pid])[0]
        assert (rec.kind, rec.call_id, rec.path, rec.labels, rec.tool_name, rec.scope, rec.owner) == (
            "file", "c9", "src/a.py", ("task:0", "goal:x"), "read_file", "shared", "alice")
        assert rec.handle == page.handle and rec.hash == page.hash and rec.tokens == page.tokens
        assert set(rec.terms or ()) == {"src/a.py", "load_config"}

    def test_aside_pages_belong_to_no_branch(self, store: Store) -> None:
        b = store.ensure_session("s")
        _, ids = store.record("s", b, None, 0, [new_page(1), new_page(2)])
        with store.transaction():
            before = store.lock_session("s")
        note = new_page(7, kind="note", scope="project", owner="alice", pool="repo", terms=("load_config",))
        (aside,) = store.record_aside("s", 2, [note])
        with store.transaction():
            assert store.lock_session("s") > before  # another writer of the session notices
        assert aside > ids[-1] and store.branch_page_ids(b) == ids  # no history loads it
        rec = store.load_pages([aside])[0]
        assert (rec.kind, rec.seq, rec.scope, rec.owner, rec.pool) == ("note", 2, "project", "alice", "repo")
        assert store.page_by_handle("s", note.handle) == aside and aside in store.pages_by_handle(note.handle)
        assert [r.id for r, _ in store.iter_pages(ids[-1])] == [aside]  # the index is fed it like any page
        assert store.aside_pages("s") == [aside] and store.aside_pages("t") == []
        assert store.count_pages("s") == 3
        _, (after,) = store.record("s", b, None, 2, [new_page(3)])
        assert store.branch_page_ids(b) == ids + [after]

    def test_pages_know_when_they_were_stored(self, store: Store) -> None:
        b = store.ensure_session("s")
        t0 = time.time()
        _, (pid,) = store.record("s", b, None, 0, [new_page(1)])
        created = store.load_pages([pid])[0].created
        assert created is not None and t0 - 5 <= created <= time.time() + 5

    def test_page_ids_grow_across_sessions(self, store: Store) -> None:
        a, b = store.ensure_session("a"), store.ensure_session("b")
        _, ia = store.record("a", a, None, 0, [new_page(1)])
        _, ib = store.record("b", b, None, 0, [new_page(2)])
        _, ia2 = store.record("a", a, None, 1, [new_page(3)])
        assert ia[0] < ib[0] < ia2[0]

    def test_running_digest_round_trips(self, store: Store) -> None:
        # the digest a record puts on its last page is read back as written (None on the others)
        b = store.ensure_session("s")
        digest = "ab" * 32
        _, ids = store.record("s", b, None, 0, [new_page(0), new_page(1, digest=digest)])
        assert [r.digest for r in store.load_pages(ids)] == [None, digest]

    def test_branch_columns_are_load_pages_as_columns(self, store: Store) -> None:
        # a store's own branch_columns (when it has one) gives exactly what load_pages of the branch gives
        b = store.ensure_session("s")
        _, ids = store.record("s", b, None, 0, [
            new_page(0, kind="system"), new_page(1, terms=("src/a.py", "parse_config"), labels=("task:1",)),
            new_page(2, kind="assistant", call_ids=("c2", "c3"), step=0, digest="cd" * 32),
            new_page(3, kind="tool", call_id="c2", tool_name="bash", step=1, path="x.py")])
        nb, _ = store.record("s", b, (b, 2), 2, [new_page(4)])
        store.update_stats([StatUpdate(ids[1], 7, 2, True)])
        for branch in (b, nb):
            want = PageColumns.of(store.load_pages(store.branch_page_ids(branch)))
            got = branch_columns(store, branch)
            for name in [a.name for a in attrs.fields(PageColumns) if a.name != "term_table"]:
                mine = getattr(got, name)
                if name == "terms":
                    mine = [None if t is None else set(t) for t in mine]
                    assert mine == [None if t is None else set(t) for t in want.terms], name
                else:
                    assert list(mine) == list(getattr(want, name)), name

    def test_fork_shares_the_prefix_and_keeps_the_old_branch(self, store: Store) -> None:
        b = store.ensure_session("s")
        _, ids = store.record("s", b, None, 0, [new_page(i) for i in range(4)])
        nb, new = store.record("s", b, (b, 2), 2, [new_page(10)])
        assert nb != b
        assert store.branch_page_ids(nb) == ids[:2] + new
        assert store.branch_page_ids(b) == ids  # the old branch is kept as it was
        assert store.ensure_session("s") == nb  # the fork became the head
        fork = [x for x in store.branches("s") if x.id == nb][0]
        assert (fork.parent, fork.fork_seq) == (b, 2)

    def test_handles(self, store: Store) -> None:
        b = store.ensure_session("s")
        store.ensure_session("t")
        _, ids = store.record("s", b, None, 0, [new_page(1)])
        assert store.page_by_handle("s", "pg:1-abc001") == ids[0]
        assert store.page_by_handle("t", "pg:1-abc001") is None  # handles are per session
        assert store.page_by_handle("s", "pg:404-nope") is None

    def test_unknown_page_is_a_store_error(self, store: Store) -> None:
        with pytest.raises(StoreError):
            store.message(987654)
        with pytest.raises(StoreError):
            store.load_pages([987654])

    def test_iter_pages_in_id_order_after_a_watermark(self, store: Store) -> None:
        b = store.ensure_session("s")
        _, ids = store.record("s", b, None, 0, [new_page(i) for i in range(5)])
        got = [r.id for r, _m in store.iter_pages(ids[1], batch=2)]
        assert got == ids[2:]
        assert [m["content"] for _r, m in store.iter_pages(0)] == [f"message {i}" for i in range(5)]
        ids_after = getattr(store, "page_ids_after", None)  # optional: the index's catch-up reads ids alone
        if ids_after is not None:
            assert list(ids_after(ids[1])) == ids[2:] and list(ids_after(ids[-1])) == []
        present = getattr(store, "present_pages", None)  # optional: which ids are stored, in one query
        if present is not None:
            assert set(present([ids[0], ids[3], 987654])) == {ids[0], ids[3]} and set(present([])) == set()

    def test_update_stats(self, store: Store) -> None:
        b = store.ensure_session("s")
        _, ids = store.record("s", b, None, 0, [new_page(1), new_page(2)])
        store.update_stats([StatUpdate(ids[0], last_ref=7, ref_count=3, stale=True)])
        r0, r1 = store.load_pages(ids)
        assert (r0.last_ref, r0.ref_count, r0.stale) == (7, 3, True)
        assert (r1.ref_count, r1.stale) == (0, False)

    def test_state_settings_pins_notes_events(self, store: Store) -> None:
        store.ensure_session("s")
        assert store.load_state("s") is None
        store.save_state("s", {"calls": 3, "layout": None})
        assert store.load_state("s") == {"calls": 3, "layout": None}
        assert store.setting("k") is None and store.setting("k", "d") == "d"
        store.set_setting("k", "v")
        store.set_setting("k", "w")
        assert store.setting("k") == "w"
        store.add_pin("s", "goal one")
        store.add_note("s", "note one", 3)
        store.add_pin("s", "goal two")
        assert store.pins("s") == ["goal one", "goal two"] and store.notes("s") == ["note one"]
        assert store.pins("other") == [] and store.notes("other") == []
        kinds = [(e.kind, e.text) for e in store.timeline("s")]
        assert kinds == [("pin", "goal one"), ("note", "note one"), ("pin", "goal two")]
        store.add_event("s", "rollover", {"generation": 1})
        store.add_event("s", "intent", None)
        assert [(e.kind, e.payload) for e in store.events("s")] == [("rollover", {"generation": 1}), ("intent", None)]
        assert [e.kind for e in store.events("s", "intent")] == ["intent"]

    def test_transaction_is_all_or_nothing(self, store: Store) -> None:
        b = store.ensure_session("s")
        with pytest.raises(RuntimeError):
            with store.transaction():
                store.record("s", b, None, 0, [new_page(1)])
                store.add_note("s", "lost", 0)
                raise RuntimeError("boom")
        assert store.count_pages() == 0 and store.notes("s") == [] and store.branch_page_ids(b) == []
        with store.transaction():
            with store.transaction():  # re-entrant: joins the outer one
                store.record("s", b, None, 0, [new_page(1)])
            store.save_state("s", {"calls": 1})
        assert store.count_pages() == 1 and store.load_state("s") == {"calls": 1}

    def test_every_write_raises_the_session_version(self, store: Store) -> None:
        b = store.ensure_session("s")
        store.ensure_session("t")
        seen = [store.lock_session("s")]
        for write in (
            lambda: store.record("s", b, None, 0, [new_page(1)]),
            lambda: store.save_state("s", {"calls": 1}),
            lambda: store.add_note("s", "n", 0),
            lambda: store.add_pin("s", "p"),
        ):
            with store.transaction():
                write()
            seen.append(store.lock_session("s"))
        assert seen == sorted(set(seen)) and len(seen) == 5  # strictly growing
        assert store.lock_session("t") == store.lock_session("t")  # other sessions untouched

    def test_scopes_pools_and_handles_across_sessions(self, store: Store) -> None:
        a, b = store.ensure_session("a"), store.ensure_session("b")
        _, (pa,) = store.record("a", a, None, 0, [new_page(1, scope="project", pool="repo", owner="alice")])
        _, (pb,) = store.record("b", b, None, 0, [new_page(1)])  # the same handle in another session
        rec = store.load_pages([pa])[0]
        assert (rec.scope, rec.pool, rec.owner) == ("project", "repo", "alice")
        assert store.pages_by_handle("pg:1-abc001") == [pb, pa]
        before = store.lock_session("a")
        with store.transaction():
            store.set_scope(pa, "shared", None)
        assert (store.load_pages([pa])[0].scope, store.load_pages([pa])[0].pool) == ("shared", None)
        assert store.lock_session("a") > before
        assert store.pool_acls() == {}
        store.set_pool_acl("repo", ["bob", "*"], ["alice"])
        acl = store.pool_acls()["repo"]
        assert acl.readers == {"bob", "*"} and acl.writers == {"alice"}
        with pytest.raises(StoreError):
            store.set_scope(987654, "shared", None)

    def test_recall_index_is_provided(self, store: Store) -> None:
        index = store.open_index()
        try:
            assert index.indexed_upto() >= 0 and len(index) >= 0
        finally:
            index.close()

    def test_what_survives_a_reopen(self, make_store: Callable[[], Store]) -> None:
        if not self.durable:
            pytest.skip("this store keeps nothing across close (durable = False)")
        store = make_store()
        b = store.ensure_session("s")
        _, ids = store.record("s", b, None, 0, [new_page(1), new_page(2)])
        store.add_note("s", "kept", 0)
        store.save_state("s", {"calls": 2})
        store = self._reopen(make_store, store)
        try:
            assert store.sessions() == ["s"] and store.branch_page_ids(b) == ids
            assert store.notes("s") == ["kept"] and store.load_state("s") == {"calls": 2}
            assert store.message(ids[1])[1]["content"] == "message 2"
        finally:
            store.close()

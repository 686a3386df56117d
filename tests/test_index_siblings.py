"""A session opened beside others of the same process (a proxy's): the recall index's catch-up.

The sessions of one store in one process share the index object and its buffer
of pages not committed yet. Opening a session used to feed those pages again from
the store and commit them (a Tantivy commit, ~30 ms, for every session a proxy
opened). Pages no other session may read are now left to the commit that will take
them; pages another session may read are committed as before, so the session
opening can recall them (issue 23).
"""

from __future__ import annotations

from pathlib import Path

import pager
from pager.storage.index import PageIndex


def _history(word: str, n: int) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": "agent"}]
    for i in range(n):
        msgs += [{"role": "user", "content": f"look at {word}{i} please"},
                 {"role": "assistant", "content": f"{word}{i} looks fine"}]
    return msgs


def test_a_sibling_session_s_uncommitted_pages_are_left_to_its_own_commit(tmp_path: Path) -> None:
    store = tmp_path / "ctx"
    with pager.open(store, session="first", log_reports=False) as first:
        first.assemble({"messages": _history("alpha", 3)})
        index = first._feeder.index
        upto, pending = index.indexed_upto(), index.pending
        assert pending > 0  # under COMMIT_EVERY: buffered, not committed
        with pager.open(store, session="second", log_reports=False) as second:
            assert second._feeder.index._target() is index._target()  # one index object per folder per process
            assert index.indexed_upto() == upto and index.pending == pending  # no commit, nothing fed again
            # a process killed now: the committed watermark does not claim the buffered pages
            assert PageIndex(store / "index").indexed_upto() == upto
            second.assemble({"messages": _history("beta", 2)})
    # closed: every page committed once
    with pager.open(store, session="third", log_reports=False) as third:
        assert len(third._feeder.index) == third.store.count_pages()
        assert third._feeder.index.page_ids() == {r.id for r, _m in third.store.iter_pages(0)}


def test_a_page_other_sessions_may_read_is_committed_for_the_session_opening(tmp_path: Path) -> None:
    store = tmp_path / "ctx"
    with pager.open(store, session="alice/a", owner="alice", scope="project", pool="repo",
                    log_reports=False) as alice:
        alice.grant("repo", readers=["*"], writers=["alice"])
        alice.note("decision: 5eed7777cafe ships behind a flag")
        note = alice.store.max_page_id()
        assert alice._feeder.index.indexed_upto() < note  # buffered
        with pager.open(store, session="bob/b", owner="bob", recall_min_strength=0, log_reports=False) as bob:
            assert bob._feeder.index.indexed_upto() >= note  # committed as bob opened
            out = bob.assemble({"messages": [{"role": "system", "content": "agent"},
                                             {"role": "user", "content": "status of 5eed7777cafe?"}]})
            assert "ships behind a flag" in str(out["messages"])


def test_a_catch_up_beside_held_pages_records_a_watermark_below_them(tmp_path: Path) -> None:
    from pager.storage.indexing import feed_index

    with pager.open(tmp_path / "ctx", session="s", log_reports=False) as p:
        p.assemble({"messages": _history("gamma", 4)})
        ids = sorted(r.id for r, _m in p.store.iter_pages(0))
        ix = PageIndex(tmp_path / "other-index")
        try:
            held = {ids[3]}
            assert feed_index(p.store, ix, 0, held=held) == len(ids) - 1
            assert ix.indexed_upto() == ids[3] - 1  # a crash now re-feeds the held page and what follows
            assert ix.page_ids() == set(ids) - held
            assert feed_index(p.store, ix, ix.indexed_upto(), held=set(ids)) == 0  # all held: no commit
            assert ix.indexed_upto() == ids[3] - 1
        finally:
            ix.close()


def test_a_session_opening_beside_buffered_siblings_reads_none_of_their_pages(tmp_path: Path, monkeypatch) -> None:
    """The catch-up asks the store for ids alone and reads back only pages it feeds.

    Reading every held page (message decoded) to skip it made a proxy's new session
    cost grow with the pages all the sessions before it had buffered: quadratic in
    sessions opened between commits.
    """
    from pager.storage.sqlite import SQLiteStore

    read: list[int] = []
    real = SQLiteStore.iter_pages

    def counting(self, after_id=0, batch=500):
        for rec, msg in real(self, after_id, batch):
            read.append(rec.id)
            yield rec, msg

    monkeypatch.setattr(SQLiteStore, "iter_pages", counting)
    store = tmp_path / "ctx"
    opened = [pager.open(store, session=f"s{k}", log_reports=False) for k in range(4)]
    try:
        for k, p in enumerate(opened):
            p.assemble({"messages": _history(f"w{k}x", 3)})
        index = opened[0]._feeder.index
        held = index.buffered_session_ids()
        assert len(held) >= 4 * 6 and index.pending  # every sibling's pages buffered, none committed
        read.clear()
        with pager.open(store, session="new", log_reports=False) as p:
            assert not read  # no page read back to be skipped
            assert index.buffered_session_ids() == held and index.indexed_upto() < min(held)
            p.assemble({"messages": _history("delta", 1)})
    finally:
        for p in opened:
            p.close()
    with pager.open(store, session="after", log_reports=False) as p:
        assert p._feeder.index.page_ids() == {r.id for r, _m in real(p.store, 0)}


def test_buffered_session_ids_follow_adds_deletes_rescopes_and_commits(tmp_path: Path) -> None:
    from pager.storage.index import IndexDoc

    ix = PageIndex(tmp_path / "index")
    try:
        def doc(pid: int, scope: str = "session") -> IndexDoc:
            return IndexDoc(page_id=pid, session="s", step=pid, kind="tool", text=f"word{pid} here", scope=scope,
                            owner="o" if scope != "session" else "", pool="p" if scope == "project" else None)

        ix.add([doc(1), doc(2), doc(3), doc(4, "project")])
        assert ix.buffered_session_ids() == {1, 2, 3}  # a page others may read is not held
        ix.delete([2])
        assert ix.buffered_session_ids() == {1, 3}  # a page dropped from the buffer is not held either
        ix.add([doc(3, "project"), doc(5)])
        assert ix.buffered_session_ids() == {1, 5}  # re-added with a wider scope: no longer its session's alone
        ix.commit()
        assert ix.buffered_session_ids() == frozenset() and ix.page_ids() == {1, 3, 4, 5}
    finally:
        ix.close()

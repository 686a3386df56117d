"""What may skip waiting for a background commit, and that it answers what waiting answers (issue 23).

A background commit (``PageIndex.commit(wait=False)``) is held here until the
test lets it go, so a use that does not wait for it is seen not to: it returns
while the commit has not run. Two uses skip the wait:

- ``add``: its pages go to the next commit, never into the running one;
- ``beyond_session``, when its answer is False and the running commit cannot
  change that (``BehindMixin._nothing_beyond``).

Everything else waits. The property test draws the committed pages, the
running commit's batch (new pages, replacements with another scope, deletes),
the question and whether it was asked before, and checks that the answer
given at once is the answer after the commit landed and the answer of an index
that committed in the caller's thread. Not a Tantivy score is involved: a
search always waits, because a commit moves every BM25 score (the document
count and the average length change), so only an answer that no score can
change is given early; ``test_a_commit_of_unrelated_pages_moves_the_scores``
shows why.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import pytest
import tantivy
from hypothesis import example, given, settings, strategies as st
from sizes import examples, size

from pager.core.pools import owner_audience, pool_audience
from pager.errors import RecallIndexError
from pager.storage import index as index_mod
from pager.storage.index import IndexDoc, PageIndex


class Held:
    """Background commits wait for ``release``; ``waits`` counts the uses that had to wait for one."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.waits = 0


@contextlib.contextmanager
def held_commits() -> Iterator[Held]:
    """Hold every background commit until a use waits for it (that use lets it run first)."""
    h = Held()
    commit_behind, join = PageIndex._commit_behind, PageIndex._join

    def behind(self: PageIndex, *args: object) -> None:
        h.go.wait()
        h.go.clear()
        commit_behind(self, *args)

    def joining(self: PageIndex) -> None:
        if self._bg is not None and not self._lock._is_owned():  # type: ignore[attr-defined]
            h.waits += 1
            h.go.set()
        join(self)

    PageIndex._commit_behind, PageIndex._join = behind, joining  # type: ignore[method-assign]
    try:
        yield h
    finally:
        PageIndex._commit_behind, PageIndex._join = commit_behind, join  # type: ignore[method-assign]
        h.go.set()  # a commit nobody waited for: let it finish


def _doc(pid: int, scope: str = "session", session: str = "A", owner: str = "", pool: str | None = None) -> IndexDoc:
    return IndexDoc(page_id=pid, session=session, step=pid, kind="tool", text=f"retry loop run{pid}",
                    scope=scope, owner=owner, pool=pool if scope == "project" else None)


ASK = dict(session="A", audiences=(owner_audience("A"), pool_audience("p")), cross_session=True)


def test_add_does_not_wait_and_its_pages_go_to_the_next_commit(tmp_path):
    ix = PageIndex(tmp_path / "ix")
    try:
        with held_commits() as h:
            ix.add([_doc(p) for p in range(1, 11)])
            ix.commit(wait=False)
            ix.add([_doc(p) for p in range(11, 16)])  # the commit is held: this returns all the same
            assert h.waits == 0 and ix._bg is not None and ix._bg.is_alive()
            assert ix.pending == 5  # waits: the running commit took pages 1-10 only
            assert h.waits == 1
            assert len(ix) == 10 and ix.indexed_upto() == 10
            ix.commit()
            assert len(ix) == 15 and ix.indexed_upto() == 15 and ix.pending == 0
    finally:
        ix.close()


def test_a_delete_after_an_add_during_a_commit_still_deletes(tmp_path):
    ix = PageIndex(tmp_path / "ix")
    try:
        with held_commits():
            ix.add([_doc(1)])
            ix.commit(wait=False)
            ix.add([_doc(2), _doc(3)])
            ix.delete([2])  # waits; the page added meanwhile is in the buffer it deletes from
            ix.commit()
            assert sorted(h.page_id for h in ix.search("retry", session="A", k=9)) == [1, 3]
    finally:
        ix.close()


def test_a_steady_beyond_question_does_not_wait(tmp_path):
    ix = PageIndex(tmp_path / "ix")
    try:
        ix.add([_doc(p) for p in range(1, 5)])
        ix.commit()
        assert ix.beyond_session(**ASK, refresh=True) is False  # answered on this searcher: memoized
        with held_commits() as h:
            ix.add([_doc(p) for p in range(5, 9)])  # this session's pages only
            ix.commit(wait=False)
            assert ix.beyond_session(**ASK, refresh=True) is False
            assert h.waits == 0 and ix._bg.is_alive()  # answered while the commit is held
            assert len(ix) == 8  # waits
            assert h.waits == 1
            # the next commit, asked at once on the searcher that commit loaded: still no wait
            ix.add([_doc(9)])
            ix.commit(wait=False)
            assert ix.beyond_session(**ASK) is False and h.waits == 1
    finally:
        ix.close()


@pytest.mark.parametrize("scope", ["shared", "private", "project"])
def test_a_page_of_another_audience_in_the_running_commit_is_waited_for(tmp_path, scope):
    ix = PageIndex(tmp_path / "ix")
    try:
        ix.add([_doc(1)])
        ix.commit()
        assert ix.beyond_session(**ASK) is False
        with held_commits() as h:
            ix.add([_doc(2, scope=scope, pool="p")])
            ix.commit(wait=False)
            assert ix.beyond_session(**ASK) is True  # what the commit lands: it had to wait
            assert h.waits == 1
    finally:
        ix.close()


@pytest.mark.parametrize("refresh", [True, False])
def test_another_writers_commit_is_waited_for(tmp_path, refresh):
    """Our commit loads what another writer committed before it took the writer, refresh or not."""
    where = tmp_path / "ix"
    ix = PageIndex(where)
    try:
        ix.add([_doc(1)])
        ix.commit()
        assert ix.beyond_session(**ASK) is False
        other = PageIndex(where)  # another process's index on the same folder
        other.add([_doc(100, scope="shared", session="B")])
        other.commit()
        other.close()
        with held_commits() as h:
            ix.add([_doc(2)])
            ix.commit(wait=False)
            assert ix.beyond_session(**ASK, refresh=refresh) is True
            assert h.waits == 1
    finally:
        ix.close()


def test_a_failed_background_commit_still_raises_typed_where_it_is_waited_for(tmp_path, monkeypatch):
    monkeypatch.setattr(index_mod, "WRITER_WAIT_SECONDS", 0.0)
    where = tmp_path / "ix"
    ix = PageIndex(where)
    ix.add([_doc(1)])
    ix.commit()
    assert ix.beyond_session(**ASK) is False
    other = tantivy.Index(index_mod._SCHEMA, str(where), reuse=True)
    held = other.writer(heap_size=15_000_000, num_threads=1)  # another process's writer holds the lock
    try:
        ix.add([_doc(2)])
        ix.commit(wait=False)
        ix._bg.join()  # the thread has failed (a test may wait for a thread; nothing sleeps)
        ix.add([_doc(3)])  # does not wait, so it does not raise: the failure is kept for a use that waits
        with pytest.raises(RecallIndexError, match="cannot write the recall index"):
            ix.beyond_session(**ASK)  # a failed commit is never answered around
        assert ix.beyond_session(**ASK) is False  # raised once
        assert ix.pending == 1  # page 3 came after the failed batch and is still buffered
    finally:
        held.rollback()
        del held
        ix.close()


SCOPES = st.sampled_from(["session", "session", "shared", "private", "project"])
PAGE = st.tuples(SCOPES, st.sampled_from(["A", "B"]), st.sampled_from(["", "A", "C"]), st.sampled_from(["p", "q"]))


def _make(pid: int, spec: tuple[str, str, str, str]) -> IndexDoc:
    scope, session, owner, pool = spec
    return _doc(pid, scope=scope, session=session, owner=owner, pool=pool)


def test_the_answer_given_at_once_is_the_answer_after_the_commit():
    seen = {"at once": 0, "waited": 0}
    _answer_at_once(seen)
    # over the examples, both ways of answering are checked: some answers come without a wait, some after one
    assert seen["at once"] > 0 and seen["waited"] > 0, seen


# 20 examples in the suite (60 in the full campaign): each commits four small in-RAM indexes, ~15 ms of
# CPU each whatever their size; the pages are few (at most 6 + 4 over 5 scopes and 2 sessions), so 20
# draws already mix committed, replaced and deleted pages of every audience, asked before or not
@settings(max_examples=examples(20, 60))
@given(
    committed=st.lists(PAGE, max_size=6),
    added=st.lists(PAGE, max_size=4),
    replaced=st.lists(st.tuples(st.integers(1, 6), PAGE), max_size=2),
    deleted=st.lists(st.integers(1, 6), max_size=2),
    asked_before=st.booleans(),
    cross=st.booleans(),
    owner=st.booleans(),
)
# one answer of each kind whatever is drawn: nothing beyond the session, asked before (answered at once);
# nothing beyond it asked before, then a shared page of another session in the running batch (the answer
# must wait for it: True after the commit)
@example(committed=[("session", "A", "", "p")], added=[("session", "A", "", "p")], replaced=[], deleted=[],
         asked_before=True, cross=True, owner=False)
@example(committed=[("session", "A", "", "p")], added=[("shared", "B", "", "p")], replaced=[], deleted=[],
         asked_before=True, cross=True, owner=False)
def _answer_at_once(seen, committed, added, replaced, deleted, asked_before, cross, owner):
    ask = dict(session="A", audiences=(owner_audience("A"),) if owner else (pool_audience("p"),),
               cross_session=cross)
    batch = [_make(len(committed) + 1 + i, spec) for i, spec in enumerate(added)]
    batch += [_make(pid, spec) for pid, spec in replaced if pid <= len(committed)]
    gone = [pid for pid in deleted if pid <= len(committed)]
    reference, behind = PageIndex(), PageIndex()
    try:
        for ix in (reference, behind):
            ix.add([_make(i + 1, spec) for i, spec in enumerate(committed)])
            ix.commit()
            if asked_before:
                ix.beyond_session(**ask)
        reference.delete(gone)
        reference.add(batch)
        reference.commit()
        want = reference.beyond_session(**ask)
        with held_commits() as h:
            behind.delete(gone)
            behind.add(batch)
            behind.commit(wait=False)
            at_once = behind.beyond_session(**ask)
            waited = h.waits
            after = behind.beyond_session(**ask)
        assert at_once == after == want
        assert waited == 1 or at_once is False  # only False is ever answered without waiting
        seen["waited" if waited else "at once"] += 1
    finally:
        reference.close()
        behind.close()


def test_a_commit_of_unrelated_pages_moves_the_scores():
    """Why a search always waits: pages that match nothing of the query still reorder its hits.

    BM25 weighs a word by how rare it is among all pages: 64 new pages make
    every word rarer, "retry" (on three pages) gains on "alpha" (on one), and
    the page that says "retry" six times overtakes the one that says "alpha".
    """

    def d(pid: int, text: str) -> IndexDoc:
        return IndexDoc(page_id=pid, session="A", step=pid, kind="tool", text=text)

    ix = PageIndex()
    try:
        ix.add([d(1, "alpha"), d(2, "retry " * 6), d(3, "retry"), d(4, "retry"), d(5, "zeta")])
        ix.commit()
        assert [h.page_id for h in ix.search("alpha retry", session="A", k=2)] == [1, 2]
        ix.add([d(pid, "omega") for pid in range(6, 70)])  # none of them matches the query
        ix.commit()
        assert [h.page_id for h in ix.search("alpha retry", session="A", k=2)] == [2, 1]
    finally:
        ix.close()


def test_a_session_whose_commits_are_never_waited_for_unless_needed_plans_what_a_waiting_one_does(tmp_path):
    """End to end: every background commit held until a use must wait; prompts and reports as with waited commits."""
    import orjson

    import pager
    from pager.lab.synth import generate_session

    # 30 steps in the suite (60 in the full campaign): still several commits and calls answered while one
    # was held (asserted at the end)
    _h, msgs = generate_session(5, size(30, 60), big_every=5)
    bounds = [k for k in range(2, len(msgs) + 1) if k == len(msgs) or msgs[k]["role"] == "assistant"]
    opts = {"session": "s", "context_window": 6000, "log_reports": False}  # pools on: beyond_session is asked
    answered_at_once = []
    real = PageIndex._nothing_beyond

    def spied(self: PageIndex, readers: tuple[str, ...]) -> bool:
        out = real(self, readers)
        answered_at_once.append(out)
        return out

    with held_commits() as h:
        PageIndex._nothing_beyond = spied  # type: ignore[method-assign]
        try:
            with pager.open(tmp_path / "behind", **opts) as a, pager.open(tmp_path / "waited", **opts) as b:
                b._feeder.index.commits_in_background = False  # every commit in the caller's thread
                for k in bounds:
                    request = {"model": "m", "messages": msgs[:k]}
                    assert orjson.dumps(a.assemble(request)) == orjson.dumps(b.assemble(request))
                    ra, rb = a.last_report.to_dict(), b.last_report.to_dict()
                    ra.pop("elapsed_ms"), rb.pop("elapsed_ms")
                    assert ra == rb
                commits = a._feeder.index.generation
        finally:
            PageIndex._nothing_beyond = real  # type: ignore[method-assign]
    assert commits > 3 and sum(answered_at_once) >= 5, "calls went on while a commit was held"

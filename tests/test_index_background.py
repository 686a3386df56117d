"""The recall index commits in the background and every later use waits for it (issue 23).

``PageIndex.commit(wait=False)`` returns at once; a search, another commit,
``close`` or a read of the bookkeeping first waits for the commit under way, so
what each sees is what it saw when the commit ran in the caller's thread;
``add`` does not wait (its pages go to the next commit). A commit that fails
raises at the next use that waits, typed as it was.
"""

from __future__ import annotations

import tantivy
import pytest

import pager
from pager.errors import RecallIndexError
from pager.storage import index as index_mod
from pager.storage.index import IndexDoc, PageIndex
from pager.storage.indexing import COMMIT_EVERY, IndexFeeder

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda omicron".split()


def _docs(start: int, n: int) -> list[IndexDoc]:
    return [IndexDoc(page_id=pid, session="A", step=pid, kind="tool",
                     text=f"{WORDS[pid % len(WORDS)]} {WORDS[(pid * 7) % len(WORDS)]} run{pid} retry loop")
            for pid in range(start, start + n)]


def _answers(index: PageIndex) -> list[list[tuple[int, float]]]:
    return [[(h.page_id, round(h.score, 6)) for h in index.search(q, session="A", k=8)]
            for q in ("retry loop", "alpha gamma", "run1 run9 run17", "kappa")]


@pytest.fixture
def gated(monkeypatch):
    """Hold each background commit until the index is next used: a use that does not wait sees the old state."""
    import threading

    go = threading.Event()
    commit_behind, join = PageIndex._commit_behind, PageIndex._join

    def held(self, *args):
        go.wait()
        go.clear()
        commit_behind(self, *args)

    def joining(self):
        if self._bg is not None:
            go.set()  # a commit is under way and this use waits: let it run, then wait for it
        join(self)

    monkeypatch.setattr(PageIndex, "_commit_behind", held)
    monkeypatch.setattr(PageIndex, "_join", joining)
    yield
    go.set()  # a use that did not wait leaves a commit held: let it finish


def test_a_search_right_after_a_background_commit_sees_what_a_waited_commit_shows(tmp_path, gated):
    waited, behind = PageIndex(tmp_path / "waited"), PageIndex(tmp_path / "behind")
    try:
        pid = 1
        for batch in (3, 17, 1, 40, 2):
            docs = _docs(pid, batch)
            pid += batch
            waited.add(docs)
            waited.commit()
            behind.add(docs)
            behind.commit(wait=False)  # returns before Tantivy has committed
            got = _answers(behind)  # at once: it waits for the commit
            assert got == _answers(waited)
            assert behind.search(f"run{pid - 1}", session="A", k=1)[0].page_id == pid - 1  # the newest page
            assert len(behind) == len(waited) == pid - 1
            assert behind.indexed_upto() == waited.indexed_upto() == pid - 1
    finally:
        waited.close()
        behind.close()


def test_pages_added_after_a_background_commit_wait_for_it_and_come_next(tmp_path, gated):
    ix = PageIndex(tmp_path / "ix")
    ix.add(_docs(1, 10))
    ix.commit(wait=False)
    ix.add(_docs(11, 5))  # does not wait: buffered for the next commit
    assert ix.pending == 5
    ix.commit(wait=False)
    ix.commit(wait=False)  # nothing new: waits for the one before, commits the meta document only
    assert len(ix) == 15 and ix.indexed_upto() == 15 and ix.pending == 0
    ix.close()


def test_closing_during_a_background_commit_loses_nothing(tmp_path, gated):
    where = tmp_path / "ix"
    ix = PageIndex(where)
    ix.add(_docs(1, 30))
    ix.commit(upto_page_id=30, wait=False)
    ix.close()  # waits for the commit: nothing of it is rolled back
    again = PageIndex(where)
    try:
        assert len(again) == 30 and again.indexed_upto() == 30
        assert again.search("run7", session="A", k=1)[0].page_id == 7
    finally:
        again.close()


def test_a_background_commit_that_fails_raises_its_typed_error_at_the_next_use(tmp_path, monkeypatch):
    monkeypatch.setattr(index_mod, "WRITER_WAIT_SECONDS", 0.0)
    where = tmp_path / "ix"
    ix = PageIndex(where)
    ix.add(_docs(1, 3))
    ix.commit()
    other = tantivy.Index(index_mod._SCHEMA, str(where), reuse=True)
    held = other.writer(heap_size=15_000_000, num_threads=1)  # another process's writer holds the lock
    try:
        ix.add(_docs(4, 2))
        with pytest.raises(RecallIndexError, match="cannot write the recall index") as waited:
            ix.commit()  # as it fails in the caller's thread
        ix.add(_docs(4, 2))
        ix.commit(wait=False)  # returns: the failure is the next use's
        with pytest.raises(RecallIndexError, match="cannot write the recall index") as behind:
            ix.search("retry", session="A")
        assert str(behind.value) == str(waited.value)
        assert sorted(h.page_id for h in ix.search("retry", session="A")) == [1, 2, 3]  # raised once; it works
    finally:
        held.rollback()
        del held
        ix.close()


def test_a_feeder_flush_commits_in_the_background_and_close_waits(tmp_path):
    where = tmp_path / "ctx"
    with pager.open(where, session="s", log_reports=False) as p:
        feeder: IndexFeeder = p._feeder
        docs = _docs(10_001, COMMIT_EVERY)
        feeder.add(docs)  # COMMIT_EVERY pages: a commit starts, behind
        ix = feeder.index
        assert ix.pending == 0 and ix.indexed_upto() >= 10_000 + COMMIT_EVERY  # waited for
        feeder.add(_docs(20_001, 3))
        feeder.flush()
    # close waited for that last commit; a fresh process sees it (the store lacks these pages: the
    # index heals them away as phantoms on open, so read the folder with Tantivy alone)
    raw = tantivy.Index(index_mod._SCHEMA, str(where / "index"), reuse=True)
    raw.reload()
    assert raw.searcher().num_docs >= COMMIT_EVERY + 3


def _scored(index: PageIndex) -> list[list[tuple[int, float]]]:
    return [[(h.page_id, h.score) for h in index.search(q, session="A", k=8)]
            for q in ("retry loop", "alpha gamma", "run1 run9 run17", "kappa")]


def _merged(where) -> tuple[int, ...]:
    """The documents of each committed segment, deleted ones included (``meta.json``: merges change it)."""
    import json

    meta = json.loads((where / "meta.json").read_text())
    return tuple(sorted(seg["max_doc"] for seg in meta["segments"]))


def test_a_merge_ending_later_changes_no_answer(tmp_path):
    """Commits that replace pages leave deleted documents, which BM25 still counts until a merge drops them.

    Answers are those of the state each commit left, whenever its merges end:
    once they have, a refresh loads nothing (a merge keeps the opstamp), and the
    scores are exactly the ones given before. The next commit builds on the
    merged state, the same one whether the merges ended early or late.
    """
    where = tmp_path / "ix"
    ix = PageIndex(where)
    try:
        layouts = []
        for n in range(12):  # Tantivy merges once about eight segments are committed
            # six new pages and three of the last commit's again: each commit deletes three documents
            ix.add(_docs(6 * n + 1, 6) + (_docs(6 * n - 5, 3) if n else []))
            ix.commit(wait=False)
            before = _scored(ix)  # the searcher of this commit: loaded before its merges end
            generation = ix.generation
            ix.wait()  # its merges too
            layouts.append(_merged(where))
            ix.refresh()
            assert ix.generation == generation  # the merges loaded no new searcher
            assert _scored(ix) == before
        # merges happened (else this test shows nothing): the segments got fewer at some commit
        assert any(len(b) < len(a) for a, b in zip(layouts, layouts[1:]))
        assert len(ix) == 72
    finally:
        ix.close()


def test_a_search_does_not_wait_for_the_merges_of_the_commit_before(tmp_path, monkeypatch):
    """The writer is let go only after its merges (``_settle``); a search needs just the committed searcher."""
    import threading

    merging, end = threading.Event(), threading.Event()
    settle = PageIndex._settle

    def slow_merges(self, w):
        if w is not None:
            merging.set()
            assert end.wait(30)
        settle(self, w)

    monkeypatch.setattr(PageIndex, "_settle", slow_merges)
    ix = PageIndex(tmp_path / "ix")
    try:
        ix.add(_docs(1, 5))
        ix.commit(wait=False)
        assert merging.wait(30)  # committed; waiting for its merges
        assert [h.page_id for h in ix.search("run3", session="A", k=1)] == [3]  # answered meanwhile
        assert len(ix) == 5 and ix.indexed_upto() == 5 and not end.is_set()
        ix.add(_docs(6, 2))
        ix.commit(wait=False)  # waits for those merges in its own thread, then commits
        assert not end.is_set()
        end.set()
        assert [h.page_id for h in ix.search("run7", session="A", k=1)] == [7]
    finally:
        end.set()
        ix.close()

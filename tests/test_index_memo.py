"""The recall index's memo: a repeated query costs no search, and answers what a fresh search answers.

Each test asks the same question of an index whose memo is on and of one
whose memo is off (``memo_size = 0``) or of a fresh object, around the events
that change what a search may see: new pages, a reindex, another writer's
commit, a page the store commits after the index did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pager.storage.index import IndexDoc, PageIndex


def doc(pid: int, text: str, session: str = "A", **kw: Any) -> IndexDoc:
    return IndexDoc(page_id=pid, session=session, step=pid, kind="tool", text=text, **kw)


TERMS = ["retry", "jitter", "pager/net.py"]


def ask(index: PageIndex, **kw: Any) -> list[tuple[int, float]]:
    return index.search_ids(TERMS, session="A", k=kw.pop("k", 5), **kw)


def fresh(index: PageIndex, **kw: Any) -> list[tuple[int, float]]:
    """What the same index answers with its memo off."""
    saved = index.memo_size
    index.memo_size = 0
    index._memo.clear()
    try:
        return ask(index, **kw)
    finally:
        index.memo_size = saved


class Spy:
    """Counts the Tantivy searches an index runs."""

    def __init__(self, index: PageIndex, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = index._candidates

        def counted(*a: Any) -> Any:
            self.calls += 1
            return real(*a)

        monkeypatch.setattr(index, "_candidates", counted)


def seeded(path: Path | None = None) -> PageIndex:
    index = PageIndex(path)
    index.add([doc(i, f"retry loop number {i} with jitter") for i in range(1, 9)])
    index.add([doc(9, "unrelated words"), doc(10, "net code", path="pager/net.py")])
    index.commit(10)
    return index


def test_a_repeated_query_runs_no_search(monkeypatch: pytest.MonkeyPatch) -> None:
    index = seeded()
    spy = Spy(index, monkeypatch)
    prompt = set(range(100, 140))  # pages in the prompt, excluded: more than the short fetch reaches
    first = ask(index, exclude=prompt)
    assert spy.calls == 1
    assert ask(index, exclude=prompt) == first
    assert spy.calls == 1  # same terms, same committed state: served from the memo
    # exclusion and min_score are applied to the memoized candidates, not part of what is memoized
    assert ask(index, exclude=prompt, min_score=first[1][1]) == [h for h in first if h[1] >= first[1][1]]
    assert spy.calls == 1
    assert ask(index, exclude=prompt | {first[0][0]})[0] == first[1]
    assert spy.calls == 1  # the short fetch decides it again
    assert ask(index, exclude=prompt | {first[0][0]}) == fresh(index, exclude=prompt | {first[0][0]})


def test_search_ids_are_the_hits_of_search_terms() -> None:
    index = seeded()
    for kw in ({}, {"k": 2}, {"exclude": {10, 3}}, {"kinds": ["tool"]}, {"kinds": ["file"]}, {"min_score": 1.0}):
        hits = index.search_terms(TERMS, session="A", **{"k": 5, **kw})
        assert ask(index, **dict(kw)) == [(h.page_id, h.score) for h in hits]


def test_new_committed_pages_are_found_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    index = seeded()
    before = ask(index)
    index.add([doc(11, "retry retry retry jitter jitter in pager/net.py", path="pager/net.py")])
    assert ask(index) == before  # added, not committed: not visible, as without the memo
    index.commit(11)
    after = ask(index)
    assert after[0][0] == 11
    assert after == fresh(index)


def test_deleted_pages_leave_the_memo() -> None:
    index = seeded()
    top = ask(index)[0][0]
    index.delete([top])
    index.commit()
    assert top not in [pid for pid, _ in ask(index)]
    assert ask(index) == fresh(index)


def test_a_reindex_is_seen() -> None:
    index = seeded()
    assert ask(index)
    index.clear()
    assert ask(index) == []
    index.add([doc(20, "retry with jitter, rebuilt")])
    index.commit(20)
    assert [pid for pid, _ in ask(index)] == [20]
    assert ask(index) == fresh(index)


def test_another_writers_commit_is_seen_after_refresh(tmp_path: Path) -> None:
    index = seeded(tmp_path)
    other = PageIndex(tmp_path)  # a second writer (another process, or another Pager's index)
    try:
        before = ask(index)
        generation = index.generation
        index.refresh()  # nothing committed since: the searcher and the memo are kept
        assert index.generation == generation
        other.add([doc(30, "retry jitter retry jitter pager/net.py", path="pager/net.py")])
        other.commit(30)
        assert ask(index) == before  # not refreshed yet: the searcher it had, as without the memo
        index.refresh()
        assert index.generation > generation
        after = ask(index)
        assert after[0][0] == 30
        assert after == fresh(index)
        assert after == ask(PageIndex(tmp_path))
    finally:
        other.close()
        index.close()


class Store:
    """A bound source whose pages the test commits one by one (``present``)."""

    def __init__(self, pages: set[int]) -> None:
        self.pages = pages

    def rebuild(self, index: PageIndex) -> int:
        return 0

    def present(self, page_ids: list[int]) -> set[int]:
        return {p for p in page_ids if p in self.pages}


def test_a_page_the_store_commits_later_is_a_hit_then(monkeypatch: pytest.MonkeyPatch) -> None:
    # another writer committed the index before its store transaction: for a while the page is a
    # phantom, then a page; the index's state does not change in between, the answer does
    index = seeded()
    index.add([doc(40, "retry jitter retry jitter pager/net.py", path="pager/net.py")])
    index.commit(40)
    store = Store(set(range(1, 11)))
    index.bind_source(store)
    spy = Spy(index, monkeypatch)
    assert 40 not in [pid for pid, _ in ask(index)]
    store.pages.add(40)
    assert ask(index)[0][0] == 40
    assert spy.calls == 1  # the memo held the candidates; the store was asked again
    assert ask(index) == fresh(index)


def test_memo_is_bounded() -> None:
    index = seeded()
    for i in range(3 * index.memo_size):
        index.search_ids([f"word{i}", "retry"], session="A")
    assert len(index._memo) <= index.memo_size


def reference(index: PageIndex, terms: list[str], k: int, exclude: set[int], min_score: float) -> list[tuple[int, float]]:
    """The answer as it was defined before the memo and the short fetch: the whole over-fetch, filtered."""
    from pager.storage.index_schema import _OVERFETCH, analyze_terms, clean_query, reader_keys

    words, grams, keys = clean_query(*analyze_terms(terms))  # type: ignore[misc]
    _w, found = index._candidates(words, grams, keys, reader_keys("A", (), False), None,
                                  k + _OVERFETCH + len(exclude))
    ranked = sorted((r for r in found if r[1] not in exclude and r[0] > 0.0 and r[0] >= min_score),
                    key=lambda r: (-r[0], -r[1]))
    present = index._present([pid for _, pid, _ in ranked])
    if present is not None:
        ranked = [r for r in ranked if r[1] in present]
    return [(pid, score) for score, pid, _ in ranked[:k]]


def test_the_short_fetch_answers_what_the_whole_over_fetch_does() -> None:
    # many pages with equal scores (ties at every cut), exclusions of every size, a store missing some
    import random

    rng = random.Random(23)
    index = PageIndex()
    texts = ["retry jitter", "retry", "jitter backoff retry", "retry retry", "backoff"]
    index.add([doc(i, texts[i % len(texts)] + (" pager/net.py" if i % 7 == 0 else "")) for i in range(1, 301)])
    index.commit(300)
    store = Store({i for i in range(1, 301) if i % 11})
    index.bind_source(store)
    for _ in range(150):
        k = rng.choice([1, 3, 5, 9, 18])
        exclude = set(rng.sample(range(1, 301), rng.choice([0, 5, 40, 150, 290])))
        min_score = rng.choice([0.0, 0.5, 1.5])
        terms = rng.sample(["retry", "jitter", "backoff", "pager/net.py"], rng.randint(1, 3))
        # the caller's history: pages it knows are stored (never a phantom), not asked of the store again
        stored = set(rng.sample(sorted(store.pages), rng.choice([0, 50, 250])))
        got = index.search_ids(terms, session="A", k=k, exclude=exclude, min_score=min_score, stored=stored)
        assert got == reference(index, terms, k, exclude, min_score), (terms, k, len(exclude), min_score)


def test_pages_the_caller_holds_are_not_asked_of_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    index = seeded()
    store = Store(set(range(1, 11)))
    index.bind_source(store)
    asked: list[list[int]] = []
    real = index._present
    monkeypatch.setattr(index, "_present", lambda ids: asked.append(ids) or real(ids))
    everything = ask(index)
    assert asked  # without it, the hits are checked against the store
    asked.clear()
    assert ask(index, stored=set(range(1, 11))) == everything
    assert asked == []  # every hit is in the caller's history: no store round trip
    assert ask(index, stored={everything[0][0]}) == everything
    assert everything[0][0] not in asked[-1]

"""The recall index: scoping, exclusion, dedup, catch-up bookkeeping, hostile queries."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import pager
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sizes import examples

from pager.core.pools import owner_audience, pool_audience
from pager.errors import RecallIndexError
from pager.storage.index import Hit, IndexDoc, PageIndex


def doc(pid: int, text: str, session: str = "A", kind: str = "tool", **kw: object) -> IndexDoc:
    return IndexDoc(page_id=pid, session=session, step=pid, kind=kind, text=text, **kw)  # type: ignore[arg-type]


def ids(hits: list[Hit]) -> list[int]:
    return [h.page_id for h in hits]


@pytest.fixture
def ix() -> PageIndex:
    index = PageIndex()
    index.add(
        [
            doc(1, "pytest failed: ImportError in pager/store.py line 42", path="pager/store.py"),
            doc(2, "the user asked to fix the flaky retry loop", kind="user"),
            doc(3, "def load_config(path): return toml.load(path)", kind="file", path="src/config.py"),
            doc(4, "retry loop fixed by adding jitter", kind="assistant"),
            doc(5, "retry storm in session B logs", session="B"),
            doc(6, "retry secret of B", session="B", scope="private"),
            doc(7, "retry notes B shares with everyone", session="B", scope="shared"),
            doc(8, "上下文换窗 的 设计 讨论 with retry", kind="user"),
        ]
    )
    index.commit(8)
    return index


# -- basics ---------------------------------------------------------------------


def test_add_commit_search(ix: PageIndex) -> None:
    assert len(ix) == 8
    assert ix.indexed_upto() == 8
    hits = ix.search("ImportError store.py", session="A")
    assert hits[0].page_id == 1
    h = hits[0]
    assert (h.session, h.kind, h.path, h.step) == ("A", "tool", "pager/store.py", 1)
    assert "ImportError" in h.snippet and len(h.snippet) <= 210
    assert h.score > 0


def test_uncommitted_pages_are_invisible() -> None:
    index = PageIndex()
    index.add([doc(1, "alpha beta")])
    assert index.search("alpha", session="A") == []
    assert index.indexed_upto() == 0
    index.commit()
    assert ids(index.search("alpha", session="A")) == [1]
    assert index.indexed_upto() == 1  # None records the highest id added


def test_results_sorted_by_score_then_newest() -> None:
    index = PageIndex()
    index.add([doc(i, "same words here") for i in range(1, 6)] + [doc(6, "words")])
    index.commit()
    hits = index.search("same words", session="A", k=10)
    assert ids(hits) == [5, 4, 3, 2, 1, 6]
    assert hits == index.search("same words", session="A", k=10)  # deterministic


def test_k_and_min_score(ix: PageIndex) -> None:
    assert len(ix.search("retry", session="A", k=1)) == 1
    assert ix.search("retry", session="A", k=0) == []
    assert ix.search("retry", session="A", min_score=1e9) == []


def test_path_and_handle_exact_match_boosted() -> None:
    index = PageIndex()
    index.add(
        [
            doc(1, "config config config py src", path="src/other.py"),
            doc(2, "unrelated", path="src/config.py", handle="pg:2-abc"),
        ]
    )
    index.commit()
    assert ids(index.search("src/config.py", session="A"))[0] == 2
    assert ids(index.search("config.py", session="A"))[0] == 2  # basename
    assert ids(index.search("expand pg:2-abc please", session="A")) == [2]


def test_search_terms(ix: PageIndex) -> None:
    assert ids(ix.search_terms(["load_config", "src/config.py"], session="A"))[0] == 3
    assert ix.search_terms([], session="A") == []
    assert ix.search_terms(["AND", "(", ":"], session="A") == []


def test_labels_are_searchable() -> None:
    index = PageIndex()
    index.add([doc(1, "nothing here", labels=("goal:migrate-db",))])
    index.commit()
    assert ids(index.search("goal:migrate-db", session="A")) == [1]
    assert ids(index.search("migrate", session="A")) == [1]


# -- scoping --------------------------------------------------------------------


def test_session_scoped_by_default(ix: PageIndex) -> None:
    assert {h.session for h in ix.search("retry", session="A", k=10)} == {"A"}
    assert set(ids(ix.search("retry", session="B", k=10))) == {5, 7}
    # B's private page (no owner: owned by identity "B") is read through its owner's audience
    assert set(ids(ix.search("retry", session="B", k=10, audiences=[owner_audience("B")]))) == {5, 6, 7}
    assert ix.search("retry", session="C") == []


def test_a_session_named_like_an_owner_or_a_pool_reads_neither() -> None:
    """Session names, owners and pools are typed audiences: no name crosses from one kind to another."""
    index = PageIndex()
    index.add([doc(1, "quokka private", session="alice/a", owner="alice", scope="private"),
               doc(2, "quokka pooled", session="w", scope="project", pool="repo"),
               doc(3, "quokka own", session="pool:repo")])
    index.commit()
    assert ids(index.search("quokka", session="alice", cross_session=True)) == []
    assert ids(index.search("quokka", session="pool:repo", cross_session=True)) == [3]
    assert ids(index.search("quokka", session="x", audiences=[owner_audience("alice")])) == [1]
    assert ids(index.search("quokka", session="x", audiences=[pool_audience("repo")])) == [2]
    with pytest.raises(pager.InputError):
        index.search("quokka", session="x", audiences=["pool:repo"])  # a bare name is refused


def test_cross_session_labels_session_and_respects_private(ix: PageIndex) -> None:
    hits = ix.search("retry", session="A", k=10, cross_session=True)
    by_id = {h.page_id: h.session for h in hits}
    assert by_id[7] == "B"  # shared page of B, labelled with its session
    assert 5 not in by_id  # session-scoped page of B
    assert 6 not in by_id  # private page of B: never, even cross-session
    assert {2, 4, 8} <= set(by_id)


def test_owner_other_than_session() -> None:
    index = PageIndex()
    index.add(
        [
            doc(1, "pool note", session="pool", owner="alice"),
            doc(2, "pool secret", session="pool", owner="alice", scope="private"),
        ]
    )
    index.commit()
    assert ids(index.search("pool", session="pool", k=5)) == [1]  # alice's private page: alice only
    assert set(ids(index.search("pool", session="pool", k=5, audiences=[owner_audience("alice")]))) == {1, 2}
    assert ids(index.search("pool", session="other", audiences=[owner_audience("alice")])) == [2]  # any of alice's sessions
    assert index.search("pool", session="bob", cross_session=True) == []


def test_project_pool_pages_are_read_through_the_pool() -> None:
    index = PageIndex()
    index.add([doc(1, "deploy recipe", session="s1", scope="project", pool="repo"),
               doc(2, "deploy secret", session="s1")])
    index.commit()
    assert ids(index.search("deploy", session="s2")) == []
    assert ids(index.search("deploy", session="s2", audiences=[pool_audience("repo")])) == [1]
    assert ids(index.search("deploy", session="s2", audiences=[pool_audience("other")])) == []
    hit = index.search("deploy", session="s2", audiences=[pool_audience("repo")])[0]
    assert (hit.session, hit.pool, hit.scope) == ("s1", "repo", "project")


def test_bad_scope_rejected() -> None:
    with pytest.raises(ValueError):
        doc(1, "x", scope="public")


# -- filters --------------------------------------------------------------------


def test_exclude(ix: PageIndex) -> None:
    all_ids = ids(ix.search("retry", session="A", k=10))
    assert 2 in all_ids and 4 in all_ids
    kept = ids(ix.search("retry", session="A", k=10, exclude={2, 4}))
    assert kept == [i for i in all_ids if i not in (2, 4)]
    assert ix.search("retry", session="A", exclude=all_ids) == []


def test_exclude_still_fills_k() -> None:
    index = PageIndex()
    index.add([doc(i, "needle") for i in range(1, 101)])
    index.commit()
    hits = index.search("needle", session="A", k=5, exclude=range(50, 101))
    assert ids(hits) == [49, 48, 47, 46, 45]


def test_kinds(ix: PageIndex) -> None:
    assert ids(ix.search("retry", session="A", kinds={"assistant"})) == [4]
    assert set(ids(ix.search("retry", session="A", kinds=["user", "assistant"]))) == {2, 4, 8}
    assert ix.search("retry", session="A", kinds=[]) == []


# -- dedup, catch-up, rebuild ---------------------------------------------------


def test_readding_a_page_does_not_duplicate(ix: PageIndex) -> None:
    ix.add([doc(1, "pytest failed again: ImportError")])
    ix.add([doc(1, "pytest failed a third time: ImportError")])  # same batch twice
    ix.commit(8)
    hits = ix.search("ImportError", session="A", k=10)
    assert ids(hits) == [1]
    assert "third" in hits[0].snippet
    assert len(ix) == 8


def test_delete(ix: PageIndex) -> None:
    ix.delete([1])
    ix.commit()
    assert ix.search("ImportError", session="A") == []
    assert len(ix) == 7


def test_indexed_upto_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "idx"
    index = PageIndex(path)
    index.add([doc(i, f"page {i} text") for i in range(1, 11)])
    index.commit(10)
    index.add([doc(11, "never committed")])
    index.close()  # dies before commit: page 11 is not recorded

    index = PageIndex(path)
    assert index.indexed_upto() == 10
    assert len(index) == 10
    assert index.search("never committed", session="A") == []
    # The store re-feeds from indexed_upto(); a page fed twice stays single.
    index.add([doc(i, f"page {i} text") for i in range(9, 12)])
    index.commit(11)
    index.close()

    index = PageIndex(path)
    assert index.indexed_upto() == 11
    assert len(index) == 11
    assert len(index.search("page", session="A", k=50)) == 11
    index.close()


def test_deleted_index_dir_reopens_empty(tmp_path: Path) -> None:
    path = tmp_path / "idx"
    index = PageIndex(path)
    index.add([doc(1, "hello")])
    index.commit(1)
    index.close()
    shutil.rmtree(path)
    index = PageIndex(path)
    assert index.indexed_upto() == 0
    assert len(index) == 0
    assert index.search("hello", session="A") == []
    index.close()


def test_clear_then_rebuild(ix: PageIndex) -> None:
    ix.clear()
    assert ix.indexed_upto() == 0
    assert len(ix) == 0
    assert ix.search("retry", session="A") == []
    ix.add([doc(1, "rebuilt retry")])
    ix.commit(1)
    assert ids(ix.search("retry", session="A")) == [1]


def test_two_writers_on_one_folder_both_commit(tmp_path: Path) -> None:
    first = PageIndex(tmp_path)
    second = PageIndex(tmp_path)
    first.add([doc(1, "alpha retry")])
    second.add([doc(2, "beta retry")])
    first.commit()
    second.commit()
    first.add([doc(3, "gamma retry")])
    first.commit()
    fresh = PageIndex(tmp_path)
    assert len(fresh) == 3 and fresh.page_ids() == {1, 2, 3}
    assert sorted(ids(fresh.search("retry", session="A", k=5))) == [1, 2, 3]
    assert fresh.indexed_upto() == 3  # the higher watermark is kept, whoever committed last
    for ix in (first, second, fresh):
        ix.close()


def test_a_writer_held_elsewhere_is_waited_for_then_a_recall_index_error(tmp_path: Path, monkeypatch) -> None:
    import pager.storage.index as index_mod

    monkeypatch.setattr(index_mod, "WRITER_WAIT_SECONDS", 0.2)
    holder = PageIndex(tmp_path)
    holder._w()  # hold Tantivy's lock, as a process in the middle of a commit does
    other = PageIndex(tmp_path)
    other.add([doc(2, "y")])
    with pytest.raises(RecallIndexError):
        other.commit()
    holder._release()
    other.add([doc(2, "y")])
    other.commit()  # the lock is free again
    assert other.page_ids() == {2}
    holder.close()
    other.close()


def test_context_manager(tmp_path: Path) -> None:
    with PageIndex(tmp_path) as index:
        index.add([doc(1, "x")])
        index.commit()
    with PageIndex(tmp_path) as index:
        assert index.indexed_upto() == 1


# -- hostile queries and text ---------------------------------------------------

HOSTILE = [
    "",
    "   ",
    ':"()[]{}^~*?\\+-!/',
    "AND OR NOT",
    "title:foo AND (bar OR -baz) ~2 ^3 \"unterminated",
    "field:[a TO b}",
    "/regex.*/",
    "x" * 100_000,
    "retry " * 20_000,
    "🎉🔥 emoji retry 🎉",
    "\ud800",
    "retry \udfff lone",
    "\x00\x01\x02",
    "换窗",
    "مرحبا שלום Привет",
]


@pytest.mark.parametrize("query", HOSTILE)
def test_hostile_queries_never_raise(ix: PageIndex, query: str) -> None:
    for cross in (False, True):
        ix.search(query, session="A", cross_session=cross)
    ix.search_terms([query, query], session="A")


def test_hostile_text_is_indexed() -> None:
    index = PageIndex()
    index.add(
        [
            doc(1, "broken \ud800 surrogate but findable", session="\udfff"),
            doc(2, "emoji 🎉 page", labels=("\ud83d",), path="a/\ud800.py"),
        ]
    )
    index.commit()
    assert ids(index.search("findable", session="\udfff")) == [1]
    assert ids(index.search("emoji", session="A")) == [2]


def test_cjk_is_searchable(ix: PageIndex) -> None:
    hits = ix.search("换窗", session="A")
    assert ids(hits) == [8]
    assert "换窗" in hits[0].snippet
    assert ids(ix.search("上下文", session="A")) == [8]
    assert ids(ix.search_terms(["换窗"], session="A")) == [8]


def test_huge_query_is_truncated_not_slow(ix: PageIndex) -> None:
    query = " ".join(f"w{i}" for i in range(50_000)) + " ImportError"
    assert ix.search(query, session="A") == []  # the tail beyond 4 KB is dropped


def test_snippet_centres_on_match() -> None:
    index = PageIndex()
    index.add([doc(1, "lorem ipsum " * 200 + "NeedleError happened here " + "dolor " * 200)])
    index.commit()
    (hit,) = index.search("needleerror", session="A")
    assert "NeedleError" in hit.snippet
    assert hit.snippet.startswith("…") and hit.snippet.endswith("…")
    assert len(hit.snippet) <= 210


# -- property -------------------------------------------------------------------


@pytest.fixture(scope="module")
def prop_ix() -> PageIndex:
    index = PageIndex()
    words = ["retry", "alpha", "config", "换窗", "error", "path", "🎉", "test"]
    docs = []
    for pid in range(1, 61):
        session = "AB"[pid % 2]
        scope = ("session", "private", "shared")[pid % 3]
        text = " ".join(words[(pid * j) % len(words)] for j in range(1, 6))
        docs.append(doc(pid, text, session=session, scope=scope))
    index.add(docs)
    index.commit()
    return index


@settings(max_examples=examples(80, 200), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    query=st.text(max_size=300),
    exclude=st.sets(st.integers(1, 60), max_size=30),
    cross=st.booleans(),
    k=st.integers(0, 20),
)
def test_property_queries_never_raise_or_leak(
    prop_ix: PageIndex, query: str, exclude: set[int], cross: bool, k: int
) -> None:
    for q in (query, query + " retry 换窗"):
        hits = prop_ix.search(q, session="A", k=k, exclude=exclude, cross_session=cross)
        assert len(hits) <= k
        for h in hits:
            assert h.page_id not in exclude
            if h.session != "A":
                assert cross and h.page_id % 3 == 2  # only B's shared pages
        scores = [(-h.score, -h.page_id) for h in hits]
        assert scores == sorted(scores)


def test_date_like_text_stays_searchable() -> None:
    # tantivy JSON fields would otherwise index an RFC 3339 string as a date
    index = PageIndex()
    index.add([doc(1, "2024-05-01T10:00:00Z", labels=("2024-05-01T10:00:00Z",)), doc(2, "12345")])
    index.commit()
    assert ids(index.search("2024", session="A")) == [1]
    assert ids(index.search("2024-05-01T10:00:00Z", session="A")) == [1]
    assert ids(index.search("12345", session="A")) == [2]


def test_oversized_fields_are_indexed() -> None:
    index = PageIndex()
    long_path = "d/" * 40_000 + "f.py"
    index.add(
        [
            doc(1, "🎉" * 20_000 + " findme", path=long_path, labels=("l" * 100_000,)),
            doc(2, "x" * 100_000 + " other"),
        ]
    )
    index.commit()
    assert ids(index.search("findme", session="A")) == [1]
    assert ids(index.search(long_path, session="A")) == [1]
    assert ids(index.search("other", session="A")) == [2]


def test_common_words_are_pruned_in_big_audiences(monkeypatch: pytest.MonkeyPatch) -> None:
    import pager.storage.index_search as mod  # where the query reads its thresholds

    monkeypatch.setattr(mod, "PRUNE_MIN_DF", 10)
    index = PageIndex()
    index.add([doc(i, f"common words everywhere item{i}") for i in range(1, 101)])
    index.add([doc(101, "common rareword")])
    index.add([doc(i, "common words", session="B") for i in range(201, 204)])
    index.add([doc(204, "common rareword", session="B")])
    index.commit()
    # "common" is on every page: only the rare word decides, so one hit, not k.
    assert ids(index.search("common rareword", session="A", k=5)) == [101]
    # All words common: the rarest few are kept and pages still come back.
    assert len(index.search("common words", session="A", k=5)) == 5
    # Small audiences are never pruned.
    assert ids(index.search("common rareword", session="B", k=5)) == [204, 203, 202, 201]


def test_pending_counts_uncommitted() -> None:
    index = PageIndex()
    index.add([doc(1, "a"), doc(2, "b"), doc(1, "a again")])
    assert index.pending == 2
    index.commit()
    assert index.pending == 0


def test_a_closed_index_leaves_its_folder_alone(tmp_path):
    """close() frees tantivy's objects at once (no garbage collection needed): the folder can go right after."""
    import shutil

    from helpers import native_threads, wait_until

    before = native_threads()
    for i in range(10):
        path = tmp_path / f"ix{i}"
        ix = PageIndex(path)
        ix.add([IndexDoc(page_id=1, session="s", step=0, kind="user", text="hello world")])
        ix.commit(1)
        assert ix.search("hello", session="s")
        ix.close()
        shutil.rmtree(path)
    # once tantivy's threads are gone nothing can write again: wait for that state, not for a time
    wait_until(lambda: native_threads() <= before, "the closed indexes' threads exited")
    assert list(tmp_path.iterdir()) == []  # nothing recreated a folder or a lock file


def test_a_folder_another_writer_set_aside_and_started_again_is_reloaded(tmp_path: Path) -> None:
    """The new folder's opstamps start over: the same opstamp as before must still read as another commit."""
    reader, healer = PageIndex(tmp_path), PageIndex(tmp_path)
    try:
        reader.add([doc(1, "alpha"), doc(2, "alpha")])
        reader.commit()
        assert sorted(ids(reader.search("alpha", session="A", k=5))) == [1, 2]
        healer.refresh()
        healer._set_aside(RuntimeError("a damaged segment"))  # as a rebuild after damage does
        healer.add([doc(1, "omega"), doc(2, "omega")])  # the same number of operations: the same opstamp
        healer.commit()
        reader.refresh()
        assert sorted(ids(reader.search("omega", session="A", k=5))) == [1, 2]
        assert reader.search("alpha", session="A", k=5) == []
    finally:
        reader.close()
        healer.close()

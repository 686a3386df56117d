"""The recall index's watermark: meta documents kept side by side, replaced every ``META_KEEP`` commits.

A commit's meta document used to replace the one before it, which left a
deleted document in every segment; Tantivy's merges then decompress and
compress a segment's stored fields instead of copying them (issue 23). Each
commit now adds its own, the watermark is the highest they hold, and every
``META_KEEP`` commits one replaces them all.
"""

from __future__ import annotations

from pathlib import Path

import tantivy
from tantivy import Query

from pager.storage.index import META_KEEP, IndexDoc, PageIndex
from pager.storage.index_schema import _KEY_ANALYZER, _META, _SCHEMA, _TEXT_ANALYZER


def doc(pid: int, session: str = "A") -> IndexDoc:
    return IndexDoc(page_id=pid, session=session, step=pid, kind="tool", text=f"retry page {pid}")


def _raw(path: Path) -> tuple[int, int]:
    """Return (meta documents, every document) as Tantivy alone reads the folder."""
    ix = tantivy.Index(_SCHEMA, str(path), reuse=True)
    ix.register_tokenizer("pg_text", _TEXT_ANALYZER)
    ix.register_tokenizer("pg_key", _KEY_ANALYZER)
    ix.reload()
    s = ix.searcher()
    return s.search(Query.term_query(_SCHEMA, "meta", _META), 1, count=True).count, s.num_docs


def _deletions(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.endswith(".del"))


def test_commits_keep_their_meta_documents_without_deletions_until_one_replaces_them(tmp_path: Path) -> None:
    path = tmp_path / "idx"
    ix = PageIndex(path)
    try:
        for n in range(1, 2 * META_KEEP + 3):
            ix.add([doc(n)])
            ix.commit(n)
            metas, docs = _raw(path)
            assert ix.indexed_upto() == n and len(ix) == n
            assert docs == n + metas  # the pages, and the meta documents beside them
            # the first replacement is the commit that finds META_KEEP of them
            assert metas == (n if n <= META_KEEP else (n - 1) % META_KEEP + 1), (n, metas)
            if n <= META_KEEP:
                assert not _deletions(path), n  # nothing deleted: merges copy the stored fields as they are
        ix.wait()
    finally:
        ix.close()
    again = PageIndex(path)
    try:
        assert again.indexed_upto() == 2 * META_KEEP + 2 and len(again) == 2 * META_KEEP + 2
        assert again.page_ids() == set(range(1, 2 * META_KEEP + 3))
    finally:
        again.close()


def test_the_watermark_is_the_highest_whoever_committed_it(tmp_path: Path) -> None:
    """Two writers on one folder: each reads the other's higher watermark, and a lower one never wins."""
    first, second = PageIndex(tmp_path), PageIndex(tmp_path)
    try:
        first.add([doc(1), doc(2), doc(3)])
        first.commit(30)  # a watermark above its pages: the store said so
        second.add([doc(4)])
        second.commit(4)  # its own is lower: the higher one is kept in its meta document
        for n in range(5, META_KEEP + 8):  # through a replacement
            (first if n % 2 else second).add([doc(n)])
            (first if n % 2 else second).commit(n)
        fresh = PageIndex(tmp_path)
        try:
            assert fresh.indexed_upto() == max(30, META_KEEP + 7)
            assert len(fresh) == META_KEEP + 7
        finally:
            fresh.close()
    finally:
        first.close()
        second.close()


def test_a_replaced_page_is_still_a_single_document_and_the_count_excludes_meta_documents(tmp_path: Path) -> None:
    ix = PageIndex(tmp_path)
    try:
        ix.add([doc(1), doc(2)])
        ix.commit(2)
        ix.add([doc(2)])  # fed again (a catch-up): replaces its document
        ix.commit(2)
        assert len(ix) == 2 and ix.page_ids() == {1, 2}
        assert [h.page_id for h in ix.search("retry page 2", session="A", k=5)][0] == 2
    finally:
        ix.close()


def test_more_meta_documents_than_one_search_asks_for_are_all_read(tmp_path: Path, monkeypatch) -> None:
    """Written under a larger ``META_KEEP`` (another release): the watermark is still the highest of them."""
    import pager.storage.index as index_module

    path = tmp_path / "idx"
    monkeypatch.setattr(index_module, "META_KEEP", 64)
    ix = PageIndex(path)
    try:
        for n in range(1, 41):
            ix.add([doc(n)])
            ix.commit(n)
    finally:
        ix.close()
    assert _raw(path)[0] == 40
    monkeypatch.setattr(index_module, "META_KEEP", 4)  # one search asks for 5 of the 40
    again = PageIndex(path)
    try:
        assert again.indexed_upto() == 40 and len(again) == 40
        again.add([doc(41)])
        again.commit(41)  # finds more than 4: replaces them all
        assert _raw(path)[0] == 1 and again.indexed_upto() == 41 and len(again) == 41
    finally:
        again.close()

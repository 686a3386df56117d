"""Querying the recall index: free text or extracted terms, read through audience keys.

A mixin of ``PageIndex`` (``pager.storage.index``): it reads ``self._searcher``
under ``self._lock`` and never writes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable
from typing import TypeVar

import tantivy
from tantivy import Occur, Query

from pager.storage.index_schema import (
    analyze_query,
    analyze_terms,
    clean_query,
    Hit,
    KEY_BOOST,
    PRUNE_KEEP,
    PRUNE_MIN_DF,
    PRUNE_SHARE,
    SNIPPET_CHARS,
    _OVERFETCH,
    _SCHEMA,
    _clean,
    reader_keys,
)

__all__ = ["SearchMixin"]

_T = TypeVar("_T")


class SearchMixin:
    """The query half of ``PageIndex``."""

    _lock: threading.RLock
    _searcher: tantivy.Searcher

    def _reload(self) -> None:  # provided by PageIndex
        raise NotImplementedError

    def _guarded(self, what: str, fn: Callable[[], _T]) -> _T:  # provided by PageIndex
        raise NotImplementedError

    def _present(self, page_ids: list[int]) -> set[int] | None:  # provided by PageIndex
        raise NotImplementedError

    def search(
        self,
        query: str,
        *,
        session: str,
        k: int = 5,
        exclude: Collection[int] = (),
        kinds: Collection[str] | None = None,
        cross_session: bool = False,
        min_score: float = 0.0,
        audiences: Collection[str] = (),
    ) -> list[Hit]:
        """Return up to ``k`` pages matching free text ``query``, best first.

        A query reads its session's pages, plus the pages of each typed
        audience in ``audiences`` (``pager.core.pools``: ``owner_audience``
        for an owner's private pages, ``pool_audience`` for a project pool),
        plus shared pages with ``cross_session``. A bare name there is an
        ``InputError``.

        Never raises on odd input: syntax characters, empty, huge, emoji or
        CJK queries are all fine (huge ones are cut to 4 KB / 64 terms).
        """
        # a person or the agent asked: see what other writers committed (reload=True)
        return self._run(
            *analyze_query(query), session, k, exclude, kinds, cross_session, min_score, audiences, reload=True,
        )  # fmt: skip

    def search_terms(
        self,
        terms: Iterable[str],
        *,
        session: str,
        k: int = 5,
        exclude: Collection[int] = (),
        kinds: Collection[str] | None = None,
        cross_session: bool = False,
        min_score: float = 0.0,
        audiences: Collection[str] = (),
    ) -> list[Hit]:
        """Return up to ``k`` pages matching pre-extracted ``terms``, best first.

        Each term is analyzed like page text, so "pager/index.py" matches its
        words and, boosted, a page whose path is exactly that.
        """
        words, grams, chunks = analyze_terms(terms)
        return self._run(words, grams, chunks, session, k, exclude, kinds, cross_session, min_score, audiences)

    def _run(
        self,
        words: list[str],
        grams: list[str],
        chunks: list[str],
        session: str,
        k: int,
        exclude: Collection[int],
        kinds: Collection[str] | None,
        cross_session: bool,
        min_score: float,
        audiences: Collection[str] = (),
        reload: bool = False,
    ) -> list[Hit]:
        if k <= 0:
            return []
        cleaned = clean_query(words, grams, chunks)
        if cleaned is None:
            return []
        words, grams, keys = cleaned
        readers = reader_keys(session, audiences, cross_session)  # a bare name is the caller's InputError

        def query() -> list[Hit]:
            if reload:
                self._reload()
            return self._query(words, grams, keys, readers, k, exclude, kinds, min_score)

        # every Tantivy failure is typed; a damaged index is set aside, rebuilt and asked again
        return self._guarded("recall query failed", query)

    def _query(
        self,
        words: list[str],
        grams: list[str],
        keys: list[str],
        readers: list[str],
        k: int,
        exclude: Collection[int],
        kinds: Collection[str] | None,
        min_score: float,
    ) -> list[Hit]:
        paths = [f"{{}}.{r}" for r in readers]

        def term(field: str, value: str) -> Query:
            qs = [Query.term_query(_SCHEMA, p.format(field), value) for p in paths]
            return qs[0] if len(qs) == 1 else Query.disjunction_max_query(qs)

        words = self._prune(words, paths)
        clauses = [(Occur.Should, term("text", w)) for w in words]
        clauses += [(Occur.Should, term("cjk", g)) for g in grams]
        clauses += [(Occur.Should, Query.boost_query(term("key", c), KEY_BOOST)) for c in keys]
        if kinds is not None:
            kinds = [_clean(x) for x in kinds]
            if not kinds:
                return []
            kq = Query.const_score_query(Query.term_set_query(_SCHEMA, "kind", kinds), 0.0)
            # Nested, so the kind filter intersects the matches instead of
            # turning every page of that kind into a zero-score candidate.
            clauses = [(Occur.Must, Query.boolean_query(clauses)), (Occur.Must, kq)]
        s = self._searcher
        # Excluded pages are filtered after the search: a must_not term set over
        # hundreds of ids cost more than the whole query; over-fetching by
        # len(exclude) still guarantees k survivors.
        excluded = exclude if isinstance(exclude, (set, frozenset)) else set(exclude)
        limit = k + _OVERFETCH + len(excluded)
        found = s.search(Query.boolean_query(clauses), limit, count=False).hits
        if not found:
            return []
        pids = s.fast_field_values("page_id", [a for _, a in found])
        ranked = sorted(
            (
                (score, pid, addr)
                for (score, addr), pid in zip(found, pids)
                if pid not in excluded and score > 0.0 and score >= min_score
            ),
            key=lambda r: (-r[0], -r[1]),
        )
        # a document whose page the store does not have (its writer was killed between the
        # index's commit and the store's) is never a hit; the next open removes it
        present = self._present([pid for _, pid, _ in ranked])
        if present is not None:
            ranked = [r for r in ranked if r[1] in present]
        ranked = ranked[:k]
        needles = sorted(set(words) | set(grams), key=len, reverse=True)[:16]
        return [self._hit(s.doc(addr), pid, score, needles) for score, pid, addr in ranked]

    def _prune(self, words: list[str], paths: list[str]) -> list[str]:
        """Drop words so common in the audience's pages that they only cost time."""
        s = self._searcher
        seen = sum(s.doc_freq(p.format("key"), "=") for p in paths)
        if seen <= PRUNE_MIN_DF:
            return words  # no word can be common enough to matter
        fields = [p.format("text") for p in paths]
        df = {w: sum(s.doc_freq(f, w) for f in fields) for w in words}
        limit = max(seen * PRUNE_SHARE, PRUNE_MIN_DF)
        kept = [w for w in words if df[w] <= limit]
        return kept or sorted(words, key=df.__getitem__)[:PRUNE_KEEP]

    @staticmethod
    def _hit(doc: tantivy.Document, pid: int, score: float, needles: list[str]) -> Hit:
        return Hit(
            page_id=pid,
            session=doc.get_first("session"),
            step=doc.get_first("step"),
            kind=doc.get_first("kind"),
            score=score,
            path=doc.get_first("path"),
            handle=doc.get_first("handle"),
            snippet=_snippet((doc.get_first("body") or b"").decode(), needles),
            owner=doc.get_first("owner"),
            pool=doc.get_first("pool"),
            scope=doc.get_first("scope") or "session",
        )


def _snippet(text: str, needles: list[str]) -> str:
    """Return about ``SNIPPET_CHARS`` of ``text`` around the earliest needle, on one line."""
    low = text.lower()
    if len(low) != len(text):  # a few characters change length when lowered
        low = text
    best = len(low)
    for n in needles:
        i = low.find(n, 0, best + len(n))
        if 0 <= i < best:
            best = i
    if best == len(low):
        best = 0
    start = max(0, best - SNIPPET_CHARS // 4)
    out = " ".join(text[start : start + SNIPPET_CHARS].split())
    if start > 0:
        out = "…" + out
    if start + SNIPPET_CHARS < len(text):
        out += "…"
    return out

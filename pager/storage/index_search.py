"""Querying the recall index: free text or extracted terms, read through audience keys.

A mixin of ``PageIndex`` (``pager.storage.index``): it reads ``self._searcher``
under ``self._lock`` and never writes.

Memo. What Tantivy answers a query is a function of the query and of the
committed state the searcher shows, so the candidates (score, page id,
address) are memoized per query and dropped whenever a searcher is loaded
(``PageIndex.generation``: at each commit, clear, rebuild, or a refresh that
finds another writer's commit). Exclusion, ``min_score`` and the store's
check of each hit (``_present``) run at every call on the memoized
candidates, so a memoized answer is the one a fresh search gives. A steady
call whose query did not change (a retry, a request overtaken by a newer one)
costs no search.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Container, Iterable
from typing import Any, TypeVar

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


# Queries memoized per searcher: a call asks one; a few cover retries and other sessions sharing the index.
MEMO_SIZE = 8


class SearchMixin:
    """The query half of ``PageIndex``."""

    _lock: threading.RLock
    _searcher: tantivy.Searcher
    _memo: dict[tuple[object, ...], tuple[list[str], list[tuple[float, int, object]]]]
    _beyond: dict[tuple[int, tuple[str, ...]], bool]
    generation: int
    memo_size = MEMO_SIZE  # 0: every query searches (a test compares the two)

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

    def search_ids(
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
        stored: Container[int] = (),
    ) -> list[tuple[int, float]]:
        """Return ``(page id, score)`` of the pages ``search_terms`` finds, best first, reading no document.

        For a caller that holds the pages' text itself (recall, from the
        session's mirror): a document read costs more than the query.
        ``stored``: pages the caller knows the store has (its history's), so
        only the other hits are checked against the store.
        """
        words, grams, chunks = analyze_terms(terms)
        ranked = self._run(words, grams, chunks, session, k, exclude, kinds, cross_session, min_score, audiences,
                           hits=False, stored=stored)
        return [(pid, score) for score, pid, _addr in ranked]

    def beyond_session(
        self, *, session: str, audiences: Collection[str] = (), cross_session: bool = False, refresh: bool = False
    ) -> bool:
        """Return whether a query of ``session`` with these audiences may read a page outside its session's audience.

        From the committed state a search shows (the pages each audience sees,
        counted by the bare ``=`` key): False means every hit of such a query
        is a page of ``session``'s own audience. Counts include deleted pages
        not yet merged away, so it may say True when no such page is left.
        ``refresh``: first see what other writers committed (as ``refresh``).
        A commit under way in the background is not waited for when it cannot
        change a False answer (``BehindMixin._nothing_beyond``).
        """
        readers = tuple(reader_keys(session, audiences, cross_session)[1:])  # the first is the session's own
        if not readers:
            return False
        if self._nothing_beyond(readers):
            return False

        def count() -> bool:
            if refresh:
                self._refresh()
            found = self._beyond.get((self.generation, readers))
            if found is None:
                found = self._count_beyond(readers)
                if len(self._beyond) >= MEMO_SIZE:
                    self._beyond.clear()
                self._beyond[(self.generation, readers)] = found  # what this searcher says, for _nothing_beyond
            return found

        return self._guarded("recall query failed", count)

    def _count_beyond(self, readers: tuple[str, ...]) -> bool:
        s = self._searcher
        return any(s.doc_freq(f"key.{r}", "=") for r in readers)

    def _recount_beyond(self) -> None:
        """Answer again, on the searcher just loaded, the ``beyond_session`` questions asked of the last one.

        A few term counts, so that the next call finds its answer for the new
        state memoized (``_nothing_beyond`` decides only from a memoized answer).
        """
        asked = {readers for _gen, readers in self._beyond}
        self._beyond = {(self.generation, readers): self._count_beyond(readers) for readers in asked}

    def _nothing_beyond(self, readers: tuple[str, ...]) -> bool:  # provided by BehindMixin
        raise NotImplementedError

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
        hits: bool = True,
        stored: Container[int] = (),
    ) -> list[Any]:
        if k <= 0:
            return []
        cleaned = clean_query(words, grams, chunks)
        if cleaned is None:
            return []
        words, grams, keys = cleaned
        readers = reader_keys(session, audiences, cross_session)  # a bare name is the caller's InputError

        def query() -> list[Any]:
            if reload:
                self._refresh()
            searched, ranked = self._ranked(words, grams, keys, readers, k, exclude, kinds, min_score, stored)
            if not hits:
                return ranked
            s = self._searcher
            needles = sorted(set(searched) | set(grams), key=len, reverse=True)[:16]
            return [self._hit(s.doc(addr), pid, score, needles) for score, pid, addr in ranked]

        # every Tantivy failure is typed; a damaged index is set aside, rebuilt and asked again
        return self._guarded("recall query failed", query)

    def _refresh(self) -> None:  # provided by DiskMixin
        raise NotImplementedError

    def _ranked(
        self,
        words: list[str],
        grams: list[str],
        keys: list[str],
        readers: list[str],
        k: int,
        exclude: Collection[int],
        kinds: Collection[str] | None,
        min_score: float,
        stored: Container[int] = (),
    ) -> tuple[list[str], list[tuple[float, int, Any]]]:
        """Return the words searched (common ones pruned) and ``(score, page id, address)`` of up to
        ``k`` pages, best first (ties: newest page first)."""
        if kinds is not None:
            kinds = [_clean(x) for x in kinds]
            if not kinds:
                return words, []
        # Excluded pages are filtered after the search: a must_not term set over
        # hundreds of ids cost more than the whole query. Over-fetching by
        # len(exclude) guarantees k survivors, but the excluded pages (those in
        # the prompt) are rarely all among the best: a short fetch is tried first
        # and kept when it decides the answer alone (``_pick``).
        excluded = exclude if isinstance(exclude, (set, frozenset)) else set(exclude)
        full = k + _OVERFETCH + len(excluded)
        short = min(full, 2 * (k + _OVERFETCH))
        searched, found = self._memoized(words, grams, keys, readers, kinds, short)
        out = self._pick(found, excluded, k, min_score, stored, complete=short == full or len(found) < short)
        if out is None:
            searched, found = self._memoized(words, grams, keys, readers, kinds, full)
            out = self._pick(found, excluded, k, min_score, stored, complete=True)
        assert out is not None
        return searched, out

    def _memoized(
        self, words: list[str], grams: list[str], keys: list[str], readers: list[str], kinds: list[str] | None,
        limit: int,
    ) -> tuple[list[str], list[tuple[float, int, Any]]]:
        """Return ``_candidates``, from the memo when this searcher answered the same query already."""
        key = (tuple(words), tuple(grams), tuple(keys), tuple(readers), None if kinds is None else tuple(kinds), limit)
        memo = self._memo.get(key)
        if memo is None:
            memo = self._candidates(words, grams, keys, readers, kinds, limit)
            if self.memo_size > 0:
                while len(self._memo) >= self.memo_size:
                    del self._memo[next(iter(self._memo))]  # the oldest query
                self._memo[key] = memo
        return memo

    def _pick(
        self, found: list[tuple[float, int, Any]], excluded: Collection[int], k: int, min_score: float,
        stored: Container[int], complete: bool,
    ) -> list[tuple[float, int, Any]] | None:
        """Return the best ``k`` of ``found`` that are not excluded, score enough and are stored pages.

        ``complete``: ``found`` is the whole fetch the answer is defined on.
        Otherwise it is a shorter top of it, which decides the answer only
        through the pages scoring strictly above its last one (every such page
        is in both); None when fewer than ``k`` of those qualify.
        """
        ranked = [r for r in found if r[1] not in excluded and r[0] > 0.0 and r[0] >= min_score]
        if not complete and found:
            cut = min(r[0] for r in found)
            ranked = [r for r in ranked if r[0] > cut]
        ranked.sort(key=lambda r: (-r[0], -r[1]))
        # a document whose page the store does not have (its writer was killed between the
        # index's commit and the store's) is never a hit; the next open removes it. Checked
        # at every call (the store may have committed it since), on just enough of the ranking
        out: list[tuple[float, int, Any]] = []
        i = 0
        while len(out) < k and i < len(ranked):
            part = ranked[i : i + k - len(out)]
            i += len(part)
            ask = [pid for _, pid, _ in part if pid not in stored]
            present = self._present(ask) if ask else None
            out += part if present is None else [r for r in part if r[1] in present or r[1] in stored]
        return out if complete or len(out) >= k else None

    def _candidates(
        self,
        words: list[str],
        grams: list[str],
        keys: list[str],
        readers: list[str],
        kinds: list[str] | None,
        limit: int,
    ) -> tuple[list[str], list[tuple[float, int, Any]]]:
        """Return the words searched and Tantivy's top ``limit``, as ``(score, page id, address)``."""
        paths = [f"{{}}.{r}" for r in readers]

        def term(field: str, value: str) -> Query:
            qs = [Query.term_query(_SCHEMA, p.format(field), value) for p in paths]
            return qs[0] if len(qs) == 1 else Query.disjunction_max_query(qs)

        words = self._prune(words, paths)
        clauses = [(Occur.Should, term("text", w)) for w in words]
        clauses += [(Occur.Should, term("cjk", g)) for g in grams]
        clauses += [(Occur.Should, Query.boost_query(term("key", c), KEY_BOOST)) for c in keys]
        if kinds is not None:
            kq = Query.const_score_query(Query.term_set_query(_SCHEMA, "kind", kinds), 0.0)
            # Nested, so the kind filter intersects the matches instead of
            # turning every page of that kind into a zero-score candidate.
            clauses = [(Occur.Must, Query.boolean_query(clauses)), (Occur.Must, kq)]
        s = self._searcher
        found = s.search(Query.boolean_query(clauses), limit, count=False).hits
        if not found:
            return words, []
        pids = s.fast_field_values("page_id", [a for _, a in found])
        return words, [(score, pid, addr) for (score, addr), pid in zip(found, pids)]

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

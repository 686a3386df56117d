"""The recall index of record on PostgreSQL: a tsvector per page, a GIN index, BM25 in SQL.

Theory of operation
-------------------
Every page row holds ``tsv``, written by ``PostgresStore.record`` in the same
transaction as the page, so the index is never behind the store and every
host searches the same one: there is no derived copy to feed or heal.

The vector holds the words the Tantivy index's analyzer cuts, so the two
indexes differ only in how they rank: text words at weight D with their
positions (term frequency counts, capped at ``MAX_POSITIONS``), exact keys
(path, file name, handle, labels) at weight A; ``pager.storage.pg_vector``
says how it is built.

Ranking is BM25 (k1 = 1.2, b = 0.75: Tantivy's constants, though Tantivy's
JSON fields keep no lengths, so in effect it does not normalise by length),
computed in one statement. For a (page, term) pair, ``ts_rank`` with all
weights 1 on a one-term query is ``sum(1/j^2, j=1..tf) / (pi^2/6)``, from
which the term frequency is recovered exactly enough (``1 / (pi^2/6 * (1 -
rank)) - 0.5``); the document length is the page's token count; a term's IDF
counts the audience's pages that hold it; exact keys weigh ``KEY_BOOST`` times
a word. Ties go to the newer page. Past 2,000 pages, words on more than a
fifth of them are dropped from the query (as Tantivy's index does), judged by
ANALYZE's most common lexemes.

Two plans, picked by the audience's size (counted once per index, then read
off each result). Under ``PROBE_EACH`` pages, one GIN probe finds the pages
holding any term; each one's vector is detoasted once (``tsv || ''``:
otherwise every per-term test decompresses it again) and every (page, term)
pair is scored. From ``PROBE_EACH`` pages on, the GIN index is probed once per
term, which gives the document frequencies and each page's matched terms
without reading a vector; a page's score then lies between a lower bound
(every matched term once) and an upper bound (every one ``MAX_POSITIONS``
times), and only the pages whose upper bound reaches the k-th best exact score
so far have their vector read (``EXACT_FIRST``, ``EXACT_MORE``). The
audience's page count and mean length are reused for ``AUDIENCE_TTL`` seconds
past ``AUDIENCE_CACHE_MIN`` pages. Each per-term probe also reads GIN's pending
list, where new pages wait to be merged into the index: that is why a small
audience (whose pages may all still be there) keeps the single probe.

Cost: the single probe scores every page of the audience holding a query
word: 2.4 ms p50 on the traces' sessions (under ~500 pages), but ~125 ms at
10,000 pages in one session. The per-term plan reads one heap row per
(page, term) match and at most ``EXACT_FIRST + EXACT_MORE`` vectors: at
10,000 pages in one session, p50 25 ms (p99 46), cross-session 29 ms, on a
2-core machine at load average 3-4 (``bench/pg_scale.py``), with the same top
5 as scoring every page on its 400 queries. The statement is never prepared:
a generic plan cannot see the audience, whose size picks the scans.

Visibility is the Tantivy index's, as a ``WHERE`` clause (``VISIBLE``): a
query reads its session's pages (a private page only by its owner), the
private pages of the owners and the project pools named in ``audiences``, and
with ``cross_session=True`` every shared page. A superset of it that the
session, owner, pool and shared indexes can find (``NEAR_HOME``) is checked
too, so that a small audience in a big store is counted without a scan of
every session's pages.

Where it lives: ``pager.storage.pg_vector`` writes a page's vector,
``pager.storage.pg_bm25`` holds the statements and the visibility clauses,
and this module is the index: it picks the plan, prunes common words, keeps
the audience statistics and speaks the ``RecallIndex`` protocol.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Container, Iterable, Sequence
from typing import Any

import orjson

from pager.core.messages import message_text
from pager.errors import RecallIndexError, StoreError
from pager.storage.index_schema import (  # the Tantivy index's analysis, shared on purpose: same words
    analyze_query,
    analyze_terms,
    clean_query,
    Hit,
    IndexDoc,
    _clean,
    split_audiences,
)
from pager.storage.index_search import _snippet
from pager.storage.pg_bm25 import (
    AUD_COUNT,
    AUD_GIVEN,
    BM25_B,
    BM25_K1,
    CROSS,
    HOME,
    KEY_BOOST,
    NEAR_CROSS,
    NEAR_HOME,
    SEARCH_FEW,
    SEARCH_MANY,
)
from pager.storage.pg_vector import MAX_POSITIONS, lexeme_fits, page_vector, quote_lexeme

__all__ = ["PgIndex", "page_vector"]

# As the Tantivy index: past PRUNE_MIN_ROWS pages, a word on more than
# PRUNE_SHARE of them is dropped from the query (keeping the PRUNE_KEEP rarest
# if all are): its weight is small and every page holding it is a candidate to
# score. Frequencies come from ANALYZE's most common lexemes, re-read every
# PRUNE_TTL seconds.
PRUNE_SHARE = 0.2
PRUNE_MIN_ROWS = 2000
PRUNE_KEEP = 3
PRUNE_TTL = 60.0
# A small audience is searched with one GIN probe for all the terms, each
# candidate's vector read once, every candidate scored exactly. From
# PROBE_EACH pages on, the GIN index is probed once per term instead, so
# document frequencies and bounds cost no vector and a vector is read only for
# a page that can still make the top k. Below that, reading every vector is
# cheaper than one probe per term, each of which also reads GIN's pending list
# (measured median per query: 5.3 against 6.0 ms at 500 pages, 8.5 against
# 7.5 at 1,000, 40 against 13 at 4,000).
PROBE_EACH = 1000
# In the per-term plan, the EXACT_FIRST pages with the best lower bound (each
# matched term's frequency taken as 1) are scored exactly: their k-th best
# score is the bar. Then every other page whose upper bound (frequency
# MAX_POSITIONS) reaches the bar is scored too, at most EXACT_MORE of them,
# best lower bound first. Past that cap the result may differ from the full
# ranking (it was the same top 5 on all 400 queries of bench/pg_scale.py).
EXACT_FIRST = 50
EXACT_MORE = 200
# The audience's page count and mean length (for IDF and length
# normalisation) cost a scan of its pages: past AUDIENCE_CACHE_MIN pages they
# are reused for AUDIENCE_TTL seconds, in which a few more pages barely move them.
AUDIENCE_CACHE_MIN = 2000
AUDIENCE_TTL = 30.0



class PgIndex:
    """Recall over a ``PostgresStore``'s pages (the ``RecallIndex`` protocol).

    ``add`` and ``commit`` exist for the protocol: pages are indexed when
    recorded, so ``add`` only (re)builds vectors that ``clear`` dropped.
    """

    def __init__(self, store: Any) -> None:  # a PostgresStore (not imported: it imports this module)
        self._store = store
        self._common: dict[str, float] = {}
        self._common_at = -PRUNE_TTL
        self._sizes: dict[tuple[Any, ...], float] = {}  # audience -> its page count when last seen
        self._audiences: dict[tuple[Any, ...], tuple[float, float, float]] = {}  # audience -> (n, avgdl, when)

    def _seen(self, audience: tuple[Any, ...], n: float, avgdl: float) -> None:
        """Remember an audience's page count (it picks the plan) and, when big, its statistics."""
        if len(self._sizes) >= 1024:  # one index serving many audiences: forget the old ones
            self._sizes.clear()
            self._audiences.clear()
        self._sizes[audience] = n
        if n >= AUDIENCE_CACHE_MIN:
            self._audiences[audience] = (n, avgdl, time.monotonic())

    def _prune(self, words: list[str]) -> list[str]:
        """Drop words on more than ``PRUNE_SHARE`` of the pages (per the planner's statistics)."""
        now = time.monotonic()
        if now - self._common_at > PRUNE_TTL:
            self._common_at = now
            rows = self._store._rows(
                "SELECT s.most_common_elems::text::text[], s.most_common_elem_freqs, c.reltuples "
                "FROM pg_stats s JOIN pg_class c ON c.oid = 'pager_pages'::regclass "
                "WHERE s.schemaname = current_schema() AND s.tablename = 'pager_pages' AND s.attname = 'tsv'")
            self._common = {}
            if rows and rows[0][0] and rows[0][2] and rows[0][2] > PRUNE_MIN_ROWS:
                elems, freqs, _n = rows[0]
                self._common = {e: f for e, f in zip(elems, freqs) if f > PRUNE_SHARE}
        if not self._common:
            return words
        kept = [w for w in words if w not in self._common]
        return kept or sorted(words, key=lambda w: self._common.get(w, 0.0))[:PRUNE_KEEP]

    # -- feeding (the store already did) ------------------------------------------

    def add(self, docs: Sequence[IndexDoc]) -> int:
        """Index ``docs`` whose page has no vector yet; return how many docs were given."""
        docs = list(docs)
        if not docs:
            return 0
        if self._store.vectorized(d.page_id for d in docs):
            return len(docs)  # the common case: this process just recorded them, with vectors
        try:
            missing = {r[0] for r in self._store._rows(
                "SELECT id FROM pager_pages WHERE id = ANY(%s) AND tsv IS NULL", ([d.page_id for d in docs],))}
            todo = [
                (page_vector(d.text, d.labels, d.path, d.handle), d.page_id) for d in docs if d.page_id in missing
            ]
            if todo:
                self._store._write(lambda c: c.cursor().executemany(
                    "UPDATE pager_pages SET tsv = %s::tsvector WHERE id = %s", todo))
        except StoreError as exc:
            raise RecallIndexError(f"cannot add to the recall index: {exc}") from exc
        return len(docs)

    def commit(self, upto_page_id: int | None = None) -> None:
        """Nothing to publish: vectors commit with their pages."""

    def delete(self, page_ids: Iterable[int]) -> None:
        """Nothing to drop: a page's vector lives and rolls back with its row, and ids are never reused."""

    def page_ids(self) -> set[int]:
        """Return the ids of the pages that have their vector."""
        try:
            return {int(r[0]) for r in self._store._rows("SELECT id FROM pager_pages WHERE tsv IS NOT NULL")}
        except StoreError as exc:
            raise RecallIndexError(f"cannot read the recall index: {exc}") from exc

    def indexed_upto(self) -> int:
        """Return the highest page id below which every page has its vector."""
        try:
            rows = self._store._rows(
                "SELECT coalesce((SELECT min(id) - 1 FROM pager_pages WHERE tsv IS NULL),"
                " (SELECT coalesce(max(id), 0) FROM pager_pages))")
        except StoreError as exc:
            raise RecallIndexError(f"cannot read the recall index: {exc}") from exc
        return int(rows[0][0])

    def rebuild(self, after: int = 0, batch: int = 500) -> int:
        """Write the vector of every page with id > ``after`` that lacks one; return how many."""
        done = 0
        for page, msg in self._store.iter_pages(after, batch):
            if done % batch == 0 and not self._store._rows(
                "SELECT 1 FROM pager_pages WHERE id >= %s AND tsv IS NULL LIMIT 1", (page.id,)
            ):
                break
            doc = IndexDoc(page_id=page.id, session=page.session, step=page.step, kind=page.kind,
                           text=message_text(msg), labels=page.labels, path=page.path, handle=page.handle,
                           scope=page.scope)
            self.add([doc])
            done += 1
        return done

    def clear(self) -> None:
        """Drop every vector (``add`` or ``rebuild`` writes them again)."""
        try:
            self._store.forget_vectorized()
            self._store._write(lambda c: c.execute("UPDATE pager_pages SET tsv = NULL WHERE tsv IS NOT NULL"))
        except StoreError as exc:
            raise RecallIndexError(f"cannot clear the recall index: {exc}") from exc

    def close(self) -> None:
        """Nothing to release: the store owns the connections."""

    def __len__(self) -> int:
        return int(self._store._rows("SELECT count(*) FROM pager_pages WHERE tsv IS NOT NULL")[0][0])

    # -- searching ------------------------------------------------------------------

    def search(
        self, query: str, *, session: str, k: int = 5, exclude: Collection[int] = (),
        kinds: Collection[str] | None = None, cross_session: bool = False, min_score: float = 0.0,
        audiences: Collection[str] = (),
    ) -> list[Hit]:
        """Return up to ``k`` pages matching free text ``query``, best first (never a syntax error).

        A query reads its session's pages, the pages of each typed audience in
        ``audiences`` (``pager.core.pools``: an owner's private pages, a
        project pool's), and shared pages with ``cross_session``.
        """
        return self._run(*analyze_query(query), session, k, exclude, kinds, cross_session, min_score, audiences)

    def search_terms(
        self, terms: Iterable[str], *, session: str, k: int = 5, exclude: Collection[int] = (),
        kinds: Collection[str] | None = None, cross_session: bool = False, min_score: float = 0.0,
        audiences: Collection[str] = (),
    ) -> list[Hit]:
        """Return up to ``k`` pages matching pre-extracted ``terms``, best first."""
        words, grams, chunks = analyze_terms(terms)
        return self._run(words, grams, chunks, session, k, exclude, kinds, cross_session, min_score, audiences)

    def search_ids(
        self, terms: Iterable[str], *, session: str, k: int = 5, exclude: Collection[int] = (),
        kinds: Collection[str] | None = None, cross_session: bool = False, min_score: float = 0.0,
        audiences: Collection[str] = (), stored: Container[int] = (),
    ) -> list[tuple[int, float]]:
        """Return ``(page id, score)`` of what ``search_terms`` finds, best first, parsing no message.

        ``stored`` is accepted for the Tantivy index's sake: here every hit is a stored page.
        """
        words, grams, chunks = analyze_terms(terms)
        _words, ranked = self._ranked(words, grams, chunks, session, k, exclude, kinds, cross_session, min_score,
                                      audiences)
        return [(int(row[0]), float(row[1])) for row in ranked]

    def _run(
        self, words: list[str], grams: list[str], chunks: list[str], session: str, k: int,
        exclude: Collection[int], kinds: Collection[str] | None, cross_session: bool, min_score: float,
        audiences: Collection[str] = (),
    ) -> list[Hit]:
        words, ranked = self._ranked(words, grams, chunks, session, k, exclude, kinds, cross_session, min_score,
                                     audiences)
        needles = sorted(set(words) | set(grams), key=len, reverse=True)[:16]
        out: list[Hit] = []
        for pid, score, session_, step, kind, path, handle, owner, pool, scope, message, _n, _avgdl in ranked:
            try:
                text = message_text(orjson.loads(message))
            except orjson.JSONDecodeError:
                text = ""
            out.append(Hit(page_id=int(pid), session=session_, step=int(step), kind=kind, score=float(score),
                           path=path, handle=handle, snippet=_snippet(text[:16_384], needles),
                           owner=owner, pool=pool, scope=scope))
        return out

    def _ranked(
        self, words: list[str], grams: list[str], chunks: list[str], session: str, k: int,
        exclude: Collection[int], kinds: Collection[str] | None, cross_session: bool, min_score: float,
        audiences: Collection[str] = (),
    ) -> tuple[list[str], list[Any]]:
        """Return the words searched (common ones pruned) and the ranked rows, best first."""
        if k <= 0 or (kinds is not None and not kinds):
            return words, []
        cleaned = clean_query(words, grams, chunks)
        if cleaned is None:
            return words, []
        words, grams, keys = cleaned
        try:
            words = self._prune(words)  # keeps at least PRUNE_KEEP words: never empties the query
        except StoreError as exc:
            raise RecallIndexError(f"recall query failed: {exc}") from exc
        lexemes = [x for x in dict.fromkeys([*words, *grams, *keys]) if lexeme_fits(x)]
        terms = [quote_lexeme(x) for x in lexemes]
        vis, near = (CROSS, NEAR_CROSS) if cross_session else (HOME, NEAR_HOME)
        sessions, owners, pools = split_audiences(session, audiences)
        params: dict[str, Any] = {
            "terms": terms, "keys": [x.startswith("=") for x in lexemes], "any": " | ".join(terms),
            "boost": KEY_BOOST, "k1": BM25_K1, "b": BM25_B, "tfmax": float(MAX_POSITIONS + 1),
            "sessions": sessions, "owners": owners, "pools": pools, "near": [*sessions, *owners],
            "limit": k, "first": max(EXACT_FIRST, k), "more": EXACT_MORE,
            "min_score": float(min_score), "exclude": sorted(set(exclude)),
            "kinds": None if kinds is None else [_clean(x) for x in kinds], "n": None, "avgdl": None,
        }
        audience = (cross_session, tuple(sessions), tuple(owners), tuple(pools))
        count = AUD_COUNT.format(near=near, vis=vis)
        try:
            if audience not in self._sizes:  # once per audience: its size picks the plan
                n, avgdl = self._store._rows(count, params, prepare=False)[0]
                self._seen(audience, float(n), float(avgdl))
            aud = count
            if self._sizes[audience] < PROBE_EACH:
                sql = SEARCH_FEW.format(vis=vis, near=near, aud=aud)
            else:
                cached = self._audiences.get(audience)
                if cached is not None and time.monotonic() - cached[2] < AUDIENCE_TTL:
                    aud = AUD_GIVEN
                    params["n"], params["avgdl"] = cached[0], cached[1]
                sql = SEARCH_MANY.format(vis=vis, near=near, aud=aud)
            # never prepared: a generic plan cannot see the audience (whose size picks the scans)
            ranked = self._store._rows(sql, params, prepare=False)
        except StoreError as exc:
            raise RecallIndexError(f"recall query failed: {exc}") from exc
        if ranked and aud is count:
            self._seen(audience, float(ranked[0][-2]), float(ranked[0][-1]))
        return words, ranked

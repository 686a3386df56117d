"""The recall index of record on PostgreSQL: a tsvector per page, a GIN index, BM25 in SQL.

Theory of operation
-------------------
Every page row holds ``tsv``, written by ``PostgresStore.record`` in the same
transaction as the page, so the index is never behind the store and every
host searches the same one: there is no derived copy to feed or heal.

Words are cut by the analyzer the Tantivy index uses (``pager.storage.index``):
the same tokens, the same lowercasing, the same CJK bigrams, so the two indexes
differ only in how they rank. The vector is built in Python as a tsvector
literal (not ``to_tsvector``, whose parser keeps ``a/b.py`` or ``x-y`` whole):
text words at weight D with their positions (so term frequency counts, capped
at ``MAX_POSITIONS``), and exact keys — path, file name, handle, labels, each
prefixed ``=`` — at weight A.

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

Visibility is the Tantivy index's, as a ``WHERE`` clause (``_VISIBLE``): a
query reads its session's pages (a private page only by its owner), the
private pages of the owners and the project pools named in ``audiences``, and
with ``cross_session=True`` every shared page. A superset of it that the
session, owner, pool and shared indexes can find (``_NEAR_HOME``) is checked
too, so that a small audience in a big store is counted without a scan of
every session's pages.
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
    _TEXT_ANALYZER,
    MAX_KEY_CHARS,
    Hit,
    IndexDoc,
    _bigrams,
    _clean,
    split_audiences,
)
from pager.storage.index_search import _snippet

__all__ = ["PgIndex", "page_vector"]

MAX_POSITIONS = 32  # term frequency saturates long before; PostgreSQL keeps at most 256
MAX_POSITION = 16383  # PostgreSQL's largest lexeme position
MAX_LEXEMES = 20_000  # keeps a huge tool output's vector far under the 1 MB tsvector limit
MAX_LEXEME_BYTES = 2046
KEY_BOOST = 2.0
# As the Tantivy index: past PRUNE_MIN_ROWS pages, a word on more than
# PRUNE_SHARE of them is dropped from the query (keeping the PRUNE_KEEP rarest
# if all are): its weight is small and every page holding it is a candidate to
# score. Frequencies come from ANALYZE's most common lexemes, re-read every
# PRUNE_TTL seconds.
PRUNE_SHARE = 0.2
PRUNE_MIN_ROWS = 2000
PRUNE_KEEP = 3
PRUNE_TTL = 60.0
BM25_K1 = 1.2  # Tantivy's (and Lucene's) defaults
BM25_B = 0.75
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

_TERMS = """
WITH q AS MATERIALIZED (
    SELECT i, t::tsquery AS tq, key FROM unnest(%(terms)s::text[], %(keys)s::bool[]) WITH ORDINALITY AS q(t, key, i)),
aud AS MATERIALIZED ({aud}),"""
# ts_rank with all weights 1 on a one-term query is sum(1/j^2, j=1..tf) / (pi^2/6)
_TF = "1.0 / (1.6449340668482264 * (1.0 - ts_rank('{{{{1,1,1,1}}}}', {v}, {tq}, 0)::float8)) - 0.5"
_IDF = (
    "ln(1 + (greatest(aud.n, df.n) - df.n + 0.5) / (df.n + 0.5))"
    " * CASE WHEN {key} THEN %(boost)s::float8 ELSE 1.0::float8 END"
)
_KD = "%(k1)s::float8 * (1 - %(b)s::float8 + %(b)s::float8 * {dl} / aud.avgdl)"
_FILTER = """NOT ({id} = ANY(%(exclude)s::bigint[]))
      AND (%(kinds)s::text[] IS NULL OR {kind} = ANY(%(kinds)s::text[]))"""
_RESULT = """
SELECT r.id, r.score, p.session, p.step, p.kind, p.path, p.handle, p.owner, p.pool, p.scope, p.message,
       aud.n, aud.avgdl
FROM ranked r JOIN pager_pages p ON p.id = r.id CROSS JOIN aud
WHERE r.score > 0 AND r.score >= %(min_score)s
ORDER BY r.score DESC, r.id DESC
"""
# Scores are rounded so that the order of summation cannot break a tie (ties go to the newer page).
_SEARCH_FEW = _TERMS + """
pairs AS MATERIALIZED (
    SELECT c.id, c.kind, c.dl, m.i, m.key, m.tf FROM (
        SELECT p.id, p.kind, greatest(p.tokens, 1)::float8 AS dl, p.tsv || ''::tsvector AS v FROM pager_pages p
        WHERE ({near}) AND ({vis}) AND p.tsv @@ %(any)s::tsquery OFFSET 0) c
    CROSS JOIN LATERAL (
        SELECT q.i, q.key, """ + _TF.format(v="c.v", tq="q.tq") + """ AS tf FROM q WHERE c.v @@ q.tq) m),
df AS MATERIALIZED (SELECT i, count(*)::float8 AS n FROM pairs GROUP BY i),
ranked AS (
    SELECT pairs.id, round(sum(""" + _IDF.format(key="pairs.key") + """ * pairs.tf * (%(k1)s::float8 + 1)
        / (pairs.tf + """ + _KD.format(dl="pairs.dl") + """))::numeric, 9)::float8 AS score
    FROM pairs JOIN df USING (i) CROSS JOIN aud
    WHERE """ + _FILTER.format(id="pairs.id", kind="pairs.kind") + """
    GROUP BY pairs.id ORDER BY score DESC, pairs.id DESC LIMIT %(limit)s)""" + _RESULT
# Exact BM25 of the candidates c (id, kd) over the terms their vector holds:
# each vector is detoasted once (OFFSET 0 keeps the planner from inlining the
# detoasting into every test).
_EXACT = """
    CROSS JOIN LATERAL (SELECT p.tsv || ''::tsvector AS v FROM pager_pages p WHERE p.id = c.id OFFSET 0) d
    CROSS JOIN LATERAL (
        SELECT sum(w.ws[m.i] * x.tf * (%(k1)s::float8 + 1) / (x.tf + c.kd)) AS score
        FROM w, generate_subscripts(w.ws, 1) AS m(i),
        LATERAL (SELECT """ + _TF.format(v="d.v", tq="w.tqs[m.i]") + """ AS tf
                 WHERE d.v @@ w.tqs[m.i]) x) sc"""
_SEARCH_MANY = _TERMS + """
hits AS MATERIALIZED (
    SELECT q.i, h.id, h.kind, h.dl FROM q CROSS JOIN LATERAL (
        SELECT p.id, p.kind, greatest(p.tokens, 1)::float8 AS dl FROM pager_pages p
        WHERE ({near}) AND ({vis}) AND p.tsv @@ q.tq OFFSET 0) h),
w AS MATERIALIZED (
    SELECT array_agg(coalesce(""" + _IDF.format(key="q.key") + """, 0) ORDER BY q.i) AS ws,
           array_agg(q.tq ORDER BY q.i) AS tqs
    FROM q LEFT JOIN (SELECT i, count(*)::float8 AS n FROM hits GROUP BY i) df USING (i) CROSS JOIN aud),
bound AS MATERIALIZED (
    SELECT x.id, y.kd, x.s * (%(k1)s::float8 + 1) / (1 + y.kd) AS lb,
           x.s * (%(k1)s::float8 + 1) * %(tfmax)s / (%(tfmax)s + y.kd) AS ub
    FROM (SELECT h.id, sum(w.ws[h.i]) AS s, min(h.dl) AS dl FROM hits h CROSS JOIN w
          WHERE """ + _FILTER.format(id="h.id", kind="h.kind") + """
          GROUP BY h.id) x
    CROSS JOIN aud CROSS JOIN LATERAL (SELECT """ + _KD.format(dl="x.dl") + """ AS kd) y),
first AS MATERIALIZED (SELECT id, kd, lb FROM bound ORDER BY lb DESC, id DESC LIMIT %(first)s),
s1 AS MATERIALIZED (SELECT c.id, sc.score FROM first c""" + _EXACT + """),
edge AS MATERIALIZED (
    SELECT (SELECT CASE WHEN count(*) < %(limit)s THEN 0 ELSE min(score) END
            FROM (SELECT score FROM s1 ORDER BY score DESC LIMIT %(limit)s) x) AS bar,
           (SELECT lb FROM first ORDER BY lb, id LIMIT 1) AS lb, (SELECT id FROM first ORDER BY lb, id LIMIT 1) AS id),
s2 AS MATERIALIZED (
    SELECT c.id, sc.score FROM (
        SELECT b.id, b.kd FROM bound b, edge WHERE (b.lb, b.id) < (edge.lb, edge.id) AND b.ub >= edge.bar
        ORDER BY b.lb DESC, b.id DESC LIMIT %(more)s) c""" + _EXACT + """),
ranked AS (
    SELECT id, round(score::numeric, 9)::float8 AS score FROM (SELECT * FROM s1 UNION ALL SELECT * FROM s2) u
    ORDER BY 2 DESC, 1 DESC LIMIT %(limit)s)""" + _RESULT
_AUD_COUNT = (
    "SELECT count(*)::float8 AS n, greatest(avg(p.tokens), 1)::float8 AS avgdl FROM pager_pages p"
    " WHERE ({near}) AND ({vis})"
)
_AUD_GIVEN = "SELECT %(n)s::float8 AS n, %(avgdl)s::float8 AS avgdl"
# Who reads a page, by scope (pager.core.pools.page_audiences, as the Tantivy index's
# audience keys): ``private`` its owner (its session when it has none); ``project``
# its session and readers of its pool; ``shared`` its session, and everyone
# cross-session; ``session`` its session. Sessions, owners and pools are three typed
# lists, never one: a session named like an owner or "pool:<name>" reads neither.
_VISIBLE = (
    "(p.session = ANY(%(sessions)s) AND p.scope <> 'private')"
    " OR (p.scope = 'private' AND coalesce(p.owner, p.session) = ANY(%(owners)s))"
    " OR (p.scope = 'project' AND p.pool = ANY(%(pools)s))"
)
_HOME = _VISIBLE
_CROSS = _VISIBLE + " OR p.scope = 'shared'"
# A superset of the visible pages that indexes can find (BitmapOr of the
# session, owner, pool and shared indexes): checked with the visibility clause,
# it lets a small audience in a big database skip the other sessions' rows.
_NEAR_HOME = "p.session = ANY(%(near)s) OR p.owner = ANY(%(owners)s) OR p.pool = ANY(%(pools)s)"
_NEAR_CROSS = _NEAR_HOME + " OR p.scope = 'shared'"


def _quote(lexeme: str) -> str:
    """Return ``lexeme`` quoted for a tsvector / tsquery literal (no normalisation applies)."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def _fits(lexeme: str) -> bool:
    return 0 < len(lexeme.encode("utf-8")) <= MAX_LEXEME_BYTES


def _keys(labels: Iterable[str], path: str | None, handle: str | None) -> list[str]:
    keys = [_clean(x) for x in labels]
    if path:
        p = _clean(path)
        keys += [p, p.rsplit("/", 1)[-1]]  # "index.py" finds ".../pager/index.py"
    if handle:
        keys.append(handle)
    return list(dict.fromkeys("=" + k[:MAX_KEY_CHARS].lower() for k in keys if k))


def page_vector(text: str, labels: Iterable[str] = (), path: str | None = None, handle: str | None = None) -> str:
    """Return the tsvector literal of a page (words at weight D with positions, keys at A)."""
    text = _clean(text)
    labels = tuple(labels)
    words = _TEXT_ANALYZER.analyze(text)
    for extra in (*labels, path or ""):
        if extra:
            words += _TEXT_ANALYZER.analyze(_clean(extra))
    if not text.isascii():
        words += _bigrams(text)
    positions: dict[str, list[int]] = {}
    for i, w in enumerate(words, 1):
        got = positions.get(w)
        if got is None:
            if len(positions) >= MAX_LEXEMES:
                continue
            positions[w] = got = []
        if len(got) < MAX_POSITIONS:
            got.append(min(i, MAX_POSITION))
    parts = [
        f"{_quote(w)}:{','.join(str(p) + 'D' for p in dict.fromkeys(ps))}"
        for w, ps in positions.items()
        if _fits(w)
    ]
    parts += [f"{_quote(k)}:1A" for k in _keys(labels, path, handle) if _fits(k)]
    return " ".join(parts)


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
        lexemes = [x for x in dict.fromkeys([*words, *grams, *keys]) if _fits(x)]
        terms = [_quote(x) for x in lexemes]
        vis, near = (_CROSS, _NEAR_CROSS) if cross_session else (_HOME, _NEAR_HOME)
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
        count = _AUD_COUNT.format(near=near, vis=vis)
        try:
            if audience not in self._sizes:  # once per audience: its size picks the plan
                n, avgdl = self._store._rows(count, params, prepare=False)[0]
                self._seen(audience, float(n), float(avgdl))
            aud = count
            if self._sizes[audience] < PROBE_EACH:
                sql = _SEARCH_FEW.format(vis=vis, near=near, aud=aud)
            else:
                cached = self._audiences.get(audience)
                if cached is not None and time.monotonic() - cached[2] < AUDIENCE_TTL:
                    aud = _AUD_GIVEN
                    params["n"], params["avgdl"] = cached[0], cached[1]
                sql = _SEARCH_MANY.format(vis=vis, near=near, aud=aud)
            # never prepared: a generic plan cannot see the audience (whose size picks the scans)
            ranked = self._store._rows(sql, params, prepare=False)
        except StoreError as exc:
            raise RecallIndexError(f"recall query failed: {exc}") from exc
        if ranked and aud is count:
            self._seen(audience, float(ranked[0][-2]), float(ranked[0][-1]))
        return words, ranked

"""The recall statements on PostgreSQL: BM25 in one SQL statement, in two plans, and who may read a page.

For a (page, term) pair, ``ts_rank`` with all weights 1 on a one-term query
is ``sum(1/j^2, j=1..tf) / (pi^2/6)``, from which the term frequency is
recovered (``_TF``); the document length is the page's token count; a term's
IDF counts the audience's pages that hold it; exact keys weigh ``KEY_BOOST``
times a word. ``SEARCH_FEW`` scores every page a single GIN probe finds;
``SEARCH_MANY`` probes once per term and reads a vector only for a page whose
upper bound can still make the top k. ``VISIBLE`` (``HOME``, ``CROSS``) is the
Tantivy index's visibility as a ``WHERE`` clause, ``NEAR_HOME`` (``NEAR_CROSS``)
a superset of it that indexes can find. Text only: ``pager.storage.pg_index``
picks the plan, fills the parameters and runs it (the theory of operation is
there).
"""

from __future__ import annotations

__all__ = [
    "AUD_COUNT",
    "AUD_GIVEN",
    "BM25_B",
    "BM25_K1",
    "CROSS",
    "HOME",
    "KEY_BOOST",
    "NEAR_CROSS",
    "NEAR_HOME",
    "SEARCH_FEW",
    "SEARCH_MANY",
    "VISIBLE",
]

KEY_BOOST = 2.0
BM25_K1 = 1.2  # Tantivy's (and Lucene's) defaults
BM25_B = 0.75

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
SEARCH_FEW = _TERMS + """
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
SEARCH_MANY = _TERMS + """
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
AUD_COUNT = (
    "SELECT count(*)::float8 AS n, greatest(avg(p.tokens), 1)::float8 AS avgdl FROM pager_pages p"
    " WHERE ({near}) AND ({vis})"
)
AUD_GIVEN = "SELECT %(n)s::float8 AS n, %(avgdl)s::float8 AS avgdl"
# Who reads a page, by scope (pager.core.pools.page_audiences, as the Tantivy index's
# audience keys): ``private`` its owner (its session when it has none); ``project``
# its session and readers of its pool; ``shared`` its session, and everyone
# cross-session; ``session`` its session. Sessions, owners and pools are three typed
# lists, never one: a session named like an owner or "pool:<name>" reads neither.
VISIBLE = (
    "(p.session = ANY(%(sessions)s) AND p.scope <> 'private')"
    " OR (p.scope = 'private' AND coalesce(p.owner, p.session) = ANY(%(owners)s))"
    " OR (p.scope = 'project' AND p.pool = ANY(%(pools)s))"
)
HOME = VISIBLE
CROSS = VISIBLE + " OR p.scope = 'shared'"
# A superset of the visible pages that indexes can find (BitmapOr of the
# session, owner, pool and shared indexes): checked with the visibility clause,
# it lets a small audience in a big database skip the other sessions' rows.
NEAR_HOME = "p.session = ANY(%(near)s) OR p.owner = ANY(%(owners)s) OR p.pool = ANY(%(pools)s)"
NEAR_CROSS = NEAR_HOME + " OR p.scope = 'shared'"

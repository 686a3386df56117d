"""Recall query latency as the store grows: Tantivy against PostgreSQL full-text, same pages, same queries.

Run: ``python bench/pg_scale.py --pages 20000`` (starts and stops its own PostgreSQL).
Pages and queries are the synthetic ones of ``bench/test_bench_recall.py``:
half the pages in one session ("main"), the rest over 50 sessions, every tenth
shared. Reports query p50 / p99 for session-scoped and cross-session queries
and how often both indexes put the same page first, for Tantivy alone, the
index of record (``PgIndex``) and the feed follower (``FeedIndex``: Tantivy
plus a poll of the change feed per query; its catch-up time at open too).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from pg_load import _pct, _pg_store, _schema_dsn, _table  # noqa: E402


def scale(admin_dsn: str, n: int) -> dict[str, dict[str, Any]]:
    """Index ``n`` synthetic pages in both indexes; time the same 200 queries; compare top hits."""
    import orjson

    from test_bench_recall import _queries, make_docs

    from pager.core.pages import NewPage, hash_bytes
    from pager.storage.index import PageIndex

    docs = list(make_docs(n))
    tantivy = PageIndex(None)
    tantivy.add(docs)
    tantivy.commit(n)
    store = _pg_store(_schema_dsn(admin_dsn), 2)
    seqs: dict[str, int] = {}
    by_session: dict[str, list[Any]] = {}
    for d in docs:
        by_session.setdefault(d.session, []).append(d)
    t0 = time.perf_counter()
    for session, group in by_session.items():
        branch = store.ensure_session(session)
        for i in range(0, len(group), 500):
            pages = []
            for d in group[i : i + 500]:
                msg = orjson.dumps({"content": d.text, "role": "tool", "tool_call_id": f"c{d.page_id}"},
                                   option=orjson.OPT_SORT_KEYS)
                pages.append(NewPage(
                    hash=hash_bytes(msg), kind=d.kind, role="tool", step=d.step, tokens=max(1, len(d.text) // 4),
                    stub_tokens=1, chars=len(d.text), handle=d.handle or "", message=msg, path=d.path,
                    labels=d.labels, scope=d.scope))
            branch, _ids = store.record(session, branch, None, seqs.get(session, 0), pages)
            seqs[session] = seqs.get(session, 0) + len(pages)
    build = time.perf_counter() - t0
    store._write(lambda c: c.execute("ANALYZE pager_pages"))  # autovacuum would, a little later
    pg = store.open_index()
    t0 = time.perf_counter()
    from pager.storage.pg_follow import FeedIndex

    follower = FeedIndex(store)  # what PostgresStore(index="tantivy") opens: catches up from the feed
    catch_up = time.perf_counter() - t0
    # store ids were given in the docs' order per session: map them back for the comparison
    ids = {r.handle: r.id for r, _m in store.iter_pages(0)}
    out: dict[str, dict[str, Any]] = {}
    for cross in (False, True):
        lat: dict[str, list[float]] = {"tantivy": [], "postgres": [], "follower": []}
        agree = {"tantivy": 0, "postgres": 0, "follower": 0}
        total = 0
        for q in _queries():
            t = time.perf_counter()
            a = tantivy.search(q, session="main", k=5, cross_session=cross)
            lat["tantivy"].append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            b = pg.search(q, session="main", k=5, cross_session=cross)
            lat["postgres"].append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            c = follower.search(q, session="main", k=5, cross_session=cross)  # includes its feed poll
            lat["follower"].append((time.perf_counter() - t) * 1000)
            total += 1
            top = ids.get(a[0].handle) if a else None
            agree["tantivy"] += bool(a)
            agree["postgres"] += bool(b and b[0].page_id == top)
            agree["follower"] += bool(c and c[0].page_id == top)
        for name, xs in lat.items():
            out[f"{name}{' cross' if cross else ''}"] = {
                "pages": n, "query_p50_ms": _pct(xs, 50), "query_p99_ms": _pct(xs, 99),
                "same_top1_as_tantivy": agree[name] / total}
    out["postgres"]["build_pages_per_s"] = n / build
    out["follower"]["catch_up_s"] = catch_up
    follower.shutdown()
    store.close()
    tantivy.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=20_000)
    ap.add_argument("--dsn", default=None, help="an existing PostgreSQL (a fresh schema is created in it)")
    args = ap.parse_args(argv)
    server = None
    if args.dsn is None:
        from pager.lab.testing_pg import start_server

        server = start_server(durable=True)
    try:
        rows = scale(args.dsn or server.dsn, args.pages)  # type: ignore[union-attr]
        print(_table(f"recall query latency at {args.pages} pages (session 'main' holds half)", rows,
                     ["pages", "query_p50_ms", "query_p99_ms", "same_top1_as_tantivy", "build_pages_per_s", "catch_up_s"]))
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

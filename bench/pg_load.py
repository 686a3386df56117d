"""PostgreSQL against SQLite: recall quality on real traces, then many writers at once.

Run (one command; starts and stops its own PostgreSQL unless ``--dsn`` is given)::

    python bench/pg_load.py                       # both parts: ~8 minutes on a busy 2-core machine
    python bench/pg_load.py --part recall         # recall quality and latency only
    python bench/pg_load.py --part load --seconds 60 --procs 8 --sessions 8

*recall*: every session under ``--traces`` is replayed open-loop (one
``assemble`` per assistant message, as ``pager bench`` does) on the default
store (SQLite + Tantivy), on ``PostgresStore`` with its index of record
(tsvector + GIN) and on ``PostgresStore(index="tantivy")`` (a per-process
Tantivy index following the change feed). It reports the pager's recall hits and precision
(the share of recalled pages the next message referred to) summed over the
sessions, and the latency of the index queries made inside ``assemble``.

*load*: ``--procs`` processes x ``--sessions`` threads each replay sessions
(one after another, each a new pager session) against ONE store for
``--seconds``; a session cut by the deadline keeps what it recorded. At the
end every session's page count in the store is checked against the pages its
pager recorded. Reports errors, exact-count mismatches, assemble and recall
p50 / p99 and throughput, for PostgreSQL and for SQLite, both with one store
folder shared by all writers (``shared``: what a team would need; Tantivy's
single-writer lock makes most of those sessions fail) and with a folder per
session (``per-session``: today's deployment, nothing shared).

Query latency as the store grows is ``bench/pg_scale.py``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import numpy as np

import pager
from pager.lab.replay.session import load_sessions

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
WINDOW = 200_000
TEAM_POOL = "repo"


# -- stores with a timed recall index -------------------------------------------------------


class TimedIndex:
    """Forward to a recall index, recording each query's latency in milliseconds."""

    def __init__(self, index: Any, samples: list[float]) -> None:
        self._index = index
        self._samples = samples

    def search_terms(self, *a: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self._index.search_terms(*a, **kw)
        finally:
            self._samples.append((time.perf_counter() - t0) * 1000)

    def search(self, *a: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self._index.search(*a, **kw)
        finally:
            self._samples.append((time.perf_counter() - t0) * 1000)

    def __len__(self) -> int:
        return len(self._index)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._index, name)


class TimedStore:
    """Forward to a store; its ``open_index`` returns a ``TimedIndex``."""

    def __init__(self, store: Any, samples: list[float]) -> None:
        self._store = store
        self._samples = samples

    def open_index(self) -> TimedIndex:
        return TimedIndex(self._store.open_index(), self._samples)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _schema_dsn(admin_dsn: str) -> str:
    """Create a fresh schema and return a DSN whose tables land in it."""
    import psycopg

    schema = "b_" + uuid.uuid4().hex[:12]
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in admin_dsn else "?"
    return f"{admin_dsn}{sep}options=-csearch_path%3D{schema}"


def _sqlite_store(folder: str) -> Any:
    from pager.storage.sqlite import SQLiteStore

    return SQLiteStore(folder)


def _pg_store(dsn: str, max_size: int = 8, index: str = "postgres") -> Any:
    from pager.storage.postgres import PostgresStore

    return PostgresStore(dsn, min_size=1, max_size=max_size, index=index)


def _calls(messages: list[dict[str, Any]]) -> list[int]:
    """Return the indices of the assistant messages (one assemble before each)."""
    return [i for i, m in enumerate(messages) if m.get("role") == "assistant" and i > 0]


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


# -- part 1: recall quality -------------------------------------------------------------------


def recall_quality(traces: Path, admin_dsn: str, limit: int | None) -> dict[str, dict[str, Any]]:
    sessions = [s for s in load_sessions([traces]) if len(_calls(list(s.messages))) >= 5][:limit]
    backends = ("sqlite", "postgres", "postgres+tantivy")
    searches: dict[str, list[float]] = {b: [] for b in backends}
    assembles: dict[str, list[float]] = {b: [] for b in backends}
    totals = {b: {"hits": 0, "useful": 0, "calls": 0} for b in backends}
    # sessions outer, backends inner: both see the same machine load (the machine is shared)
    for s in sessions:
        msgs = [dict(m) for m in s.messages]
        for backend in backends:
            tmp = tempfile.mkdtemp(prefix="pg-bench-")
            if backend == "sqlite":
                store = _sqlite_store(tmp)
            else:
                index = "tantivy" if backend.endswith("tantivy") else "postgres"
                store = _pg_store(_schema_dsn(admin_dsn), 2, index)
            p = pager.open(TimedStore(store, searches[backend]), session=str(s.id), context_window=WINDOW)
            for i in _calls(msgs):
                t = time.perf_counter()
                p.assemble({"model": "replay", "messages": msgs[:i]})
                assembles[backend].append((time.perf_counter() - t) * 1000)
                totals[backend]["calls"] += 1
            st = p.stats()
            totals[backend]["hits"] += st["recall_hits"]
            totals[backend]["useful"] += st["recall_useful"]
            p.close()
            store.close()
            shutil.rmtree(tmp, ignore_errors=True)
    out: dict[str, dict[str, Any]] = {}
    for b in backends:
        t = totals[b]
        out[b] = {
            "sessions": len(sessions), "calls": t["calls"], "recall_hits": t["hits"], "recall_useful": t["useful"],
            "precision": t["useful"] / t["hits"] if t["hits"] else None, "queries": len(searches[b]),
            "query_p50_ms": _pct(searches[b], 50), "query_p99_ms": _pct(searches[b], 99),
            "assemble_p50_ms": _pct(assembles[b], 50), "assemble_p99_ms": _pct(assembles[b], 99),
        }
        print(f"  recall {b}: {out[b]}", file=sys.stderr, flush=True)
    return out


# -- part 2: many writers ---------------------------------------------------------------------


def _worker(
    backend: str, where: str, proc: int, threads: int, deadline: float, traces: list[list[dict]], layout: str,
    team: bool = False,
) -> dict:  # backend: "postgres", "postgres+tantivy" or "sqlite"
    """One process: ``threads`` sessions at once until ``deadline``; return figures and counts."""
    assembles: list[float] = []
    searches: list[float] = []
    recorded: dict[str, int] = {}
    errors: list[str] = []
    lock = threading.Lock()
    index = "tantivy" if backend.endswith("tantivy") else "postgres"
    shared = _pg_store(where, max_size=threads, index=index) if backend.startswith("postgres") else None

    def run(t: int) -> None:
        n = 0
        while time.time() < deadline:
            name = f"p{proc}-t{t}-{n}"
            msgs = traces[(proc * threads + t + n) % len(traces)]
            n += 1
            mine: list[float] = []
            if shared is not None:
                store = shared
            else:  # "shared": every writer opens the one folder; "per-session": a folder each
                store = _sqlite_store(where if layout == "shared" else os.path.join(where, name))
            try:
                # --team: four users' agents on one repository's pool, each recalling the others' pages
                opts = {"owner": f"user{proc % 4}", "scope": "project", "pool": TEAM_POOL} if team else {}
                p = pager.open(TimedStore(store, mine), session=name, context_window=WINDOW, **opts)
                try:
                    for i in _calls(msgs):
                        if time.time() >= deadline:
                            break
                        t0 = time.perf_counter()
                        p.assemble({"model": "replay", "messages": msgs[:i]})
                        dt = (time.perf_counter() - t0) * 1000
                        with lock:
                            assembles.append(dt)
                    pages = p.stats()["pages"]
                finally:
                    p.close()
                with lock:
                    recorded[name] = pages
                    searches.extend(mine)
            except Exception:  # counted and reported: the load must show 0 of these
                with lock:
                    errors.append(f"{name}: {traceback.format_exc(limit=3)}")
            finally:
                if shared is None:
                    store.close()

    ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if shared is not None:
        shared.close()
    return {"assembles": assembles, "searches": searches, "recorded": recorded, "errors": errors}


def load(
    backend: str, where: str, procs: int, threads: int, seconds: float, traces: list[list[dict]], layout: str = "shared",
    team: bool = False,
) -> dict:
    rtt = _round_trip_ms(where) if backend.startswith("postgres") else None
    if team and layout == "shared":
        st = _pg_store(where) if backend.startswith("postgres") else _sqlite_store(where)
        try:
            st.set_pool_acl(TEAM_POOL, ["*"], ["*"])
        finally:
            st.close()
    ctx = multiprocessing.get_context("spawn")
    deadline = time.time() + seconds + 8  # the processes need a few seconds to import
    t0 = time.perf_counter()
    with ctx.Pool(procs) as pool:
        results = pool.starmap(_worker, [(backend, where, p, threads, deadline, traces, layout, team)
                                         for p in range(procs)])
    wall = time.perf_counter() - t0
    assembles = [x for r in results for x in r["assembles"]]
    searches = [x for r in results for x in r["searches"]]
    recorded = {k: v for r in results for k, v in r["recorded"].items()}
    errors = [e for r in results for e in r["errors"]]
    if backend == "sqlite" and layout == "per-session":
        counts = {}
        for s in recorded:
            st = _sqlite_store(os.path.join(where, s))
            counts[s] = st.count_pages(s)
            st.close()
        total = sum(counts.values())
    else:
        st = _pg_store(where) if backend.startswith("postgres") else _sqlite_store(where)
        try:
            counts = {s: st.count_pages(s) for s in recorded}
            total = st.count_pages()
        finally:
            st.close()
    mismatched = [s for s, n in recorded.items() if counts[s] != n]
    for e in errors[:3]:
        print(f"  {backend} error: {e}", file=sys.stderr)
    return {
        "writers": procs * threads, "sessions": len(recorded), "errors": len(errors),
        "pages": total, "pages_expected": sum(recorded.values()), "count_mismatches": len(mismatched),
        "assembles": len(assembles), "assembles_per_s": len(assembles) / wall,
        "assemble_p50_ms": _pct(assembles, 50), "assemble_p99_ms": _pct(assembles, 99),
        "recall_p50_ms": _pct(searches, 50), "recall_p99_ms": _pct(searches, 99), "wall_s": wall,
        "idle_round_trip_ms": rtt, "load_average": os.getloadavg()[0],
    }


def _round_trip_ms(dsn: str) -> float:
    """Return the median ``SELECT 1`` round trip before the load starts (context for the figures)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        xs = []
        for _ in range(200):
            t = time.perf_counter()
            conn.execute("SELECT 1").fetchone()
            xs.append((time.perf_counter() - t) * 1000)
    return _pct(xs, 50)


# -- the command ------------------------------------------------------------------------------


def _table(title: str, rows: dict[str, dict[str, Any]], keys: list[str]) -> str:
    lines = [f"### {title}", "", "| | " + " | ".join(rows) + " |", "|---|" + "---:|" * len(rows)]
    for k in keys:
        cells = []
        for r in rows.values():
            v = r.get(k)
            cells.append(f"{v:.3g}" if isinstance(v, float) else str(v))
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=["recall", "load", "both"], default="both")
    ap.add_argument("--traces", type=Path, default=TRACES)
    ap.add_argument("--limit", type=int, default=None, help="replay at most this many sessions (recall part)")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--sessions", type=int, default=8, help="threads (sessions at once) per process")
    ap.add_argument("--sqlite-layout", default="shared,per-session",
                    help="SQLite runs: 'shared' (one folder for all writers), 'per-session' (a folder each), or both")
    ap.add_argument("--dsn", default=None, help="an existing PostgreSQL (a fresh schema is created in it)")
    ap.add_argument("--team", action="store_true",
                    help="load: every writer's pages go to one open project pool, owners user0..user3, so "
                    "automatic recall reads the other sessions' pages too")
    ap.add_argument("--backends", default="postgres,postgres+tantivy,sqlite",
                    help="load: which stores to run (postgres, postgres+tantivy, sqlite)")
    args = ap.parse_args(argv)
    if not args.traces.is_dir():
        ap.error(f"{args.traces} is not a folder of session files")
    server = None
    if args.dsn is None:
        from pager.lab.testing_pg import start_server

        server = start_server(durable=True, max_connections=args.procs * args.sessions + 40)
        admin = server.dsn
    else:
        admin = args.dsn
    try:
        if args.part in ("recall", "both"):
            rows = recall_quality(args.traces, admin, args.limit)
            print(_table("recall quality (same traces, open-loop replay)", {
                "SQLite + Tantivy": rows["sqlite"], "PostgreSQL + tsvector/GIN": rows["postgres"],
                "PostgreSQL + Tantivy follower": rows["postgres+tantivy"]},
                ["sessions", "calls", "recall_hits", "recall_useful", "precision", "queries", "query_p50_ms",
                 "query_p99_ms", "assemble_p50_ms", "assemble_p99_ms"]))
            print()
        if args.part in ("load", "both"):
            traces = [[dict(m) for m in s.messages] for s in load_sessions([args.traces])
                      if len(_calls(list(s.messages))) >= 5]
            rows = {}
            backends = set(args.backends.split(","))
            if "postgres" in backends:
                rows["PostgreSQL"] = load("postgres", _schema_dsn(admin), args.procs, args.sessions, args.seconds,
                                          traces, team=args.team)
                print(f"  load postgres: {rows['PostgreSQL']}", file=sys.stderr, flush=True)
            if "postgres+tantivy" in backends:
                rows["PostgreSQL + follower"] = load(
                    "postgres+tantivy", _schema_dsn(admin), args.procs, args.sessions, args.seconds, traces,
                    team=args.team)
                print(f"  load postgres+tantivy: {rows['PostgreSQL + follower']}", file=sys.stderr, flush=True)
            for layout in [x for x in args.sqlite_layout.split(",") if x and "sqlite" in backends]:
                folder = tempfile.mkdtemp(prefix="pg-bench-sqlite-")
                try:
                    row = load("sqlite", folder, args.procs, args.sessions, args.seconds, traces, layout,
                               team=args.team)
                finally:
                    shutil.rmtree(folder, ignore_errors=True)
                rows[f"SQLite ({layout})"] = row
                print(f"  load sqlite {layout}: {row}", file=sys.stderr, flush=True)
            print(_table(f"{args.procs} processes x {args.sessions} sessions, {args.seconds:g} s, one store", rows,
                         ["writers", "sessions", "errors", "pages", "pages_expected", "count_mismatches",
                          "assembles", "assembles_per_s", "assemble_p50_ms", "assemble_p99_ms", "recall_p50_ms",
                          "recall_p99_ms", "idle_round_trip_ms", "load_average"]))
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

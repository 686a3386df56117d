"""Many writers: processes x threads x sessions on one store, for a time or a number of operations.

Every conversation's requests are sent in order, as a harness or a proxy
sends them. Each worker process has threads; each thread steps its own
*private* conversation (its own ``Pager``) or one of the two *shared*
conversations its process serves with a neighbouring process. A shared
conversation's next request is claimed from a counter both processes see
(the order a proxy receives requests in); each process serves its claims in
order through one ``Pager`` its threads share. Two processes serve claims
concurrently, so a request can reach the store after a later one of the
same conversation: that stale request is planned read-only (its report's
``behind`` > 0) and records nothing; it is counted apart, as ``behind``, and
checked: a later request of it was claimed (else ``illegit_behind``).
Threads also note, pin, search, expand and read stats.

Each thread stops after ``ops`` operations, or at the deadline ``duration``
seconds away, whichever comes first: the fast test counts operations, so a
loaded machine makes it slower, never different.

The parent then reopens the store and checks each conversation: exactly the
acknowledged number of pages (no loss, no duplicate, one branch), every
acknowledged note once, every page in the recall index.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import orjson

import chaos_common as cc
from pager.lab.replay.parallel import worker_context

STEPS = 80


def _shared_request(claim: int, k: int) -> tuple[str, list[dict[str, Any]], int]:
    """Return the session, conversation and request length of shared conversation ``k``'s claim."""
    b = cc.boundaries(cc.conversation("x", STEPS))  # the same shape for every session name length
    gen, pos = divmod(claim, len(b) - 1)
    session = f"shared-{k}-{gen}"
    history = cc.conversation(session, STEPS)
    bounds = cc.boundaries(history)
    return session, history, bounds[min(pos, len(bounds) - 1)]


def worker(store: str, w: int, nproc: int, threads: int, duration: float | None, ops: int | None,
           claims: list[Any], out_path: str, seed: int) -> None:
    import pager

    serves = (w, (w - 1) % nproc)  # shared conversations this process serves
    plocks = {k: threading.Lock() for k in serves}
    shared_pagers: dict[str, Any] = {}
    result: dict[str, Any] = {"acked": {}, "notes": {}, "errors": [], "behind": 0, "illegit_behind": 0,
                              "calls": 0, "assembles": 0}
    rlock = threading.Lock()
    deadline = time.monotonic() + duration if duration is not None else None

    def more(done: int) -> bool:
        if ops is not None and done >= ops:
            return False
        return deadline is None or time.monotonic() < deadline

    def ack(session: str, n: int) -> None:
        with rlock:
            result["acked"][session] = max(result["acked"].get(session, 0), n)
            result["assembles"] += 1

    def ack_note(session: str, text: str) -> None:
        with rlock:
            result["notes"].setdefault(session, []).append(text)

    def extras(p: Any, r: random.Random, session: str, tag: str) -> None:
        x = r.random()
        if x < 0.1:
            text = f"note {tag}"
            p.note(text)
            ack_note(session, text)
        elif x < 0.2:
            hits = p.search(r.choice(("parse_config", "tantivy", "watermark", "KeyError")), k=3)
            if hits and hits[0].handle:
                p.expand(hits[0].handle, 1, 3)
        elif x < 0.25:
            p.stats()
            p.task_state()

    def shared_pager(session: str) -> Any:
        p = shared_pagers.get(session)
        if p is None:
            p = shared_pagers[session] = pager.open(store, session=session, log_reports=False)
        return p

    def run_thread(t: int) -> None:
        r = random.Random(seed * 1000 + t)
        gen = 0
        private = f"p{w}-{t}-{gen}"
        p = pager.open(store, session=private, log_reports=r.random() < 0.5)
        history = cc.conversation(private, STEPS)
        i = done = 0
        try:
            while more(done):
                done += 1
                try:
                    if r.random() < 0.5:
                        k = r.choice(serves)
                        with plocks[k]:
                            with claims[k].get_lock():
                                claim = claims[k].value
                                claims[k].value += 1
                            session, shist, n = _shared_request(claim, k)
                            sp = shared_pager(session)
                            sp.assemble({"messages": shist[:n]})
                            ack(session, n)
                            if sp.last_report.behind:
                                with rlock:
                                    result["behind"] += 1
                                    # legitimate only when a later request of it was claimed
                                    if claims[k].value <= claim + 1:
                                        result["illegit_behind"] += 1
                            extras(sp, r, session, f"{w}.{t}.{claim}")
                    else:
                        bounds = cc.boundaries(history)
                        if i >= len(bounds):
                            p.close()
                            gen += 1
                            private = f"p{w}-{t}-{gen}"
                            p = pager.open(store, session=private, log_reports=False)
                            history, i = cc.conversation(private, STEPS), 0
                            continue
                        p.assemble({"messages": history[: bounds[i]]})
                        ack(private, bounds[i])
                        i += 1
                        extras(p, r, private, f"{w}.{t}.{i}")
                    with rlock:
                        result["calls"] += 1
                except Exception as exc:  # noqa: BLE001 - counted, with its traceback
                    with rlock:
                        result["errors"].append(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}")
        finally:
            p.close()

    ts = [threading.Thread(target=run_thread, args=(t,)) for t in range(threads)]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    for sp in shared_pagers.values():
        sp.close()
    Path(out_path).write_bytes(orjson.dumps(result))


def run(duration: float | None = None, *, ops: int | None = None, processes: int = 4, threads: int = 4,
        seed: int = 0, workdir: str | None = None, log: Any = None) -> dict[str, Any]:
    """Run the load for about ``duration`` seconds or ``ops`` operations per thread; return the counts."""
    if duration is None and ops is None:
        raise ValueError("give a duration, an operation count or both")
    ctx = worker_context()  # children start with pager and the tokenizer loaded
    base = Path(tempfile.mkdtemp(prefix="pager-chaos-load-", dir=workdir))
    store = base / "store"
    try:
        claims = [ctx.Value("q", 0) for _ in range(processes)]
        procs = [
            ctx.Process(target=worker, args=(str(store), w, processes, threads, duration, ops, claims,
                                             str(base / f"w{w}.json"), seed + w))
            for w in range(processes)
        ]
        for pr in procs:
            pr.start()
        for pr in procs:
            pr.join(timeout=(duration or 0) + 300 + (ops or 0) * threads)  # a hang guard, not a time limit
            if pr.is_alive():
                pr.kill()
                pr.join()
        counts: dict[str, Any] = {"processes": processes, "threads": threads, "seconds": duration, "ops": ops,
                                  "calls": 0, "assembles": 0, "errors": 0, "behind": 0,
                                  "illegit_behind": 0, "dead_workers": 0, "sessions": 0, "pages": 0,
                                  "acked_notes": 0, "error_samples": []}
        acked: dict[str, int] = {}
        notes: dict[str, set[str]] = {}
        for w, pr in enumerate(procs):
            path = base / f"w{w}.json"
            if pr.exitcode != 0 or not path.exists():
                counts["dead_workers"] += 1
                continue
            res = orjson.loads(path.read_bytes())
            for k in ("calls", "assembles", "behind", "illegit_behind"):
                counts[k] += res[k]
            counts["errors"] += len(res["errors"])
            counts["error_samples"] += res["errors"][:3]
            for s, n in res["acked"].items():
                acked[s] = max(acked.get(s, 0), n)
            for s, texts in res["notes"].items():
                notes.setdefault(s, set()).update(texts)
                counts["acked_notes"] += len(texts)
        faults = cc.check_store(store, acked, notes, STEPS)
        counts.update(faults)
        # exact page counts: each conversation holds exactly what was acknowledged
        import pager

        mismatch = 0
        with pager.open(store, session="check", log_reports=False) as p:
            for s, n in acked.items():
                aside = len(p.store.notes(s)) + len(p.store.pins(s))  # each note and pin is a page too
                mismatch += abs(p.store.count_pages(s) - aside - n)
            counts["pages"] = p.store.count_pages()
        counts["page_count_mismatch"] = mismatch
        counts["sessions"] = len(acked)
        return counts
    finally:
        shutil.rmtree(base, ignore_errors=True)

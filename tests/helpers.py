"""Small builders for chat histories used across the tests."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, Iterator


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def system(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text}


def call(cid: str, name: str = "bash", **args: Any) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def assistant(text: str | None = None, *calls: dict[str, Any]) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        msg["tool_calls"] = list(calls)
    return msg


def tool(cid: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": content}


def big_text(n_lines: int, tag: str = "line") -> str:
    return "".join(f"{tag} {i}: value_{i} = compute_{tag}({i}) # padding text here\n" for i in range(n_lines))


def coding_session(steps: int, *, output_lines: int = 40, seed_text: str = "fix parse_config in src/app/config.py") -> list[dict[str, Any]]:
    """Return a history: system, task, then ``steps`` call/result steps (no final assistant)."""
    msgs = [system("You are a coding agent."), user(seed_text)]
    for i in range(steps):
        cid = f"call_{i}"
        if i % 3 == 0:
            msgs.append(assistant(f"Reading file number {i}", call(cid, "bash", command=f"cat src/mod_{i % 7}.py")))
        else:
            msgs.append(assistant(f"Step {i}: run tests", call(cid, "bash", command=f"pytest -k test_{i}")))
        msgs.append(tool(cid, big_text(output_lines, tag=f"out{i}")))
    return msgs


_TURN_WORKER = r"""
import sys, pager
sys.path.insert(0, {tests!r})
from helpers import coding_session
history = coding_session(int(sys.argv[3]))
with pager.open(sys.argv[1], session=sys.argv[2], context_window=200_000, log_reports=False) as p:
    for line in sys.stdin:
        p.assemble({{"messages": history[: int(line)]}})
        print("ok", len(p.history), flush=True)
"""


def take_turns(store: str, session: str, steps: int) -> list[dict[str, Any]]:
    """Two worker processes (as two proxy processes would) take turns serving one conversation; return it.

    Each call's reply must show the worker's mirror holding every message so far, the other's included.
    """
    import subprocess
    import sys
    from pathlib import Path

    import zygote

    tests = Path(__file__).resolve().parent
    code = _TURN_WORKER.format(tests=str(tests))
    history = coding_session(steps)
    workers = [  # processes of their own, forked with pager imported (tests/zygote.py)
        zygote.popen([sys.executable, "-c", code, store, session, str(steps)], cwd=tests.parent,
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        for n in range(3, len(history) + 1):
            w = workers[n % 2]
            assert w.stdin is not None and w.stdout is not None and w.stderr is not None
            w.stdin.write(f"{n}\n")
            w.stdin.flush()
            assert w.stdout.readline().split() == ["ok", str(n)], w.stderr.read()[-2000:]
    finally:
        for w in workers:
            if w.stdin is not None:
                w.stdin.close()
            w.wait(timeout=60)
    return history


def python_lines(fn: Any, *args: Any, **kwargs: Any) -> int:
    """Return how many lines of Python ``fn(*args, **kwargs)`` executed.

    A count of work that a loaded machine cannot change, for tests that would
    otherwise time a call: a per-item Python loop shows as lines growing with
    the input; vectorised or C-level work does not.
    """
    import sys

    count = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        fn(*args, **kwargs)
    finally:
        sys.settrace(previous)
    return count


def native_threads() -> int:
    """Return the threads of this process as the OS counts them (tantivy's are not Python threads)."""
    import os

    return len(os.listdir("/proc/self/task"))


def wait_until(condition: Any, what: str, limit: float = 120.0) -> None:
    """Block until ``condition()`` is true: a state to reach, not a delay (``limit`` only guards a hang)."""
    import threading
    import time

    tick = threading.Event()
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never reached: {what}")
        tick.wait(0.005)  # the OS has no event for "a native thread exited": look again shortly


def committed_pages(store: Path) -> int:
    """Count the pages another connection sees: what is committed (a writer's open transaction does not block it)."""
    db = sqlite3.connect(store / "pager.db")
    try:
        return int(db.execute("SELECT count(*) FROM pages").fetchone()[0])
    finally:
        db.close()


def write_pg_sessions(dsn: str, prefix: str, threads: int, batches: int) -> list[int]:
    """Write ``threads`` sessions at once on PostgreSQL, ``batches`` transactions of 3 pages each; return ids."""
    import threading

    from pager.storage.base import StatUpdate
    from pager.storage.postgres import PostgresStore
    from pager.testing import new_page

    store = PostgresStore(dsn, max_size=threads)
    out: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(t: int) -> None:
        session = f"{prefix}-{t}"
        try:
            branch = store.ensure_session(session)
            for b in range(batches):
                with store.transaction():
                    branch, ids = store.record(
                        session, branch, None, 3 * b, [new_page(100 * b + i, step=b) for i in range(3)]
                    )
                    store.update_stats([StatUpdate(ids[0], last_ref=b, ref_count=1, stale=False)])
                    store.save_state(session, {"calls": b + 1})
                with lock:
                    out.extend(ids)
        except BaseException as exc:  # collected: a worker thread must not die silently
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    store.close()
    if errors:
        raise errors[0]
    return out


def plan_table(rng: Any, n_units: int, *, most_results: int, sizes: tuple[int, ...]) -> Any:
    """A random planner input: L1 (two rows) then units of a call and 0..``most_results`` results of ``sizes`` tokens."""
    import numpy as np

    from pager.core.plan import PlanInput

    pages, tokens, units, tool = [1, 2], [50, 50], [0, 1], [False, False]
    for u in range(n_units):
        for k in range(int(rng.integers(1, most_results + 2))):
            pages.append(10 + len(pages))
            tokens.append(int(rng.choice(list(sizes))) if k else 40)
            units.append(2 + u)
            tool.append(bool(k))
    tok = np.asarray(tokens, dtype=np.int64)
    n = len(pages)
    return PlanInput(
        page=np.asarray(pages, dtype=np.int64), tokens=tok, stub_tokens=np.where(np.asarray(tool), 60, tok),
        unit=np.asarray(units, dtype=np.int64), pinned=np.asarray([True, True] + [False] * (n - 2)),
        tool=np.asarray(tool), heat=rng.random(n), compact_tokens=np.full(n, 12, dtype=np.int64),
    )


def scheduler_prompts(full: list[Any], rng: Any, count: int, edited: Any) -> Iterator[list[Any]]:
    """Yield ``count`` prompts of ``full``'s neutral messages the way the scheduler hands them over.

    Between rounds the turn's new messages are appended; otherwise a message of the head is
    replaced by a new object (``edited(message, index)``: a stub, an edit), the tail is dropped (a
    rollover, a retry), pager's own message or a late system message is inserted, or the same
    prompt comes again as a new list. A caller may draw from ``rng`` between yields.
    """
    cur = full[: rng.randrange(2, 8)]
    for _ in range(count):
        r = rng.random()
        if r < 0.45:  # the turn's new messages
            k = len(cur)
            cur = cur + full[k: k + rng.randrange(1, 5)]
        elif r < 0.6 and len(cur) > 2:  # a new object in the head
            i = rng.randrange(1, len(cur))
            cur = cur[:i] + [edited(cur[i], i)] + cur[i + 1:]
        elif r < 0.7 and len(cur) > 3:  # the tail dropped
            cur = cur[: rng.randrange(2, len(cur))]
        elif r < 0.85:  # pager's own message (the card, a recalled page) or a late system message
            i = rng.randrange(1, len(cur) + 1)
            new = ({"role": "user", "content": f"## Task state {i}"} if rng.random() < 0.7 else
                   {"role": "system", "content": f"late {i}"})
            cur = cur[:i] + [new] + cur[i:]
        else:  # the same prompt again, as a new list
            cur = list(cur)
        yield cur


def run_threads(work: Any, count: int) -> None:
    """Run ``work(i)`` for i in range(count), each in a thread of its own, and wait for them all."""
    import threading

    threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

"""Processes that open one new store at the same moment all open it.

Turning a new database into WAL takes SQLite's exclusive lock, and SQLite answers "database
is locked" at once instead of waiting: the store now waits there as a transaction does.
"""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

from pager.storage.sqlite import SQLiteStore

PROCESSES = 4
STORES = 30


def _open_each_with_the_others(base: str, barrier: Any, failures: Any) -> None:
    for i in range(STORES):
        barrier.wait()  # every process opens store i at the same moment
        try:
            SQLiteStore(f"{base}/store{i}").close()
        except Exception as exc:  # every failure counts, typed or not
            failures.put(repr(exc))


def test_processes_opening_one_new_store_together_all_open_it(tmp_path):
    ctx = mp.get_context("fork")
    barrier, failures = ctx.Barrier(PROCESSES), ctx.Queue()
    procs = [ctx.Process(target=_open_each_with_the_others, args=(str(tmp_path), barrier, failures))
             for _ in range(PROCESSES)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * PROCESSES
    seen = []
    while not failures.empty():
        seen.append(failures.get())
    assert seen == []

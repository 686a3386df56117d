"""A lost or cut SQLite WAL is noticed on open, and what it took is named (issue 20).

A writer process acknowledges messages, then dies by SIGKILL before any
checkpoint; its ``pager.db-wal`` is deleted or cut short; the reopened store
must warn (``LostWritesWarning``) with the session and how many pages and
writes it lost, once. A writer killed with its WAL intact loses nothing and
raises no alarm.
"""

from __future__ import annotations

import os
import signal
import sys
import warnings
from pathlib import Path

import pytest
from helpers import system, user

import pager
import zygote
from pager.storage.sqlite import SQLiteStore

ROOT = Path(__file__).resolve().parents[1]

_WRITER = """
import os, signal, sys
sys.path.insert(0, sys.argv[3])
import pager
import pager.storage.sqlite_checkpoint
pager.storage.sqlite_checkpoint.DELAY = 3600.0  # no background checkpoint before the kill, however slow the machine
store, n = sys.argv[1], int(sys.argv[2])
p = pager.open(store, session="agent", log_reports=False)
msgs = [{"role": "system", "content": "agent"}, {"role": "user", "content": "start"}]
for i in range(n):
    msgs += [{"role": "assistant", "content": f"step {i}"}, {"role": "user", "content": f"result {i}"}]
    p.assemble({"messages": msgs})
    if i == n // 2:
        p.note("decided: keep going")
    print(p.store.count_pages("agent"), flush=True)  # acknowledged: assemble returned
os.kill(os.getpid(), signal.SIGKILL)  # no close, no checkpoint: the WAL holds it all
"""


def _write_then_die(store: Path, n: int) -> int:
    out = zygote.run([sys.executable, "-c", _WRITER, str(store), str(n), str(ROOT)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == -signal.SIGKILL, out.stderr
    return int(out.stdout.split()[-1])


def _first_part(store: Path) -> int:
    """A part written and closed cleanly: checkpointed into pager.db, it survives losing the WAL."""
    with pager.open(store, session="agent", log_reports=False) as p:
        p.assemble({"messages": [system("agent"), user("start")]})
        return p.store.count_pages("agent")


def _reopen_quietly(store: Path) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("error", pager.LostWritesWarning)
        with pager.open(store, session="agent", log_reports=False) as p:
            return p.store.count_pages("agent")


def test_a_deleted_wal_is_reported_with_what_it_took(tmp_path):
    store = tmp_path / "ctx"
    kept = _first_part(store)
    acked = _write_then_die(store, 20)
    assert acked > kept
    (store / "pager.db-wal").unlink()
    (store / "pager.db-shm").unlink(missing_ok=True)
    with pytest.warns(pager.LostWritesWarning, match="write-ahead log was lost") as got:
        s = SQLiteStore(store)
    lost = got[0].message.lost
    assert s.count_pages("agent") == kept  # what pager.db held; everything after it is gone
    (agent,) = lost.sessions
    assert agent.session == "agent" and agent.pages == acked - kept and agent.versions > 0
    assert lost.pages == acked - kept
    assert "'agent'" in str(got[0].message) and f"{acked - kept} page(s)" in str(got[0].message)
    events = s.events("agent", "lost-writes")
    assert len(events) == 1 and events[0].payload["pages"] == acked - kept
    s.close()
    assert _reopen_quietly(store) == kept  # said once


def test_a_wal_cut_short_is_reported(tmp_path):
    store = tmp_path / "ctx"
    kept = _first_part(store)
    acked = _write_then_die(store, 30)
    wal = store / "pager.db-wal"
    with open(wal, "r+b") as f:
        f.truncate(wal.stat().st_size // 3)
    (store / "pager.db-shm").unlink(missing_ok=True)
    with pytest.warns(pager.LostWritesWarning) as got:
        with pager.open(store, session="agent", log_reports=False) as p:
            have = p.store.count_pages("agent")
    assert kept <= have < acked
    assert got[0].message.lost.sessions[0].pages == acked - have


def test_a_killed_writer_with_its_wal_loses_nothing_and_raises_no_alarm(tmp_path):
    store = tmp_path / "ctx"
    _first_part(store)
    acked = _write_then_die(store, 10)
    assert _reopen_quietly(store) == acked


def test_a_whole_session_lost_with_the_wal_is_named(tmp_path):
    store = tmp_path / "ctx"
    with pager.open(store, session="other", log_reports=False) as p:
        p.assemble({"messages": [system("agent"), user("another session, checkpointed")]})
    acked = _write_then_die(store, 5)
    os.unlink(store / "pager.db-wal")
    with pytest.warns(pager.LostWritesWarning, match="'agent' is gone") as got:
        SQLiteStore(store).close()
    (agent,) = got[0].message.lost.sessions
    assert agent.missing and agent.pages == acked


_BUSY_WRITER = """
import sys
sys.path.insert(0, sys.argv[3])
import pager
msgs = [{"role": "system", "content": "agent"}, {"role": "user", "content": "start"}]
with pager.open(sys.argv[1], session="busy", log_reports=False) as p:
    for i in range(int(sys.argv[2])):
        msgs += [{"role": "assistant", "content": f"step {i}"}, {"role": "user", "content": f"result {i}"}]
        p.assemble({"messages": msgs})
"""


def test_opening_while_another_process_writes_raises_no_alarm(tmp_path):
    """The mark is compared under its lock with what the database holds then: a busy writer is no loss."""
    store = tmp_path / "ctx"
    SQLiteStore(store).close()
    writer = zygote.popen([sys.executable, "-c", _BUSY_WRITER, str(store), "40", str(ROOT)])
    opens = 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", pager.LostWritesWarning)
            while writer.poll() is None or opens == 0:
                SQLiteStore(store).close()
                opens += 1
    finally:
        writer.wait(timeout=120)
    assert writer.returncode == 0 and opens > 0

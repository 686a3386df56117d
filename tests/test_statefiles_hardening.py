"""State files never follow a symlink, rename atomically in place, rotate the WAL; the CLI refuses unknown sessions."""

from __future__ import annotations

import datetime as dt
import os

import pytest

import pager
from pager.cli import main
from pager.errors import StateFileError
from pager.statefiles import (
    INVARIANTS_FILE,
    NEXT_FILE,
    WAL_FILE,
    Invariant,
    TaskState,
    export_state,
    resume_text,
    wal_segments,
)

T0 = dt.datetime(2026, 11, 30, 2, 30, 25, tzinfo=dt.timezone.utc)
STATE = TaskState("Ship it", (Invariant("keep WAL mode", "readers must not block"),), "run the canary")


def clock():
    return T0


@pytest.fixture
def victim(tmp_path):
    v = tmp_path / "victim.txt"
    v.write_text("precious\n")
    return v


@pytest.mark.parametrize("name", [WAL_FILE, INVARIANTS_FILE])
def test_append_through_a_planted_symlink_is_refused(tmp_path, victim, name):
    d = tmp_path / "state"
    export_state(STATE, d, transition="a", now=clock)
    (d / name).unlink()
    (d / name).symlink_to(victim)
    grown = TaskState("Ship it", (*STATE.invariants, Invariant("no LLM summaries", "lossy", "rejected")), "x")
    with pytest.raises(StateFileError, match="symlink"):
        export_state(grown, d, transition="b", now=clock)
    assert victim.read_text() == "precious\n"


def test_planted_temp_symlink_is_never_written_through(tmp_path, victim):
    d = tmp_path / "state"
    export_state(STATE, d, transition="a", now=clock)
    planted = d / f".{NEXT_FILE}.tmp-{os.getpid()}"
    planted.symlink_to(victim)
    export_state(TaskState("Ship it", STATE.invariants, "deploy"), d, transition="b", now=clock)
    assert victim.read_text() == "precious\n"
    assert not (d / NEXT_FILE).is_symlink()
    assert "- next step: deploy" in (d / NEXT_FILE).read_text()
    assert planted.is_symlink()  # left alone, not followed, not removed
    leftovers = [p.name for p in d.iterdir() if ".tmp-" in p.name and p != planted]
    assert leftovers == []


def test_a_symlinked_next_file_is_replaced_not_written_through(tmp_path, victim):
    d = tmp_path / "state"
    export_state(STATE, d, transition="a", now=clock)
    (d / NEXT_FILE).unlink()
    (d / NEXT_FILE).symlink_to(victim)
    export_state(TaskState("Ship it", STATE.invariants, "deploy"), d, transition="b", now=clock)
    assert victim.read_text() == "precious\n"
    assert not (d / NEXT_FILE).is_symlink()


def test_resume_does_not_read_through_symlinks(tmp_path, victim):
    d = tmp_path / "state"
    export_state(STATE, d, transition="a", now=clock)
    (d / "50_secret.md").symlink_to(victim)
    assert "precious" not in resume_text(d)
    (d / WAL_FILE).unlink()
    (d / WAL_FILE).symlink_to(victim)
    with pytest.raises(StateFileError, match="symlink"):
        resume_text(d)


def test_wal_rotates_by_size_and_keeps_every_segment(tmp_path):
    d = tmp_path / "state"
    for i in range(12):
        export_state(TaskState("g", (), f"step {i}"), d, transition=f"t{i}", now=clock, wal_max_bytes=300)
    segments = wal_segments(d)
    assert len(segments) >= 3 and segments[-1] == WAL_FILE
    assert segments[:-1] == sorted(segments[:-1]) and segments[0] == ".wal.000001"
    lines = []
    for name in segments:
        lines += (d / name).read_text().splitlines()
    transitions = [ln.split()[2] for ln in lines if "rotated" not in ln]
    assert transitions == [f"t{i}" for i in range(12)]  # nothing lost across segments
    assert all((d / s).stat().st_size <= 300 + 200 for s in segments)
    assert (d / WAL_FILE).read_text().startswith(f"{T0:%Y-%m-%dT%H:%M:%SZ} no-git rotated previous=")
    assert "WAL segments, oldest first: .wal.000001" in resume_text(d)


# --------------------------------------------------------------------------- CLI


def _store(tmp_path):
    store = tmp_path / "ctx"
    p = pager.open(store, session="real", context_window=20_000, log_reports=False)
    p.assemble({"messages": [{"role": "user", "content": "hello"}]})
    p.close()
    return store


def test_cli_export_refuses_an_unknown_session_and_creates_nothing(tmp_path, capsys):
    store = _store(tmp_path)
    rc = main(["state", "export", str(store), str(tmp_path / "state"), "--session", "typo"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "no session 'typo'" in err
    assert pager.store_sessions(store) == ["real"]
    assert not (tmp_path / "state").exists()


def test_cli_export_refuses_a_path_without_a_store(tmp_path, capsys):
    rc = main(["state", "export", str(tmp_path / "nothing"), str(tmp_path / "state")])
    assert rc == 2 and capsys.readouterr().err.count("\n") == 1
    assert not (tmp_path / "nothing").exists()


def test_cli_export_of_a_real_session(tmp_path, capsys):
    store = _store(tmp_path)
    assert main(["state", "export", str(store), str(tmp_path / "state"), "--session", "real"]) == 0
    assert "hello" in (tmp_path / "state" / "00_goal.md").read_text()

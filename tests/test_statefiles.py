"""Checkpoint files: latches, append-only refusal, atomic next, the WAL, resume, the CLI."""

from __future__ import annotations

import argparse
import datetime as dt
import re
import shutil
import subprocess

import pytest

import pager
from pager.cli import state as state_cli
from pager.errors import PagerError
from pager.statefiles import (
    GOAL_FILE,
    INVARIANTS_FILE,
    NEXT_FILE,
    WAL_FILE,
    Invariant,
    InvariantRewriteError,
    StateFileError,
    TaskState,
    export_state,
    git_revision,
    last_wal_line,
    render_invariants,
    resume_text,
    wal_line,
)

T0 = dt.datetime(2026, 11, 30, 2, 30, 25, tzinfo=dt.timezone.utc)
WAL_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (no-git|[0-9a-f]{4,64}(\+dirty)?) \S.*$")

INV1 = Invariant("Never edit db/schema.sql without a migration file", "migrations are the source of truth")
INV2 = Invariant("Summarize old turns with an LLM", "lossy; turns guesses into facts", "rejected")
STATE = TaskState("Ship the budget module", (INV1,), "run the canary", ("flag X is on",))


def bare(line):
    """Return a WAL line without its files / hash tail."""
    return re.sub(r" files=\S+ sha256=[0-9a-f]{16}$", "", line)


def clock():
    return T0


def test_first_export_writes_everything(tmp_path):
    d = tmp_path / "state"
    written = export_state(STATE, d, transition="start", now=clock)
    assert [p.name for p in written] == [WAL_FILE, GOAL_FILE, INVARIANTS_FILE, NEXT_FILE]
    assert (d / GOAL_FILE).read_text() == "# Goal\n\nShip the budget module\n"
    inv = (d / INVARIANTS_FILE).read_text()
    assert "- [decision] Never edit db/schema.sql without a migration file\n" in inv
    assert "  reason: migrations are the source of truth\n" in inv
    assert (d / NEXT_FILE).read_text() == (
        "# Next\n\n- current step: (not set)\n- last completed step: (none yet)\n"
        "- next step: run the canary\n\n## Notes\n\n- flag X is on\n"
    )
    wal = (d / WAL_FILE).read_text()
    assert wal.startswith("2026-11-30T02:30:25Z no-git start files=00_goal.md,10_invariants.md,99_next.md sha256=")
    assert wal.count("\n") == 1


def test_goal_is_written_once(tmp_path):
    export_state(STATE, tmp_path, transition="a", now=clock)
    drift = TaskState("Something else entirely", (INV1,), "x")
    written = export_state(drift, tmp_path, transition="b", now=clock)
    assert tmp_path / GOAL_FILE not in written
    assert (tmp_path / GOAL_FILE).read_text() == "# Goal\n\nShip the budget module\n"
    assert export_state(TaskState(""), tmp_path / "empty", transition="c", now=clock)
    assert not (tmp_path / "empty" / GOAL_FILE).exists()


def test_invariants_are_appended(tmp_path):
    export_state(STATE, tmp_path, transition="a", now=clock)
    before = (tmp_path / INVARIANTS_FILE).read_text()
    grown = TaskState(STATE.goal, (INV1, INV2), "next")
    written = export_state(grown, tmp_path, transition="b", now=clock)
    after = (tmp_path / INVARIANTS_FILE).read_text()
    assert tmp_path / INVARIANTS_FILE in written
    assert after.startswith(before) and after == render_invariants((INV1, INV2))
    assert "- [rejected] Summarize old turns with an LLM\n  reason: lossy" in after
    # same state again: the file is untouched
    assert tmp_path / INVARIANTS_FILE not in export_state(grown, tmp_path, transition="c", now=clock)


@pytest.mark.parametrize(
    "invariants",
    [
        (),  # drop everything
        (INV2,),  # drop INV1
        (Invariant(INV1.text, "a different reason"), INV2),  # alter a reason
        (Invariant(INV1.text, INV1.reason, "rejected"),),  # flip its kind
        (INV2, INV1),  # reorder
    ],
)
def test_rewriting_invariants_is_refused_and_nothing_is_written(tmp_path, invariants):
    export_state(TaskState(STATE.goal, (INV1, INV2), "first"), tmp_path, transition="a", now=clock)
    snapshot = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(InvariantRewriteError) as info:
        export_state(TaskState(STATE.goal, invariants, "second"), tmp_path, transition="b", now=clock)
    assert "append-only" in str(info.value) and isinstance(info.value, PagerError)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == snapshot


def test_hand_edited_invariants_file_is_refused(tmp_path):
    export_state(STATE, tmp_path, transition="a", now=clock)
    with open(tmp_path / INVARIANTS_FILE, "a") as f:
        f.write("- [decision] added by hand\n")
    with pytest.raises(InvariantRewriteError, match="line"):
        export_state(STATE, tmp_path, transition="b", now=clock)


def test_next_is_replaced_atomically_and_leaves_no_temp(tmp_path):
    export_state(STATE, tmp_path, transition="a", now=clock)
    export_state(TaskState(STATE.goal, (INV1,), "deploy", ()), tmp_path, transition="b", now=clock)
    assert "- next step: deploy\n" in (tmp_path / NEXT_FILE).read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [GOAL_FILE, INVARIANTS_FILE, NEXT_FILE, WAL_FILE]
    )


def test_wal_appends_one_line_per_transition(tmp_path):
    times = iter([T0, T0 + dt.timedelta(minutes=5)])
    export_state(STATE, tmp_path, transition="start", now=lambda: next(times))
    export_state(STATE, tmp_path, transition="next:\n run  tests", now=lambda: next(times))
    lines = [bare(ln) for ln in (tmp_path / WAL_FILE).read_text().splitlines()]
    assert lines == [
        "2026-11-30T02:30:25Z no-git start",
        "2026-11-30T02:35:25Z no-git next: run tests",
    ]
    assert all(WAL_RE.match(ln) for ln in lines)


def test_wal_line_format_converts_to_utc():
    cet = dt.timezone(dt.timedelta(hours=1))
    assert wal_line("x", "abc1234", dt.datetime(2026, 1, 1, 1, 0, tzinfo=cet)) == (
        "2026-01-01T00:00:00Z abc1234 x\n"
    )
    assert wal_line("  ", "no-git", T0).endswith(" export\n")


def test_default_clock_is_utc_now(tmp_path):
    export_state(STATE, tmp_path, transition="now")
    line = last_wal_line(tmp_path)
    assert WAL_RE.match(line)
    stamp = dt.datetime.strptime(line.split()[0], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
    assert abs((dt.datetime.now(dt.timezone.utc) - stamp).total_seconds()) < 120


def _git(*args, cwd):
    subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True,
        env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
             "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(cwd), "PATH": "/usr/bin:/bin:/usr/local/bin"},
    )


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_git_revision_in_a_repository_and_outside(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git("init", "-q", cwd=repo)
    assert git_revision(repo) == "no-git"  # no commit yet
    (repo / "f").write_text("x")
    _git("add", "f", cwd=repo)
    _git("commit", "-q", "-m", "c", cwd=repo)
    rev = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    state_dir = repo / "state"
    export_state(STATE, state_dir, transition="in repo", now=clock)
    # untracked state files do not make the tree dirty; a modified tracked file does
    assert bare(last_wal_line(state_dir)) == f"2026-11-30T02:30:25Z {rev} in repo"
    (repo / "f").write_text("changed")
    export_state(STATE, state_dir, transition="dirty", now=clock)
    assert bare(last_wal_line(state_dir)) == f"2026-11-30T02:30:25Z {rev}+dirty dirty"
    outside = tmp_path / "plain"
    export_state(STATE, outside, transition="outside", now=clock)
    assert bare(last_wal_line(outside)) == "2026-11-30T02:30:25Z no-git outside"


def test_git_revision_failures_are_no_git(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise subprocess.TimeoutExpired("git", 5)

    monkeypatch.setattr(subprocess, "run", boom)
    assert git_revision(tmp_path) == "no-git"

    def missing(*a, **k):
        raise FileNotFoundError("git")

    monkeypatch.setattr(subprocess, "run", missing)
    assert git_revision(tmp_path) == "no-git"


def test_export_into_a_file_path_is_refused(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(StateFileError, match="not a directory"):
        export_state(STATE, f, transition="x", now=clock)


def test_invariant_kind_is_checked():
    with pytest.raises(StateFileError):
        Invariant("x", "y", "maybe")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- resume


def test_resume_prints_files_in_order_then_last_wal_line(tmp_path):
    export_state(STATE, tmp_path, transition="start", now=clock)
    export_state(TaskState(STATE.goal, (INV1, INV2), "deploy"), tmp_path, transition="step 2", now=clock)
    (tmp_path / "50_extra.md").write_text("no trailing newline")
    (tmp_path / "notes.md").write_text("not numbered: skipped")
    text = resume_text(tmp_path)
    headers = re.findall(r"^===== (.*) =====$", text, re.M)
    assert headers == [GOAL_FILE, INVARIANTS_FILE, "50_extra.md", NEXT_FILE, "last WAL entry"]
    assert "no trailing newline\n===== 99_next.md" in text
    assert bare(text.splitlines()[-1]) == "2026-11-30T02:30:25Z no-git step 2"
    assert "start" not in text.split("last WAL entry")[1]
    assert "not numbered" not in text


def test_resume_without_wal_and_without_dir(tmp_path):
    (tmp_path / GOAL_FILE).write_text("# Goal\n\ng\n")
    assert resume_text(tmp_path).endswith("===== last WAL entry =====\n(no wal yet)\n")
    with pytest.raises(StateFileError, match="no state directory"):
        resume_text(tmp_path / "missing")


def test_last_wal_line_reads_the_tail_of_a_long_log(tmp_path):
    lines = [f"2026-11-30T02:30:25Z no-git step {i} " + "x" * 50 for i in range(2000)]
    (tmp_path / WAL_FILE).write_text("\n".join(lines) + "\n\n")
    assert last_wal_line(tmp_path) == lines[-1]
    (tmp_path / WAL_FILE).write_text("only line")
    assert last_wal_line(tmp_path) == "only line"
    (tmp_path / WAL_FILE).write_text("")
    assert last_wal_line(tmp_path) is None


# --------------------------------------------------------------------------- CLI


def _parser():
    parser = argparse.ArgumentParser(prog="pager")
    sub = parser.add_subparsers(dest="command")
    state_cli.register(sub)
    return parser


class FakePager:
    closed = False

    def __init__(self, store, session):
        self.store, self.session = store, session

    def task_state(self):
        return TaskState(f"goal of {self.session}", (INV1,), f"next for {self.session}")

    def close(self):
        FakePager.closed = True


@pytest.fixture
def fake_store(monkeypatch):
    opened = []

    def fake_open(store, *, session):
        opened.append((store, session))
        return FakePager(store, session)

    monkeypatch.setattr(pager, "open", fake_open, raising=False)
    monkeypatch.setattr(pager, "store_sessions", lambda store: ["old", "newest"], raising=False)
    return opened


def test_cli_export_uses_most_recent_session_by_default(tmp_path, fake_store, capsys):
    d = tmp_path / "state"
    args = _parser().parse_args(["state", "export", "db.sqlite", str(d)])
    assert args.func(args) == 0
    assert fake_store == [("db.sqlite", "newest")] and FakePager.closed
    assert (d / GOAL_FILE).read_text() == "# Goal\n\ngoal of newest\n"
    assert bare(last_wal_line(d)).endswith(" export session=newest")
    printed = capsys.readouterr().out.split()
    assert printed == [str(d / n) for n in (WAL_FILE, GOAL_FILE, INVARIANTS_FILE, NEXT_FILE)]


def test_cli_export_with_session_and_transition(tmp_path, fake_store):
    args = _parser().parse_args(
        ["state", "export", "db", str(tmp_path), "--session", "old", "--transition", "handoff 3"]
    )
    assert args.func(args) == 0
    assert fake_store == [("db", "old")]
    assert bare(last_wal_line(tmp_path)).endswith(" handoff 3")


def test_cli_export_with_empty_store_fails_cleanly(tmp_path, monkeypatch):
    monkeypatch.setattr(pager, "open", lambda *a, **k: None, raising=False)
    monkeypatch.setattr(pager, "store_sessions", lambda store: [], raising=False)
    args = _parser().parse_args(["state", "export", "db", str(tmp_path)])
    with pytest.raises(StateFileError, match="no sessions"):
        args.func(args)


def test_cli_resume_prints_resume_text(tmp_path, capsys):
    export_state(STATE, tmp_path, transition="start", now=clock)
    args = _parser().parse_args(["state", "resume", str(tmp_path)])
    assert args.func(args) == 0
    assert capsys.readouterr().out == resume_text(tmp_path)


def test_cli_resume_through_main_exit_code(tmp_path, capsys):
    from pager import cli

    try:
        cli.build_parser()
    except ImportError:
        pytest.skip("not every subcommand module exists yet")
    assert cli.main(["state", "resume", str(tmp_path / "missing")]) == 2
    assert "no state directory" in capsys.readouterr().err

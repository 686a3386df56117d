"""Live checkpoint files (``state_dir=``): one WAL line per transition, latches, crash consistency, resume."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import textwrap
from pathlib import Path

import pytest
import zygote

import pager
from pager.core.tokens import HeuristicCounter
from pager.errors import InvariantRewriteError, StateFileError
from pager.statefiles import render_state_next, wal_segments

ROOT = Path(__file__).resolve().parents[1]
LINE_RE = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (no-git|[0-9a-f]{4,64}(\+dirty)?) (?P<what>.+?) "
    r"mark=(?P<mark>p\d+\.n\d+\.e\d+)( files=(?P<files>\S+) sha256=[0-9a-f]{16})?$"
)
HISTORY = [{"role": "system", "content": "You are a coding agent."},
           {"role": "user", "content": "Fix the off-by-one in hard_limit."}]


def wal(d: Path) -> list[re.Match[str]]:
    lines = []
    for name in wal_segments(d):
        lines += [ln for ln in (d / name).read_text().splitlines() if "rotated previous=" not in ln]
    matches = [LINE_RE.match(ln) for ln in lines]
    assert all(matches), lines
    return matches  # type: ignore[return-value]


def opened(tmp_path: Path, **kw):
    opts = dict(context_window=40_000, log_reports=False, state_dir=str(tmp_path / "state"),
                counter=HeuristicCounter(4.0))
    opts.update(kw)
    return pager.open(tmp_path / "ctx", session="s1", **opts)


def nc(cid: str, next_steps, inferences=("the reserve is subtracted twice",), requirements=()):
    args = {"handoff": {"requirements": list(requirements), "inferences": list(inferences), "conflicts": [],
                        "next_steps": list(next_steps)}, "related_files": []}
    return {"id": cid, "type": "function", "function": {"name": "new_context", "arguments": json.dumps(args)}}


def test_every_transition_appends_one_wal_line(tmp_path):
    d = tmp_path / "state"
    p = opened(tmp_path, mode="rollover", fallback_reserve=4_000, reminder_threshold=4_000)
    assert [m["what"] for m in wal(d)] == ["session-opened session=s1"]
    p.pin("Never edit db/schema.sql without a migration file")
    p.note("decision: keep SQLite in WAL mode because readers must not block the writer")
    history = list(HISTORY)
    p.assemble({"messages": history})
    c = nc("nc1", ["Run tests/test_budget.py"])
    history.append({"role": "assistant", "content": None, "tool_calls": [c]})
    history.append(p.call_tool(c))
    p.assemble({"messages": history})
    p.close()
    whats = [m["what"] for m in wal(d)]
    assert whats[:3] == ["session-opened session=s1", "pin p=1", "note n=1"]
    assert whats[3].startswith("window-opened generation=0 id=w1-")
    assert whats[4] == "handoff-intent call=nc1"
    assert whats[5:7] == ["handoff-committed", "rollover generation=1 reason=model"]
    assert whats[7].startswith("window-opened generation=1 id=w2-")
    # each line names the store state it reflects; marks only grow
    marks = [m["mark"] for m in wal(d)]
    assert marks[0] == "p0.n0.e0" and marks[1] == "p1.n0.e0" and marks[2] == "p1.n1.e0"
    # a line that changed files names them with their hash
    assert wal(d)[1]["files"] == "00_goal.md,10_invariants.md"
    assert "- next step: Run tests/test_budget.py" in (d / "99_next.md").read_text()


def test_goal_is_written_once_and_invariants_only_grow(tmp_path):
    d = tmp_path / "state"
    p = opened(tmp_path)
    p.assemble({"messages": HISTORY})
    goal = (d / "00_goal.md").read_text()
    assert "Fix the off-by-one" in goal
    before = (d / "10_invariants.md").read_text()
    p.pin("A completely different goal")
    p.note("rejected: LLM summaries -- lossy")
    assert (d / "00_goal.md").read_text() == goal
    after = (d / "10_invariants.md").read_text()
    assert after.startswith(before) and "- [rejected] LLM summaries" in after
    # a rewrite (a hand edit dropping an entry) is refused, live and at the next open
    (d / "10_invariants.md").write_text(after.replace("LLM summaries", "LLM summaries are fine"))
    with pytest.raises(InvariantRewriteError):
        p.note("decision: another one because why not")
    p.close()
    with pytest.raises(InvariantRewriteError):
        opened(tmp_path)


def test_next_file_has_current_last_completed_and_next_step(tmp_path):
    d = tmp_path / "state"
    p = opened(tmp_path)
    p.note("done: reproduced the off-by-one")
    p.note("failed: patching base_limit alone")
    p.note("current: fixing hard_limit")
    p.note("- [ ] add a regression test")
    nxt = (d / "99_next.md").read_text()
    assert "- current step: fixing hard_limit\n" in nxt
    assert "- last completed step: reproduced the off-by-one\n" in nxt
    assert "- next step: [ ] add a regression test\n" in nxt
    assert "## Progress\n\n- done: reproduced the off-by-one\n- failed: patching base_limit alone\n" in nxt
    p.close()


def test_wal_rotates_by_size_keeping_every_segment(tmp_path):
    d = tmp_path / "state"
    p = opened(tmp_path, wal_max_bytes=400)
    for i in range(12):
        p.note(f"note {i}")
    p.close()
    segments = wal_segments(d)
    assert len(segments) >= 3 and segments[0] == ".wal.000001" and segments[-1] == ".wal"
    assert [m["what"] for m in wal(d)] == ["session-opened session=s1"] + [f"note n={i}" for i in range(1, 13)]


def test_symlinked_state_files_refuse_open_and_do_not_leak_the_store(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    d = tmp_path / "state"
    opened(tmp_path).close()
    (d / ".wal").unlink()
    (d / ".wal").symlink_to(victim)
    with pytest.raises(StateFileError, match="symlink"):
        opened(tmp_path)
    assert victim.read_text() == "precious\n"
    (d / ".wal").unlink()
    opened(tmp_path).close()  # the store was closed: it opens again


# --------------------------------------------------------------------------- crashes

CHILD = textwrap.dedent("""
    import os, signal, sys
    import pager
    from pager import statedir, stateio
    store, state, where = sys.argv[1], sys.argv[2], sys.argv[3]
    p = pager.open(store, session="s1", context_window=40_000, log_reports=False, state_dir=state)
    p.note("first note")
    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)
    if where == "before-wal":
        statedir.write_state = die          # the store has committed; no WAL line yet
    else:
        stateio.StateDirFd.replace = die    # the WAL line is written; the files are not
    p.note("second note, lost from the files by the crash")
    print("not reached")
""")


@pytest.mark.parametrize("where", ["before-wal", "before-files"])
def test_sigkill_between_store_and_state_files_is_recovered_on_reopen(tmp_path, where):
    store, state = tmp_path / "ctx", tmp_path / "state"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = zygote.run([sys.executable, "-c", CHILD, str(store), str(state), where],
                      capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "not reached" not in proc.stdout
    # the crash left them apart: the store has the note, the files do not
    assert "second note" not in (state / "99_next.md").read_text()
    marks = [m["mark"] for m in wal(state)]
    assert marks[-1] == ("p0.n1.e0" if where == "before-wal" else "p0.n2.e0")
    p = pager.open(store, session="s1", context_window=40_000, log_reports=False, state_dir=str(state))
    try:
        assert p.notes()[-1].startswith("second note")
        whats = [m["what"] for m in wal(state)]
        assert whats[-2].startswith("recover store=p0.n2.e0 wal=p0.n")
        assert whats[-1] == "resume session=s1"
        assert wal(state)[-1]["mark"] == "p0.n2.e0"
        # files and store agree again
        assert (state / "99_next.md").read_text() == render_state_next(p.task_state())
    finally:
        p.close()
    # a clean reopen needs no recovery
    q = pager.open(store, session="s1", context_window=40_000, log_reports=False, state_dir=str(state))
    q.close()
    assert not wal(state)[-2]["what"].startswith("recover")


# --------------------------------------------------------------------------- new windows start from the files


def test_reopened_paging_session_has_the_files_in_l1(tmp_path):
    p = opened(tmp_path)
    p.note("current: fixing hard_limit")
    p.assemble({"messages": HISTORY})
    p.close()
    p = opened(tmp_path)
    out = p.assemble({"messages": HISTORY})
    card = out["messages"][2]["content"]
    assert "===== 99_next.md =====" in card and "- current step: fixing hard_limit" in card
    assert "resume session=s1" in card  # the last WAL line
    assert p.last_report.layers["l1"] <= 8_000
    # the card is fixed for the session's lifetime: the prefix stays byte-stable
    p.note("another note")
    again = p.assemble({"messages": HISTORY})["messages"][2]["content"]
    assert again.split("===== 00_goal.md")[1] == card.split("===== 00_goal.md")[1]
    p.close()


def test_new_rollover_window_starts_from_the_files_within_the_l1_cap(tmp_path):
    p = opened(tmp_path, mode="rollover", fallback_reserve=4_000, reminder_threshold=4_000, l1_cap=1_500)
    for i in range(40):
        p.note(f"done: step {i} " + "with a long explanation of what was done " * 3)
    history = list(HISTORY)
    p.assemble({"messages": history})
    c = nc("nc1", ["Run tests/test_budget.py"])
    history.append({"role": "assistant", "content": None, "tool_calls": [c]})
    history.append(p.call_tool(c))
    window = p.assemble({"messages": history})["messages"]
    card = window[2]["content"]
    assert "===== 00_goal.md =====" in card and "Fix the off-by-one" in card
    assert "cut to fit the L1 cap" in card  # 40 progress lines do not fit 1,500 tokens
    assert p.last_report.layers["l1"] <= 1_500
    p.close()


def test_reopened_rollover_session_shows_the_files_once_at_the_tail(tmp_path):
    kw = dict(mode="rollover", fallback_reserve=4_000, reminder_threshold=4_000)
    p = opened(tmp_path, **kw)
    history = list(HISTORY)
    first = p.assemble({"messages": history})["messages"]
    p.close()
    p = opened(tmp_path, **kw)
    history.append({"role": "assistant", "content": "Looking at src/budget.py"})
    history.append({"role": "user", "content": "go on"})
    out = p.assemble({"messages": history})["messages"]
    assert out[: len(first)] == first  # the window's prefix is kept
    assert out[-1]["content"].startswith("[pager] Checkpoint files of this task, read back on reopen:")
    assert p.last_report.notices == ("resume",)
    history.append({"role": "assistant", "content": "ok"})
    assert p.assemble({"messages": history})["messages"][-2] == out[-1]  # once, then byte-identical
    p.close()


def test_paging_assembles_write_nothing_once_the_goal_is_on_disk(tmp_path):
    d = tmp_path / "state"
    p = opened(tmp_path)
    history = list(HISTORY)
    for i in range(5):
        p.assemble({"messages": history})
        history.append({"role": "assistant", "content": f"step {i}"})
    p.close()
    assert [m["what"] for m in wal(d)] == ["session-opened session=s1", "goal"]


def test_a_wal_line_hashes_the_files_it_changed_as_they_are_on_disk(tmp_path):
    from pager.statefiles import content_hash, parse_wal_hash

    d = tmp_path / "state"
    p = opened(tmp_path)
    p.pin("Never edit db/schema.sql without a migration file")
    p.note("current: fixing hard_limit")
    p.close()
    last = (d / ".wal").read_text().splitlines()[-1]
    names, digest = parse_wal_hash(last)
    assert names == ("99_next.md",)
    assert content_hash([(n, (d / n).read_text()) for n in names]) == digest
    (d / "99_next.md").write_text("tampered\n")
    assert content_hash([(n, (d / n).read_text()) for n in names]) != digest
    # the next open notices the files differ from the store and derives them again
    opened(tmp_path).close()
    assert [m["what"] for m in wal(d)][-2].startswith("recover store=p1.n1.e0 wal=p1.n1.e0 files=99_next.md")
    assert "tampered" not in (d / "99_next.md").read_text()


@pytest.mark.parametrize("note", ["next: run the canary", "- Next: run the canary"])
def test_a_next_note_is_printed_once_as_the_next_step_not_next_step_next(tmp_path, note):
    """A ``next: X`` note names the next step; its label is not repeated after the file's own."""
    p = opened(tmp_path)
    p.note(note)
    nxt = (tmp_path / "state" / "99_next.md").read_text()
    assert "- next step: run the canary\n" in nxt and "next step: next" not in nxt.lower()
    p.close()


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def test_resume_refuses_files_that_no_longer_hash_to_their_wal_line(tmp_path):
    from pager.statefiles import resume_text

    d = tmp_path / "state"
    p = opened(tmp_path)
    p.note("current: fixing hard_limit")
    p.close()
    assert "fixing hard_limit" in resume_text(d)
    _flip(d / "99_next.md", 5)
    with pytest.raises(pager.StateFileError, match="99_next.md do not hash"):
        resume_text(d)


@pytest.mark.parametrize("to_hex", [True, False])  # to another hash, or to no hash at all
def test_a_flipped_byte_in_the_wal_lines_hash_is_damage_too(tmp_path, to_hex):
    from pager.statefiles import resume_text

    d = tmp_path / "state"
    p = opened(tmp_path)
    p.note("current: fixing hard_limit")
    p.close()
    wal_file = d / ".wal"
    text = wal_file.read_text()
    at = text.rindex("sha256=") + len("sha256=")
    new = ("1" if text[at] == "0" else "0") if to_hex else "g"
    wal_file.write_text(text[:at] + new + text[at + 1:])
    with pytest.raises(pager.StateFileError, match="do not hash"):
        resume_text(d)
    opened(tmp_path).close()  # the reopen derives the files again under a new line
    assert "fixing hard_limit" in resume_text(d)


def test_a_reopen_derives_a_damaged_goal_again_though_the_goal_is_a_latch(tmp_path):
    from pager.statefiles import resume_text

    d = tmp_path / "state"
    p = opened(tmp_path)
    p.assemble({"messages": HISTORY})
    p.close()
    goal = (d / "00_goal.md").read_text()
    last = (d / ".wal").read_text().splitlines()[-1]
    assert "00_goal.md" in last  # the goal line is the newest hashed line
    _flip(d / "00_goal.md", len(goal) - 3)
    opened(tmp_path).close()
    assert (d / "00_goal.md").read_text() == goal
    assert "00_goal.md" in [m["what"] for m in wal(d)][-2]
    assert goal in resume_text(d)


def test_a_recover_line_that_wrote_nothing_is_no_damage(tmp_path):
    from pager.statefiles import StateDirFd, damaged_files

    d = tmp_path / "state"
    opened(tmp_path).close()
    with (d / ".wal").open("a") as f:  # as a recover line with no file to write reads
        f.write("2026-01-01T00:00:00Z no-git recover store=p0.n0.e0 wal=p0.n0.e1 files=- mark=p0.n0.e0\n")
    with StateDirFd(d) as fd:
        assert damaged_files(fd) == ()


@pytest.mark.parametrize("garble", [("99_next.md sha256=", "99_next.mf sha256="), ("sha256=", "sha256=zz")])
def test_a_garbled_hash_tail_is_healed_at_the_next_write(tmp_path, garble):
    from pager.statefiles import resume_text

    d = tmp_path / "state"
    p = opened(tmp_path)
    p.note("current: fixing hard_limit")
    wal_file = d / ".wal"
    text = wal_file.read_text()
    at = text.rindex(garble[0])
    wal_file.write_text(text[:at] + garble[1] + text[at + len(garble[0]):])
    with pytest.raises(pager.StateFileError, match="do not hash"):
        resume_text(d)
    p.pin("keep the API stable")  # the next write derives the files again under a new line
    p.close()
    assert "fixing hard_limit" in resume_text(d)

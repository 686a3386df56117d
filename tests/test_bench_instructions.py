"""``bench/bench_instructions.py``: its counting process, run natively, and how it reads callgrind's dumps.

The count itself needs valgrind and minutes a size (a bench campaign, not a
test); what is checked here is what the campaign relies on: the counting
process continues the built session (the reopen matches the recorded history,
each step records two messages) with the steps after those the build used,
marks each counted call once more than there are calls, and each dump's
count is read in the dumps' numeric order, or a dump without one refused.
With ``--phases`` the process marks the functions of
``instruction_phases.PHASES`` too, in balanced pairs inside each counted call,
and each stretch between two marks goes to the phases open at its start.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import orjson
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import bench_instructions  # noqa: E402
import bench_scale  # noqa: E402
import instruction_phases  # noqa: E402
import scale_steps  # noqa: E402


def test_the_counting_process_continues_the_built_session(tmp_path: Path) -> None:
    store, hist = str(tmp_path / "ctx"), str(tmp_path / "history.json")
    built = bench_scale._child("steady", store, hist, "100", "1", "0", "0", "openai-chat")
    shutil.copytree(store, tmp_path / "ctx-phased")  # the built session, for the runs with phases and ready below
    shutil.copytree(store, tmp_path / "ctx-ready")
    counts, others, base = bench_instructions.count(store, hist, "openai-chat", 1, 1, 0, None)
    _c, _o, more = bench_instructions.count(store, hist, "openai-chat", 1, 1, 3, None)
    assert counts == [] and others == 0  # natively: nothing counted
    assert base["reopen_new_pages"] == more["reopen_new_pages"] == 0  # the recorded history, matched
    assert (base["calls"], base["marks"], base["rounds"]) == (0, 0, 0)
    assert (more["calls"], more["marks"]) == (3, 4)  # one mark before each counted call, one after the last
    assert more["messages"] - base["messages"] == 2 * 3 and base["messages"] == built["messages"] + 2
    # the build's one step ends the recorded history; the counting steps are the ones after it, drawn by
    # the same generator, whose first steps do not depend on how many are drawn
    prelude: dict = {}
    exec(scale_steps.PRELUDE.format(root=str(ROOT)), prelude)  # noqa: S102 - the bench's own code
    one, five = prelude["steady_steps"](1, "openai-chat"), prelude["steady_steps"](5, "openai-chat")
    assert five[:1] == one
    recorded = orjson.loads(Path(hist).read_bytes())["messages"]
    assert recorded[-2:] == one[0] and five[1] != one[0]
    assert more["log"] is None  # phases only when asked for
    # with phases: every function of PHASES exists (a missing one fails the process), each counted call's marks
    # are balanced pairs of the phases' labels between its "call" and the next, and a call's phases nest
    _c, _o, phased = bench_instructions.count(str(tmp_path / "ctx-phased"), hist, "openai-chat", 1, 1, 2, None,
                                              phases=True)
    assert phased["reopen_new_pages"] == 0 and phased["messages"] == base["messages"] + 2 * 2
    log = phased["log"]
    assert log[0] == "call" and log[-1] == "end" and log.count("call") == 2 and phased["marks"] == len(log)
    labels = {label for _m, _a, label in instruction_phases.PHASES}
    assert {m[1:] for m in log if m[0] in "+-"} <= labels
    assert {"+record", "+prepare", "+terms", "+tokens", "+schedule", "+planner", "+prompt", "+wire render"} <= set(log)
    calls = instruction_phases.attribute(log, [1] * len(log))  # one instruction a stretch: counts the stretches
    assert len(calls) == 2 and all("record/prepare/terms" in c and "schedule/plan/planner" in c for c in calls)
    assert sum(sum(c.values()) for c in calls) == len(log) - 1
    # split at the request's forwarding (what the proxy adds): one more mark a counted call, and the same session
    _c, _o, split = bench_instructions.count(str(tmp_path / "ctx-ready"), hist, "openai-chat", 1, 1, 3, None,
                                             ready=True)
    assert split["reopen_new_pages"] == 0 and split["messages"] == more["messages"]
    assert (split["calls"], split["marks"]) == (3, 1 + 2 * 3)
    with pytest.raises(ValueError, match="not both"):
        bench_instructions.count(store, hist, "openai-chat", 1, 1, 1, None, phases=True, ready=True)


def test_callgrind_s_dumps_are_read_in_order_and_a_dump_without_a_count_refused(tmp_path: Path) -> None:
    # the head of a dump as callgrind 3.19 writes it at --dump-before with --separate-threads=yes (its summary:
    # the dump's instructions); the calling thread's numbered dumps, the other threads' at exit
    head = ("# callgrind format\nversion: 1\ncreator: callgrind-3.19.0\npid: 15221\npart: {part}\nthread: {t}\n\n"
            "desc: Trigger: --dump-before=getppid\n\npositions: line\nevents: Ir\nsummary: {n}\n\n")
    for part, n in ((1, 122699766), (2, 115226162), (10, 356224146)):  # 10 after 2: numbers, not text
        (tmp_path / f"cg.out.{part}-01").write_text(head.format(part=part, t=1, n=n) + "fn=(1) x\n0 1\ntotals: 0\n")
    for part in range(3, 10):
        (tmp_path / f"cg.out.{part}-01").write_text(head.format(part=part, t=1, n=part))
    (tmp_path / "cg.out-01").write_text(head.format(part=11, t=1, n=5))  # the calling thread's at exit: the close
    (tmp_path / "cg.out-02").write_text(head.format(part=11, t=2, n=95006034))
    (tmp_path / "cg.out-07").write_text(head.format(part=11, t=7, n=6))
    mine, others = bench_instructions.read_dumps(tmp_path, "cg.out")
    assert mine == [122699766, 115226162, 3, 4, 5, 6, 7, 8, 9, 356224146] and others == 95006034 + 6
    (tmp_path / "cg.out.11-01").write_text("# callgrind format\nversion: 1\n")
    with pytest.raises(SystemExit, match="no callgrind summary"):
        bench_instructions.read_dumps(tmp_path, "cg.out")
    (tmp_path / "cg.out.11-01").unlink()
    (tmp_path / "cg.out.4-01").unlink()  # a missing dump: the calls would be shifted
    with pytest.raises(SystemExit, match="not numbered"):
        bench_instructions.read_dumps(tmp_path, "cg.out")


def test_without_valgrind_the_bench_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_instructions.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit, match="valgrind is not on the PATH"):
        bench_instructions.main(["--sizes", "100"])


def test_each_stretch_goes_to_the_phases_open_at_its_start() -> None:
    log = ["call", "+record", "+terms", "-terms", "-record", "+schedule", "-schedule",
           "call", "+record", "-record", "end"]
    counts = [1000, 1, 20, 300, 4000, 50_000, 600_000, 7_000_000, 8, 90, 100, 1]  # counts[0]: before the first mark
    calls = instruction_phases.attribute(log, counts[:len(log)])
    assert calls == [
        {"other": 1 + 50_000 + 7_000_000, "record": 20 + 4000, "record/terms": 300, "schedule": 600_000},
        {"other": 8 + 100, "record": 90},
    ]
    assert instruction_phases.medians(calls, [False, True]) == {
        "other": 7_050_001.0, "record": 4020.0, "record/terms": 300.0, "schedule": 600_000.0, "total": 7_654_321.0}
    with pytest.raises(SystemExit, match="dumps for"):
        instruction_phases.attribute(log, counts)
    with pytest.raises(SystemExit, match="closes record/terms"):
        instruction_phases.attribute(["call", "+record", "+terms", "-record", "end"], [0] * 5)
    with pytest.raises(SystemExit, match="not the end"):
        instruction_phases.attribute(["call", "+record", "-record"], [0] * 3)
    rows = [{"size": 1000, "phases_m": {"record": 0.5, "total": 1.0}},
            {"size": 50_000, "phases_m": {"record": 0.6, "other": 0.1, "total": 1.2}}]
    assert instruction_phases.table(rows).splitlines()[2:] == [
        "| other | 0.000 | 0.100 |", "| record | 0.500 | 0.600 |", "| total | 1.000 | 1.200 |"]


def test_the_table_gives_the_count_up_to_the_forwarding_when_it_was_split() -> None:
    row = {"size": 1000, "p50_m": 7.0, "p99_m": 9.0, "mean_m": 7.5, "others_per_call_m": 0.5, "rounds": 1,
           "calls": 30}
    plain = bench_instructions.table([row])
    assert "forwarding" not in plain and plain.splitlines()[2] == "| 1,000 | 7.00 | 9.00 | 7.50 | 1.00x | 0.50 | 1 of 30 |"
    split = bench_instructions.table([{**row, "until_ready_p50_m": 5.5, "until_ready_p99_m": 8.25}])
    assert "up to the request's forwarding: p50 | p99 |" in split.splitlines()[0]
    assert split.splitlines()[2].endswith("| 1 of 30 | 5.50 | 8.25 |")
    with pytest.raises(SystemExit):
        bench_instructions.main(["--phases", "--ready"])

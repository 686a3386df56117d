"""``bench/bench_instructions.py``: its counting process, run natively, and how it reads callgrind's dumps.

The count itself needs valgrind and minutes a size (a bench campaign, not a
test); what is checked here is what the campaign relies on: the counting
process continues the built session (the reopen matches the recorded history,
each step records two messages) with the steps after those the build used,
marks each counted call once more than there are calls, and each dump's
count is read in the dumps' numeric order, or a dump without one refused.
"""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import bench_instructions  # noqa: E402
import bench_scale  # noqa: E402
import scale_steps  # noqa: E402


def test_the_counting_process_continues_the_built_session(tmp_path: Path) -> None:
    store, hist = str(tmp_path / "ctx"), str(tmp_path / "history.json")
    built = bench_scale._child("steady", store, hist, "100", "1", "0", "0", "openai-chat")
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

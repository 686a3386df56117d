"""The honest price of a miss (issue 24): a fault re-reads the pages that last held its missed needs.

All on the tiny hand-made session of ``_replay_helpers`` (word-counted tokens, so each figure
can be checked by hand), plus names classification and the worst-session aggregation.
"""

from __future__ import annotations

import argparse
import io

import orjson
import pytest

from pager.lab.cli import bench
from pager.lab.replay.cost import FaultCost, pricing
from pager.lab.replay.metrics import SESSION_FLOOR, CallRecord, aggregate, summarize_session
from pager.lab.replay.needs import NAME_KINDS, extract_needs
from pager.lab.replay.runner import run
from pager.lab.replay.session import Session
from pager.lab.replay.strategies import FullResend, ObservationMasking, SlidingWindow

from _replay_helpers import TINY, call, tiny_session, word_facts, write_session

ANTHROPIC = pricing("anthropic")


def replay(fault=FaultCost(), sessions=None, **kw):
    facts = word_facts()
    strategies = [FullResend(facts=facts), SlidingWindow(25, facts=facts),
                  ObservationMasking(keep=0, facts=facts)]
    return run(sessions or [tiny_session()], strategies, pricing=ANTHROPIC, facts=facts,
               progress=False, long_gap=2, fault=fault, **kw)


def test_a_page_missed_twice_in_one_call_is_paid_once():
    recs = replay().runs[0].records
    # masking stubs msg 3 (the tool output, 9 tokens), which alone held MAX_SIZE and 4096:
    # call 4 misses both, and re-reads that one page once
    mask = recs["mask-0"]
    assert [c.fault for c in mask] == [False, True, False]
    assert mask[1].reread_pages == (9,)
    assert mask[1].misses == ("stubbed:tool output", "stubbed:tool output")
    # the window at call 4 holds the system message only: it misses src/app.py too, last
    # seen in msg 2 (12 tokens, the assistant's own text), so two pages come back
    win = recs["window-0k"]
    assert win[1].reread_pages == (12, 9)
    assert win[1].misses == ("dropped:tool output", "dropped:tool output", "dropped:agent text")
    assert all(c.reread_pages == () and c.misses == () for c in recs["full"])


def test_reread_cost_by_hand_beside_the_excerpt_price():
    m = replay().metrics_for("tiny")
    mask, win, full = m["mask-0"], m["window-0k"], m["full"]
    # mask call 4: prompt 34 -> 0.1 x 34 + 1.25 x 9 + 5 x 40 = 214.65 on top of its cost 67.3
    assert mask.reread_cost == pytest.approx(67.3 + 214.65)
    assert mask.reread_pages == 1 and mask.reread_tokens == 9
    # today's excerpt: 0.1 x 34 + 1.25 x 340 + 5 x 40 = 628.4
    assert mask.effective_cost == pytest.approx(67.3 + 628.4)
    # full resend never faults: its three prices are one
    assert full.reread_cost == pytest.approx(68.65) == full.full_reread_cost
    assert mask.reread_vs_full == pytest.approx((67.3 + 214.65) / 68.65)
    # window call 4: prompt 6 -> 0.1 x 6 + 1.25 x (12 + 9) + 200 = 226.85, on its cost 38.7
    assert win.reread_cost == pytest.approx(38.7 + 226.85)
    assert dict(win.misses) == {"dropped:tool output": 2, "dropped:agent text": 1}


def test_reread_cap_limits_each_page():
    m = replay(FaultCost(reread_cap=10)).metrics_for("tiny")
    # window: pages of 12 and 9 tokens written as 10 and 9
    assert m["window-0k"].reread_cost == pytest.approx(38.7 + 0.6 + 1.25 * 19 + 200)
    assert m["mask-0"].reread_cost == pytest.approx(67.3 + 214.65)  # a 9-token page is under it
    assert FaultCost(reread_cap=0).reread(34, (9, 500), ANTHROPIC) == pytest.approx(3.4 + 200)
    assert FaultCost().reread(34, (9, 500), ANTHROPIC) == pytest.approx(3.4 + 1.25 * 509 + 200)


def test_reread_cap_must_be_a_non_negative_number():
    from pager.errors import ConfigError

    for bad in (-1, "10", True):
        with pytest.raises(ConfigError):
            FaultCost(reread_cap=bad)


def test_need_gap_leaves_out_needs_seen_just_before():
    # with need_gap=2, MAX_SIZE and 4096 (msg 3, one back from call 4) are no longer needs
    recs = replay(need_gap=2).runs[0].records
    assert [c.needs for c in recs["full"]] == [0, 1, 1]
    assert recs["mask-0"][1].fault is False


# --------------------------------------------------------------------------
# Names and words


def test_names_are_paths_identifiers_numbers_and_words_are_the_rest():
    text = "Reading src/app.py: parse_header returns 4096, the frobnicator is broken here"
    needs = extract_needs(text, words=True)
    assert needs == {"src/app.py": "path", "parse_header": "identifier", "4096": "number",
                     "Reading": "word", "returns": "word", "frobnicator": "word",
                     "broken": "word"}
    assert {n for n, k in needs.items() if k in NAME_KINDS} == {"src/app.py", "parse_header",
                                                               "4096"}
    assert extract_needs(text) == {"src/app.py": "path", "parse_header": "identifier",
                                   "4096": "number"}
    assert extract_needs("see well-done x-y", words=True) == {}  # pieces under six letters
    assert extract_needs("read double-checked", words=True) == {"checked": "word",
                                                                "double": "word"}


def _word_session(repeats: int) -> Session:
    msgs = [{"role": "system", "content": "sys"},
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [call("c1", "cat notes")]},
            {"role": "tool", "tool_call_id": "c1", "content": "the frobnicator lives at 7 alpha"}]
    for k in range(repeats):  # more messages that mention the word make it common
        msgs.append({"role": "user", "content": f"frobnicator again {k}"})
        msgs.append({"role": "assistant", "content": "ok"})
    msgs.append({"role": "assistant", "content": "the frobnicator and parse_header"})
    return Session(id=f"w{repeats}", header={"type": "session", "id": f"w{repeats}"},
                   messages=tuple(msgs), path="w.jsonl")


def test_a_rare_word_is_a_need_but_not_a_name():
    recs = replay(sessions=[_word_session(0)]).runs[0].records
    last = recs["mask-0"][-1]
    # frobnicator is only in the masked tool output: a need, missed, and not a name
    assert (last.needs, last.covered, last.names, last.names_covered) == (1, 0, 0, 0)
    assert last.reread_pages == (10,)


def test_a_word_many_messages_held_is_no_need():
    recs = replay(sessions=[_word_session(3)]).runs[0].records
    # the tool output and three user messages held it: four earlier messages, over RARE_WORD
    assert recs["mask-0"][-1].needs == 0


# --------------------------------------------------------------------------
# Aggregation: names coverage, the worst session, sessions under the floor


def rec(needs, covered, names=0, names_covered=0):
    return CallRecord(index=1, prompt_tokens=10, cached_tokens=0, completion_tokens=1,
                      needs=needs, covered=covered, names=names, names_covered=names_covered)


def test_worst_session_and_sessions_under_the_floor():
    price = pricing("none")
    full = [rec(0, 0)]
    ms = [
        summarize_session("a", "s", [rec(10, 9, 4, 4)], price, full),  # 0.90: not under
        summarize_session("b", "s", [rec(10, 8, 4, 3)], price, full),  # 0.80: the worst
        summarize_session("c", "s", [rec(5, 4, 2, 1)], price, full),  # 0.80: a tie, later
        summarize_session("d", "s", [rec(0, 0)], price, full),  # no needs: not measured
        summarize_session("e", "s", [], price, None, error="Boom"),  # failed: errors only
    ]
    agg = aggregate("s", ms, [])
    assert SESSION_FLOOR == 0.90
    assert (agg.worst_coverage, agg.worst_session) == (pytest.approx(0.8), "b")
    assert (agg.sessions_below, agg.sessions_measured, agg.errors) == (2, 4 - 1, 1)
    assert agg.names == 10 and agg.names_coverage == pytest.approx(8 / 10)
    assert ms[1].names_coverage == pytest.approx(3 / 4) and ms[3].names_coverage is None
    none = aggregate("s", [ms[3]], [])
    assert (none.worst_coverage, none.worst_session, none.sessions_below) == (None, None, 0)


# --------------------------------------------------------------------------
# The command line carries it all


def test_bench_cli_json_and_table_carry_the_new_figures(tmp_path):
    write_session(tmp_path / "one.jsonl", TINY, sid="one")
    write_session(tmp_path / "two.jsonl", TINY * 2, sid="two")
    j = tmp_path / "r.json"
    parser = argparse.ArgumentParser()
    bench.register(parser.add_subparsers())
    args = parser.parse_args(["bench", str(tmp_path), "--min-assistant", "1", "--no-pager",
                              "--no-progress", "--mask-keep", "0", "--reread-cap", "5",
                              "--json", str(j), "--explain", "--jobs", "1"])  # the pool: test_bench_jobs
    out = io.StringIO()
    bench.run_bench(args, out, io.StringIO())
    text = out.getvalue()
    head = text.splitlines()[1]
    for col in ("cost/full (re-read)", "eff/full", "cost/full", "names cov", "worst cov", "< 0.90"):
        assert col in head
    assert head.index("cost/full (re-read)") < head.index("eff/full")
    assert "worst session per strategy:" in text and "the honest price" in text
    data = orjson.loads(j.read_bytes())
    assert data["fault_cost"]["reread_cap"] == 5 and data["need_gap"] == 1
    assert data["session_floor"] == 0.9
    s = {x["strategy"]: x for x in data["summary"]}
    for key in ("reread_vs_full", "effective_vs_full", "names_coverage", "worst_coverage",
                "worst_session", "sessions_below", "sessions_measured", "misses"):
        assert key in s["mask-0"]
    assert s["mask-0"]["reread_vs_full"] > s["mask-0"]["cost_vs_full"]
    assert s["mask-0"]["worst_session"] in {"one", "two"}
    assert s["full"]["reread_vs_full"] == 1.0 and s["full"]["sessions_below"] == 0
    per = data["sessions"][0]["metrics"]["mask-0"]
    assert per["reread_pages"] >= 1 and per["names_coverage"] is not None
    assert "stubbed:tool output" in per["misses"]
    series = data["sessions"][0]["series"]["mask-0"]
    assert len(series["reread_pages"]) == len(series["faults"])

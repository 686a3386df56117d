"""Issue 24: the planner demotes only when it pays, and a recall block serves one call.

Each test states a consequence a user should see, and fails with the objective off (the old rule).
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
import pytest

import pager
from pager.core.heat import NEEDS, PageTable
from pager.core.plan import FULL, RECALL, STUB, PlanConfig, PlanInput, plan
from pager.core.tokens import HeuristicCounter

from helpers import assistant, big_text, call, system, tool, user


def _explore_then_report(reads: int = 2, lines: int = 130) -> list[dict[str, Any]]:
    """A subagent reads a few files (2k+ tokens each), looks around, then writes its report."""
    msgs = [system("You are a research subagent."), user("Survey src/pager/plan.py and src/pager/heat.py; report.")]
    for i in range(reads):
        cid = f"r{i}"
        msgs.append(assistant(f"Reading file {i}", call(cid, "read", path=f"src/pager/mod{i}.py")))
        msgs.append(tool(cid, big_text(lines, tag=f"mod{i}_symbol")))
    for i in range(6):
        cid = f"g{i}"
        msgs.append(assistant(f"grep step {i}", call(cid, "bash", command=f"grep -n name{i} src")))
        msgs.append(tool(cid, f"src/x.py:{i}: name{i} = {i}"))
    return msgs


def _last_prompt(msgs: list[dict[str, Any]], **options: Any) -> list[dict[str, Any]]:
    p = pager.open(":memory:", session="s", counter=HeuristicCounter(), **options)
    out: list[dict[str, Any]] = []
    for i in range(2, len(msgs) + 1):
        if msgs[i - 1]["role"] != "assistant":
            out = p.assemble({"model": "m", "messages": msgs[:i]})["messages"]
    p.close()
    return out


def _full_reads(prompt: list[dict[str, Any]], reads: int) -> int:
    texts = [str(m.get("content") or "") for m in prompt]
    return sum(1 for i in range(reads) if any(f"mod{i}_symbol" in t and "[pager:" not in t for t in texts))


def test_a_short_session_that_fits_the_window_keeps_what_it_read_until_it_reports():
    msgs = _explore_then_report()
    assert _full_reads(_last_prompt(msgs), 2) == 2
    # the old rule stubbed every output over inline_max one step after it arrived
    assert _full_reads(_last_prompt(msgs, objective=False), 2) == 0


def _round_input(last_ref: list[int]) -> tuple[PlanInput, PlanConfig]:
    """L1, then 6 old units (a 60-token call, a 2,500-token output), then 3 recent small units."""
    pages, tokens, stub, unit, pinned, is_tool, kind, created = [1, 2], [50, 50], [50, 50], [0, 1], [True, True], [False, False], [0, 1], [0, 0]
    for u in range(6):
        pages += [10 + 2 * u, 11 + 2 * u]
        tokens += [60, 2_500]
        stub += [60, 60]
        unit += [2 + u, 2 + u]
        pinned += [False, False]
        is_tool += [False, True]
        kind += [2, 3]
        created += [34 + u, 34 + u]
    for u in range(3):
        pages += [40 + u]
        tokens += [30]
        stub += [30]
        unit += [20 + u]
        pinned += [False]
        is_tool += [False]
        kind += [2]
        created += [40 + u]
    n = len(pages)
    refs = list(created)
    for row, step in enumerate(last_ref):
        if step:
            refs[row] = step
    table = PageTable(page_id=pages, created=created, last_ref=refs, ref_count=[0] * n, tokens=tokens,
                      kind=kind, stale=[False] * n, relevance=[0.0] * n)
    tok = np.asarray(tokens, dtype=np.int64)
    inp = PlanInput(
        page=np.asarray(pages, dtype=np.int64), tokens=tok, stub_tokens=np.asarray(stub, dtype=np.int64),
        unit=np.asarray(unit, dtype=np.int64), pinned=np.asarray(pinned), tool=np.asarray(is_tool),
        heat=np.asarray(created, dtype=np.float64), need=NEEDS.expected(table, 43, 2.0), growth=400.0, life=43.0,
    )
    cfg = PlanConfig(budget=100_000, high=40_000, low=8_000, recent_units=3, objective=True, keep_room=8_000)
    return inp, cfg


def _shown(layout: Any) -> dict[int, str]:
    return {s.page: s.kind.value for s in layout.slots if s.kind in (FULL, STUB)}


def test_the_agents_own_words_outlive_bulky_outputs():
    inp, cfg = _round_input([])
    shown = _shown(plan(inp, cfg).layout)
    calls = [10 + 2 * u for u in range(6)]
    outputs = [11 + 2 * u for u in range(6)]
    assert all(shown.get(p) == "full" for p in calls)  # every old tool call kept in full
    assert not any(shown.get(p) == "full" for p in outputs)  # its old bulky output is not
    # the old rule keeps hottest units whole while they fit: the newest old outputs stay in full
    old = _shown(plan(inp, attrs.evolve(cfg, objective=False, stub_threshold=10_000)).layout)
    assert any(old.get(p) == "full" for p in outputs)


def test_a_page_that_keeps_being_reached_for_stays():
    refs = [0] * 23
    refs[3] = 42  # the oldest output (row 3) was referred to again one step ago
    inp, cfg = _round_input(refs)
    shown = _shown(plan(inp, cfg).layout)
    assert shown.get(11) == "full"
    assert shown.get(13) != "full"  # its twin, never reached for again, is not kept
    inp, cfg = _round_input([])
    assert _shown(plan(inp, cfg).layout).get(11) != "full"


def _small(n: int) -> PlanInput:
    pages = list(range(1, n + 1))
    tok = np.full(n, 100, dtype=np.int64)
    return PlanInput(
        page=np.asarray(pages, dtype=np.int64), tokens=tok, stub_tokens=tok, unit=np.arange(n, dtype=np.int64),
        pinned=np.asarray([True, True] + [False] * (n - 2)), tool=np.zeros(n, dtype=bool),
        heat=np.arange(n, dtype=np.float64),
    )


@pytest.mark.parametrize("leaves", [True, False])
def test_a_recall_block_serves_its_call_and_then_leaves(leaves: bool):
    cfg = PlanConfig(budget=100_000, high=40_000, low=8_000, recall_pages=1, recall_tokens=500, recall_leaves=leaves)
    other = frozenset({99})  # a page from beyond the history (another session's), not shown otherwise
    first = plan(attrs.evolve(_small(6), recall=[(99, 120)], foreign=other), cfg)
    assert first.layout.slots[-1].kind == RECALL
    # next call: nothing to recall; the block was the tail of the last prompt, so it leaves for free
    nxt = plan(attrs.evolve(_small(8), foreign=other), cfg, first.layout)
    assert not nxt.round
    kinds = [s.kind for s in nxt.layout.slots]
    assert (RECALL in kinds) is (not leaves)
    if leaves:
        assert nxt.layout.slots[: len(first.layout.slots) - 1] == first.layout.slots[:-1]
    # the same page wanted again: the block stays where it is (re-placing it would re-bill it)
    again = plan(attrs.evolve(_small(8), recall=[(99, 120)], foreign=other), cfg, first.layout)
    assert [s for s in again.layout.slots if s.kind == RECALL] == [first.layout.slots[-1]]

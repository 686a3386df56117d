"""Planner switches of issue 15: compact index blocks, task-switch rounds, major-only rounds."""

from __future__ import annotations

import attrs
import numpy as np

from pager.core.plan import FULL, INDEX, RECALL, STUB, Layout, Reason, plan

from test_plan import CFG, cut, table


def with_compact(inp, per_row: int = 12):
    return attrs.evolve(inp, compact_tokens=np.full(len(inp), per_row, dtype=np.int64))


def test_compact_lines_of_dropped_units_fit_in_the_low_watermark() -> None:
    inp = with_compact(table(40))
    cfg = attrs.evolve(CFG, compact_tokens=400)
    res = plan(inp, cfg)
    index = [s for s in res.layout.slots if s.kind == INDEX]
    assert len(index) == 1
    shown = {s.page for s in res.layout.slots if s.kind in (FULL, STUB)}
    lined = set(index[0].pages)
    assert lined and not lined & shown  # only dropped pages get a line
    # whole units: a call and its result together
    units = {int(inp.unit[list(inp.page).index(p)]) for p in lined}
    assert len(lined) == 2 * len(units)
    assert index[0].tokens <= 400
    assert res.tokens <= cfg.low
    # off: no block, and more units in full
    off = plan(inp, CFG)
    assert not any(s.kind == INDEX for s in off.layout.slots)
    assert len([s for s in off.layout.slots if s.kind == FULL]) >= len(shown & {s.page for s in off.layout.slots})


def test_compact_lines_are_stable_between_rounds() -> None:
    full = with_compact(table(40))
    cfg = attrs.evolve(CFG, compact_tokens=400)
    prev = None
    for rows in range(4, len(full) + 1, 2):
        inp = attrs.evolve(cut(full, rows), compact_tokens=full.compact_tokens[:rows])
        res = plan(inp, cfg, prev)
        if not res.round and prev is not None:
            assert res.layout.slots[: len(prev.slots)] == prev.slots
        prev = res.layout


def test_a_task_switch_runs_a_major_round_unless_switched_off() -> None:
    inp = table(10)
    cfg = attrs.evolve(CFG, task_rounds=True)
    first = plan(attrs.evolve(inp, task=1), cfg)
    again = plan(attrs.evolve(inp, task=1), cfg, first.layout)
    assert not again.round
    switched = plan(attrs.evolve(inp, task=7), cfg, first.layout)
    assert switched.round and switched.reason == Reason.TASK_SWITCH
    quiet = plan(attrs.evolve(inp, task=7), CFG, first.layout)  # off by default
    assert not quiet.round
    # an unknown task (-1, a layout saved before tasks were tracked) is no switch
    old = attrs.evolve(first.layout, task=-1)
    assert not plan(attrs.evolve(inp, task=7), cfg, old).round
    assert Layout.from_state(switched.layout.to_state()) == switched.layout


def test_minor_rounds_off_rebuilds_everything_after_l1() -> None:
    full = table(80)
    on = off = 0
    for minor, counter in ((True, "on"), (False, "off")):
        prev = None
        n = 0
        for rows in range(4, len(full) + 1, 2):
            res = plan(cut(full, rows), attrs.evolve(CFG, minor_rounds=minor), prev)
            if res.round and prev is not None and prev.stable > 2 and res.layout.slots[: prev.stable] == prev.slots[: prev.stable]:
                n += 1
            prev = res.layout
        if minor:
            on = n
        else:
            off = n
    assert on >= 1 and off == 0


def test_recall_lands_at_the_tail_stays_until_the_round_and_respects_the_quota() -> None:
    full = table(60)
    cfg = attrs.evolve(CFG, recall_pages=2, recall_tokens=500)
    rows = 30
    first = plan(cut(full, rows), CFG)
    # three candidates offered; the quota takes two, at the tail
    offered = [(int(full.page[4]), 100), (int(full.page[6]), 100), (int(full.page[8]), 100)]
    with_recall = plan(attrs.evolve(cut(full, rows + 2), recall=offered), cfg, first.layout)
    assert not with_recall.round
    assert with_recall.layout.slots[-1].kind == RECALL and len(with_recall.recalled) == 2
    assert with_recall.layout.slots[: len(first.layout.slots)] == first.layout.slots  # nothing earlier moved
    # the next call appends after the block and keeps it (the cache reads it), until a round
    nxt = plan(cut(full, rows + 4), cfg, with_recall.layout)
    if not nxt.round:
        assert nxt.layout.slots[: len(with_recall.layout.slots)] == with_recall.layout.slots
    # quota 0: no block
    off = plan(attrs.evolve(cut(full, rows + 2), recall=offered), attrs.evolve(cfg, recall_pages=0), first.layout)
    assert not any(s.kind == RECALL for s in off.layout.slots)

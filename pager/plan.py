"""The planner: page table and budget in, prompt layout out. Pure.

Theory of operation. A *layout* is the ordered list of slots pager emits after
the system messages: each slot is one history message shown in full, shown as
a stub (a tool output replaced by its head and a handle), the task-state
card, or a block of recalled pages. The planner never reads a store, an index
or a clock: the facade hands it the branch's page table (numpy columns, one
row per history message), heat scores, recall candidates and the previous
layout, and renders whatever it returns.

Cache awareness is the planner's main rule. Providers bill a cached prompt
prefix at a fraction of the price and re-bill everything after the first
changed byte, so between *demotion rounds* the layout is append-only: new
history messages, and recalled blocks, are added at the tail and nothing
earlier changes. A round runs only when the layout would pass the high
watermark (or the budget); it rebuilds the layout down to the low watermark
in one go, so the prefix is rewritten rarely and in one batch, never a little
on every call.

A round keeps: L1 (pinned rows and the card), the most recent units verbatim,
then older units hottest first while they fit under the low watermark; older
tool outputs larger than the stub threshold are kept as stubs; units that do
not fit are dropped whole (pairing rule 1), to be recalled if needed again.
"""

from __future__ import annotations

from typing import Sequence

import attrs
import numpy as np

from .errors import BudgetError

__all__ = ["Layout", "PlanConfig", "PlanInput", "Plan", "Slot", "plan"]

FULL, STUB, CARD, RECALL = "full", "stub", "card", "recall"
RECALL_OVERHEAD = 40  # the block's header and message framing, in tokens


@attrs.frozen(slots=True)
class Slot:
    """One emitted message: a history row in full or stubbed, the card, or a recall block."""

    kind: str
    page: int = 0
    pages: tuple[int, ...] = ()
    tokens: int = 0  # recall blocks: their rendered size, fixed when they are placed


@attrs.frozen(slots=True)
class Layout:
    """The slots of the last emitted prompt, and up to which history row they cover."""

    slots: tuple[Slot, ...]
    upto: int  # number of history rows the layout has considered
    branch: int = 0
    card: str = ""  # the card text as emitted; a change forces a round

    def to_state(self) -> dict:
        return {
            "slots": [[s.kind, s.page, list(s.pages), s.tokens] for s in self.slots],
            "upto": self.upto,
            "branch": self.branch,
            "card": self.card,
        }

    @classmethod
    def from_state(cls, data: dict | None) -> "Layout | None":
        if not data:
            return None
        slots = tuple(
            Slot(kind=k, page=int(p), pages=tuple(int(x) for x in ps), tokens=int(t))
            for k, p, ps, t in data["slots"]
        )
        return cls(slots=slots, upto=int(data["upto"]), branch=int(data.get("branch", 0)), card=data.get("card", ""))


@attrs.frozen(slots=True)
class PlanConfig:
    """Budget figures for one plan, all in tokens."""

    budget: int  # hard ceiling: context window minus output reserve
    high: int  # a round runs when the layout would pass this
    low: int  # a round rebuilds down to this
    recent_units: int = 3  # most recent units always verbatim after a round
    stub_threshold: int = 2000  # older tool outputs above this are stubbed
    inline_max: int = 0  # a new tool output above this is stubbed on arrival (0: budget // 4)
    recall_pages: int = 5
    recall_tokens: int = 2000


@attrs.frozen(slots=True)
class PlanInput:
    """The branch's page table: one row per history message, in history order."""

    page: np.ndarray  # int64 page ids
    tokens: np.ndarray  # int64 tokens in full
    stub_tokens: np.ndarray  # int64 tokens as a stub (== tokens for rows never stubbed)
    unit: np.ndarray  # int64 unit index (a call and its results share one)
    pinned: np.ndarray  # bool: L1 rows (system messages, first user message)
    tool: np.ndarray  # bool: tool output rows (stubbable)
    heat: np.ndarray  # float64 heat score
    card_tokens: int = 0
    card: str = ""
    recall: Sequence[tuple[int, int]] = ()  # (page id, rendered tokens), best first
    branch: int = 0

    def __len__(self) -> int:
        return int(self.page.shape[0])


@attrs.frozen(slots=True)
class Plan:
    """The planner's answer: the layout and what it did to get there."""

    layout: Layout
    tokens: int
    round: bool
    reason: str
    recalled: tuple[int, ...] = ()


def _slot_tokens(slot: Slot, idx: dict[int, int], inp: PlanInput) -> int:
    if slot.kind == FULL:
        return int(inp.tokens[idx[slot.page]])
    if slot.kind == STUB:
        return int(inp.stub_tokens[idx[slot.page]])
    if slot.kind == CARD:
        return inp.card_tokens
    return slot.tokens


def _l1_slots(inp: PlanInput) -> tuple[list[Slot], int]:
    slots = [Slot(FULL, int(inp.page[i])) for i in np.flatnonzero(inp.pinned)]
    tokens = int(inp.tokens[inp.pinned].sum())
    if inp.card:
        slots.append(Slot(CARD))
        tokens += inp.card_tokens
    return slots, tokens


def _rebuild(inp: PlanInput, cfg: PlanConfig, target: int) -> tuple[list[Slot], int]:
    l1, l1_tokens = _l1_slots(inp)
    if l1_tokens > cfg.budget:
        raise BudgetError(l1_tokens, cfg.budget)
    rows = np.flatnonzero(~inp.pinned)
    if rows.size == 0:
        return l1, l1_tokens
    units = inp.unit[rows]
    uniq, first = np.unique(units, return_index=True)
    order = np.argsort(first, kind="stable")
    uniq = uniq[order]
    # per-unit cost in full, with big outputs stubbed, and fully stubbed
    big = inp.tool & (inp.tokens > cfg.stub_threshold)
    full_cost = np.zeros(uniq.size, dtype=np.int64)
    kept_cost = np.zeros(uniq.size, dtype=np.int64)
    stub_cost = np.zeros(uniq.size, dtype=np.int64)
    heat = np.full(uniq.size, -np.inf)
    unit_pos = {int(u): k for k, u in enumerate(uniq)}
    upos = np.fromiter((unit_pos[int(u)] for u in units), dtype=np.int64, count=units.size)
    np.add.at(full_cost, upos, inp.tokens[rows])
    np.add.at(kept_cost, upos, np.where(big[rows], inp.stub_tokens[rows], inp.tokens[rows]))
    np.add.at(stub_cost, upos, np.where(inp.tool[rows], inp.stub_tokens[rows], inp.tokens[rows]))
    np.maximum.at(heat, upos, inp.heat[rows])

    mode = np.zeros(uniq.size, dtype=np.int8)  # 0 drop, 1 full (big outputs stubbed), 2 all verbatim, 3 stubbed
    left = max(0, min(target, cfg.budget) - l1_tokens)
    hard_left = cfg.budget - l1_tokens
    n_recent = min(cfg.recent_units, uniq.size)
    # the most recent units: verbatim; shrink them only if the budget itself forces it
    for k in range(uniq.size - 1, uniq.size - 1 - n_recent, -1):
        for m, cost in ((2, full_cost[k]), (1, kept_cost[k]), (3, stub_cost[k])):
            if cost <= hard_left:
                mode[k] = m
                hard_left -= int(cost)
                left -= int(cost)
                break
    if mode[uniq.size - 1] == 0:
        raise BudgetError(
            l1_tokens + int(stub_cost[-1]), cfg.budget, "the latest message alone does not fit beside L1"
        )
    left = min(left, hard_left)
    older = np.arange(uniq.size - n_recent)
    if older.size:
        # hottest first; ties: newer unit first
        rank = np.lexsort((-older, -heat[older]))
        for k in older[rank]:
            if kept_cost[k] <= left:
                mode[k] = 1
                left -= int(kept_cost[k])
            elif stub_cost[k] < kept_cost[k] and stub_cost[k] <= left:
                mode[k] = 3
                left -= int(stub_cost[k])
    slots = list(l1)
    total = l1_tokens
    for r in rows:
        k = unit_pos[int(inp.unit[r])]
        m = mode[k]
        if m == 0:
            continue
        page = int(inp.page[r])
        stubbed = inp.tool[r] and (m == 3 or (m == 1 and big[r]))
        slots.append(Slot(STUB if stubbed else FULL, page))
        total += int(inp.stub_tokens[r] if stubbed else inp.tokens[r])
    return slots, total


def plan(inp: PlanInput, cfg: PlanConfig, prev: Layout | None = None) -> Plan:
    """Return the layout for the next prompt.

    Appends to ``prev`` when it is still valid and the result stays under the
    high watermark; otherwise runs a demotion round down to the low watermark.
    Then adds one block of recall candidates at the tail if it fits.
    """
    n = len(inp)
    idx = {int(p): i for i, p in enumerate(inp.page)}
    inline_max = cfg.inline_max or cfg.budget // 4
    reason = ""
    slots: list[Slot] | None = None
    total = 0
    if prev is None:
        reason = "first call"
    elif prev.branch != inp.branch or prev.upto > n:
        reason = "history diverged"
    elif prev.card != inp.card:
        reason = "card changed"
    elif any(s.kind in (FULL, STUB) and s.page not in idx for s in prev.slots):
        reason = "history diverged"
    else:
        slots = list(prev.slots)
        rows = range(prev.upto, n)
        for r in rows:
            stubbed = bool(inp.tool[r]) and int(inp.tokens[r]) > inline_max
            slots.append(Slot(STUB if stubbed else FULL, int(inp.page[r])))
        total = sum(_slot_tokens(s, idx, inp) for s in slots)
        if total > cfg.budget:
            reason, slots = "over budget", None
        elif total > cfg.high:
            reason, slots = "high watermark", None
    did_round = slots is None
    if slots is None:
        slots, total = _rebuild(inp, cfg, cfg.low)
    recalled: tuple[int, ...] = ()
    if inp.recall and cfg.recall_pages > 0:
        shown = {s.page for s in slots if s.kind == FULL}
        shown.update(p for s in slots if s.kind == RECALL for p in s.pages)
        room = min(cfg.high, cfg.budget) - total - RECALL_OVERHEAD
        cap = min(cfg.recall_tokens, room)
        picked: list[int] = []
        spent = 0
        for page, cost in inp.recall:
            if len(picked) >= cfg.recall_pages:
                break
            if page in shown or spent + cost > cap:
                continue
            picked.append(int(page))
            spent += int(cost)
        if picked:
            recalled = tuple(picked)
            slots.append(Slot(RECALL, pages=recalled, tokens=spent + RECALL_OVERHEAD))
            total += spent + RECALL_OVERHEAD
    layout = Layout(slots=tuple(slots), upto=n, branch=inp.branch, card=inp.card)
    return Plan(layout=layout, tokens=total, round=did_round, reason=reason, recalled=recalled)

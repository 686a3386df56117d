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
earlier changes, with one exception that costs almost nothing: a big tool
output (over ``inline_max``) is shown in full only while it belongs to the
newest step, and becomes its stub on the next call, while it still sits at
the tail of the previous prompt. A round runs only when the layout would pass the high
watermark (or the budget); it rebuilds the layout down to the low watermark
in one go, so the prefix is rewritten rarely and in one batch, never a little
on every call.

A *minor* round keeps L1 and the old generation (what earlier rounds kept)
byte for byte and re-plans only the young rows after it; a *major* round
re-plans everything after L1. A round keeps: L1 (pinned rows and the card),
the most recent units verbatim,
then older units hottest first while they fit under the low watermark; older
tool outputs larger than the stub threshold are kept as stubs; units that do
not fit are dropped whole (pairing rule 1), to be recalled if needed again.

The *objective* (``PlanConfig.objective``) makes every demotion pay for
itself. Demoting a row saves its tokens at the read price on every call it
would otherwise ride until the next round, plus its share of that round's
rewrite; it costs, on each call that needs it again, a re-read: the whole
page written at the write price plus one more call on the cached prompt.
The chance that a call needs a row comes from ``PlanInput.need``: the calls
expected to need it within each horizon, from a table of measured rates by
kind, size and age since the last reference (``heat.NeedTable``); the horizon is the number of calls until
the next round (how far the prompt is from the high watermark, at the rate it
grows) or the session's expected remaining life, whichever is shorter. So a
short session that fits the window keeps what it read, a small unit (the
agent's own words, its tool calls) outlives a bulky output, and a page that
keeps being referred to stays. Under the objective a round keeps every unit
that pays, best value per token first, up to ``keep_room`` tokens past the low
watermark, and drops units that do not pay even when there is room; at the
tail a big output is stubbed only when stubbing pays, and otherwise rides
until the next round (changing it later would rewrite the cached prefix).

A recall block serves one call (``PlanConfig.recall_leaves``): it is placed
at the tail, and the next call removes it while it is still the tail of the
previous prompt, so its removal re-bills nothing.

Between rounds a call works out only what its tail changed: the facts of the
previous layout's slots (their running tokens, the big outputs shown in full,
the recall blocks) come back as ``PlanInput.prior`` and are read for the head
the two layouts share (``pager.core.layout.Prior``; issue 23).

The values (``Slot``, ``Layout``, ``PlanConfig``, ``PlanInput``, ``Plan``)
live in ``pager.core.layout`` and are importable from here.
"""

from __future__ import annotations

import bisect
import enum

import attrs
import numpy as np

from pager.core.heat import HORIZONS
from pager.core.layout import (
    CARD,
    FULL,
    INDEX,
    INDEX_OVERHEAD,
    RECALL,
    RECALL_OVERHEAD,
    STUB,
    Layout,
    Plan,
    PlanConfig,
    PlanInput,
    Prior,
    Reason,
    Slot,
    SlotKind,
    _facts,
    _slot_tokens,
    _tokens,
)
from pager.errors import BudgetError

__all__ = ["INDEX", "Layout", "Plan", "PlanConfig", "PlanInput", "Prior", "Reason", "Slot", "SlotKind", "plan"]


class _Mode(enum.IntEnum):
    """How a round keeps one unit (stored in an int8 column)."""

    DROP = 0
    KEPT = 1  # in full, big outputs stubbed
    VERBATIM = 2  # everything in full
    STUBBED = 3  # every output stubbed


MAX_HORIZON = 1000.0  # calls; a horizon this long already makes every saving outweigh a rare re-read


def _horizon(inp: PlanInput, cfg: PlanConfig, total: int) -> tuple[float, float]:
    """Return ``(calls it rides, calls to the next round)`` for a row shown now (each at least 1).

    The calls to the next round: how far ``total`` is from the high watermark,
    at the rate the history grows per call. A row shown now rides that many
    calls, or as many as the session is expected to have left, if fewer; the
    next round's rewrite is shared over the calls until it.
    """
    to_round = float(min(max(max(cfg.high - total, 0) / max(inp.growth, 1.0), 1.0), MAX_HORIZON))
    rides = min(to_round, inp.life) if inp.life > 0 else to_round
    return float(max(rides, 1.0)), to_round


def _need_over(inp: PlanInput, rows: np.ndarray, h: float) -> np.ndarray:
    """Return each row's mean per-call chance of being needed over the next ``h`` calls."""
    if inp.need is None or not rows.size:
        return np.zeros(rows.size)
    cum = _need_at(inp, rows)
    grid = np.asarray(HORIZONS, dtype=np.float64)[: cum.shape[1]]
    h = float(min(max(h, grid[0]), grid[-1]))
    k = int(np.searchsorted(grid, h, side="right")) - 1
    k = min(k, grid.size - 2) if grid.size > 1 else 0
    if grid.size == 1:
        at = cum[:, 0]
    else:
        w = (h - grid[k]) / (grid[k + 1] - grid[k])
        at = cum[:, k] * (1.0 - w) + cum[:, k + 1] * w
    if not np.isfinite(at).all():
        at = np.nan_to_num(at)
    # np.minimum / np.maximum, not np.clip and np.nan_to_num unasked: a few rows between rounds (issue 23)
    return np.minimum(np.maximum(at / h, 0.0), 1.0)


def _need_at(inp: PlanInput, rows: np.ndarray) -> np.ndarray:
    """Return ``inp.need`` of ``rows`` (rows ``scored(rows)`` was not asked about read 0, as before)."""
    need = np.asarray(inp.need, dtype=np.float64)
    held = inp.need_rows
    if held is None:
        return need[rows]
    out = np.zeros((rows.size, *need.shape[1:]))
    if held.size:
        order = np.argsort(held, kind="stable")
        pos = order[np.minimum(np.searchsorted(held, rows, sorter=order), held.size - 1)]
        found = held[pos] == rows
        out[found] = need[pos[found]]
    return out


def _fault_price(cfg: PlanConfig, page_tokens: np.ndarray, prompt: int) -> np.ndarray:
    """Return what one call that needs a demoted row pays: the page re-read whole, and one more call."""
    return cfg.write_price * page_tokens + cfg.read_price * prompt + cfg.call_price


def _keep_price(cfg: PlanConfig, to_round: float) -> float:
    """Return what one shown token costs per call: its cached read, and its share of the next round's rewrite."""
    return cfg.read_price + cfg.write_price / to_round


def _stub_pays(inp: PlanInput, cfg: PlanConfig, rows: np.ndarray, total: int) -> np.ndarray:
    """Return, per row, whether stubbing it now beats letting it ride in full until the next round."""
    h, to_round = _horizon(inp, cfg, total)
    saved = (inp.tokens[rows] - inp.stub_tokens[rows]).astype(np.float64)
    p = _need_over(inp, rows, h)
    return saved * _keep_price(cfg, to_round) > p * _fault_price(cfg, inp.tokens[rows].astype(np.float64), total)


def _l1_slots(inp: PlanInput) -> tuple[list[Slot], int]:
    slots = [Slot(FULL, int(inp.page[i])) for i in np.flatnonzero(inp.pinned)]
    tokens = int(inp.tokens[inp.pinned].sum())
    if inp.card:
        slots.append(Slot(CARD))
        tokens += inp.card_tokens
    return slots, tokens


@attrs.frozen(slots=True)
class _Units:
    """The rows a round plans, grouped by unit (in history order), with each unit's cost per mode."""

    rows: np.ndarray  # the history rows planned
    uniq: np.ndarray  # unit ids, oldest first
    upos: np.ndarray  # per planned row, the position of its unit in ``uniq``
    big: np.ndarray  # per history row: an older output shown as a stub when its unit is kept
    huge: np.ndarray  # per history row: an output shown as a stub even in the recent tail
    full_cost: np.ndarray  # per unit: verbatim (huge outputs stubbed)
    kept_cost: np.ndarray  # per unit: big outputs stubbed
    stub_cost: np.ndarray  # per unit: every output stubbed
    heat: np.ndarray  # per unit: its hottest row's heat


def _units(inp: PlanInput, cfg: PlanConfig, target: int, start_row: int) -> _Units | None:
    """Group the rows from ``start_row`` on into units and price each way of keeping them (None: no rows)."""
    rows = np.flatnonzero(~inp.pinned)
    rows = rows[rows >= start_row]
    if rows.size == 0:
        return None
    units = inp.unit[rows]
    uniq, first, inverse = np.unique(units, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    uniq = uniq[order]
    # per planned row, its unit's position in ``uniq`` (units in order of first appearance): the sorted
    # unit's rank under ``order``, in numpy (with a dict and a Python pass over the rows, ``_units`` took
    # 9.2 ms against 5.0 on one round's input at 50,000 messages, 20,118 rows)
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size, dtype=np.int64)
    upos = rank[inverse.reshape(-1)]
    # per-unit cost in full, with big outputs stubbed, and fully stubbed; an
    # output over inline_max is a stub even in the recent tail (as on arrival)
    big = inp.tool & (inp.tokens > cfg.stub_threshold)
    hard_max = cfg.budget // 4
    huge = inp.tool & (inp.tokens > min(cfg.inline_max or hard_max, hard_max))
    if inp.unit.size:
        # the newest step's outputs are shown in full unless they could not fit at all
        huge &= (inp.unit != inp.unit[-1]) | (inp.tokens > hard_max)
    if cfg.objective and inp.unit.size:
        # past the newest step, a big output is stubbed only when stubbing pays
        h_rows = np.flatnonzero(huge & (inp.tokens <= hard_max))
        if h_rows.size:
            huge[h_rows] = _stub_pays(inp, cfg, h_rows, min(target, cfg.budget))
    full_cost = np.zeros(uniq.size, dtype=np.int64)
    kept_cost = np.zeros(uniq.size, dtype=np.int64)
    stub_cost = np.zeros(uniq.size, dtype=np.int64)
    heat = np.full(uniq.size, -np.inf)
    np.add.at(full_cost, upos, np.where(huge[rows], inp.stub_tokens[rows], inp.tokens[rows]))
    np.add.at(kept_cost, upos, np.where(big[rows], inp.stub_tokens[rows], inp.tokens[rows]))
    np.add.at(stub_cost, upos, np.where(inp.tool[rows], inp.stub_tokens[rows], inp.tokens[rows]))
    np.maximum.at(heat, upos, inp.heat[rows])
    return _Units(rows, uniq, upos, big, huge, full_cost, kept_cost, stub_cost, heat)


def _keep_recent(u: _Units, mode: np.ndarray, n_recent: int, left: int, hard_left: int) -> tuple[int, int]:
    """Keep the most recent units verbatim, shrunk only if the budget forces it; return ``(left, hard_left)``."""
    size = u.uniq.size
    for k in range(size - 1, size - 1 - n_recent, -1):
        for m, cost in ((_Mode.VERBATIM, u.full_cost[k]), (_Mode.KEPT, u.kept_cost[k]), (_Mode.STUBBED, u.stub_cost[k])):
            if cost <= hard_left:
                mode[k] = m
                hard_left -= int(cost)
                left -= int(cost)
                break
    return left, hard_left


def _heat_fill(inp: PlanInput, cfg: PlanConfig, u: _Units, older: np.ndarray, mode: np.ndarray, left: int) -> np.ndarray:
    """Keep the older units hottest first within ``left`` tokens; return which dropped units get compact lines."""
    compact = np.zeros(u.uniq.size, dtype=bool)
    compact_cost = np.zeros(u.uniq.size, dtype=np.int64)
    hottest = older[np.lexsort((-older, -u.heat[older]))]
    # compact lines of dropped units get a reserve of the quota, if any unit must go
    reserve = 0
    if cfg.compact_tokens and inp.compact_tokens is not None and int(u.kept_cost[older].sum()) > left:
        np.add.at(compact_cost, u.upos, inp.compact_tokens[u.rows])
        reserve = min(cfg.compact_tokens, int(compact_cost[older].sum()) + INDEX_OVERHEAD, left)
    left -= reserve
    # hottest first; ties: newer unit first. A unit that does not fit may
    # still fit with all its outputs stubbed.
    kept_cost, stub_cost = u.kept_cost, u.stub_cost
    for k in hottest:
        if kept_cost[k] <= left:
            mode[k] = _Mode.KEPT
            left -= int(kept_cost[k])
        elif stub_cost[k] < kept_cost[k] and stub_cost[k] <= left:
            mode[k] = _Mode.STUBBED
            left -= int(stub_cost[k])
    if reserve:
        room = min(left + reserve, cfg.compact_tokens) - INDEX_OVERHEAD
        for k in hottest:
            if mode[k] == _Mode.DROP and 0 < compact_cost[k] <= room:
                compact[k] = True
                room -= int(compact_cost[k])
    return compact


def _emit(
    inp: PlanInput, u: _Units, mode: np.ndarray, compact: np.ndarray, big: np.ndarray, l1: list[Slot],
    l1_tokens: int, n_recent: int,
) -> tuple[list[Slot], int, int]:
    """Lay out L1, the index block and the kept rows; return ``(slots, tokens, first_young)``."""
    slots = list(l1)
    total = l1_tokens
    if compact.any():
        lined = u.rows[compact[u.upos]].tolist()
        cost = int(inp.compact_tokens[lined].sum()) + INDEX_OVERHEAD  # type: ignore[index]
        slots.append(Slot(INDEX, pages=tuple(int(inp.page[r]) for r in lined), tokens=cost))
        total += cost
    # per planned row, in history order, at C speed (a round plans the whole history: issue 23)
    m = mode[u.upos]
    keep = m != int(_Mode.DROP)
    rows, m, upos = u.rows[keep], m[keep], u.upos[keep]
    tool = inp.tool[rows]
    stubbed = tool & ((m == int(_Mode.STUBBED)) | ((m == int(_Mode.KEPT)) & big[rows]) | u.huge[rows])
    young = np.flatnonzero(upos >= u.uniq.size - n_recent)
    first_young = len(slots) + (int(young[0]) if young.size else rows.size)
    slots.extend(Slot(STUB if s else FULL, p) for p, s in zip(inp.page[rows].tolist(), stubbed.tolist()))
    total += int(np.where(stubbed, inp.stub_tokens[rows], inp.tokens[rows]).sum())
    return slots, total, first_young


def _rebuild(
    inp: PlanInput, cfg: PlanConfig, target: int, keep: tuple[list[Slot], int] | None = None, start_row: int = 0
) -> tuple[list[Slot], int, int]:
    """Rebuild the layout from ``start_row`` on, after the slots in ``keep`` (default: L1).

    Returns ``(slots, tokens, first_young)``: ``first_young`` is the index of
    the first slot of the recent tail, where the next minor round may start.
    """
    l1, l1_tokens = keep if keep is not None else _l1_slots(inp)
    if l1_tokens > cfg.budget:
        raise BudgetError(l1_tokens, cfg.budget)
    u = _units(inp, cfg, target, start_row)
    if u is None:
        return list(l1), l1_tokens, len(l1)
    mode = np.full(u.uniq.size, _Mode.DROP, dtype=np.int8)
    n_recent = min(cfg.recent_units, u.uniq.size)
    left, hard_left = _keep_recent(u, mode, n_recent, max(0, min(target, cfg.budget) - l1_tokens), cfg.budget - l1_tokens)
    if mode[u.uniq.size - 1] == _Mode.DROP:
        raise BudgetError(
            l1_tokens + int(u.stub_cost[-1]), cfg.budget, what="L1 plus the latest message, stubbed,"
        )
    left = min(left, hard_left)
    older = np.arange(u.uniq.size - n_recent)
    compact = np.zeros(u.uniq.size, dtype=bool)
    big = u.big
    if cfg.objective and older.size:
        big = big.copy()
        # past the low watermark, but never so far that the next call runs a round again
        room = min(cfg.keep_room, max(0, (cfg.high - min(target, cfg.budget)) // 2))
        left = min(left + room, hard_left)
        _objective_fill(inp, cfg, u.rows, u.upos, older, mode, big, u.stub_cost, min(target, cfg.budget), left)
    elif older.size:
        compact = _heat_fill(inp, cfg, u, older, mode, left)
    return _emit(inp, u, mode, compact, big, l1, l1_tokens, n_recent)


def _unit_prices(
    inp: PlanInput, cfg: PlanConfig, rows: np.ndarray, upos: np.ndarray, older: np.ndarray, n_units: int,
    stub_mask: np.ndarray, prompt: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return ``_objective_fill``'s prices per unit (best kept form, dropped, stubbed; tokens shown when
    kept) and the order it weighs the ``older`` units in; sets ``stub_mask`` for the rows it prices."""
    h, to_round = _horizon(inp, cfg, prompt)
    price = _keep_price(cfg, to_round)
    p = _need_over(inp, rows, h)
    fault = p * _fault_price(cfg, inp.tokens[rows].astype(np.float64), prompt)
    tool = inp.tool[rows]
    full = inp.tokens[rows] * price
    stub = np.where(tool, inp.stub_tokens[rows] * price + fault, full)
    stub_row = tool & (stub < full)
    stub_mask[rows] = stub_row
    best = np.where(stub_row, stub, full)
    shown = np.where(stub_row, inp.stub_tokens[rows], inp.tokens[rows])
    drop_u = np.zeros(n_units)
    best_u = np.zeros(n_units)
    stub_u = np.zeros(n_units)
    shown_u = np.zeros(n_units, dtype=np.int64)
    np.add.at(drop_u, upos, fault)
    np.add.at(best_u, upos, best)
    np.add.at(stub_u, upos, stub)
    np.add.at(shown_u, upos, shown)
    value = drop_u[older] - best_u[older]
    density = value / np.maximum(shown_u[older], 1)
    return best_u, drop_u, stub_u, shown_u, older[np.lexsort((-older, -density))]


def _objective_fill(
    inp: PlanInput, cfg: PlanConfig, rows: np.ndarray, upos: np.ndarray, older: np.ndarray, mode: np.ndarray,
    stub_mask: np.ndarray, stub_cost: np.ndarray, prompt: int, left: int,
) -> np.ndarray:
    """Keep the older units that pay, best value per token first, within ``left`` tokens.

    Per row, per call: shown in full costs its tokens at ``_keep_price``;
    stubbed (tool outputs) costs its stub plus its chance of being needed
    times a re-read; dropped costs that chance times a re-read. A unit takes
    its cheapest form per row; it is dropped when dropping it whole is
    cheaper, or when it no longer fits even stubbed. Sets ``mode`` and
    ``stub_mask`` (rows of kept units shown as stubs); returns the units in
    the order they were considered.
    """
    best_u, drop_u, stub_u, shown_u, order = _unit_prices(inp, cfg, rows, upos, older, mode.size, stub_mask, prompt)
    # the greedy pass over Python floats and ints (the same doubles and integers): read as numpy scalars
    # one by one, the fill took 11.0 ms against 6.2 on one round's input at 50,000 messages (9,540 units)
    best_l, drop_l, stub_l, shown_l, cost_l = (
        best_u.tolist(), drop_u.tolist(), stub_u.tolist(), shown_u.tolist(), stub_cost.tolist())
    kept: list[int] = []
    stubbed: list[int] = []
    for k in order.tolist():
        best_k, drop_k, stub_k = best_l[k], drop_l[k], stub_l[k]
        if best_k >= drop_k and stub_k >= drop_k:
            continue  # dropping pays
        if best_k < drop_k and shown_l[k] <= left:
            kept.append(k)
            left -= shown_l[k]
        elif stub_k < drop_k and cost_l[k] <= left:
            stubbed.append(k)
            left -= cost_l[k]
    mode[np.asarray(kept, dtype=np.int64)] = _Mode.KEPT
    mode[np.asarray(stubbed, dtype=np.int64)] = _Mode.STUBBED
    return order


def _is_big(inp: PlanInput, r: int, limit: int) -> bool:
    return bool(inp.tool[r]) and int(inp.tokens[r]) > limit


def _round(
    inp: PlanInput, cfg: PlanConfig, prev: Layout | None, idx: dict[int, int], reason: Reason
) -> tuple[list[Slot], int, int, int]:
    """Run a demotion round; return ``(slots, tokens, stable, stable_row)``.

    A *minor* round keeps L1 and the old generation (``prev.slots[:stable]``)
    byte for byte and rebuilds only the young rows after them, so the cache
    keeps everything up to the first young slot. A *major* round rebuilds
    everything after L1; it runs when the old generation has outgrown its
    share (``cfg.old_share`` of the low watermark), or the layout cannot be
    kept (first call, divergence, card change), or the active task changed.
    """
    l1_slots, l1_tokens = _l1_slots(inp)
    # a task switch runs a major round: the old generation may hold the old task
    if cfg.minor_rounds and prev is not None and reason in (Reason.HIGH_WATERMARK, Reason.OVER_BUDGET) and prev.stable >= len(l1_slots):
        old = list(prev.slots[: prev.stable])
        old_tokens = sum(_slot_tokens(s, idx, inp) for s in old)
        old_limit = l1_tokens + int((cfg.low - l1_tokens) * cfg.old_share)
        if old[: len(l1_slots)] == l1_slots and old_tokens <= old_limit:
            slots, total, young = _rebuild(inp, cfg, cfg.low, (old, old_tokens), prev.stable_row)
            if total <= cfg.budget:
                return slots, total, young, _row_of_slot(slots, young, idx, inp)
    slots, total, young = _rebuild(inp, cfg, cfg.low)
    return slots, total, young, _row_of_slot(slots, young, idx, inp)


def _row_of_slot(slots: list[Slot], k: int, idx: dict[int, int], inp: PlanInput) -> int:
    """Return the history row where the young generation starts (slot ``k``)."""
    for s in slots[k:]:
        if s.kind in (FULL, STUB):
            return idx[s.page]
    return len(inp)


def _invalid(
    inp: PlanInput, cfg: PlanConfig, prev: Layout | None, idx: dict[int, int], prior: Prior | None = None
) -> Reason:
    """Return why ``prev`` cannot be appended to (``Reason.NONE``: it can).

    With ``prior`` (``prev``'s, over this table as it was: it only gained rows since) every row a slot
    shows is still a row of the table; only the recall blocks are looked at.
    """
    if prev is None:
        return Reason.FIRST_CALL
    if prev.branch != inp.branch or prev.upto > len(inp):
        return Reason.DIVERGED
    if prev.card != inp.card:
        return Reason.CARD_CHANGED
    if cfg.task_rounds and prev.task >= 0 and inp.task >= 0 and prev.task != inp.task:
        # the heat of the old task's pages just dropped (and a returned-to
        # task's rose): rebuild now, in one batch, rather than at the next
        # high watermark
        return Reason.TASK_SWITCH
    # one pass: this runs every call (issue 23)
    for s in prev.slots if prior is None else [prev.slots[j] for j in prior.recall]:
        kind = s.kind
        if kind is FULL or kind is STUB:
            if s.page not in idx:
                return Reason.DIVERGED
        elif kind is INDEX:
            if any(p not in idx for p in s.pages):
                return Reason.DIVERGED
        elif kind is RECALL:
            # a recalled page from another session that may no longer be shown (its pool was closed)
            if any(p not in idx and p not in inp.foreign for p in s.pages):
                return Reason.DIVERGED
    return Reason.NONE


def _append(
    inp: PlanInput, cfg: PlanConfig, prev: Layout, idx: dict[int, int], prior: Prior | None = None
) -> list[Slot]:
    """Return ``prev``'s slots with the new history rows appended (no round).

    ``prior``: ``prev``'s facts (``Prior``): the big outputs shown in full are read from it, not
    searched for among every young slot.
    """
    n = len(inp)
    hard_max = cfg.budget // 4
    inline_max = min(cfg.inline_max or hard_max, hard_max)
    newest = int(inp.unit[n - 1]) if n else -1
    slots = list(prev.slots)
    if cfg.recall_leaves:
        # the last call's recall block served that call; it is still the
        # tail of the previous prompt, so removing it re-bills nothing. It
        # stays when this call would recall the same pages again.
        again = {int(p) for p, _ in inp.recall} if cfg.recall_pages > 0 else set()
        while len(slots) > prev.stable and slots[-1].kind == RECALL and not set(slots[-1].pages) <= again:
            slots.pop()
    prev_newest = int(inp.unit[prev.upto - 1]) if prev.upto > 0 else -1
    # A big output is shown in full only while it belongs to the newest
    # step: the model reads it once, then it becomes a stub. It sits at the
    # tail of the previous prompt, so stubbing it re-bills almost nothing.
    # Under the objective it becomes a stub only when that pays; otherwise
    # it rides in full until the next round.
    tail: list[int] = []
    # the big outputs of older steps among the young slots shown in full, newest first
    over: list[tuple[int, int]]
    if prior is not None:
        # named by ``prior.big`` (the recall blocks popped above were the tail: every slot it names is
        # still here): a few, looked at one by one (issue 23)
        over = [(j, idx[slots[j].page]) for j in prior.big[bisect.bisect_left(prior.big, prev.stable):]]
        over = [(j, r) for j, r in over if int(inp.unit[r]) != newest]
    else:
        # found at C speed over the young slots' rows only (not over the whole history: issue 23)
        shown = [j for j in range(prev.stable, len(slots)) if slots[j].kind is FULL]
        rows = np.fromiter((idx[slots[j].page] for j in shown), dtype=np.int64, count=len(shown))
        hit = np.flatnonzero(inp.tool[rows] & (inp.tokens[rows] > inline_max) & (inp.unit[rows] != newest))
        over = [(shown[i], int(rows[i])) for i in hit.tolist()]
    for j, r in reversed(over):
        if not cfg.objective or int(inp.tokens[r]) > hard_max:
            slots[j] = Slot(STUB, slots[j].page)
        elif int(inp.unit[r]) == prev_newest:
            tail.append(j)
    new_slots: list[Slot] = []
    for r in range(prev.upto, n):
        big = _is_big(inp, r, inline_max)
        stubbed = big and (int(inp.unit[r]) != newest or int(inp.tokens[r]) > hard_max)
        if stubbed and cfg.objective and int(inp.tokens[r]) <= hard_max:
            tail.append(-1 - len(new_slots))  # decided below, with the total known
        new_slots.append(Slot(STUB if stubbed else FULL, int(inp.page[r])))
    slots.extend(new_slots)
    if tail:
        at = [j if j >= 0 else len(slots) - len(new_slots) + (-1 - j) for j in tail]
        # the layout's tokens with the slots at ``at`` in full
        full_total = _tokens(slots, idx, inp, prior) + sum(
            int(inp.tokens[idx[slots[i].page]]) - int(inp.stub_tokens[idx[slots[i].page]])
            for i in at if slots[i].kind is STUB)
        tail_rows = np.asarray([idx[slots[i].page] for i in at], dtype=np.int64)
        pays = _stub_pays(inp.scored(tail_rows), cfg, tail_rows, full_total)
        for i, stub in zip(at, pays.tolist()):
            slots[i] = Slot(STUB if stub else FULL, slots[i].page)
    return slots


def _add_recall(inp: PlanInput, cfg: PlanConfig, slots: list[Slot], total: int) -> tuple[tuple[int, ...], int]:
    """Append one block of recall candidates at the tail if any fit; return ``(recalled, total)``."""
    if not inp.recall or cfg.recall_pages <= 0:
        return (), total
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
    if not picked:
        return (), total
    recalled = tuple(picked)
    spans = tuple(inp.recall_spans.get(p, (0, 0)) for p in recalled)
    slots.append(Slot(RECALL, pages=recalled, tokens=spent + RECALL_OVERHEAD, spans=spans))
    return recalled, total + spent + RECALL_OVERHEAD


def plan(inp: PlanInput, cfg: PlanConfig, prev: Layout | None = None) -> Plan:
    """Return the layout for the next prompt.

    Appends to ``prev`` when it is still valid and the result stays under the
    high watermark; otherwise runs a demotion round down to the low watermark.
    Then adds one block of recall candidates at the tail if it fits.
    """
    n = len(inp)
    idx = inp.rows if inp.rows is not None else dict(zip(inp.page.tolist(), range(n)))
    hard_max = cfg.budget // 4
    inline_max = min(cfg.inline_max or hard_max, hard_max)
    prior = inp.prior
    if prior is not None and (prev is None or prior.slots is not prev.slots or prior.inline_max != inline_max
                              or prior.card_tokens != inp.card_tokens):
        prior = None  # facts of another layout, or of figures that changed
    reason = _invalid(inp, cfg, prev, idx, prior)
    slots: list[Slot] | None = None
    total = 0
    if reason == Reason.NONE and prev is not None:
        slots = _append(inp, cfg, prev, idx, prior)
        total = _tokens(slots, idx, inp, prior)
        if total > cfg.budget:
            reason, slots = Reason.OVER_BUDGET, None
        elif total > cfg.high:
            reason, slots = Reason.HIGH_WATERMARK, None
    did_round = slots is None
    stable, stable_row = (prev.stable, prev.stable_row) if prev is not None else (0, 0)
    if slots is None:
        inp = inp.scored()
        slots, total, stable, stable_row = _round(inp, cfg, prev, idx, reason)
    recalled, total = _add_recall(inp, cfg, slots, total)
    layout = Layout(
        slots=tuple(slots), upto=n, branch=inp.branch, card=inp.card, stable=stable, stable_row=stable_row,
        task=inp.task,
    )
    return Plan(layout=layout, tokens=total, round=did_round, reason=reason, recalled=recalled,
                prior=_facts(layout.slots, idx, inp, inline_max, prior))

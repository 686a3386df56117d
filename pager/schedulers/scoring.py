"""What the paging scheduler's planner asks of the page table: heat and the objective's need. Pure.

Both cost work in proportion to the whole history, so the planner asks for
them (``PlanInput.score``) only when it runs a round, or, for the need, of
the few rows it weighs at the tail between rounds (a big output it may
stub): ``scorer`` returns that deferred scoring for one call. Heat is the
session's policy (``pager.core.heat``, checked: one finite score per row);
the need is ``heat.NEEDS``, the measured chance that a call needs a page,
lowered for another task's pages when ``task_focus`` is on.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import attrs
import numpy as np

from pager.core.heat import NEEDS, HeatPolicy, PageTable
from pager.core.history import History
from pager.core.plan import PlanInput
from pager.options import Options

__all__ = ["MIN_LIFE", "TASK_AWAY", "focus_terms", "growth_life", "need", "need_rows", "scorer"]

# the objective assumes a session has at least this many calls left
MIN_LIFE = 8
# under the objective, a page of another task than the active one is this much less likely to be needed
TASK_AWAY = 0.25


def focus_terms(options: Options, h: History, pin_terms: frozenset[str]) -> frozenset[str]:
    """Return the active task's terms: pinned goals and the latest user message but the first."""
    latest = h.latest_user
    if options.task_focus and latest is not None and latest != h.first_user:
        return pin_terms | h.terms[latest]
    return pin_terms


def need(
    options: Options, cols: Mapping[str, np.ndarray], task: np.ndarray | None, clock: int, history: History,
    mixed: bool,
) -> np.ndarray:
    """Return per row of ``cols`` the calls expected to need it within each horizon (``heat.NEEDS``).

    ``cols``: the page table's ``kind``, ``tokens``, ``created`` and ``last_ref`` of the rows asked
    about (all of the history's, or a few); ``task``: whether each belongs to the active task (None:
    ``task_focus`` is off); ``mixed``: whether the whole history holds pages of another task.
    """
    focus = options.task_focus and task is not None and mixed
    last_ref = cols["last_ref"]
    start = history.task_resumed() if focus else None
    if start is not None:
        # the working set follows the task: the active task's pages count their age from when
        # the agent returned to it
        last_ref = np.where(task, np.maximum(last_ref, start), last_ref)
    out = NEEDS.expected_of(cols["kind"], cols["tokens"], cols["created"], last_ref, clock, options.need_scale)
    if focus:
        out = np.where(task[:, None], out, out * TASK_AWAY)  # another task's page: less likely needed
    return out


def growth_life(h: History, tokens: np.ndarray, npin: int) -> tuple[float, float]:
    """Return the history tokens a call adds on average, and the calls the session is expected to have
    left: a session that has lasted ``c`` calls, about ``c`` more (at least ``MIN_LIFE``)."""
    return float(tokens[npin:].sum()) / max(h.clock, 1), float(max(h.clock, MIN_LIFE))


def need_rows(options: Options, inp: PlanInput, h: History, cols: Mapping[str, np.ndarray], rows: np.ndarray,
              npin: int) -> PlanInput:
    """Return ``inp`` with the objective's need filled in for ``rows`` only (``PlanInput.need_rows``).

    Need is per row (kind, size, age), so the rows' values are those a whole table gives;
    only whether the history mixes tasks is read from the whole task column.
    """
    task = h.task_column() if options.task_focus else None
    sub = {name: cols[name][rows] for name in ("kind", "tokens", "created", "last_ref")}
    part = need(options, sub, task[rows] if task is not None else None, h.clock, h,
                mixed=task is not None and not task.all())
    growth, life = growth_life(h, cols["tokens"], npin)
    return attrs.evolve(inp, need=part, need_rows=np.asarray(rows, dtype=np.int64), growth=growth, life=life)


def scorer(options: Options, policy: HeatPolicy, h: History, cols: Mapping[str, np.ndarray], npin: int,
           focus: frozenset[str], compact_of: Sequence[Mapping[str, Any]] | None = None) -> Callable[..., PlanInput]:
    """Return the planner's deferred scoring of ``h``: heat and need, asked for only when used.

    ``compact_of``: the request's messages, when rounds write compact lines; a round's scoring
    counts the lines not counted yet (only a round reads them: issue 23).
    """
    o = options
    n = len(h)

    def score(inp: PlanInput, rows: np.ndarray | None = None) -> PlanInput:
        # heat and the objective's need cost work in proportion to the whole history: the planner
        # asks for them only when it runs a round, or for a few rows when it weighs big outputs at
        # the tail (issue 23)
        if rows is not None and o.objective and n:
            return need_rows(o, inp, h, cols, rows, npin)
        relevance = h.term_index.relevance(cols["page"], focus) if focus else np.zeros(n)
        table = PageTable(
            page_id=cols["page"], created=cols["created"], last_ref=cols["last_ref"],
            ref_count=cols["ref_count"], tokens=cols["tokens"], kind=cols["kind"], stale=cols["stale"],
            relevance=relevance, task=h.task_column() if o.task_focus else None,
            overlap=h.term_index.relevance(cols["page"], h.query_terms()) if n else None,
        )
        heat = policy.checked_score(table, h.clock) if n else np.zeros(0)
        needed, growth, life = None, 0.0, 0.0
        if o.objective and n:
            needed = need(o, cols, table.task if o.task_focus else None, h.clock, h, mixed=not table.task.all())
            growth, life = growth_life(h, table.tokens, npin)
        if compact_of is not None:
            h.fill_compact_tokens(compact_of)
            inp = attrs.evolve(inp, compact_tokens=h.columns()["compact_tokens"])
        return attrs.evolve(inp, heat=heat, need=needed, need_rows=None, growth=growth, life=life, score=None)

    return score

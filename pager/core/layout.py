"""A prompt's layout and the planner's inputs and answer: values, and the token sums of slots. Pure.

``pager.core.plan`` (the planner; its docstring is the theory of operation)
reads a ``PlanInput`` and a ``PlanConfig`` and answers a ``Plan``, whose
``Layout`` is the ordered ``Slot`` list the scheduler renders. ``Prior`` holds
the facts of a layout's slots that the next call's plan reads instead of
walking every slot again (issue 23). Every name here is also importable from
``pager.core.plan``.
"""

from __future__ import annotations

import bisect
import enum
from typing import Callable, Mapping, Sequence

import attrs
import numpy as np

from pager.core.canonical import same_objects

__all__ = ["CARD", "FULL", "INDEX", "INDEX_OVERHEAD", "Layout", "Plan", "PlanConfig", "PlanInput", "Prior",
           "RECALL", "RECALL_OVERHEAD", "Reason", "STUB", "Slot", "SlotKind"]


class SlotKind(str, enum.Enum):
    """What one emitted message of a layout is (a ``str``: it is persisted as its value)."""

    FULL = "full"  # a history row verbatim
    STUB = "stub"  # a tool output replaced by its head and a handle
    CARD = "card"  # the task-state card
    RECALL = "recall"  # a block of recalled pages
    INDEX = "index"  # compact lines of dropped units (``pager.core.compact``)


FULL, STUB, CARD, RECALL, INDEX = SlotKind.FULL, SlotKind.STUB, SlotKind.CARD, SlotKind.RECALL, SlotKind.INDEX


class Reason(str, enum.Enum):
    """Why a call ran a demotion round (empty: it appended to the previous layout)."""

    NONE = ""
    FIRST_CALL = "first call"
    DIVERGED = "history diverged"
    CARD_CHANGED = "card changed"
    TASK_SWITCH = "task switch"
    OVER_BUDGET = "over budget"
    HIGH_WATERMARK = "high watermark"


RECALL_OVERHEAD = 40  # the block's header and message framing, in tokens
INDEX_OVERHEAD = 40  # the same for an index block


@attrs.frozen(slots=True)
class Slot:
    """One emitted message: a history row in full or stubbed, the card, or a recall block."""

    kind: SlotKind = attrs.field(converter=SlotKind)
    page: int = 0
    pages: tuple[int, ...] = ()
    tokens: int = 0  # recall blocks: their rendered size, fixed when they are placed
    spans: tuple[tuple[int, int], ...] = ()  # recall blocks: the line range shown of each page


@attrs.frozen(slots=True)
class Layout:
    """The slots of the last emitted prompt, and up to which history row they cover."""

    slots: tuple[Slot, ...]
    upto: int  # number of history rows the layout has considered
    branch: int = 0
    card: str = ""  # the card text as emitted; a change forces a round
    stable: int = 0  # slots[:stable] are L1 and the old generation, kept by minor rounds
    stable_row: int = 0  # history rows before this are covered by the old generation
    task: int = -1  # the active task when the layout was planned (-1: unknown)

    def to_state(self, like: "tuple[Layout, dict] | None" = None) -> dict:
        """Return the layout as the state row keeps it (``from_state`` reads it back equal).

        ``like``: an earlier layout and its state; the rows of the slots this
        one shares with it (the very same objects: a layout between rounds
        keeps its predecessor's) are reused, not rebuilt (issue 23).
        """
        k = same_objects(self.slots, like[0].slots) if like is not None else 0
        head = like[1]["slots"][:k] if like is not None and k else []
        return {
            "slots": head + [_slot_state(s) for s in self.slots[k:]],
            "upto": self.upto,
            "branch": self.branch,
            "card": self.card,
            "stable": self.stable,
            "stable_row": self.stable_row,
            "task": self.task,
        }

    @classmethod
    def from_state(cls, data: dict | None) -> "Layout | None":
        if not data:
            return None
        slots = tuple(
            Slot(
                kind=row[0], page=int(row[1]), pages=tuple(int(x) for x in row[2]), tokens=int(row[3]),
                spans=tuple((int(a), int(b)) for a, b in (row[4] if len(row) > 4 else ())),
            )
            for row in data["slots"]
        )
        return cls(
            slots=slots, upto=int(data["upto"]), branch=int(data.get("branch", 0)), card=data.get("card", ""),
            stable=int(data.get("stable", 0)), stable_row=int(data.get("stable_row", 0)),
            task=int(data.get("task", -1)),
        )


def _slot_state(s: Slot) -> list:
    return [s.kind.value, s.page, list(s.pages), s.tokens, [list(x) for x in s.spans]]


@attrs.frozen(slots=True)
class PlanConfig:
    """Budget figures for one plan, all in tokens."""

    budget: int  # hard ceiling: context window minus output reserve
    high: int  # a round runs when the layout would pass this
    low: int  # a round rebuilds down to this
    recent_units: int = 3  # most recent units always verbatim after a round
    stub_threshold: int = 2000  # older tool outputs above this are stubbed
    inline_max: int = 0  # outputs above this are full only in the newest step (0: budget // 4)
    recall_pages: int = 5
    recall_tokens: int = 2000
    old_share: float = 0.9  # the old generation may hold this share of the low watermark
    minor_rounds: bool = True  # False: every round is a major one (rebuilds everything after L1)
    task_rounds: bool = False  # a switch of the active task runs a major round at once
    compact_tokens: int = 0  # a round may spend this much on compact lines of the units it drops (0: none)
    # the objective: demote a row only when the expected saving beats the expected re-read
    objective: bool = False
    keep_room: int = 0  # under the objective, paying units may hold this many tokens past the low watermark
    read_price: float = 0.1  # a cached token, in base input tokens
    write_price: float = 1.25  # a written token
    call_price: float = 200.0  # the output of the extra call a re-read takes
    recall_leaves: bool = False  # a recall block is removed at the next call, while it is the tail


@attrs.frozen(slots=True)
class PlanInput:
    """The branch's page table: one row per history message, in history order."""

    page: np.ndarray  # int64 page ids
    tokens: np.ndarray  # int64 tokens in full
    stub_tokens: np.ndarray  # int64 tokens as a stub (== tokens for rows never stubbed)
    unit: np.ndarray  # int64 unit index (a call and its results share one)
    pinned: np.ndarray  # bool: L1 rows (system messages, first user message)
    tool: np.ndarray  # bool: tool output rows (stubbable)
    heat: np.ndarray | None  # float64 heat score (None: ``score`` computes it when the plan needs it)
    card_tokens: int = 0
    card: str = ""
    recall: Sequence[tuple[int, int]] = ()  # (page id, rendered tokens), best first
    recall_spans: Mapping[int, tuple[int, int]] = attrs.field(factory=dict)  # page -> lines shown
    # pages from beyond the history that can be shown in a recall block this call (readable, text at hand)
    foreign: frozenset[int] = frozenset()
    branch: int = 0
    task: int = -1  # the active task (-1: unknown); a change is a task switch
    compact_tokens: np.ndarray | None = None  # int64 tokens of each row's compact line
    # the objective's inputs (``PlanConfig.objective``): per row, the calls expected to need it
    # within each horizon of ``heat.HORIZONS`` (rows x horizons); the history tokens a call adds
    # on average; the calls the session is expected to have left
    need: np.ndarray | None = None
    # the history rows ``need`` holds, in its order, when it was asked for a few rows only (``scored(rows)``):
    # a whole table's zeros to hold them cost 0.7 ms a call at 50,000 pages (issue 23); None: every row
    need_rows: np.ndarray | None = None
    growth: float = 0.0
    life: float = 0.0
    # heat and need cost work in proportion to the whole history; a call that appends needs neither.
    # ``score`` returns this input with them (and growth, life) filled in, and is called only when the
    # plan runs a round or weighs a big output at the tail (issue 23)
    score: Callable[..., "PlanInput"] | None = None
    rows: Mapping[int, int] | None = None  # page id -> row, when the caller keeps one (else built per call)
    # what the plan that made ``prev`` knew of it (``Plan.prior``), passed back by a caller that vouches
    # this table is that plan's table with rows appended (the same history on the same branch, L1 uncut)
    prior: "Prior | None" = None

    def __len__(self) -> int:
        return int(self.page.shape[0])

    def scored(self, rows: np.ndarray | None = None) -> "PlanInput":
        """Return this input with its heat and need computed (itself when they are).

        ``rows``: only the need (and growth, life) of these rows is asked for; the input keeps its
        ``score`` for a round later in the same plan.
        """
        if self.score is None:
            return self
        return self.score(self) if rows is None else self.score(self, rows)


@attrs.frozen(slots=True, eq=False)
class Prior:
    """Facts of a layout's slots over the page table it was planned on, for the next call (issue 23).

    Between rounds a layout is the previous one's slots (the very same objects) with a few changed or
    added at the tail, over a table that only gained rows: these facts of the shared head still hold,
    so the next plan works out only the tail's instead of walking every slot again. ``cum[k]``: the
    tokens of ``slots[:k]``; ``big``: the slots showing in full a tool output over ``inline_max``;
    ``recall``: the recall blocks (their pages from other sessions are checked every call). A plan
    takes it only for the very ``slots`` of its ``prev`` and the same ``inline_max`` and card tokens;
    that the table is the one extended is the caller's word (``PlanInput.prior``).
    """

    slots: tuple[Slot, ...]
    cum: list[int]
    big: list[int]
    recall: list[int]
    inline_max: int
    card_tokens: int


@attrs.frozen(slots=True)
class Plan:
    """The planner's answer: the layout and what it did to get there."""

    layout: Layout
    tokens: int
    round: bool
    reason: Reason
    recalled: tuple[int, ...] = ()
    prior: Prior | None = attrs.field(default=None, eq=False, repr=False)  # facts of ``layout`` for the next call


def _slot_tokens(slot: Slot, idx: dict[int, int], inp: PlanInput) -> int:
    if slot.kind == FULL:
        return int(inp.tokens[idx[slot.page]])
    if slot.kind == STUB:
        return int(inp.stub_tokens[idx[slot.page]])
    if slot.kind == CARD:
        return inp.card_tokens
    return slot.tokens


def _total(slots: Sequence[Slot], idx: Mapping[int, int], inp: PlanInput) -> int:
    """Return the tokens of ``slots`` (``_slot_tokens`` summed, the rows' tokens summed by numpy)."""
    full: list[int] = []
    stub: list[int] = []
    other = 0
    for s in slots:
        kind = s.kind
        if kind is FULL:
            full.append(idx[s.page])
        elif kind is STUB:
            stub.append(idx[s.page])
        elif kind is CARD:
            other += inp.card_tokens
        else:
            other += s.tokens
    return int(inp.tokens[full].sum()) + int(inp.stub_tokens[stub].sum()) + other


def _tokens(slots: Sequence[Slot], idx: Mapping[int, int], inp: PlanInput, prior: Prior | None) -> int:
    """Return ``_total(slots)``, the head ``slots`` shares with ``prior``'s (the very same objects) read from it."""
    if prior is None:
        return _total(slots, idx, inp)
    k = same_objects(slots, prior.slots)
    return prior.cum[k] + _total(slots[k:], idx, inp)


# Up to this many slots past the shared head are read one by one; more, by numpy (a round, a first call).
_FACTS_LOOP = 32


def _facts(
    slots: tuple[Slot, ...], idx: Mapping[int, int], inp: PlanInput, inline_max: int, prior: Prior | None
) -> Prior:
    """Return the ``Prior`` of ``slots`` over ``inp``: ``prior``'s facts for the head they share, the rest read."""
    k = same_objects(slots, prior.slots) if prior is not None else 0
    if prior is not None:
        cum = prior.cum[: k + 1]
        big = prior.big[: bisect.bisect_left(prior.big, k)]
        recall = prior.recall[: bisect.bisect_left(prior.recall, k)]
    else:
        cum, big, recall = [0], [], []
    tool, tokens, stub_tokens = inp.tool, inp.tokens, inp.stub_tokens
    if len(slots) - k <= _FACTS_LOOP:
        run = cum[-1]
        for j in range(k, len(slots)):
            s = slots[j]
            kind = s.kind
            if kind is FULL:
                r = idx[s.page]
                t = int(tokens[r])
                if t > inline_max and tool[r]:
                    big.append(j)
            elif kind is STUB:
                t = int(stub_tokens[idx[s.page]])
            elif kind is CARD:
                t = inp.card_tokens
            else:
                t = s.tokens
                if kind is RECALL:
                    recall.append(j)
            run += t
            cum.append(run)
    else:
        vals = np.zeros(len(slots) - k, dtype=np.int64)
        full_at: list[int] = []
        full_rows: list[int] = []
        stub_at: list[int] = []
        stub_rows: list[int] = []
        for j in range(k, len(slots)):
            s = slots[j]
            kind = s.kind
            if kind is FULL:
                full_at.append(j - k)
                full_rows.append(idx[s.page])
            elif kind is STUB:
                stub_at.append(j - k)
                stub_rows.append(idx[s.page])
            elif kind is CARD:
                vals[j - k] = inp.card_tokens
            else:
                vals[j - k] = s.tokens
                if kind is RECALL:
                    recall.append(j)
        vals[full_at] = tokens[full_rows]
        vals[stub_at] = stub_tokens[stub_rows]
        cum.extend((np.cumsum(vals) + cum[-1]).tolist())
        at = np.asarray(full_at, dtype=np.int64)
        over = (tokens[full_rows] > inline_max) & tool[full_rows]
        big.extend((at[over] + k).tolist())
    return Prior(slots, cum, big, recall, inline_max, inp.card_tokens)

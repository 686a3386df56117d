"""Each call's prompt, rebuilt from what the store and its report log keep.

The store keeps every page and the last prompt's layout (the session state);
each ``assemble`` record of ``reports.jsonl`` keeps its layout as a change
against the same writer's previous call (``pager.report.layout_delta``): a few
slots between demotion rounds, the whole layout after one. ``layout_of``
replays that chain back to a full layout; ``render`` turns a layout into the
messages the model got with the paging scheduler's own renderer, so the view
shows what was emitted, not a second rendering of it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from pager.core.history import History
from pager.core.messages import message_text
from pager.core.plan import Layout
from pager.schedulers.base import RecallHit, RecallSource

__all__ = ["Mirror", "heat", "layout_of", "slot_states"]


def layout_of(calls: Mapping[int, Mapping[str, Any]], call: int) -> tuple[list[Any], str] | None:
    """Return call ``call``'s layout slots and card text, or None when its records are not all kept."""
    chain = []
    n: int | None = call
    while n is not None:
        rec = calls.get(n)
        delta = rec.get("layout") if rec is not None else None
        if not isinstance(delta, Mapping) or len(chain) > len(calls):
            return None  # not recorded (rollover mode, an older pager, a rotated-away record) or a loop
        chain.append(delta)
        n = delta.get("base")
    slots: list[Any] = []
    card = ""
    for delta in reversed(chain):
        slots = slots[: int(delta.get("from", 0))] + list(delta.get("slots") or [])
        if "card" in delta:
            card = str(delta["card"])
    return slots, card


def slot_states(slots: Sequence[Sequence[Any]]) -> dict[int, str]:
    """Return each page's state in a layout: ``full``, ``stubbed``, ``recalled`` or ``indexed`` (else dropped)."""
    out: dict[int, str] = {}
    for s in slots:
        kind, page, pages = s[0], int(s[1]), s[2]
        if kind == "full":
            out[page] = "full"
        elif kind == "stub":
            out[page] = "stubbed"
        elif kind == "recall":
            for p in pages:
                out.setdefault(int(p), "recalled")
        elif kind == "index":
            for p in pages:
                out.setdefault(int(p), "indexed")
    return out


def heat(records: Sequence[Any], policy: Any) -> list[float]:
    """Return each page's heat under ``policy`` now, from the stored records (the goal-relevance term left at 0).

    The columns are the ones ``History.columns`` gives the planner, read off
    the records: no history mirror is built for a page map.
    """
    import numpy as np

    from pager.core.heat import PageTable
    from pager.core.pages import KIND_CODE

    if not records:
        return []
    col = lambda name: np.asarray([getattr(r, name) for r in records], dtype=np.int64)  # noqa: E731
    table = PageTable(
        page_id=col("id"), created=col("step"), last_ref=col("last_ref"), ref_count=col("ref_count"),
        tokens=col("tokens"), kind=np.asarray([KIND_CODE[r.kind] for r in records], dtype=np.int8),
        stale=np.asarray([r.stale for r in records], dtype=bool), relevance=np.zeros(len(records)),
    )
    return [float(x) for x in policy.checked_score(table, int(records[-1].step))]


class _Messages:
    """The branch's messages by row, read from the store when first used (a page map needs none)."""

    def __init__(self, store: Any, ids: Sequence[int]) -> None:
        self.store, self.ids = store, list(ids)
        self._got: dict[int, Mapping[str, Any]] = {}

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, row: int) -> Mapping[str, Any]:
        if row not in self._got:
            self._got[row] = self.store.message(self.ids[row])[1]
        return self._got[row]


class Mirror:
    """A session's head branch loaded as the scheduler sees it: the history table and its messages."""

    def __init__(self, store: Any, session: str, branch: int, counter: Any) -> None:
        self.store = store
        self.session = session
        self.ids = store.branch_page_ids(branch)
        self.records = store.load_pages(self.ids)
        self.messages = _Messages(store, self.ids)
        self.history = History(session, counter)
        self.history.load(self.records, branch, lambda pid: store.message(pid)[1])

    def foreign(self, slots: Sequence[Sequence[Any]]) -> dict[int, RecallHit]:
        """Return the other sessions' pages that the layout's recall blocks show, as the scheduler got them."""
        ids = [int(p) for s in slots if s[0] == "recall" for p in s[2] if int(p) not in self.history.row_of]
        out = {}
        for rec in self.store.load_pages(ids) if ids else ():
            text = message_text(self.store.message(rec.id)[1])
            written = time.strftime("%Y-%m-%d", time.gmtime(rec.created)) if rec.created else None
            out[rec.id] = RecallHit(rec.id, text, RecallSource(
                session=rec.session, handle=rec.handle, kind=rec.kind, step=rec.step, path=rec.path,
                pool=rec.pool, owner=rec.owner, written=written))
        return out

    def render(self, scheduler: Any, slots: Sequence[Sequence[Any]], card: str) -> list[Mapping[str, Any]]:
        """Return the messages a layout emits (the scheduler's renderer: stubs, card, recall and index blocks)."""
        known = [s for s in slots if s[0] not in ("full", "stub") or int(s[1]) in self.history.row_of]
        layout = Layout.from_state({"slots": known, "upto": len(self.history), "card": card})
        assert layout is not None
        # the scheduler's own renderer (a private method, on purpose): the view shows exactly what it emits
        messages, _handles = scheduler._render(self.history, layout, self.messages, self.foreign(known))
        return messages

"""What a paging call reuses of the previous one's rendering: the prompt's unchanged head (issue 23).

Between rounds a layout is the previous one's slots (the very same ``Slot``
objects) with a few changed or added at the tail, and the messages they show
are the caller's same objects. Rendering a slot is a pure function of the
slot, the messages of the rows it reads, the history's fixed facts of those
rows (handle, tokens, path, kind, step) and the card text; so the rendering
of a head of slots that are the same objects, reading rows whose messages are
the same objects, of the same ``History`` on the same branch, is the previous
call's. ``RenderMemo.reusable`` says how long that head is, with every check
done in C over the head (identity, never equality: ``pager.core.canonical.same_objects``);
the scheduler renders only the slots after it, and ``pairing.normalize_after``
normalises only after the last closed point before it. Recall blocks are
never reused (their text is read from this call's hits); with the default
``recall_leaves`` they sit at the tail only.

A memo holds no state of the session: dropping it (a new scheduler, a
reopen) costs one full render, never a different prompt.
"""

from __future__ import annotations

import bisect
import operator
from typing import Any, Mapping, Sequence

import attrs

from pager.core.canonical import same_objects
from pager.core.pairing import Normalized

__all__ = ["RenderMemo", "Rendering"]


@attrs.define(slots=True)
class Rendering:
    """The rendering of a layout's slots, slot by slot, as it is built.

    ``out``: one neutral message per slot; ``hcount[k]`` / ``dcount[k]``: how
    many handles and row reads the first ``k`` slots made; ``deps`` / ``objs``:
    the rows read, in order, and the message object read at each; ``calls``:
    per reread stub, ``(slot, call id, row of its call)`` (the row a later
    call with the same id could move).
    """

    out: list[Mapping[str, Any]] = attrs.field(factory=list)
    handles: list[str] = attrs.field(factory=list)
    hcount: list[int] = attrs.field(factory=lambda: [0])
    deps: list[int] = attrs.field(factory=list)
    objs: list[Any] = attrs.field(factory=list)
    dcount: list[int] = attrs.field(factory=lambda: [0])
    calls: list[tuple[int, str, int | None]] = attrs.field(factory=list)
    limit: int | None = None  # the first slot that is never reused (a recall block)

    def add(self, message: Mapping[str, Any], rows: Sequence[int], messages: Sequence[Mapping[str, Any]],
            handles: Sequence[str] = ()) -> None:
        """Record one slot's message, the rows it read and the handles it shows."""
        self.out.append(message)
        self.handles.extend(handles)
        self.hcount.append(len(self.handles))
        for r in rows:
            self.deps.append(r)
            self.objs.append(messages[r])
        self.dcount.append(len(self.deps))

    def head(self, k: int) -> "Rendering":
        """Return the rendering of the first ``k`` slots (copies of the lists; the objects are shared)."""
        d = self.dcount[k]
        return Rendering(
            out=self.out[:k], handles=self.handles[: self.hcount[k]], hcount=self.hcount[: k + 1],
            deps=self.deps[:d], objs=self.objs[:d], dcount=self.dcount[: k + 1],
            calls=[c for c in self.calls if c[0] < k],
        )


@attrs.frozen(slots=True)
class RenderMemo:
    """The previous call's rendering, and what it was rendered from."""

    history: Any  # the ``History`` object (identity)
    branch: int
    card: str
    reread: bool
    slots: tuple[Any, ...]
    rendering: Rendering
    normalized: Normalized

    def reusable(self, h: Any, slots: Sequence[Any], card: str, messages: Sequence[Mapping[str, Any]],
                 reread: bool) -> int:
        """Return how many leading slots of this call render as they did in the memo's call."""
        if self.history is not h or self.branch != h.branch or self.card != card or self.reread != reread:
            return 0
        r = self.rendering
        k = same_objects(slots, self.slots)
        if r.limit is not None:
            k = min(k, r.limit)
        d = r.dcount[k]
        if d:
            rows = r.deps[:d]
            try:
                now = operator.itemgetter(*rows)(messages) if d > 1 else (messages[rows[0]],)
            except IndexError:
                return 0
            same = same_objects(now, r.objs)
            if same < d:
                k = bisect.bisect_right(r.dcount, same, 0, k + 1) - 1  # the slots whose reads all match
        for slot, cid, row in r.calls:
            if slot >= k:
                break
            if h.call_rows.get(cid) != row:
                return slot
        return k

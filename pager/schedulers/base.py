"""What a scheduler is: inputs for one call in, one ``ScheduleResult`` out, no I/O.

Two schedulers ship: ``paging`` (the default: L1, a hot working set by heat,
recalled pages at the tail, demotion rounds in batches) and ``rollover``
(windows that grow verbatim and restart from L1 and a handoff). The facade
gathers a scheduler's inputs (the history mirror, pins and notes, recall hits
from the index), calls it, then persists what the result says in one
transaction and renders its neutral messages through the request's wire
format. A scheduler never touches the store, the index, the network or the
clock.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence

import attrs

from pager.core.canonical import same_message
from pager.formats.base import RenderHints

__all__ = ["RecallHit", "RecallSource", "ScheduleResult", "Scheduler"]


@attrs.frozen(slots=True)
class RecallSource:
    """Where a page from beyond this session's history comes from, as the recall block labels it.

    The facade fills it only for pages the session may read (``pager.core.pools``).
    """

    session: str
    handle: str
    kind: str
    step: int
    path: str | None = None
    pool: str | None = None
    owner: str | None = None
    written: str | None = None  # the date it was stored (YYYY-MM-DD, UTC), when known
    terms: frozenset[str] = frozenset()  # its referable terms: the strength of the reference is judged on them


@attrs.frozen(slots=True)
class RecallHit:
    """A page the recall index found for this call's query, with its text (read by the facade).

    ``source`` is None for a page of this session's history, and says where
    the page comes from otherwise (another session's page in a pool this
    session may read, a note, pin or handoff kept beside a history).
    """

    page_id: int
    text: str
    source: RecallSource | None = None


@attrs.frozen(slots=True)
class ScheduleResult:
    """Everything one call decided: the prompt, its figures, and what to persist.

    ``messages`` are neutral messages; ``tools`` None means the request's tools
    go out unchanged. ``state`` is the scheduler's own state to save (None:
    nothing changed), ``events`` the transitions to record, both in the same
    transaction as the call's pages. ``demoted`` are the pages that left the
    prompt in this call; ``faults`` how many demoted pages it brought back.
    """

    messages: list[Mapping[str, Any]]
    tokens: int
    budget: int
    layers: dict[str, int]
    pages_kept: int
    pages_stubbed: int
    pages_dropped: int
    round: bool
    reason: str
    changed_from: int | None
    hints: RenderHints = RenderHints()
    tools: list[Mapping[str, Any]] | None = None
    recalled: tuple[int, ...] = ()
    handles: tuple[str, ...] = ()
    demoted: tuple[int, ...] = ()
    faults: int = 0
    notices: tuple[str, ...] = ()
    state: Mapping[str, Any] | None = None
    events: tuple[tuple[str, Any], ...] = ()
    flush_index: bool = False  # a round demoted pages: make them searchable now


class Scheduler(Protocol):
    """A scheduler: ``schedule`` takes the call's inputs and returns one result."""

    def schedule(self, call: Any) -> ScheduleResult: ...


def first_diff(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> int | None:
    """Return the index of the first message of ``new`` that differs from ``old`` (None if ``new`` extends it)."""
    for i, (a, b) in enumerate(zip(old, new)):
        if not same_message(a, b):  # a moved cache mark is not a change (pager.core.canonical)
            return i
    return len(new) if len(new) < len(old) else None

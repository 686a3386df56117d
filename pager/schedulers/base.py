"""What a scheduler is: ``schedule(inputs, state) -> result``, its state a value, no I/O.

Two schedulers ship: ``paging`` (the default: L1, a hot working set by heat,
recalled pages at the tail, demotion rounds in batches) and ``rollover``
(windows that grow verbatim and restart from L1 and a handoff). The facade
is blind to which one runs. For one call it

1. asks ``lookups(history, state)`` what to read (an index search, pages of
   other sessions the last prompt showed) and reads it;
2. gathers the ``CallInputs`` (the history mirror, pins and notes, those
   reads, the checkpoint files) and calls ``schedule(inputs, state)``;
3. persists ``result.state`` (through ``dump``, under the scheduler's
   ``key`` of the session's state row) with the call's pages and the
   result's events, in one transaction, and renders the neutral messages
   through the request's wire format.

A scheduler's state is a frozen value: it goes in and comes out, and a
scheduler object holds none between calls (so a request planned behind the
recorded branch just drops the result's state). A scheduler never touches
the store, the index, the network or the clock. A third mode is one module
with a class meeting ``Scheduler`` and one entry in ``pager.schedulers``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence, TypeVar

import attrs

from pager.core.canonical import same_message, same_objects
from pager.formats.base import RenderHints

if TYPE_CHECKING:  # pragma: no cover
    from pager.core.handoff import Handoff
    from pager.core.history import History

__all__ = [
    "CallInputs",
    "Checkpoint",
    "Declared",
    "Lookups",
    "RecallHit",
    "RecallRequest",
    "RecallSource",
    "ScheduleResult",
    "Scheduler",
]

S = TypeVar("S")


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
class RecallRequest:
    """The index search the scheduler wants run for this call (the facade runs it)."""

    terms: tuple[str, ...]
    k: int
    exclude: frozenset[int]
    min_score: float
    # no page of the history could be a candidate (``PagingScheduler._may_recall``): only pages beyond
    # it (other sessions', the pools') can, so where the index holds none the facade does not search
    beyond_only: bool = False


@attrs.frozen(slots=True)
class Lookups:
    """What the facade reads for one call before scheduling it.

    ``search``: the recall index search (None: no recall this call);
    ``foreign``: pages of other sessions the previous prompt showed, to show
    again if this session may still read them.
    """

    search: RecallRequest | None = None
    foreign: tuple[int, ...] = ()


@attrs.frozen(slots=True)
class Checkpoint:
    """The session's checkpoint files (``state_dir``) as a scheduler may show them.

    ``text``: the files now (the resume script's text; "" without a
    ``state_dir``). ``opened``: the files as read back when the session
    reopened ("" for a fresh directory): a card that must stay byte-stable
    carries these. ``unread``: the session reopened and the model has not
    been shown the files yet.
    """

    text: str = ""
    opened: str = ""
    unread: bool = False


@attrs.frozen(slots=True)
class CallInputs:
    """The inputs of one call, the same for every scheduler. ``history`` already holds the call's messages."""

    history: "History"
    messages: Sequence[Mapping[str, Any]]  # neutral messages, one per history row
    tools: Sequence[Mapping[str, Any]]  # the request's tools as they would be sent
    tools_tokens: int
    pins: Sequence[str]
    notes: Sequence[str]
    pin_terms: frozenset[str]
    prev_out: Sequence[Mapping[str, Any]] | None = None  # the previous prompt's messages, when kept
    demoted: frozenset[int] = frozenset()
    # None: the model can call expand. Else the request's own tool names (lower case -> as named):
    # only file reads made with one of them are stubbed, and the stub says to re-read with it
    reread: Mapping[str, str] | None = None
    checkpoint: Checkpoint = Checkpoint()
    hits: Sequence[RecallHit] = ()  # what ``Lookups.search`` found, best first
    kept: Sequence[RecallHit] = ()  # the ``Lookups.foreign`` pages this session may still read


@attrs.frozen(slots=True)
class Declared:
    """What recording a handoff did: the tool result, the new state, the events to store."""

    text: str
    state: Any
    events: tuple[tuple[str, Any], ...] = ()


@attrs.frozen(slots=True)
class ScheduleResult:
    """Everything one call decided: the prompt, its figures, and what to persist.

    ``messages`` are neutral messages; ``tools`` None means the request's tools
    go out unchanged. ``state`` is the scheduler's new state value (None:
    unchanged), ``events`` the transitions to record, both saved in the same
    transaction as the call's pages. ``demoted`` are the pages that left the
    prompt in this call; ``faults`` how many demoted pages it brought back.
    ``layout`` is the prompt's layout as the report log keeps it (None: the
    scheduler has none); ``checkpoint_read`` says the model has now been
    shown the reopened checkpoint files (``Checkpoint.unread`` is spent).
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
    state: Any = None
    events: tuple[tuple[str, Any], ...] = ()
    flush_index: bool = False  # a round demoted pages: make them searchable now
    # the newest page the round left out of the prompt in full: the index is committed only if it holds
    # pages up to it uncommitted (a commit, and the merges after it, cost ~40 ms of CPU at 50,000 pages);
    # 0: not known, commit whatever is pending
    hidden_upto: int = 0
    layout: Mapping[str, Any] | None = None
    checkpoint_read: bool = False


class Scheduler(Protocol[S]):
    """One mode of scheduling; see the module docstring for how the facade drives it.

    ``key`` names the entry of the session's state row that holds ``dump(state)``;
    ``legacy_setting``, when set, is the settings key prefix (``<prefix><session>``)
    where stores written before that row held it kept the state: read when the
    row has no ``key``. ``notes_shown`` is how many of the latest notes its
    card shows (older ones are recallable). ``guards_tools`` says whether
    ``blocked`` can refuse a harness's tool call.
    """

    key: str
    legacy_setting: str | None
    notes_shown: int
    guards_tools: bool

    def load(self, saved: Any) -> S:
        """Return the state ``dump`` wrote (None: a new session's)."""

    def dump(self, state: S) -> Any:
        """Return ``state`` as JSON-able data."""

    def lookups(self, history: "History", state: S) -> Lookups:
        """Return what the facade should read for this call."""

    def schedule(self, inputs: CallInputs, state: S) -> ScheduleResult:
        """Plan and render one call's prompt; the result carries the new state."""

    def blocked(self, tool_name: str, state: S) -> str | None:
        """Return the error text for a harness tool call the budget forbids now, else None."""

    def accept_handoff(self, arguments: Mapping[str, Any]) -> "Handoff":
        """Return the ``new_context`` handoff ``arguments`` describe; ``ToolError`` if not offered or malformed."""

    def declare(self, handoff: "Handoff", call_id: str, state: S) -> Declared:
        """Record ``handoff`` as the pending switch (phase one of two)."""

    def handoff(self, state: S) -> "Handoff | None":
        """Return the handoff the task-state card shows, if any."""


def first_diff(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> int | None:
    """Return the index of the first message of ``new`` that differs from ``old`` (None if ``new`` extends it)."""
    # between rounds the head is the previous prompt's very objects: skipped at C speed (issue 23)
    start = same_objects(old, new)
    for i in range(start, min(len(old), len(new))):
        if not same_message(old[i], new[i]):  # a moved cache mark is not a change (pager.core.canonical)
            return i
    return len(new) if len(new) < len(old) else None

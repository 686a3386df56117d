"""Rollover mode: windows that grow verbatim, end with a handoff, and start again from L1.

Theory of operation
-------------------
In rollover mode (``pager.open(..., mode="rollover")``) the facade calls
``RolloverController.assemble`` instead of the paging planner. The caller
still sends its whole history every call; the controller keeps a *window*
over it::

    L1 rows          system messages and the original first user message, verbatim
    [card]           the pinned goals, rendered when the window started
    [first message]  windows after the first: the handoff (or forced checkpoint)
    window rows      history rows from the window's start, verbatim, except
                     tool outputs over ``stub_threshold`` tokens, stubbed on arrival
    notices          reminder / fallback / pin notices, each at the row it was
                     injected before, its bytes stored and re-sent unchanged

Within a window the prompt is append-only: rows, stubs and notices never
change once emitted, so the provider's prompt cache holds. The only prefix
break is a rollover (or the caller rewinding its own history).

Every call the budget (``pager.budget.evaluate_budget``) decides, on the size
of the prompt about to be sent (messages and tool schemas):

- ``remind``: append the reminder at the tail, once per window;
- ``fallback``: append the fallback notice once, and prune the tools to
  ``new_context`` (added when the request lacks it) from then on; the
  harness asks ``Pager.intercept`` before running any of its own tools and
  gets an error result instead of running a pruned one;
- ``rollover``: the model declared a handoff (``declare``), or the prompt
  passed the hard limit, or the base limit after the fallback step.

A rollover is two-phase. ``declare`` (the ``new_context`` tool) only records
the intent (and an event in the store) and returns the confirmation; the
switch happens in the next ``assemble``, and only at a step boundary: while
the last assistant message has a tool call with no result yet (a parallel
sibling still running), the switch waits. The new window starts after the
last history row; its first message names the session and the handle of the
assistant message that called ``new_context`` (``message_uuid``), so the
model can ``expand`` it; the old window's pages stay in the store and the
recall index. A forced rollover renders a checkpoint (objective, open items
from the notes, notes, last human request) with no model call.

A prompt is never emitted over the hard limit. If the prompt is over it
while a tool call is still unanswered, the last assistant message and its
results are carried into the new window whole (pairing is never cut). Only
when L1 and the new window's first message alone do not fit is
``BudgetError`` raised.

The controller never touches the store: its window state (``to_state``) and
the events it records (a handoff intent, a rollover) go out in each result,
and the facade saves them in the store's settings table (key
``rollover:<session>``) in the same transaction as the call's pages, so a
reopened session keeps its window, its claimed notices and a pending handoff.
"""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import attrs

from pager.core import pairing
from pager.core.budget import (
    ROLLOVER_TOOL,
    BudgetConfig,
    BudgetState,
    blocked_text,
    evaluate_budget,
    fallback_text,
    hard_limit,
    prune_tools,
    reminder_text,
)
from pager.errors import BudgetError
from pager.core.handoff import (
    NEW_CONTEXT_TOOL,
    Handoff,
    confirmation_text,
    forced_checkpoint,
    render_checkpoint,
    render_new_window_message,
)
from pager.core.pages import TOOL_KINDS
from pager.core.render import card_text, stub_message
from pager.core.tokens import MESSAGE_OVERHEAD, TokenCounter, ToolTokens, content_text
from pager.formats.base import RenderHints
from pager.schedulers.base import ScheduleResult
from pager.schedulers.window import Intent, Notice, Window, handoff_from

if TYPE_CHECKING:  # pragma: no cover
    from pager.core.history import History
    from pager.options import Options

__all__ = ["SETTING_PREFIX", "RolloverController"]

SETTING_PREFIX = "rollover:"
NOTICE_ROLE = "user"  # like the card and recall blocks: every provider accepts it mid-conversation
# The objective and last human request of a forced checkpoint are capped so a
# pasted log cannot make the first message alone overflow the window; the
# full text stays one expand() away.
CHECKPOINT_TEXT_CHARS = 4_000
_STATE_VERSION = 1


# --------------------------------------------------------------------------- helpers


def _open_calls(messages: Sequence[Mapping[str, Any]]) -> tuple[int | None, tuple[str, ...]]:
    """Return (row of the last assistant message, its call ids still without a result)."""
    for a in range(len(messages) - 1, -1, -1):
        if messages[a].get("role") == "assistant":
            ids = pairing.call_ids(messages[a])
            answered = {str(m.get("tool_call_id")) for m in messages[a + 1 :] if m.get("role") == "tool"}
            return a, tuple(c for c in ids if c not in answered)
    return None, ()


def _cap(text: str, handle: str) -> str:
    if len(text) <= CHECKPOINT_TEXT_CHARS:
        return text
    return text[:CHECKPOINT_TEXT_CHARS] + f"\n… (cut; expand({handle!r}) for the whole message)"


# --------------------------------------------------------------------------- controller


class RolloverController:
    """Keep one session's rollover window, decide the budget actions, persist the state.

    The facade owns the history and the store; this class reads the history
    mirror and returns its state and events in each result for the facade to
    persist. It never touches the store or the recall index.
    """

    def __init__(
        self, options: "Options", counter: TokenCounter, session: str, state: Mapping[str, Any] | None = None
    ) -> None:
        self.options = options
        self.counter = counter
        self.session = session
        # BudgetConfig validates the reserves against the window (ConfigError at open)
        self.config = BudgetConfig(
            context_window=options.context_window,
            output_reserve=options.reserve,
            fallback_reserve=options.fallback_reserve,
            reminder_threshold=options.reminder_threshold,
        )
        self.workspace = Path(options.workspace) if options.workspace else None
        self.window = Window()
        self.pending: Intent | None = None
        self.last_handoff: Mapping[str, Any] | None = None
        self._count_tools = ToolTokens(counter)
        self._events: list[tuple[str, Any]] = []
        if state:
            self._load(state)

    # -- persistence -----------------------------------------------------------------

    def _load(self, data: Mapping[str, Any]) -> None:
        w = dict(data["window"])
        w["carried"] = tuple(w.get("carried", ()))
        w["notices"] = tuple(Notice(**n) for n in w.get("notices", ()))
        self.window = Window(**w)
        p = data.get("pending")
        self.pending = Intent(p["arguments"], p["call_id"]) if p else None
        self.last_handoff = data.get("last_handoff")

    def to_state(self) -> dict[str, Any]:
        """Return the controller's state as JSON-able data (what ``save`` writes)."""
        return {
            "version": _STATE_VERSION,
            "window": attrs.asdict(self.window, recurse=True),
            "pending": attrs.asdict(self.pending) if self.pending else None,
            "last_handoff": self.last_handoff,
        }

    def take_events(self) -> tuple[tuple[str, Any], ...]:
        """Return the events recorded since the last call, and forget them (the facade stores them)."""
        out, self._events = tuple(self._events), []
        return out

    # -- the tool side ------------------------------------------------------------------

    def declare(self, handoff: Handoff, call_id: str) -> str:
        """Record the model's handoff as the pending intent; return the tool result text.

        Phase one of two: nothing in the window changes here. A second call
        before the switch replaces the first (the latest handoff wins).
        """
        args = handoff.to_arguments()
        self.pending = Intent(args, call_id)
        self._events.append(("rollover_intent", {"call_id": call_id, **args}))
        return confirmation_text(handoff, self.session)

    @property
    def fallback_active(self) -> bool:
        """Whether the current window is in its fallback step (only ``new_context`` may run)."""
        return self.window.fallback_claimed

    def blocked(self, tool_name: str) -> str | None:
        """Return the error result text for a call to ``tool_name`` if the fallback step prunes it, else None."""
        if not self.fallback_active or tool_name == ROLLOVER_TOOL:
            return None
        return blocked_text(tool_name, (ROLLOVER_TOOL,))

    def latest_handoff(self) -> Handoff | None:
        """Return the pending handoff, else the one the current window started from."""
        if self.pending is not None:
            return handoff_from(self.pending.arguments)
        return handoff_from(self.last_handoff) if self.last_handoff else None

    # -- assemble -------------------------------------------------------------------------

    def _text_tokens(self, text: str) -> int:
        return MESSAGE_OVERHEAD + self.counter.count(text)

    def _stubbed(self, h: "History", r: int) -> bool:
        return h.kind[r] in TOOL_KINDS and h.tokens[r] > self.options.stub_threshold

    def _start(self, h: "History") -> int:
        return h.pinned_count() if self.window.start is None else self.window.start

    def _sync(self, h: "History") -> int | None:
        """Follow a caller that rewound its history; return the first changed row, or None."""
        w = self.window
        n = len(h)
        if w.upto == 0 or (w.upto <= n and h.page[w.upto - 1] == w.tail):
            return None
        # page ids grow along a branch: rows with ids up to the last one seen are the shared prefix
        common = bisect.bisect_right(h.page, w.tail)
        start = w.start
        anchor = w.anchor
        carried = tuple(p for p in w.carried if p in h.row_of and h.row_of[p] < common)
        if start is not None and start > common:
            start = common
            anchor = h.page[common - 1] if common else 0
        self.window = attrs.evolve(
            w, start=start, anchor=anchor, carried=carried,
            notices=tuple(x for x in w.notices if x.pos <= common),
            upto=min(w.upto, common), tail=h.page[common - 1] if common else 0,
        )
        return common

    def _measure(self, h: "History", open_calls: int) -> tuple[dict[str, int], int, int]:
        """Return the window's tokens per layer, rows kept verbatim and rows stubbed."""
        w = self.window
        n = len(h)
        pinned = min(h.pinned_count(), n)
        layers = {"l1": 0, "handoff": w.first_tokens, "l2": 0, "stubs": 0, "l3": 0, "notices": 0}
        layers["l1"] = sum(h.tokens[:pinned]) + sum(h.tokens[h.row_of[p]] for p in w.carried)
        layers["l1"] += w.card_tokens if w.card else 0
        layers["notices"] = sum(x.tokens for x in w.notices)
        kept, stubbed = pinned + len(w.carried), 0
        for r in range(self._start(h), n):
            if self._stubbed(h, r):
                layers["stubs"] += h.stub_tokens[r]
                stubbed += 1
            else:
                layers["l2"] += h.tokens[r]
                kept += 1
        if open_calls:  # pairing.normalize answers them with a synthetic result
            layers["l2"] += open_calls * self._text_tokens(pairing.SYNTHETIC_RESULT)
        return layers, kept, stubbed

    def _emit(
        self, h: "History", messages: Sequence[Mapping[str, Any]]
    ) -> tuple[list[Mapping[str, Any]], list[str], int | None]:
        """Render the window; return (messages, handles shown, index of the first synthetic result)."""
        w = self.window
        n = len(h)
        out: list[Mapping[str, Any]] = list(messages[: min(h.pinned_count(), n)])
        out.extend(messages[h.row_of[p]] for p in w.carried)
        if w.card:
            out.append({"role": "user", "content": w.card})
        if w.first:
            out.append({"role": "user", "content": w.first})
        by_pos: dict[int, list[Notice]] = {}
        for x in w.notices:
            by_pos.setdefault(x.pos, []).append(x)
        handles: list[str] = []
        for r in range(self._start(h), n + 1):
            out.extend({"role": NOTICE_ROLE, "content": x.text} for x in by_pos.get(r, ()))
            if r == n:
                break
            msg = messages[r]
            if self._stubbed(h, r):
                handles.append(h.handle[r])
                out.append(stub_message(msg, h.tokens[r], h.handle[r], h.path[r]))
            else:
                out.append(msg)
        normalized = pairing.normalize(out)
        ours = {id(m) for m in out}
        synthetic = next((i for i, m in enumerate(normalized) if id(m) not in ours), None)
        return normalized, handles, synthetic

    def _objective(self, h: "History", messages: Sequence[Mapping[str, Any]], pins: Sequence[str]) -> str:
        if pins:
            return "\n".join(pins)
        if h.first_user is None:
            return ""
        return _cap(content_text(messages[h.first_user].get("content")), h.handle[h.first_user])

    def _last_human(self, h: "History", messages: Sequence[Mapping[str, Any]], end: int) -> str:
        for r in range(end - 1, -1, -1):
            if h.kind[r] == "user":
                return _cap(content_text(messages[r].get("content")), h.handle[r])
        return ""

    def _roll(
        self,
        h: "History",
        messages: Sequence[Mapping[str, Any]],
        pins: Sequence[str],
        notes: Sequence[str],
        reason: str,
        end: int,
    ) -> tuple[int, ...]:
        """Start a new window at row ``end``; return the page ids that left the prompt."""
        old = self.window
        old_start = self._start(h)
        pinned = h.pinned_count()
        keep_notes = list(notes[-self.options.max_notes :]) if self.options.max_notes else []
        # a declared handoff beats a checkpoint even when the host forced the switch
        intent = self.pending
        if intent is not None:
            row = h.call_rows.get(intent.call_id)
            trigger = h.handle[row] if row is not None else intent.call_id
            handoff = handoff_from(intent.arguments)
            first = render_new_window_message(self.session, trigger, handoff, keep_notes)
            payload: dict[str, Any] = {"handoff": dict(intent.arguments)}
            self.last_handoff = intent.arguments
        else:
            trigger = h.handle[end - 1] if end > 0 else ""
            cp = forced_checkpoint(self._objective(h, messages, pins), keep_notes,
                                   self._last_human(h, messages, end))
            first = render_checkpoint(self.session, trigger, cp)
            payload = {"checkpoint": attrs.asdict(cp)}
            # a forced window has no handoff: the next step comes from the notes now
            self.last_handoff = None
        carried = tuple(
            h.page[r] for r in range(pinned, end) if h.kind[r] == "system"
        )
        card = card_text(list(pins), [])
        self.window = Window(
            generation=old.generation + 1,
            start=end,
            anchor=h.page[end - 1] if end > 0 else 0,
            carried=carried,
            card=card,
            card_tokens=self._text_tokens(card) if card else 0,
            first=first,
            first_tokens=self._text_tokens(first),
            pins_shown=len(pins),
            upto=old.upto,
            tail=old.tail,
            reason=reason,
            trigger=trigger,
        )
        self.pending = None
        self._events.append((
            "rollover",
            {"generation": self.window.generation, "reason": reason, "trigger": trigger,
             "start": end, **payload},
        ))
        carried_set = set(carried)
        return tuple(
            h.page[r] for r in range(max(old_start, pinned), end) if h.page[r] not in carried_set
        )

    def _notice(self, kind: str, text: str, pos: int) -> None:
        n = Notice(pos=pos, kind=kind, text=text, tokens=self._text_tokens(text))
        self.window = attrs.evolve(self.window, notices=(*self.window.notices, n))

    def assemble(
        self,
        h: "History",
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        pins: Sequence[str],
        notes: Sequence[str],
    ) -> ScheduleResult:
        """Build the prompt for the next model call from the caller's whole history.

        ``h`` is the facade's history mirror, already holding ``messages``;
        ``tools`` the request's tools as they would be sent. Raises
        ``BudgetError`` when L1 and the first message of a new window alone
        do not fit the hard limit.
        """
        forked = self._sync(h)
        n = len(h)
        hard = hard_limit(self.config)
        if self.window.card is None:
            # the first window's card is fixed when it opens, like every later one's
            card = card_text(list(pins), [])
            self.window = attrs.evolve(
                self.window, card=card, card_tokens=self._text_tokens(card) if card else 0,
                pins_shown=len(pins),
            )
        last_assistant, open_ids = _open_calls(messages)
        boundary = not open_ids
        tools_tokens = self._count_tools(tools)
        changed: list[int] = []
        if forked is not None:
            changed.append(0)  # conservative: a rewind is rare and re-bills anyway
        if self.window.synthetic_at is not None:
            changed.append(self.window.synthetic_at)
        labels: list[str] = []
        demoted: tuple[int, ...] = ()
        reason = ""

        def size() -> int:
            layers, _, _ = self._measure(h, len(open_ids))
            return sum(layers.values()) + tools_tokens

        def roll(why: str, end: int) -> None:
            nonlocal demoted, reason
            old = self.window
            demoted += self._roll(h, messages, pins, notes, why, end)
            # L1 rows and the carried system rows stay; the first difference is after them
            changed.append(min(h.pinned_count(), n) + len(old.carried))
            reason = f"rollover: {why}"
            labels.append(f"rollover:{why}")
            if size() > hard:
                raise BudgetError(size() - tools_tokens, hard - tools_tokens,
                                  "L1 and the new window's first message do not fit")

        total = size()
        action = evaluate_budget(self.config, BudgetState(
            current_tokens=total,
            explicit_rollover_declared=self.pending is not None and boundary,
            reminder_claimed=self.window.reminder_claimed,
            fallback_claimed=self.window.fallback_claimed,
        ))
        if action.type == "rollover":
            if boundary:
                roll(action.reason or "hard-limit", n)
            elif total > hard:
                # over the limit while a call is still running: carry its unit whole
                if last_assistant is None or last_assistant <= self._start(h):
                    raise BudgetError(total - tools_tokens, hard - tools_tokens,
                                      "the unit with the unanswered tool call alone does not fit")
                roll(action.reason or "hard-limit", last_assistant)
            # else: not at a step boundary yet; the switch waits for the next call
            if reason:
                # the new window gets its own decision, never a second rollover
                action = evaluate_budget(self.config, BudgetState(size()))
        if boundary and action.type in ("remind", "fallback"):
            now = BudgetState(size())
            if action.type == "remind":
                self._notice("remind", reminder_text(self.config, now), n)
                self.window = attrs.evolve(self.window, reminder_claimed=True)
            else:
                self._notice("fallback", fallback_text(self.config, now), n)
                self.window = attrs.evolve(self.window, fallback_claimed=True)
            labels.append(action.type)
            reason = reason or action.type
        if boundary and len(pins) > self.window.pins_shown:
            # a pin added mid-window is shown once at the tail; the card is fixed until the next window
            added = "\n".join(f"- {p}" for p in pins[self.window.pins_shown :])
            self._notice("pin", f"[pager] Pinned goal(s) added by the harness:\n{added}", n)
            self.window = attrs.evolve(self.window, pins_shown=len(pins))
            labels.append("pin")
        out_tools: list[Mapping[str, Any]] | None = None
        if self.window.fallback_claimed:
            # the fallback step: only new_context stays callable (added when the request lacks it)
            out_tools = prune_tools(tools) or [NEW_CONTEXT_TOOL]
        tools_sent = tools_tokens if out_tools is None else self._count_tools(out_tools)
        if size() - tools_tokens + tools_sent > hard:
            if reason.startswith("rollover") or not boundary:
                raise BudgetError(size() - tools_tokens, hard - tools_sent,
                                  "L1, the first message and the budget notice do not fit")
            # a notice tipped the prompt over the limit: roll over instead
            roll("hard-limit", n)
            out_tools, tools_sent = None, tools_tokens
        layers, kept, stubbed = self._measure(h, len(open_ids))
        msgs, handles, synthetic = self._emit(h, messages)
        prev_len = self.window.emitted
        self.window = attrs.evolve(self.window, upto=n, tail=h.page[n - 1] if n else 0,
                                   synthetic_at=synthetic, emitted=len(msgs))
        layers["tools"] = tools_sent
        changed_from = min(changed) if changed else None
        l1 = min(h.pinned_count(), n) + len(self.window.carried) + (1 if self.window.card else 0)
        return ScheduleResult(
            messages=msgs,
            tools=out_tools,
            tokens=sum(layers.values()),
            budget=hard,
            layers=layers,
            pages_kept=kept,
            pages_stubbed=stubbed,
            pages_dropped=n - kept - stubbed,
            round=reason.startswith("rollover"),
            reason=reason,
            changed_from=changed_from,
            # a window grows verbatim: its first message closes the part that never changes
            hints=RenderHints(
                l1=l1, stable=l1 + (1 if self.window.first else 0),
                previous=changed_from if changed_from is not None else (prev_len or None),
            ),
            notices=tuple(labels),
            handles=tuple(handles),
            demoted=demoted,
            state=self.to_state(),
            events=self.take_events(),
        )

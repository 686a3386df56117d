"""Rollover mode: windows that grow verbatim, end with a handoff, and start again from L1.

Theory of operation
-------------------
In rollover mode (``pager.open(..., mode="rollover")``) the facade's
scheduler is ``RolloverScheduler`` instead of the paging planner. The caller
still sends its whole history every call; the scheduler keeps a *window*
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

The scheduler never touches the store and keeps no state between calls: its
state (``RolloverState``: the window, a pending handoff, the handoffs so far)
comes in with each call and goes out in the result with the events it
recorded (a handoff intent, a rollover). The facade saves both in the
session's state row (key ``rollover``) in the same transaction as the call's
pages, so a reopened session keeps its window, its claimed notices and a
pending handoff. Stores written before that row held it kept it in the
settings table under ``rollover:<session>``; it is read from there once.

One call is worked out by a ``_WindowCall``: a copy of the state for that
call alone, changed step by step (sync with a rewound history, open the
first card, the budget decision, the notices, the tools) and returned as the
new state.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import attrs

from pager.core.budget import (
    ROLLOVER_TOOL,
    BudgetAction,
    BudgetConfig,
    BudgetState,
    blocked_text,
    evaluate_budget,
    fallback_text,
    hard_limit,
    prune_tools,
    reminder_text,
)
from pager.core.handoff import NEW_CONTEXT_TOOL, Handoff, confirmation_text, parse_handoff
from pager.core.promotion import check_promotion
from pager.core.tokens import TokenCounter, ToolTokens
from pager.errors import BudgetError
from pager.formats.base import RenderHints
from pager.schedulers.base import CallInputs, Declared, Lookups, ScheduleResult
from pager.schedulers.window import Intent, RolloverState, handoff_from
from pager.schedulers.windowing import WindowOps, open_calls

if TYPE_CHECKING:  # pragma: no cover
    from pager.core.history import History
    from pager.options import Options

__all__ = ["SETTING_PREFIX", "RolloverScheduler"]

# where stores written before the state row held the rollover state kept it: settings["rollover:<session>"]
SETTING_PREFIX = "rollover:"


class RolloverScheduler:
    """Schedule one session's calls in rollover mode: one window at a time (see the module docstring)."""

    key = "rollover"
    legacy_setting = SETTING_PREFIX
    notes_shown = 0  # a window's card shows pins only: every note is recallable
    guards_tools = True  # the fallback step lets only new_context run

    def __init__(self, options: "Options", counter: TokenCounter, session: str) -> None:
        self.options = options
        self.counter = counter
        self.session = session
        # BudgetConfig validates the reserves against the window (ConfigError at open)
        self.config = BudgetConfig(
            context_window=options.context_window,
            output_reserve=options.reserve,
            fallback_reserve=options.fallback_reserve,
            reminder_threshold=options.reminder_threshold,
            effective_window_percent=options.effective_window_percent,
            auto_compact_ratio=options.auto_compact_ratio,
            notice_percents=tuple(options.notice_percents),
            max_steps=options.max_steps,
        )
        self.workspace = Path(options.workspace) if options.workspace else None
        self.count_tools = ToolTokens(counter)

    # -- state ---------------------------------------------------------------------------

    def load(self, saved: Mapping[str, Any] | None) -> RolloverState:
        """Return the state ``dump`` wrote (None: a new session's)."""
        return RolloverState.from_data(saved)

    def dump(self, state: RolloverState) -> dict[str, Any]:
        """Return ``state`` as JSON-able data."""
        return state.to_data()

    def lookups(self, history: "History", state: RolloverState) -> Lookups:
        """Return no reads: a window recalls nothing (its pages are one ``expand`` away)."""
        return Lookups()

    # -- the tool side ------------------------------------------------------------------

    def accept_handoff(self, arguments: Mapping[str, Any]) -> Handoff:
        """Return the handoff ``arguments`` describe; ``ToolError`` for a malformed one or a file outside the workspace."""
        return parse_handoff(arguments, self.workspace)

    def declare(self, handoff: Handoff, call_id: str, state: RolloverState) -> Declared:
        """Record the model's handoff as the pending intent; return the tool result text and the new state.

        Phase one of two: nothing in the window changes here. A second call
        before the switch replaces the first (the latest handoff wins).
        """
        check_promotion(handoff, state.inferences, state.triggers)
        args = handoff.to_arguments()
        return Declared(
            confirmation_text(handoff, self.session),
            attrs.evolve(state, pending=Intent(args, call_id)),
            (("rollover_intent", {"call_id": call_id, **args}),),
        )

    def blocked(self, tool_name: str, state: RolloverState) -> str | None:
        """Return the error result text for a call to ``tool_name`` if the fallback step prunes it, else None."""
        if not state.window.fallback_claimed or tool_name == ROLLOVER_TOOL:
            return None
        return blocked_text(tool_name, (ROLLOVER_TOOL,))

    def handoff(self, state: RolloverState) -> Handoff | None:
        """Return the pending handoff, else the one the current window started from."""
        if state.pending is not None:
            return handoff_from(state.pending.arguments)
        return handoff_from(state.last_handoff) if state.last_handoff else None

    # -- schedule -------------------------------------------------------------------------

    def schedule(self, inputs: CallInputs, state: RolloverState) -> ScheduleResult:
        """Build the prompt for the next model call from the caller's whole history.

        ``inputs.history`` is the facade's history mirror, already holding the
        call's messages. Raises ``BudgetError`` when L1 and the first message
        of a new window alone do not fit the hard limit.
        """
        return _WindowCall(self, inputs, state).run()


class _WindowCall(WindowOps):
    """One call of the rollover scheduler: the state copied in, changed step by step, handed back."""

    def __init__(self, scheduler: RolloverScheduler, inputs: CallInputs, state: RolloverState) -> None:
        self.options = scheduler.options
        self.counter = scheduler.counter
        self.session = scheduler.session
        self.config = scheduler.config
        self._count_tools = scheduler.count_tools
        self.window = state.window
        self.pending = state.pending
        self.last_handoff = state.last_handoff
        self.inferences = state.inferences
        self.triggers = state.triggers
        self.state_text = inputs.checkpoint.text  # a new window's card carries the latest files
        self.resume_pending = inputs.checkpoint.unread  # a reopened session: show them once, at the tail
        self._events: list[tuple[str, Any]] = []
        self.inputs = inputs
        self.h = inputs.history
        self.n = len(inputs.history)
        self.hard = hard_limit(self.config)
        self.tools_tokens = inputs.tools_tokens
        self.last_assistant, self.open_ids = open_calls(inputs.messages)
        self.boundary = not self.open_ids
        self.labels: list[str] = []
        self.changed: list[int] = []  # prompt positions that changed since the last call
        self.demoted: tuple[int, ...] = ()
        self.reason = ""

    def state(self) -> RolloverState:
        return RolloverState(self.window, self.pending, self.last_handoff, self.inferences, self.triggers)

    def run(self) -> ScheduleResult:
        forked = self._sync(self.h)
        if self.window.card is None:
            self._open_first_card()
        if forked is not None:
            self.changed.append(0)  # conservative: a rewind is rare and re-bills anyway
        if self.window.synthetic_at is not None:
            self.changed.append(self.window.synthetic_at)
        action = self._decide()
        if self.boundary:
            self._give_notices(action)
        out_tools, tools_sent = self._tools_sent()
        return self._result(out_tools, tools_sent)

    def size(self) -> int:
        """Return the prompt's tokens as it stands now, tools included."""
        layers, _, _ = self._measure(self.h, len(self.open_ids))
        return sum(layers.values()) + self.tools_tokens

    def _open_first_card(self) -> None:
        # the first window's card is fixed when it opens, like every later one's
        pins = self.inputs.pins
        guard = self._guard(self.h, pins, self.window.carried)
        self.window = attrs.evolve(
            self.window, card=guard.card, card_tokens=self._text_tokens(guard.card) if guard.card else 0,
            pins_shown=len(pins), moved=guard.moved,
        )
        self.labels.extend(f"l1-moved:{ref}" for ref in guard.moved)
        self.resume_pending = False  # the card already carries the state files

    def roll(self, why: str, end: int) -> None:
        """Start a new window at row ``end``; ``BudgetError`` if it does not fit the hard limit."""
        old = self.window
        i = self.inputs
        self.demoted += self._roll(self.h, i.messages, i.pins, i.notes, why, end)
        # L1 rows and the carried system rows stay; the first difference is after them
        self.changed.append(min(self.h.pinned_count(), self.n) + len(old.carried))
        self.reason = f"rollover: {why}"
        self.labels.append(f"rollover:{why}")
        self.labels.extend(f"l1-moved:{ref}" for ref in self.window.moved)
        if self.size() > self.hard:
            raise BudgetError(self.size() - self.tools_tokens, self.hard - self.tools_tokens,
                              "L1 and the new window's first message do not fit")

    def _decide(self) -> BudgetAction:
        """Take the budget's decision on the prompt as it stands; roll over when it says so and may."""
        total = self.size()
        action = evaluate_budget(self.config, BudgetState(
            current_tokens=total,
            explicit_rollover_declared=self.pending is not None and self.boundary,
            reminder_claimed=self.window.reminder_claimed,
            fallback_claimed=self.window.fallback_claimed,
            steps=self._steps(self.h),
        ))
        if action.type != "rollover":
            return action
        if self.boundary:
            self.roll(action.reason or "hard-limit", self.n)
        elif total > self.hard:
            # over the limit while a call is still running: carry its unit whole
            if self.last_assistant is None or self.last_assistant <= self._start(self.h):
                raise BudgetError(total - self.tools_tokens, self.hard - self.tools_tokens,
                                  "the unit with the unanswered tool call alone does not fit")
            self.roll(action.reason or "hard-limit", self.last_assistant)
        # else: not at a step boundary yet; the switch waits for the next call
        if self.reason:
            # the new window gets its own decision, never a second rollover
            action = evaluate_budget(self.config, BudgetState(self.size()))
        return action

    def _give_notices(self, action: BudgetAction) -> None:
        """Append what this step boundary owes: the budget's notice, the window's, a new pin's."""
        n = self.n
        if action.type in ("remind", "fallback"):
            now = BudgetState(self.size())
            if action.type == "remind":
                self._notice("remind", reminder_text(self.config, now), n)
                self.window = attrs.evolve(self.window, reminder_claimed=True)
            else:
                self._notice("fallback", fallback_text(self.config, now), n)
                self.window = attrs.evolve(self.window, fallback_claimed=True)
            self.labels.append(action.type)
            self.reason = self.reason or action.type
        self.labels.extend(self._announce(self.h, self.size, self.hard))
        pins = self.inputs.pins
        if len(pins) > self.window.pins_shown:
            # a pin added mid-window is shown once at the tail; the card is fixed until the next window
            added = "\n".join(f"- {p}" for p in pins[self.window.pins_shown :])
            self._notice("pin", f"[pager] Pinned goal(s) added by the harness:\n{added}", n)
            self.window = attrs.evolve(self.window, pins_shown=len(pins))
            self.labels.append("pin")

    def _tools_sent(self) -> tuple[list[Mapping[str, Any]] | None, int]:
        """Return the tools to send (None: the request's) and their tokens; roll over if a notice tipped the prompt."""
        out_tools: list[Mapping[str, Any]] | None = None
        if self.window.fallback_claimed:
            # the fallback step: only new_context stays callable (added when the request lacks it)
            out_tools = prune_tools(self.inputs.tools) or [NEW_CONTEXT_TOOL]
        tools_sent = self.tools_tokens if out_tools is None else self._count_tools(out_tools)
        if self.size() - self.tools_tokens + tools_sent > self.hard:
            if self.reason.startswith("rollover") or not self.boundary:
                raise BudgetError(self.size() - self.tools_tokens, self.hard - tools_sent,
                                  "L1, the first message and the budget notice do not fit")
            # a notice tipped the prompt over the limit: roll over instead
            self.roll("hard-limit", self.n)
            out_tools, tools_sent = None, self.tools_tokens
        return out_tools, tools_sent

    def _result(self, out_tools: list[Mapping[str, Any]] | None, tools_sent: int) -> ScheduleResult:
        h, n = self.h, self.n
        layers, kept, stubbed = self._measure(h, len(self.open_ids))
        msgs, handles, synthetic = self._emit(h, self.inputs.messages)
        prev_len = self.window.emitted
        self.window = attrs.evolve(self.window, upto=n, tail=h.page[n - 1] if n else 0,
                                   synthetic_at=synthetic, emitted=len(msgs))
        layers["tools"] = tools_sent
        changed_from = min(self.changed) if self.changed else None
        l1 = min(h.pinned_count(), n) + len(self.window.carried) + (1 if self.window.card else 0)
        return ScheduleResult(
            messages=msgs,
            tools=out_tools,
            tokens=sum(layers.values()),
            budget=self.hard,
            layers=layers,
            pages_kept=kept,
            pages_stubbed=stubbed,
            pages_dropped=n - kept - stubbed,
            round=self.reason.startswith("rollover"),
            reason=self.reason,
            changed_from=changed_from,
            # a window grows verbatim: its first message closes the part that never changes
            hints=RenderHints(
                l1=l1, stable=l1 + (1 if self.window.first else 0),
                previous=changed_from if changed_from is not None else (prev_len or None),
            ),
            notices=tuple(self.labels),
            handles=tuple(handles),
            demoted=self.demoted,
            state=self.state(),
            events=tuple(self._events),
            checkpoint_read=not self.resume_pending,
        )

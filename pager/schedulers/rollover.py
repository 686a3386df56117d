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

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import attrs

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
from pager.core.handoff import NEW_CONTEXT_TOOL, Handoff, confirmation_text
from pager.core.promotion import check_promotion
from pager.core.tokens import TokenCounter, ToolTokens
from pager.errors import BudgetError
from pager.formats.base import RenderHints
from pager.schedulers.base import ScheduleResult
from pager.schedulers.window import Intent, Notice, Window, handoff_from
from pager.schedulers.windowing import WindowOps, open_calls

if TYPE_CHECKING:  # pragma: no cover
    from pager.core.history import History
    from pager.options import Options

__all__ = ["SETTING_PREFIX", "RolloverController"]

SETTING_PREFIX = "rollover:"
_STATE_VERSION = 1


# --------------------------------------------------------------------------- controller


class RolloverController(WindowOps):
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
            effective_window_percent=options.effective_window_percent,
            auto_compact_ratio=options.auto_compact_ratio,
            notice_percents=tuple(options.notice_percents),
            max_steps=options.max_steps,
        )
        self.workspace = Path(options.workspace) if options.workspace else None
        self.window = Window()
        self.pending: Intent | None = None
        self.last_handoff: Mapping[str, Any] | None = None
        # inferences of every committed handoff: never accepted back as requirements
        self.inferences: tuple[str, ...] = ()
        self.triggers: tuple[str, ...] = ()  # message_uuids of earlier handoffs
        # the checkpoint files read back (``state_dir``), set by the facade: the next card carries them
        self.state_text = ""
        self.resume_pending = False  # a reopened session: show the state files once, at the tail
        self._count_tools = ToolTokens(counter)
        self._events: list[tuple[str, Any]] = []
        if state:
            self._load(state)

    # -- persistence -----------------------------------------------------------------

    def _load(self, data: Mapping[str, Any]) -> None:
        w = dict(data["window"])
        w["carried"] = tuple(w.get("carried", ()))
        w["notices"] = tuple(Notice(**n) for n in w.get("notices", ()))
        for key in ("notices_claimed", "moved"):
            w[key] = tuple(w.get(key, ()))
        if "opened" not in w:
            w["opened"] = True  # a window saved before the notice existed is not announced again
        self.window = Window(**w)
        self.inferences = tuple(data.get("inferences", ()))
        self.triggers = tuple(data.get("triggers", ()))
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
            "inferences": list(self.inferences),
            "triggers": list(self.triggers),
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
        check_promotion(handoff, self.inferences, self.triggers)
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
        labels: list[str] = []
        if self.window.card is None:
            # the first window's card is fixed when it opens, like every later one's
            guard = self._guard(h, pins, self.window.carried)
            self.window = attrs.evolve(
                self.window, card=guard.card, card_tokens=self._text_tokens(guard.card) if guard.card else 0,
                pins_shown=len(pins), moved=guard.moved,
            )
            labels.extend(f"l1-moved:{ref}" for ref in guard.moved)
            self.resume_pending = False  # the card already carries the state files
        last_assistant, open_ids = open_calls(messages)
        boundary = not open_ids
        tools_tokens = self._count_tools(tools)
        changed: list[int] = []
        if forked is not None:
            changed.append(0)  # conservative: a rewind is rare and re-bills anyway
        if self.window.synthetic_at is not None:
            changed.append(self.window.synthetic_at)
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
            labels.extend(f"l1-moved:{ref}" for ref in self.window.moved)
            if size() > hard:
                raise BudgetError(size() - tools_tokens, hard - tools_tokens,
                                  "L1 and the new window's first message do not fit")

        total = size()
        action = evaluate_budget(self.config, BudgetState(
            current_tokens=total,
            explicit_rollover_declared=self.pending is not None and boundary,
            reminder_claimed=self.window.reminder_claimed,
            fallback_claimed=self.window.fallback_claimed,
            steps=self._steps(h),
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
        if boundary:
            labels.extend(self._announce(h, size, hard))
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

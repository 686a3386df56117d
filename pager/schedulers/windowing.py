"""Rollover windows: measuring, emitting, opening and announcing them. One call's base class.

``WindowOps`` holds what one call of ``pager.schedulers.rollover``
(``_WindowCall``) does to its window besides the budget decision: follow a caller
that rewound its history, measure and render the window, start a new one
(``_roll``: the model's handoff or a forced checkpoint, and a card under the
L1 cap carrying the checkpoint files), and append the notices a window is
owed at a step boundary (``_announce``: window-open, resume, usage). Pure,
like the scheduler: it reads the history mirror, changes its own copy of the
state and records events for the facade to persist, never touching the store.
"""

from __future__ import annotations

import bisect
import hashlib
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import attrs

from pager.core import pairing
from pager.core.budget import BudgetConfig, BudgetState, due_notice, usage_text, window_open_text
from pager.core.handoff import forced_checkpoint, render_checkpoint, render_new_window_message
from pager.core.l1guard import GuardResult, cut_text, guard_card, items
from pager.core.pages import TOOL_KINDS
from pager.core.render import stub_message
from pager.core.tokens import MESSAGE_OVERHEAD, TokenCounter, content_text
from pager.schedulers.window import Intent, Notice, Window, handoff_from

if TYPE_CHECKING:  # pragma: no cover
    from pager.core.history import History
    from pager.options import Options

__all__ = ["CHECKPOINT_TEXT_CHARS", "NOTICE_ROLE", "WindowOps", "open_calls"]

NOTICE_ROLE = "user"  # like the card and recall blocks: every provider accepts it mid-conversation
# The objective and last human request of a forced checkpoint are capped so a
# pasted log cannot make the first message alone overflow the window; the
# full text stays one expand() away.
CHECKPOINT_TEXT_CHARS = 4_000

# --------------------------------------------------------------------------- helpers


def open_calls(messages: Sequence[Mapping[str, Any]]) -> tuple[int | None, tuple[str, ...]]:
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


class WindowOps:
    """The window half of one rollover call (see the module docstring)."""

    options: "Options"
    counter: TokenCounter
    session: str
    config: BudgetConfig
    window: Window
    pending: Intent | None
    last_handoff: Mapping[str, Any] | None
    inferences: tuple[str, ...]
    triggers: tuple[str, ...]
    state_text: str
    resume_pending: bool
    _events: list[tuple[str, Any]]

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
            # committed: its inferences stay inferences in every later window
            self.inferences = (*self.inferences, *(i for i in handoff.inferences if i not in self.inferences))
            self.triggers = (*self.triggers, trigger)
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
        guard = self._guard(h, pins, carried)
        card = guard.card
        self.window = Window(
            generation=old.generation + 1,
            start=end,
            anchor=h.page[end - 1] if end > 0 else 0,
            carried=carried,
            card=card,
            card_tokens=self._text_tokens(card) if card else 0,
            moved=guard.moved,
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
        self._events.append(("notice", {"kind": kind, "generation": self.window.generation}))

    def _guard(self, h: "History", pins: Sequence[str], carried: Sequence[int]) -> GuardResult:
        """Return the new window's card under the L1 cap: pins (oldest move out first) and the state files."""
        pinned = min(h.pinned_count(), len(h))
        fixed = sum(h.tokens[:pinned]) + sum(h.tokens[h.row_of[p]] for p in carried)
        if not pins and not self.state_text:
            return guard_card(fixed, [], [], 0, self.counter.count)
        return guard_card(
            fixed, items("pin", pins), [], self.options.l1_cap, self.counter.count,
            overhead=MESSAGE_OVERHEAD, state=self.state_text,
        )

    def window_id(self) -> str:
        """Return the current window's id: its number and a digest of the session and its start."""
        w = self.window
        digest = hashlib.sha1(f"{self.session}\0{w.generation}\0{w.anchor}".encode()).hexdigest()[:8]
        return f"w{w.generation + 1}-{digest}"

    def _steps(self, h: "History") -> int:
        return sum(1 for r in range(self._start(h), len(h)) if h.role[r] == "assistant")

    def _announce(self, h: "History", size: Callable[[], int], hard: int) -> list[str]:
        """Append the notices the window is owed at this step boundary; return their labels.

        The window-open notice (once per window, with its id and the tokens
        left), the checkpoint files once after a reopen, and the highest usage
        threshold crossed and not yet given (25 / 50 / 75 % by default).
        """
        labels: list[str] = []
        if not self.window.opened:
            # the window-open notice: which window, its id, the tokens left
            now = size()
            self.window = attrs.evolve(self.window, opened=True, prefix_tokens=now)
            if self.options.window_notice:
                wid = self.window_id()
                self._notice("window", window_open_text(
                    self.config, BudgetState(now), self.window.generation + 1, wid, self.session), len(h))
                self._events.append(("window_opened", {"generation": self.window.generation, "id": wid,
                                                       "tokens_left": hard - now}))
                labels.append("window")
        if self.resume_pending and self.state_text:
            # a reopened session: the checkpoint files once, at the tail (the window's prefix stays)
            # as big as L1 may be, no bigger: the notice is re-sent on every call of the window
            text = self.state_text
            if self.options.l1_cap:
                text = cut_text(text, self.options.l1_cap, self.counter.count, "pager state resume")
            self._notice("resume", "[pager] Checkpoint files of this task, read back on reopen:\n" + text, len(h))
            labels.append("resume")
        self.resume_pending = False
        if self.config.notice_percents:
            w = self.window
            pct = due_notice(self.config, BudgetState(size(), prefix_tokens=w.prefix_tokens,
                                                      notices_claimed=w.notices_claimed),
                             self.options.body_after_prefix)
            if pct is not None:
                self._notice(f"usage-{pct}", usage_text(self.config, BudgetState(size()), pct), len(h))
                claimed = (*w.notices_claimed, *(q for q in self.config.notice_percents
                                                 if q <= pct and q not in w.notices_claimed))
                self.window = attrs.evolve(self.window, notices_claimed=claimed)
                labels.append(f"usage-{pct}")
        return labels

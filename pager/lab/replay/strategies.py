"""Prompt-building strategies replayed side by side: the baselines and pager.

A strategy gets, for each assistant message of a session, the history before
it and returns the messages of the prompt it would send. The protocol:

- ``name``: shown in tables and charts;
- ``budget``: the token ceiling it promises (``None``: no promise);
- ``pins_l1``: whether the system message(s) and first user message must be
  in every prompt (checked as an invariant);
- ``reset(session_header)``: start a session;
- ``build(history) -> messages``: the prompt for the next assistant message.
  It must not mutate ``history`` or its messages;
- optionally ``close()`` (end of session) and ``layers()`` (tokens per layer
  of the last build, for the layer chart).

The baselines are what users have today, pure and fast:

- ``FullResend``: the whole history, every call.
- ``SlidingWindow``: the system message(s), then the most recent messages
  that fit ``budget`` tokens, newest first, stopping at the first that does
  not fit; an assistant message and the tool results answering it are one
  unit, taken or left whole.
- ``ObservationMasking``: tool outputs older than the last ``keep`` tool
  messages are replaced by a one-line placeholder (Lindenbauer et al. 2025,
  "The Complexity Trap": the best cheap method they measured).
- ``ClearToolResults``: once the full history exceeds ``trigger`` tokens,
  every tool result but the last ``keep`` is replaced by a placeholder, as
  Anthropic's context editing (``clear_tool_uses``) does on each request.

Placeholders are built once per original message and reused, so the same
masked message is the same bytes on every call and the prompt cache sees it.
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

from pager.lab.replay.facts import Facts

__all__ = [
    "ClearToolResults",
    "FullResend",
    "ObservationMasking",
    "PagerStrategy",
    "SlidingWindow",
    "Strategy",
    "baselines",
    "describe",
]

Message = dict[str, Any]
SYSTEM_ROLES = ("system", "developer")


@runtime_checkable
class Strategy(Protocol):
    """Build the prompt for each assistant message of a replayed session."""

    name: str
    budget: int | None
    pins_l1: bool

    def reset(self, session_header: Mapping[str, Any]) -> None:
        """Start a new session."""
        ...

    def build(self, history: list[Message]) -> list[Message]:
        """Return the prompt's messages for the assistant message after ``history``."""
        ...


class _Baseline:
    budget: int | None = None
    pins_l1 = False

    def __init__(self, name: str, facts: Facts | None) -> None:
        self.name = name
        self.facts = facts if facts is not None else Facts()

    def __getstate__(self) -> dict[str, Any]:
        # sent to a worker process without its memos: the worker binds its own Facts
        state = dict(self.__dict__)
        state["facts"] = None
        state.pop("_placeholders", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def reset(self, session_header: Mapping[str, Any]) -> None:
        """Start a new session (baselines keep only their placeholder memo)."""
        self._placeholders: dict[int, tuple[Message, Message]] = {}

    def close(self) -> None:
        """Drop per-session state."""
        self._placeholders = {}

    def _placeholder(self, original: Message, make: Callable[[Message], str]) -> Message:
        memo = getattr(self, "_placeholders", None)
        if memo is None:
            memo = self._placeholders = {}
        hit = memo.get(id(original))
        if hit is not None and hit[0] is original:
            return hit[1]
        stub: Message = {"role": "tool", "content": make(original)}
        if original.get("tool_call_id") is not None:
            stub["tool_call_id"] = original["tool_call_id"]
        if original.get("name"):
            stub["name"] = original["name"]
        memo[id(original)] = (original, stub)
        return stub


class FullResend(_Baseline):
    """Send the whole history on every call."""

    def __init__(self, name: str = "full", facts: Facts | None = None) -> None:
        super().__init__(name, facts)

    def build(self, history: list[Message]) -> list[Message]:
        return list(history)


class SlidingWindow(_Baseline):
    """Keep the system message(s) and the most recent whole units that fit ``budget`` tokens."""

    def __init__(
        self, budget: int = 32_000, name: str | None = None, facts: Facts | None = None
    ) -> None:
        super().__init__(name or f"window-{budget // 1000}k", facts)
        self.budget = budget

    def build(self, history: list[Message]) -> list[Message]:
        tokens = self.facts.tokens
        keep = [i for i, m in enumerate(history) if m.get("role") in SYSTEM_ROLES]
        left = self.budget - sum(tokens(history[i]) for i in keep)
        taken: list[int] = []
        i = len(history) - 1
        while i >= 0:
            role = history[i].get("role")
            if role in SYSTEM_ROLES:
                i -= 1
                continue
            j = i
            if role == "tool":
                # a run of tool results belongs with the assistant message that called them
                while j >= 0 and history[j].get("role") == "tool":
                    j -= 1
                if j >= 0 and history[j].get("role") != "assistant":
                    j += 1  # orphan results (bad data): take them as their own unit
                j = max(j, 0)
            cost = sum(tokens(history[k]) for k in range(j, i + 1))
            if cost > left:
                break
            left -= cost
            taken.extend(range(j, i + 1))
            i = j - 1
        chosen = sorted(set(keep) | set(taken))
        return [history[k] for k in chosen]


# Fixed texts: a count or a path in a placeholder would be matched as a need.
MASKED = "[Old tool output omitted]"
CLEARED = "[Tool result cleared to save context]"


def _masked_text(original: Message) -> str:
    return MASKED


def _cleared_text(original: Message) -> str:
    return CLEARED


class ObservationMasking(_Baseline):
    """Replace tool outputs older than the last ``keep`` tool messages with a placeholder."""

    def __init__(self, keep: int = 10, name: str | None = None, facts: Facts | None = None) -> None:
        super().__init__(name or f"mask-{keep}", facts)
        self.keep = keep

    def build(self, history: list[Message]) -> list[Message]:
        tool_idx = [i for i, m in enumerate(history) if m.get("role") == "tool"]
        old = set(tool_idx[: max(0, len(tool_idx) - self.keep)])
        return [
            self._placeholder(m, _masked_text) if i in old else m for i, m in enumerate(history)
        ]


class ClearToolResults(_Baseline):
    """Past ``trigger`` tokens, replace every tool result but the last ``keep`` with a placeholder."""

    def __init__(
        self,
        trigger: int = 100_000,
        keep: int = 3,
        name: str | None = None,
        facts: Facts | None = None,
    ) -> None:
        super().__init__(name or f"clear-{trigger // 1000}k", facts)
        self.trigger = trigger
        self.keep = keep

    def build(self, history: list[Message]) -> list[Message]:
        tokens = self.facts.tokens
        if sum(tokens(m) for m in history) <= self.trigger:
            return list(history)
        tool_idx = [i for i, m in enumerate(history) if m.get("role") == "tool"]
        old = set(tool_idx[: max(0, len(tool_idx) - self.keep)])
        return [
            self._placeholder(m, _cleared_text) if i in old else m for i, m in enumerate(history)
        ]


def baselines(facts: Facts | None = None) -> list[_Baseline]:
    """Return the four baselines with their default settings, sharing one ``Facts``."""
    facts = facts if facts is not None else Facts()
    return [
        FullResend(facts=facts),
        SlidingWindow(facts=facts),
        ObservationMasking(facts=facts),
        ClearToolResults(facts=facts),
    ]


class PagerStrategy:
    """Replay pager itself: a fresh store per session, ``assemble`` per call.

    ``options`` go to ``pager.open`` unchanged (``context_window`` defaults to
    200,000). ``opener`` replaces ``pager.open`` (tests pass a fake).
    """

    pins_l1 = True
    copy_history = True  # pager may keep references; give it its own copies

    def __init__(
        self,
        name: str = "pager",
        *,
        opener: Callable[..., Any] | None = None,
        **options: Any,
    ) -> None:
        self.name = name
        self.options = {"context_window": 200_000, **options}
        self._opener = opener
        self._p: Any = None
        self._dir: str | None = None
        self._report: Any = None

    @property
    def budget(self) -> int | None:
        """Return the last report's budget if it gives one, else ``context_window``."""
        b = getattr(self._report, "budget", None)
        if isinstance(b, int) and b > 0:
            return b
        cw = self.options.get("context_window")
        return int(cw) if cw else None

    def reset(self, session_header: Mapping[str, Any]) -> None:
        self.close()
        opener = self._opener
        if opener is None:
            import pager  # lazily: the baselines must work before pager.open exists

            opener = pager.open
        self._dir = tempfile.mkdtemp(prefix="pager-bench-")
        session = str(session_header.get("id") or "session")
        self._p = opener(self._dir, session=session, **self.options)
        self._report = None

    def build(self, history: list[Message]) -> list[Message]:
        out = self._p.assemble({"model": "replay", "messages": history})
        self._report = getattr(self._p, "last_report", None)
        return list(out["messages"])

    def layers(self) -> dict[str, int] | None:
        """Return tokens per layer of the last build, from pager's report."""
        layers = getattr(self._report, "layers", None)
        return dict(layers) if layers else None

    def close(self) -> None:
        """Close the pager and remove its temporary store."""
        p, self._p = self._p, None
        try:
            if p is not None and hasattr(p, "close"):
                p.close()
        finally:
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None


def describe(strategies: Sequence[Any]) -> list[dict[str, Any]]:
    """Return a JSON-able description of each strategy's settings."""
    out = []
    for s in strategies:
        d: dict[str, Any] = {"name": s.name, "kind": type(s).__name__}
        # pager's budget comes from its options (a report's budget is per session)
        for attr in () if isinstance(s, PagerStrategy) else ("budget", "keep", "trigger"):
            v = getattr(s, attr, None)
            if isinstance(v, int):
                d[attr] = v
        if isinstance(s, PagerStrategy):
            d["options"] = {k: v for k, v in s.options.items()}
        out.append(d)
    return out

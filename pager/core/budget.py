"""Pure budget decisions for rollover mode. No I/O, no clock.

Theory of operation
-------------------
A context window has three limits, all derived from one ``BudgetConfig``::

    0 ─────────────── base_limit ──────── hard_limit ──────── context_window
       (reminder zone: the last           fallback reserve     output reserve
        reminder_threshold tokens
        below base_limit)

- ``hard_limit = min(effective - output_reserve, effective * auto_compact_ratio)``
  where ``effective = context_window * effective_window_percent / 100``: a
  prompt at or past it leaves no room for the answer (or reaches the host's
  auto-rollover point), so the host rolls over by itself. ``BudgetConfig``'s
  own defaults (100 %, ratio 1.0) make it ``context_window - output_reserve``;
  ``pager.open`` passes 95 % and 0.9 in rollover mode (effective_window_percent, auto_compact_ratio).
- ``base_limit = hard_limit - fallback_reserve``: past it the model gets one
  *fallback* step in which the only tool it may call is ``new_context``; the
  request's other tools are pruned (``prune_tools``) and a call to any of them
  is answered with an error (``blocked_tool_result``) instead of running.
- When ``base_limit - current_tokens <= reminder_threshold`` the model gets one
  *reminder*, once per window, appended at the tail of the prompt.

``evaluate_budget`` checks, in this order: a handoff the model already
declared; the hard limit; the step count (``max_steps`` assistant messages in
the window: the step trigger); the base limit after the fallback was given;
the base limit; the reminder zone.

Besides those actions, ``due_notice`` picks the usage notice a window is owed
(25 / 50 / 75 % by default, each once per window): the share of the window
used, counted either on the whole prompt against the hard limit or, with
``body_after_prefix``, on the body after the window's fixed prefix (L1, the
first message, tool schemas) against the room after that prefix.
``window_open_text`` is the notice a window opens with: its number, its id
and the tokens left. The host owns the three booleans of
``BudgetState`` and sets them once it has delivered an action;
a rollover starts a new window and with it a fresh ``BudgetState``.

Notices never churn the prompt cache: each is rendered once, appended at the
tail, and then kept byte-identical (the host stores the rendered text rather
than re-rendering it, since the numbers in it would change).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import attrs

from pager.core.handoff import TOOL_NAME
from pager.errors import ConfigError, ToolError

__all__ = [
    "ACTIONS",
    "DEFAULT_FALLBACK_RESERVE",
    "DEFAULT_OUTPUT_RESERVE_CAP",
    "DEFAULT_REMINDER_THRESHOLD",
    "ROLLOVER_TOOL",
    "BudgetAction",
    "BudgetConfig",
    "BudgetState",
    "base_limit",
    "blocked_text",
    "blocked_tool_result",
    "default_output_reserve",
    "due_notice",
    "effective_window",
    "evaluate_budget",
    "usage_percent",
    "usage_text",
    "window_open_text",
    "fallback_text",
    "hard_limit",
    "is_allowed",
    "prune_tools",
    "remaining",
    "reminder_text",
    "tool_name",
]

ActionType = Literal["continue", "remind", "fallback", "rollover"]
ACTIONS: tuple[str, ...] = ("continue", "remind", "fallback", "rollover")

ROLLOVER_TOOL = TOOL_NAME  # the one rollover tool: ``new_context``

# Seed 004 (dsh-context-window): fallbackBufferTokens 8000, reminderThresholdTokens 16000.
DEFAULT_FALLBACK_RESERVE = 8_000
DEFAULT_REMINDER_THRESHOLD = 16_000
# Output reserve: 10 % of the window, capped at 8,192. 8 K covers a long
# answer with a handoff in it; the 10 % keeps small test windows usable.
DEFAULT_OUTPUT_RESERVE_CAP = 8_192


def default_output_reserve(context_window: int) -> int:
    """Return the default output reserve for a window: 10 % of it, at most 8,192."""
    return min(DEFAULT_OUTPUT_RESERVE_CAP, context_window // 10)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@attrs.frozen(slots=True)
class BudgetConfig:
    """Window size and the three reserves that place the budget limits.

    ``output_reserve`` defaults to ``default_output_reserve(context_window)``.
    ``fallback_reserve`` 0 disables the fallback step (the host rolls over at
    the hard limit directly); ``reminder_threshold`` 0 disables the reminder.
    Raises ``ConfigError`` if a figure is not a non-negative integer, if the
    reserves leave no base budget, or if the reminder would fire on an empty
    window.
    """

    context_window: int
    output_reserve: int = attrs.field()
    fallback_reserve: int = DEFAULT_FALLBACK_RESERVE
    reminder_threshold: int = DEFAULT_REMINDER_THRESHOLD
    effective_window_percent: int = 100
    auto_compact_ratio: float = 1.0
    notice_percents: tuple[int, ...] = ()
    max_steps: int = 0

    @output_reserve.default
    def _output_reserve_default(self) -> int:
        # A bad window is reported by __attrs_post_init__, not as a TypeError here.
        if not _is_int(self.context_window):
            return 0
        return default_output_reserve(self.context_window)

    def __attrs_post_init__(self) -> None:
        for name in ("context_window", "output_reserve", "fallback_reserve", "reminder_threshold"):
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                raise ConfigError(f"{name} must be a non-negative integer, got {value!r}")
        if self.context_window == 0:
            raise ConfigError("context_window must be positive")
        if not _is_int(self.effective_window_percent) or not 0 < self.effective_window_percent <= 100:
            raise ConfigError(f"effective_window_percent must be in 1..100, got {self.effective_window_percent!r}")
        ratio = self.auto_compact_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
            raise ConfigError(f"auto_compact_ratio must be in (0, 1], got {ratio!r}")
        if not _is_int(self.max_steps) or self.max_steps < 0:
            raise ConfigError(f"max_steps must be a non-negative integer, got {self.max_steps!r}")
        if any(not _is_int(p) or not 0 < p < 100 for p in self.notice_percents):
            raise ConfigError(f"notice_percents must be percentages in 1..99, got {self.notice_percents!r}")
        hard = hard_limit(self)
        if hard - self.fallback_reserve <= 0:
            raise ConfigError(
                f"output_reserve + fallback_reserve ({self.output_reserve} + "
                f"{self.fallback_reserve}) leave no base budget in the usable window "
                f"({hard} tokens of {self.context_window}); lower a reserve or raise the window"
            )
        base = hard - self.fallback_reserve
        if self.reminder_threshold >= base:
            raise ConfigError(
                f"reminder_threshold ({self.reminder_threshold}) must be below the base "
                f"limit ({base} = hard limit - fallback_reserve), "
                "or the reminder fires on an empty window; lower reminder_threshold"
            )


@attrs.frozen(slots=True)
class BudgetState:
    """The facts one budget decision reads, for the prompt about to be sent.

    ``current_tokens`` is the size of that prompt (messages and tool schemas).
    ``explicit_rollover_declared``: the model called ``new_context`` and the
    switch is pending. ``reminder_claimed`` / ``fallback_claimed``: the reminder
    / fallback step was already given in this window.
    """

    current_tokens: int
    explicit_rollover_declared: bool = False
    reminder_claimed: bool = False
    fallback_claimed: bool = False
    steps: int = 0  # assistant messages in this window (the step trigger)
    prefix_tokens: int = 0  # the window's fixed prefix (body-after-prefix view)
    notices_claimed: tuple[int, ...] = ()  # usage notice percentages already given

    def __attrs_post_init__(self) -> None:
        if not _is_int(self.current_tokens) or self.current_tokens < 0:
            raise ConfigError(
                f"current_tokens must be a non-negative integer, got {self.current_tokens!r}"
            )


@attrs.frozen(slots=True)
class BudgetAction:
    """What the host does before the next model call, and why.

    Reasons: ``rollover`` — ``"model"`` (the model handed off),
    ``"hard-limit"`` (no room for the answer), ``"max-steps"`` (the step
    trigger), ``"fallback-exhausted"`` (past
    the base limit after the fallback step was given); ``fallback`` —
    ``"base-limit"``; ``remind`` — ``"near-limit"``; ``continue`` — ``None``.
    """

    type: ActionType
    reason: str | None = None


CONTINUE = BudgetAction("continue")


def effective_window(config: BudgetConfig) -> int:
    """Return the usable part of the window (``effective_window_percent`` of it)."""
    return config.context_window * config.effective_window_percent // 100


def hard_limit(config: BudgetConfig) -> int:
    """Return the prompt size at which the host rolls over by itself."""
    effective = effective_window(config)
    return min(effective - config.output_reserve, int(effective * config.auto_compact_ratio))


def base_limit(config: BudgetConfig) -> int:
    """Return the prompt size at which the fallback step begins."""
    return hard_limit(config) - config.fallback_reserve


def remaining(config: BudgetConfig, state: BudgetState) -> int:
    """Return the tokens left before the base limit (negative past it)."""
    return base_limit(config) - state.current_tokens


def evaluate_budget(config: BudgetConfig, state: BudgetState) -> BudgetAction:
    """Decide the action for the next model call (checks in the order the module docstring gives)."""
    current = state.current_tokens
    # 1. The model handed off: honour it whatever the size.
    if state.explicit_rollover_declared:
        return BudgetAction("rollover", "model")
    # 2. No room left for the answer: the host rolls over (no deadlock on a
    #    model that will not hand off).
    if current >= hard_limit(config):
        return BudgetAction("rollover", "hard-limit")
    # 3. The step trigger: a window of max_steps steps ends whatever its size.
    if config.max_steps and state.steps >= config.max_steps:
        return BudgetAction("rollover", "max-steps")
    base = base_limit(config)
    # 4. The fallback step was given and not used.
    if current >= base and state.fallback_claimed:
        return BudgetAction("rollover", "fallback-exhausted")
    # 5. Past the base limit: one step with only new_context callable.
    if current >= base:
        return BudgetAction("fallback", "base-limit")
    # 6. Near the limit: one reminder per window.
    if base - current <= config.reminder_threshold and not state.reminder_claimed:
        return BudgetAction("remind", "near-limit")
    return CONTINUE


def usage_percent(config: BudgetConfig, state: BudgetState, body_after_prefix: bool = True) -> float:
    """Return how much of the window is used, in percent (0..100+).

    With ``body_after_prefix`` the window's fixed prefix is counted out of
    both sides: a window that opens with a big L1 starts at 0 %, not at 30 %.
    """
    hard = hard_limit(config)
    if body_after_prefix:
        prefix = min(state.prefix_tokens, hard - 1)
        return 100.0 * max(0, state.current_tokens - prefix) / (hard - prefix)
    return 100.0 * state.current_tokens / hard


def due_notice(config: BudgetConfig, state: BudgetState, body_after_prefix: bool = True) -> int | None:
    """Return the highest usage threshold crossed and not yet given in this window, or None.

    Thresholds below it are given with it (the caller claims every threshold
    up to the returned one): one notice per call, never a burst.
    """
    used = usage_percent(config, state, body_after_prefix)
    crossed = [p for p in config.notice_percents if used >= p and p not in state.notices_claimed]
    return max(crossed) if crossed else None


def usage_text(config: BudgetConfig, state: BudgetState, percent: int, tool: str = ROLLOVER_TOOL) -> str:
    """Render the usage notice for ``percent`` (render once, then keep the bytes)."""
    hard = hard_limit(config)
    left = max(0, hard - state.current_tokens)
    return (
        f"[context budget] {percent} % of this context window is used "
        f"({state.current_tokens:,} of {hard:,} tokens; about {left:,} left). "
        "Keep decisions and the next step in notes as you go; when a phase of the task ends, "
        f"call `{tool}` with a handoff instead of waiting for the limit."
    )


def window_open_text(config: BudgetConfig, state: BudgetState, number: int, window_id: str, session: str) -> str:
    """Render the notice a window opens with: which window this is, its id, the tokens left."""
    hard = hard_limit(config)
    left = max(0, hard - state.current_tokens)
    return (
        f"[context window] This is context window {number} (id {window_id}) of session {session}. "
        f"About {left:,} tokens remain before this window ends ({state.current_tokens:,} of {hard:,} used)."
    )


def reminder_text(config: BudgetConfig, state: BudgetState, tool: str = ROLLOVER_TOOL) -> str:
    """Render the one-time near-limit reminder (render once, then keep the bytes)."""
    left = max(0, remaining(config, state))
    return (
        "[context budget] This context window is nearly full: about "
        f"{left:,} tokens remain before the fallback limit "
        f"({state.current_tokens:,} of {base_limit(config):,} used). "
        "Finish the step you are on, then call "
        f"`{tool}` with a handoff: spec-confirmed requirements with their sources, "
        "your inferences (kept apart from facts), unresolved conflicts, unverified "
        "acceptance criteria and next steps, and the related files with their roles. "
        "Previous context stays retrievable after the switch. This reminder is not repeated."
    )


def fallback_text(config: BudgetConfig, state: BudgetState, tool: str = ROLLOVER_TOOL) -> str:
    """Render the fallback notice: only the rollover tool is callable from now on."""
    return (
        "[context budget] This context window is full "
        f"({state.current_tokens:,} tokens; fallback limit {base_limit(config):,}). "
        f"Every tool except `{tool}` is disabled: calls to other tools return an "
        f"error and do not run. Call `{tool}` now with your handoff and related files. "
        "If you do not, the host starts a new window at the next step from your notes "
        "and the task objective only."
    )


def tool_name(item: Mapping[str, Any]) -> str | None:
    """Return the function name of an OpenAI tool definition or tool call."""
    fn = item.get("function")
    if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
        return fn["name"]
    name = item.get("name")  # flat shapes (Responses API tools, custom tools)
    return name if isinstance(name, str) else None


def is_allowed(tool_call: Mapping[str, Any], keep: Iterable[str] = (ROLLOVER_TOOL,)) -> bool:
    """Return whether a tool call may run during the fallback step."""
    return tool_name(tool_call) in set(keep)


def prune_tools(
    tools: Sequence[Mapping[str, Any]] | None, keep: Iterable[str] = (ROLLOVER_TOOL,)
) -> list[Mapping[str, Any]]:
    """Return the tool definitions whose name is in ``keep``, in their order.

    The kept definitions are the same objects, so their serialised bytes do
    not change. A ``keep`` tool missing from ``tools`` is not added: the host
    adds ``NEW_CONTEXT_TOOL`` (``pager.handoff``) to the request itself.
    """
    wanted = set(keep)
    return [t for t in tools or () if tool_name(t) in wanted]


def blocked_text(name: str, keep: Sequence[str] = (ROLLOVER_TOOL,)) -> str:
    """Return the error result text for a call to a tool pruned in the fallback step."""
    allowed = ", ".join(f"`{k}`" for k in keep) or "no tool"
    return (
        f"Error: `{name or '(unnamed)'}` was not run. The context budget is exhausted and only "
        f"{allowed} may be called now. Call `{keep[0] if keep else ROLLOVER_TOOL}` "
        "with your handoff; the work continues in a new context window."
    )


def blocked_tool_result(
    tool_call: Mapping[str, Any], keep: Sequence[str] = (ROLLOVER_TOOL,)
) -> dict[str, Any]:
    """Return the OpenAI chat tool message answering a call to a pruned tool.

    Raises ``ToolError`` if the call has no ``id`` (it could not be paired).
    """
    call_id = tool_call.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise ToolError("tool call has no id; it cannot be answered")
    return {"role": "tool", "tool_call_id": call_id, "content": blocked_text(tool_name(tool_call) or "", keep)}

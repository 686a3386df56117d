"""The four parts of ``pager.options.Options``, one per owner, each validating its own fields.

``SharedOptions`` holds the facade's options both schedulers read too, so
``PagingOptions`` and ``RolloverOptions`` extend it: a scheduler handed its
part finds every name it reads there. Field metadata marks the options a user
sets first (``FIRST``) and the tuner's own (``TUNER``); see docs/api.md.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import attrs

from pager.core.describe import brief
from pager.core.pages import SCOPES
from pager.errors import ConfigError

__all__ = [
    "CACHE_MARKS",
    "FIRST",
    "MODES",
    "TUNER",
    "CheckpointOptions",
    "FacadeOptions",
    "PagingOptions",
    "RolloverOptions",
    "SharedOptions",
]

MODES = ("paging", "rollover")
CACHE_MARKS = ("pager", "merge", "caller")  # pager.formats.breakpoints.MODES

# field metadata: the options a user sets first (docs/api.md's first table), and the tuner's own
FIRST = {"first": True}
TUNER = {"tuner": True}


def _positive(_inst: Any, attribute: attrs.Attribute, value: int) -> None:
    # options are persisted as JSON, which holds 64-bit integers only
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**63:
        raise ConfigError(f"{attribute.name} must be a positive 64-bit integer, got {brief(value)}")


def _non_negative(_inst: Any, attribute: attrs.Attribute, value: int | float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 2**63:
        raise ConfigError(f"{attribute.name} must be a non-negative number, got {brief(value)}")


def _path_or_none(value: Any) -> Any:
    # absolute when built: the options are saved with the session, and a reopen from another
    # working directory must find the same checkpoint files
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str) and value and "\x00" not in value:
        return os.path.abspath(value)
    return value


def _int_tuple(value: Any) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise ConfigError(f"expected a list of integers, got {brief(value)}")
    out = tuple(value)
    if any(not isinstance(v, int) or isinstance(v, bool) for v in out):
        raise ConfigError(f"expected a list of integers, got {brief(value)}")
    return out


def _pos(default: int, metadata: Mapping[str, Any] | None = None) -> Any:
    return attrs.field(default=default, validator=_positive, metadata=metadata)


def _nonneg(default: float, metadata: Mapping[str, Any] | None = None) -> Any:
    return attrs.field(default=default, validator=_non_negative, metadata=metadata)


def _flag(default: bool, metadata: Mapping[str, Any] | None = None) -> Any:
    return attrs.field(default=default, metadata=metadata)


@attrs.frozen(slots=True)
class SharedOptions:
    """The facade's options that every scheduler reads too: the budget, stubs, the card.

    ``reserve`` is ``output_reserve`` or its default; ``budget`` is
    ``context_window - reserve``.
    """

    context_window: int = _pos(200_000, FIRST)
    output_reserve: int | None = attrs.field(default=None, metadata=FIRST)
    stub_threshold: int = _nonneg(2_000, FIRST)
    max_notes: int = _nonneg(8)
    l1_cap: int = _nonneg(8_000)

    def __attrs_post_init__(self) -> None:
        if self.output_reserve is not None and not (0 <= self.output_reserve < self.context_window):
            raise ConfigError(
                f"output_reserve must be in [0, context_window), got {self.output_reserve} "
                f"for a {self.context_window}-token window"
            )

    @property
    def reserve(self) -> int:
        if self.output_reserve is not None:
            return self.output_reserve
        from pager.core.budget import default_output_reserve

        return default_output_reserve(self.context_window)

    @property
    def budget(self) -> int:
        return self.context_window - self.reserve


@attrs.frozen(slots=True)
class FacadeOptions(SharedOptions):
    """What ``Pager`` itself reads in every mode: the mode, tools, reports, who owns the pages."""

    mode: str = attrs.field(default="paging", metadata=FIRST)
    expose_tools: bool = _flag(False, FIRST)
    log_reports: bool = True
    scope: str = attrs.field(default="session", metadata=FIRST)
    owner: str | None = None  # the user or agent identity of this session's pages (default: the session)
    pool: str | None = None  # the project pool of new pages when scope="project"
    cache_marks: str = "pager"  # Anthropic cache breakpoints: pager's own, merged with the caller's, or the caller's

    def __attrs_post_init__(self) -> None:
        SharedOptions.__attrs_post_init__(self)
        if self.mode not in MODES:
            raise ConfigError(f"mode must be one of {MODES}, got {brief(self.mode)}")
        if self.scope not in SCOPES:
            raise ConfigError(f"scope must be one of {SCOPES}, got {brief(self.scope)}")
        if self.scope == "project" and not self.pool:
            raise ConfigError("scope='project' needs pool=<name> (the project pool the pages go to)")
        for name in ("owner", "pool"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigError(f"{name} must be a non-empty string or None, got {brief(value)}")
        if self.cache_marks not in CACHE_MARKS:
            raise ConfigError(f"cache_marks must be one of {list(CACHE_MARKS)}, got {brief(self.cache_marks)}")


@attrs.frozen(slots=True)
class PagingOptions(SharedOptions):
    """The paging scheduler's options (``mode="paging"``), plus the shared ones.

    Token figures: ``high_watermark`` / ``low_watermark`` bound the tokens
    *beyond L1* (history shown in full, stubs and recalled pages); a demotion
    round runs when the prompt would pass ``L1 + high_watermark`` and rebuilds
    it to ``L1 + low_watermark``. Both are capped by the budget.
    """

    policy: str = "reference"
    policy_params: Mapping[str, Any] = attrs.field(factory=dict)
    high_watermark: int = _pos(40_000, FIRST)
    low_watermark: int = _pos(8_000, FIRST)
    recent_units: int = _nonneg(3)
    old_share: float = _nonneg(0.9, TUNER)
    inline_max: int = _nonneg(2_000)
    recall_pages: int = _nonneg(3, FIRST)
    recall_tokens: int = _nonneg(900)
    recall_page_tokens: int = _pos(300, TUNER)
    recall_min_score: float = _nonneg(0.0, TUNER)
    recall_min_strength: int = _nonneg(8, TUNER)
    # automatic recall also reads other sessions' pages this one may read (its owner's private
    # pages, readable project pools, shared pages), labelled with their source
    recall_pools: bool = True
    # Switches of the paging scheduler's components (issue 15's ablations); each
    # default is the shipped behaviour.
    task_focus: bool = _flag(True, TUNER)  # relevance also counts the active task's user message
    minor_rounds: bool = _flag(True, TUNER)  # rounds keep the old generation byte-stable when it fits
    # a detected task switch (or return) runs a major round at once; off by default:
    # on the Claude Code development sessions it lowered long-range coverage
    # (0.713 against 0.752, docs/tuning.md) at equal effective cost
    task_rounds: bool = _flag(False, TUNER)
    compact_tokens: int = _nonneg(0, TUNER)  # rounds: tokens for compact lines
    # issue 24: demote a page only when the expected saving beats the expected re-read (docs/how-it-works.md)
    objective: bool = _flag(True, TUNER)
    need_scale: float = _nonneg(2.0, TUNER)  # times the measured need rates (heat.NEEDS)
    keep_room: int = _nonneg(8_000, TUNER)  # tokens past low_watermark paying pages may hold
    recall_leaves: bool = _flag(True, TUNER)  # a recall block serves its call and leaves at the next one

    def __attrs_post_init__(self) -> None:
        SharedOptions.__attrs_post_init__(self)
        if self.low_watermark > self.high_watermark:
            raise ConfigError(
                f"low_watermark ({self.low_watermark}) must not exceed high_watermark ({self.high_watermark})"
            )


@attrs.frozen(slots=True)
class RolloverOptions(SharedOptions):
    """The window controller's options (``mode="rollover"``, seeds 000 and 004), plus the shared ones."""

    workspace: str | None = attrs.field(default=None, metadata=FIRST)
    fallback_reserve: int = _nonneg(8_000)
    reminder_threshold: int = _nonneg(16_000)
    notice_percents: tuple[int, ...] = attrs.field(default=(25, 50, 75), converter=_int_tuple)
    window_notice: bool = True
    effective_window_percent: int = _pos(95)
    auto_compact_ratio: float = _nonneg(0.9)
    body_after_prefix: bool = True
    max_steps: int = _nonneg(0)

    def __attrs_post_init__(self) -> None:
        SharedOptions.__attrs_post_init__(self)
        if any(not 0 < p < 100 for p in self.notice_percents) or list(self.notice_percents) != sorted(
            set(self.notice_percents)
        ):
            raise ConfigError(
                f"notice_percents must be increasing percentages between 1 and 99, got {list(self.notice_percents)}"
            )
        if not 0 < self.effective_window_percent <= 100:
            raise ConfigError(f"effective_window_percent must be in 1..100, got {self.effective_window_percent}")
        if not 0 < self.auto_compact_ratio <= 1:
            raise ConfigError(f"auto_compact_ratio must be in (0, 1], got {self.auto_compact_ratio}")


@attrs.frozen(slots=True)
class CheckpointOptions:
    """The live checkpoint files (seed 003; docs/checkpoints.md), in either mode."""

    # live task state and rollover notices (seeds 000, 001, 003, 004)
    state_dir: str | None = attrs.field(default=None, converter=_path_or_none, metadata=FIRST)
    wal_max_bytes: int = _nonneg(256 * 1024)

    def __attrs_post_init__(self) -> None:
        if self.state_dir is not None and (not isinstance(self.state_dir, str) or not self.state_dir
                                           or "\x00" in self.state_dir):
            raise ConfigError(f"state_dir must be a directory path, got {brief(self.state_dir)}")

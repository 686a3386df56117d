"""Options for ``pager.open``: defaults, validation, config files.

The defaults are the tuned ones (see docs/tuning.md). A configuration file is
JSON holding any of the option names below; ``pager tune --write`` produces
one. Explicit keyword arguments to ``open`` win over the file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import attrs
import orjson

from pager.core.describe import brief
from pager.core.pages import SCOPES
from pager.errors import ConfigError

__all__ = ["Options", "load_config", "read_json_file"]

MODES = ("paging", "rollover")
CACHE_MARKS = ("pager", "merge", "caller")  # pager.formats.breakpoints.MODES


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


@attrs.frozen(slots=True)
class Options:
    """Every knob of the scheduler, with its default.

    Token figures: ``high_watermark`` / ``low_watermark`` bound the tokens
    *beyond L1* (history shown in full, stubs and recalled pages); a demotion
    round runs when the prompt would pass ``L1 + high_watermark`` and rebuilds
    it to ``L1 + low_watermark``. Both are capped by the budget
    (``context_window - output_reserve``).
    """

    context_window: int = attrs.field(default=200_000, validator=_positive)
    output_reserve: int | None = None
    policy: str = "reference"
    policy_params: Mapping[str, Any] = attrs.field(factory=dict)
    high_watermark: int = attrs.field(default=40_000, validator=_positive)
    low_watermark: int = attrs.field(default=8_000, validator=_positive)
    recent_units: int = attrs.field(default=3, validator=_non_negative)
    old_share: float = attrs.field(default=0.9, validator=_non_negative)
    stub_threshold: int = attrs.field(default=2_000, validator=_non_negative)
    inline_max: int = attrs.field(default=2_000, validator=_non_negative)
    recall_pages: int = attrs.field(default=3, validator=_non_negative)
    recall_tokens: int = attrs.field(default=900, validator=_non_negative)
    recall_page_tokens: int = attrs.field(default=300, validator=_positive)
    recall_min_score: float = attrs.field(default=0.0, validator=_non_negative)
    recall_min_strength: int = attrs.field(default=8, validator=_non_negative)
    # automatic recall also reads other sessions' pages this one may read (its owner's private
    # pages, readable project pools, shared pages), labelled with their source
    recall_pools: bool = True
    max_notes: int = attrs.field(default=8, validator=_non_negative)
    expose_tools: bool = False
    mode: str = "paging"
    workspace: str | None = None
    fallback_reserve: int = attrs.field(default=8_000, validator=_non_negative)
    reminder_threshold: int = attrs.field(default=16_000, validator=_non_negative)
    log_reports: bool = True
    scope: str = "session"
    owner: str | None = None  # the user or agent identity of this session's pages (default: the session)
    pool: str | None = None  # the project pool of new pages when scope="project"
    cache_marks: str = "pager"  # Anthropic cache breakpoints: pager's own, merged with the caller's, or the caller's
    # live task state and rollover notices (seeds 000, 001, 003, 004)
    state_dir: str | None = attrs.field(default=None, converter=_path_or_none)
    wal_max_bytes: int = attrs.field(default=256 * 1024, validator=_non_negative)
    l1_cap: int = attrs.field(default=8_000, validator=_non_negative)
    notice_percents: tuple[int, ...] = attrs.field(default=(25, 50, 75), converter=_int_tuple)
    window_notice: bool = True
    effective_window_percent: int = attrs.field(default=95, validator=_positive)
    auto_compact_ratio: float = attrs.field(default=0.9, validator=_non_negative)
    body_after_prefix: bool = True
    max_steps: int = attrs.field(default=0, validator=_non_negative)
    # Switches of the paging scheduler's components (issue 15's ablations); each
    # default is the shipped behaviour.
    task_focus: bool = True  # relevance also counts the active task's user message
    minor_rounds: bool = True  # rounds keep the old generation byte-stable when it fits
    # a detected task switch (or return) runs a major round at once; off by default:
    # on the Claude Code development sessions it lowered long-range coverage
    # (0.713 against 0.752, docs/tuning.md) at equal effective cost
    task_rounds: bool = False
    compact_tokens: int = attrs.field(default=0, validator=_non_negative)  # rounds: tokens for compact lines
    # issue 24: demote a page only when the expected saving beats the expected re-read (docs/how-it-works.md)
    objective: bool = True
    need_scale: float = attrs.field(default=2.0, validator=_non_negative)  # times the measured need rates (heat.NEEDS)
    keep_room: int = attrs.field(default=8_000, validator=_non_negative)  # tokens past low_watermark paying pages may hold
    recall_leaves: bool = True  # a recall block serves its call and leaves at the next one

    def __attrs_post_init__(self) -> None:
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
        if self.low_watermark > self.high_watermark:
            raise ConfigError(
                f"low_watermark ({self.low_watermark}) must not exceed high_watermark ({self.high_watermark})"
            )
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
        if self.state_dir is not None and (not isinstance(self.state_dir, str) or not self.state_dir
                                           or "\x00" in self.state_dir):
            raise ConfigError(f"state_dir must be a directory path, got {brief(self.state_dir)}")
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

    def to_dict(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        data["policy_params"] = dict(self.policy_params)
        data["notice_percents"] = list(self.notice_percents)
        return data

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in attrs.fields(cls))

    @classmethod
    def build(cls, base: Mapping[str, Any] | None = None, **overrides: Any) -> "Options":
        """Return options from a mapping plus overrides; unknown names are a ``ConfigError``."""
        data: dict[str, Any] = dict(base or {})
        data.update({k: v for k, v in overrides.items() if v is not None})
        unknown = sorted(set(data) - set(cls.names()))
        if unknown:
            raise ConfigError(f"unknown option(s) {unknown}; valid: {sorted(cls.names())}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise ConfigError(str(exc)) from exc


def read_json_file(path: str | os.PathLike[str]) -> Any:
    """Return the JSON value in ``path``; a missing, unreadable or malformed file is a ``ConfigError``."""
    try:
        return orjson.loads(Path(path).read_bytes())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not JSON: {exc}") from exc


def load_config(config: str | os.PathLike[str] | Mapping[str, Any] | None) -> dict[str, Any]:
    """Return option values from a JSON file (path) or a mapping."""
    if config is None:
        return {}
    if isinstance(config, Mapping):
        return dict(config)
    if not isinstance(config, (str, os.PathLike)):
        raise ConfigError(f"config must be a JSON file's path or a mapping, not {type(config).__name__}")
    path = Path(config)
    data = read_json_file(path)
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a JSON object")
    # `pager tune --write` nests the options under "options" beside its figures
    if "options" in data and isinstance(data["options"], dict):
        data = data["options"]
    return data

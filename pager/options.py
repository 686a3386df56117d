"""Options for ``pager.open``: one part per owner, flat names, validation, config files.

``Options`` is composed of four frozen parts, each validated by the part that
reads it:

- ``facade`` (``FacadeOptions``): mode, tools, reports, scope and identity,
  cache marks; and the options every scheduler reads too (``SharedOptions``:
  the window and reserve, ``stub_threshold``, ``max_notes``, ``l1_cap``);
- ``paging`` (``PagingOptions``): the paging scheduler's watermarks, stubs,
  recall and heat policy, plus the shared ones;
- ``rollover`` (``RolloverOptions``): the window controller's limits and
  notices, plus the shared ones;
- ``checkpoints`` (``CheckpointOptions``): the live ``state_dir``.

A scheduler is handed its own part, whose field names are the flat names
(``options.paging.high_watermark``), and every flat name still reads on the
whole (``options.high_watermark``). Construction stays flat:
``Options(high_watermark=30_000)``, ``Options.build(base, **flat)``, a JSON
config file of flat names, ``to_dict()`` with the same keys in the same order
(the form a store saves as ``options:<session>``).

A *wrong-mode* option is a ``ConfigError``: a paging option in rollover mode,
or a rollover option in paging mode, given to ``build`` (a keyword or a config
file's entry) with a value other than its default. A default changes nothing,
and ``pager tune --write`` and the tuner pass every option, so those never
trip it. ``Options.restore`` reads what a store saved and checks only its
overrides, so an old store that saved such an option reopens as it was.

Options that exist for the tuner and the ablations (``bench/ablations.py``,
docs/tuning.md) carry ``metadata={"tuner": True}``; ``Options.tuner_only()``
names them, and the generated table in docs/api.md lists them apart. The
defaults are the tuned ones (see docs/tuning.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Mapping

import attrs
import orjson

from pager.core.describe import brief
from pager.core.pages import SCOPES
from pager.errors import ConfigError

__all__ = [
    "CheckpointOptions",
    "FacadeOptions",
    "Options",
    "PagingOptions",
    "RolloverOptions",
    "SharedOptions",
    "load_config",
    "read_json_file",
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


PARTS: dict[str, type] = {
    "facade": FacadeOptions, "paging": PagingOptions, "rollover": RolloverOptions, "checkpoints": CheckpointOptions,
}
SHARED: tuple[str, ...] = tuple(f.name for f in attrs.fields(SharedOptions))
# every flat name and the part that owns it (the shared ones: the facade)
OWNER: dict[str, str] = {}
for _part, _cls in PARTS.items():
    for _f in attrs.fields(_cls):
        OWNER.setdefault(_f.name, _part)
# the names only one scheduler reads: given for the other mode, they are a wrong-mode error
MODE_ONLY: dict[str, frozenset[str]] = {
    mode: frozenset(n for n, part in OWNER.items() if part == mode) for mode in MODES
}
# the flat order of ``to_dict`` and ``names`` (the order a store has always saved them in)
ORDER: tuple[str, ...] = (
    "context_window", "output_reserve", "policy", "policy_params", "high_watermark", "low_watermark",
    "recent_units", "old_share", "stub_threshold", "inline_max", "recall_pages", "recall_tokens",
    "recall_page_tokens", "recall_min_score", "recall_min_strength", "recall_pools", "max_notes",
    "expose_tools", "mode", "workspace", "fallback_reserve", "reminder_threshold", "log_reports", "scope",
    "owner", "pool", "cache_marks", "state_dir", "wal_max_bytes", "l1_cap", "notice_percents", "window_notice",
    "effective_window_percent", "auto_compact_ratio", "body_after_prefix", "max_steps", "task_focus",
    "minor_rounds", "task_rounds", "compact_tokens", "objective", "need_scale", "keep_room", "recall_leaves",
)
assert sorted(ORDER) == sorted(OWNER), "ORDER must name every option once"


def _flatten(parts: Mapping[str, Any]) -> dict[str, Any]:
    """Return the flat values of the given parts; a shared option two parts disagree on is a ``ConfigError``."""
    values: dict[str, Any] = {}
    seen: dict[str, str] = {}
    for part, value in parts.items():
        if value is None:
            continue
        if not isinstance(value, PARTS[part]):
            raise ConfigError(f"{part} must be a {PARTS[part].__name__}, got {type(value).__name__}")
        for f in attrs.fields(type(value)):
            v = getattr(value, f.name)
            if f.name in values and values[f.name] != v:
                raise ConfigError(f"{f.name} differs between the {seen[f.name]} part ({brief(values[f.name])}) "
                                  f"and the {part} part ({brief(v)}); give it once")
            values[f.name], seen[f.name] = v, part
    return values


@attrs.frozen(slots=True, init=False)
class Options:
    """Every knob of the scheduler, by owner; see the module docstring.

    ``Options(**flat)`` builds the four parts from flat names (missing ones
    take their defaults); ``attrs.evolve(options, name=value)`` works with
    flat names too. Each flat name reads as an attribute.
    """

    facade: FacadeOptions
    paging: PagingOptions
    rollover: RolloverOptions
    checkpoints: CheckpointOptions

    def __init__(
        self,
        *,
        facade: FacadeOptions | None = None,
        paging: PagingOptions | None = None,
        rollover: RolloverOptions | None = None,
        checkpoints: CheckpointOptions | None = None,
        **flat: Any,
    ) -> None:
        unknown = sorted(set(flat) - set(OWNER))
        if unknown:
            raise TypeError(f"Options() got unexpected option(s) {unknown}")
        values = _flatten({"facade": facade, "paging": paging, "rollover": rollover, "checkpoints": checkpoints})
        values.update(flat)
        built = {part: cls(**{f.name: values[f.name] for f in attrs.fields(cls) if f.name in values})
                 for part, cls in PARTS.items()}
        self.__attrs_init__(**built)  # type: ignore[attr-defined]

    @property
    def reserve(self) -> int:
        return self.facade.reserve

    @property
    def budget(self) -> int:
        return self.facade.budget

    def to_dict(self) -> dict[str, Any]:
        """Return the flat options (what a store saves and ``pager tune --write`` writes)."""
        data: dict[str, Any] = {}
        for part in PARTS:
            data.update(attrs.asdict(getattr(self, part)))
        data["policy_params"] = dict(self.paging.policy_params)
        data["notice_percents"] = list(self.rollover.notice_percents)
        return {name: data[name] for name in ORDER}

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Return every flat option name, in ``to_dict`` order."""
        return ORDER

    @classmethod
    def fields(cls) -> tuple[attrs.Attribute, ...]:
        """Return the flat options' attrs fields (default, metadata), in ``to_dict`` order."""
        return tuple(_FIELDS[name] for name in ORDER)

    @classmethod
    def part_of(cls, name: str) -> str:
        """Return the part owning option ``name``: ``facade``, ``paging``, ``rollover`` or ``checkpoints``."""
        return OWNER[name]

    @classmethod
    def tuner_only(cls) -> tuple[str, ...]:
        """Return the options that exist for the tuner and the ablations (``metadata["tuner"]``)."""
        return tuple(f.name for f in cls.fields() if f.metadata.get("tuner"))

    @classmethod
    def build(cls, base: Mapping[str, Any] | None = None, **overrides: Any) -> "Options":
        """Return options from a mapping plus overrides (``None`` overrides are ignored).

        Unknown names are a ``ConfigError``, and so is a wrong-mode option set
        to other than its default (see the module docstring).
        """
        given = {k: v for k, v in overrides.items() if v is not None}
        opts = cls._make(base, given)
        opts._check_mode({**(base or {}), **given})
        return opts

    @classmethod
    def restore(cls, saved: Mapping[str, Any], **overrides: Any) -> "Options":
        """Return the options a store saved (``to_dict``) plus overrides; saved ones are never a wrong-mode error."""
        given = {k: v for k, v in overrides.items() if v is not None}
        opts = cls._make(saved, given)
        opts._check_mode(given)
        return opts

    @classmethod
    def _make(cls, base: Mapping[str, Any] | None, given: Mapping[str, Any]) -> "Options":
        data: dict[str, Any] = {**(base or {}), **given}
        unknown = sorted(set(data) - set(OWNER))
        if unknown:
            raise ConfigError(f"unknown option(s) {unknown}; valid: {sorted(OWNER)}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise ConfigError(str(exc)) from exc

    def _check_mode(self, given: Iterable[str]) -> None:
        """Raise ``ConfigError`` if an option of ``given`` is the other mode's and not at its default."""
        mode = self.facade.mode
        other = MODES[1 - MODES.index(mode)]
        # a default changes nothing whether it is read or not: tune and config files carry every option
        bad = sorted(n for n in set(given) & MODE_ONLY[other] if getattr(self, n) != getattr(_DEFAULT, n))
        if bad:
            one = len(bad) == 1
            what = f"{bad[0]} is a {other} option" if one else f"{', '.join(bad)} are {other} options"
            it = "it" if one else "them"
            raise ConfigError(f"{what}; mode={mode!r} does not read {it} (drop {it}, or open with mode={other!r})")


def _flat_property(part: str, name: str) -> property:
    def get(self: Options) -> Any:
        return getattr(getattr(self, part), name)

    return property(get, doc=f"``{part}.{name}``")


for _name, _part in OWNER.items():
    setattr(Options, _name, _flat_property(_part, _name))
_FIELDS: dict[str, attrs.Attribute] = {}
for _cls in PARTS.values():
    for _f in attrs.fields(_cls):
        _FIELDS.setdefault(_f.name, _f)
_DEFAULT = Options()


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

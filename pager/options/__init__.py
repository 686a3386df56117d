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

import operator
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import orjson

from pager.core.describe import brief
from pager.errors import ConfigError
from pager.options.parts import (
    MODES,
    CheckpointOptions,
    FacadeOptions,
    PagingOptions,
    RolloverOptions,
    SharedOptions,
)

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
    # attrgetter("paging.high_watermark") runs in C: a flat read costs about what a part's does
    return property(operator.attrgetter(f"{part}.{name}"), doc=f"``{part}.{name}``")


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

"""Build the configurations ``pager tune`` replays: grids, their combinations, the valid candidates.

A *grid* maps option names (``Options`` fields, or ``policy_params.X`` for one
parameter of the heat policy) to candidate values; ``parse_grid_spec`` and
``load_grid_file`` read one, ``expand_grid`` takes the product and ``validate``
lays each combination over the base (``load_base``), keeps those that build
valid options, as ``Candidate`` values, and ``cap`` samples at most
``max_points`` of them. ``DEFAULT_POINTS`` is the grid used when none is given.
Nothing here replays; ``pager.lab.tune`` holds the theory of operation.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import attrs
import orjson

from pager.errors import ConfigError, PagerError
from pager.core.heat import get_policy
from pager.options import Options, load_config, read_json_file

__all__ = [
    "DEFAULT_POINTS",
    "PARAM_PREFIX",
    "Candidate",
    "cap",
    "changes",
    "expand_grid",
    "flatten",
    "label",
    "load_base",
    "load_grid_file",
    "parse_grid_spec",
    "show",
    "validate",
]

PARAM_PREFIX = "policy_params."

# The grid used when none is given: the defaults, then one knob moved at a
# time to each side. A star, not a product, so each knob's effect can be read
# off on its own and a run on a dozen sessions stays at a few minutes.
DEFAULT_POINTS: tuple[Mapping[str, Any], ...] = (
    {},
    {"high_watermark": 20_000},
    {"high_watermark": 48_000},
    {"low_watermark": 4_000},
    {"low_watermark": 12_000},
    {"recent_units": 2},
    {"recent_units": 5},
    {"stub_threshold": 1_000},
    {"stub_threshold": 4_000},
    {"recall_pages": 0},
    {"recall_pages": 5, "recall_tokens": 1_500},
    {"policy_params.half_life": 24},
)



def _check_key(key: str) -> str:
    key = key.strip()
    if key.startswith(PARAM_PREFIX):
        if not key[len(PARAM_PREFIX):]:
            raise ConfigError(f"grid key {key!r} names no policy parameter")
        return key
    if key not in Options.names():
        raise ConfigError(
            f"unknown grid key {key!r}; valid: option names {sorted(Options.names())} "
            f"or {PARAM_PREFIX}NAME"
        )
    return key


def _scalar(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def parse_grid_spec(spec: str) -> tuple[str, list[Any]]:
    """Parse ``key=v1,v2,...`` into the key and its values.

    Values are JSON where they parse (numbers, ``true``, ``null``, objects)
    and strings otherwise, so ``policy=decay,reference`` and
    ``policy_params={"half_life": 8},{"half_life": 16}`` both work.
    """
    key, sep, rest = spec.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--grid expects KEY=V1,V2,..., got {spec!r}")
    key = _check_key(key)
    rest = rest.strip()
    try:
        # the whole list as JSON first: keeps commas inside objects intact
        values = orjson.loads(f"[{rest}]")
    except orjson.JSONDecodeError:
        values = [_scalar(v.strip()) for v in rest.split(",") if v.strip()]
    if not values:
        raise ConfigError(f"--grid {key} has no values")
    return key, list(values)


def load_grid_file(path: str | Path) -> dict[str, list[Any]]:
    """Read a grid from a JSON file holding ``{key: [values]}`` (a bare value is one value)."""
    data = read_json_file(path)
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"{path}: a grid file holds a non-empty JSON object of key: [values]")
    grid: dict[str, list[Any]] = {}
    for key, values in data.items():
        values = values if isinstance(values, list) else [values]
        if not values:
            raise ConfigError(f"{path}: grid key {key!r} has no values")
        grid[_check_key(key)] = list(values)
    return grid


def expand_grid(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Return every combination of the grid's values, in order (the first key varies slowest)."""
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


def _apply(base: Mapping[str, Any], combo: Mapping[str, Any]) -> dict[str, Any]:
    data = dict(base)
    params = dict(data.get("policy_params") or {})
    for key, value in combo.items():
        if key.startswith(PARAM_PREFIX):
            params[key[len(PARAM_PREFIX):]] = value
        elif key == "policy_params":
            params = dict(value or {})
        else:
            data[key] = value
    # a policy switched by the grid starts from its own defaults, not the base's parameters
    if "policy" in combo and "policy_params" not in combo and combo["policy"] != base.get("policy"):
        params = {k[len(PARAM_PREFIX):]: v for k, v in combo.items() if k.startswith(PARAM_PREFIX)}
    data["policy_params"] = params
    return data


def flatten(options: Mapping[str, Any]) -> dict[str, Any]:
    """Return options with ``policy_params`` spread into ``policy_params.X`` keys."""
    out = {k: v for k, v in options.items() if k != "policy_params"}
    for k, v in (options.get("policy_params") or {}).items():
        out[PARAM_PREFIX + k] = v
    return out


def changes(options: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    """Return the (flattened) options whose values differ from ``base``."""
    flat, ref = flatten(options), flatten(base)
    return {k: v for k, v in flat.items() if k not in ref or ref[k] != v}


def label(diff: Mapping[str, Any]) -> str:
    """Return ``key=value`` pairs of a configuration's changes, or ``defaults``."""
    if not diff:
        return "defaults"
    return " ".join(f"{k}={show(v)}" for k, v in diff.items())


def show(value: Any) -> str:
    """Return a value as a grid spec writes it: strings bare, the rest as JSON."""
    return value if isinstance(value, str) else orjson.dumps(value).decode()


@attrs.frozen
class Candidate:
    """One valid configuration to replay: its full options and what differs from the base."""

    options: Mapping[str, Any]
    changes: Mapping[str, Any]


def validate(
    combos: Iterable[Mapping[str, Any]],
    base: Mapping[str, Any] | None = None,
    *,
    note: Callable[[str], None] | None = None,
    strict: bool = False,
) -> list[Candidate]:
    """Return the combinations that build valid options, in order, without duplicates.

    Each is laid over ``base`` and checked with ``Options.build`` and
    ``get_policy``; an invalid one is reported through ``note`` and skipped.
    The base itself is checked too: an invalid base is a ``ConfigError``.
    With ``strict`` (a grid the user gave), a value that is valid in no
    combination (``high_watermark=-1``, ``policy=nosuch``) is a ``ConfigError``
    naming it; combinations invalid only together are still skipped.
    """
    base_opts = Options.build(base or {})
    ref = base_opts.to_dict()
    get_policy(base_opts.policy, **dict(base_opts.policy_params))
    out: list[Candidate] = []
    seen: set[bytes] = set()
    used: dict[tuple[str, bytes], bool] = {}  # (key, value) -> valid in some combination
    why: dict[tuple[str, bytes], str] = {}
    combos = list(combos)
    for combo in combos:
        pairs = [(k, orjson.dumps(v, option=orjson.OPT_SORT_KEYS)) for k, v in combo.items()]
        try:
            opts = Options.build(_apply(ref, combo))
            get_policy(opts.policy, **dict(opts.policy_params))
        except PagerError as exc:
            for pair in pairs:
                used.setdefault(pair, False)
                why.setdefault(pair, str(exc))
            if note is not None:
                note(f"skipped {label(dict(combo))}: {exc}")
            continue
        for pair in pairs:
            used[pair] = True
        data = opts.to_dict()
        key = orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
        if key in seen:
            continue
        seen.add(key)
        out.append(Candidate(options=data, changes=changes(data, ref)))
    if strict:
        bad = [pair for pair, ok in used.items() if not ok]
        # blame a value that is invalid on its own first (every combination then fails)
        for key, raw in sorted(bad, key=lambda pair: _valid_alone(ref, pair)):
            value = show(orjson.loads(raw))
            reason = _why_alone(ref, (key, raw)) or why[(key, raw)]
            raise ConfigError(f"--grid {key}={value}: no combination with it is valid: {reason}")
    return out


def _why_alone(ref: Mapping[str, Any], pair: tuple[str, bytes]) -> str | None:
    try:
        opts = Options.build(_apply(ref, {pair[0]: orjson.loads(pair[1])}))
        get_policy(opts.policy, **dict(opts.policy_params))
    except PagerError as exc:
        return str(exc)
    return None


def _valid_alone(ref: Mapping[str, Any], pair: tuple[str, bytes]) -> bool:
    return _why_alone(ref, pair) is None


def cap(candidates: Sequence[Candidate], max_points: int, *, seed: int = 0) -> list[Candidate]:
    """Return at most ``max_points`` candidates: a seeded sample, order kept, the base kept.

    The base configuration (no changes), when present, is always kept: it is
    the point every other one is read against.
    """
    if max_points < 1:
        raise ConfigError("--max-points must be at least 1")
    if len(candidates) <= max_points:
        return list(candidates)
    base = [i for i, c in enumerate(candidates) if not c.changes][:1]
    rest = [i for i in range(len(candidates)) if i not in base]
    picked = base + random.Random(seed).sample(rest, max_points - len(base))
    return [candidates[i] for i in sorted(picked)]



def load_base(config: str | Path | None, context_window: int | None = None) -> dict[str, Any]:
    """Return the base options: a config file's (if any) with ``context_window`` laid over."""
    base = load_config(config) if config is not None else {}
    if context_window is not None:
        base["context_window"] = context_window
    opts = Options.build(base)
    get_policy(opts.policy, **dict(opts.policy_params))
    return opts.to_dict()

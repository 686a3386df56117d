"""Features of a page table, and the heat policy whose weights are fitted on them.

``features(table, clock)`` turns a ``PageTable`` into a matrix, one row per
page and one column per name in ``FEATURES``: recency (linear and log), the age
of the last reference, the reference count, size, staleness, relevance to the
latest user message, task membership, overlap with the latest step and the
kind. ``FittedPolicy`` ("fitted") scores a page as the dot product of its
features with weights fitted offline by ``pager.lab.fit`` (cross-validated by
session; see docs/policies.md). Pure, like every policy.

The policy registers itself when this module is imported, and
``heat.get_policy("fitted")`` imports it on first use of the name
(``heat.SHIPPED_ELSEWHERE``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import attrs
import numpy as np

from pager.core.heat import _WEIGHT_MAX, HeatPolicy, PageTable, _age, _to_float, register_policy
from pager.core.pages import KIND_CODE
from pager.errors import ConfigError

__all__ = ["FEATURES", "FITTED_WEIGHTS", "FittedPolicy", "features"]


# The features a fitted policy weighs, in column order of ``features``. Ages
# are in steps; sizes per doubling of tokens.
FEATURES = (
    "age",            # steps since created, in units of 16 steps
    "ref_age",        # steps since the last reference (or creation), in units of 16 steps
    "log_age",        # log2(1 + steps since created)
    "log_ref_age",    # log2(1 + steps since the last reference, or creation)
    "log_refs",       # log2(1 + ref_count)
    "log_size",       # log2(1 + tokens)
    "stale",          # a superseded file read
    "relevance",      # overlap with the pinned goals and the latest user message
    "other_task",     # the page belongs to another task than the active one
    "overlap",        # overlap with the latest steps
    "assistant",      # kind one-hot (user and system are the base)
    "tool",
    "file",
)


AGE_UNIT = 16.0


def features(table: PageTable, clock: int) -> np.ndarray:
    """Return the ``(n, len(FEATURES))`` float64 feature matrix of ``table`` at ``clock``."""
    n = len(table)
    x = np.empty((n, len(FEATURES)), dtype=np.float64)
    age = _age(clock, table.created)
    ref_age = _age(clock, table.last_ref)
    x[:, 0] = age / AGE_UNIT
    x[:, 1] = ref_age / AGE_UNIT
    x[:, 2] = np.log2(1.0 + age)
    x[:, 3] = np.log2(1.0 + ref_age)
    x[:, 4] = np.log2(1.0 + np.maximum(table.ref_count, 0).astype(np.float64))
    x[:, 5] = np.log2(1.0 + np.maximum(table.tokens, 0).astype(np.float64))
    x[:, 6] = table.stale
    x[:, 7] = np.clip(np.nan_to_num(table.relevance), 0.0, 1.0)
    x[:, 8] = ~table.task
    x[:, 9] = np.clip(np.nan_to_num(table.overlap), 0.0, 1.0)
    x[:, 10] = table.kind == KIND_CODE["assistant"]
    x[:, 11] = table.kind == KIND_CODE["tool"]
    x[:, 12] = table.kind == KIND_CODE["file"]
    return x


def _signed(value: Any) -> float:
    v = _to_float(value)
    if not -_WEIGHT_MAX <= v <= _WEIGHT_MAX:
        raise ConfigError(f"a fitted weight must be in [-{_WEIGHT_MAX:g}, {_WEIGHT_MAX:g}], got {value!r}")
    return v


def _weights(value: Any) -> tuple[float, ...]:
    if isinstance(value, Mapping):
        unknown = set(value) - set(FEATURES)
        if unknown:
            raise ConfigError(f"unknown fitted features {sorted(unknown)}; valid: {', '.join(FEATURES)}")
        return tuple(_signed(value.get(name, 0.0)) for name in FEATURES)
    try:
        items = tuple(value)
    except TypeError:
        raise ConfigError(f"fitted weights are a mapping or a sequence of numbers, not {value!r}") from None
    if len(items) != len(FEATURES):
        raise ConfigError(f"fitted weights need {len(FEATURES)} numbers ({', '.join(FEATURES)}), got {len(items)}")
    return tuple(_signed(v) for v in items)


# Weights fitted by ``python -m pager.lab.fit`` on the 40 development sessions (all
# of them; the cross-validated figures are in docs/policies.md): a Poisson model
# of the residual needs of the next 8 calls a page holds, per token. Only the
# order counts.
FITTED_WEIGHTS: tuple[float, ...] = (
    -0.3715,  # age
    -0.0217,  # ref_age
    -0.2407,  # log_age
    -0.2611,  # log_ref_age
    -0.2979,  # log_refs
    -0.0948,  # log_size
    -0.7531,  # stale
    -0.1322,  # relevance
    -0.4446,  # other_task
    -0.0067,  # overlap
    1.1393,  # assistant
    0.1843,  # tool
    0.5793,  # file
)


@register_policy
@attrs.frozen
class FittedPolicy(HeatPolicy):
    """A linear score over ``FEATURES``, with weights fitted offline (``pager.lab.fit``).

    ``weights`` is a mapping from feature name to weight (missing names weigh
    0) or one number per feature in ``FEATURES`` order; ``params()`` returns
    the mapping.
    """

    name: ClassVar[str] = "fitted"
    weights: tuple[float, ...] = attrs.field(default=FITTED_WEIGHTS, converter=_weights)

    def score(self, table: PageTable, clock: int) -> np.ndarray:
        if not len(table):
            return np.zeros(0)
        x = features(table, clock)
        # column by column, not a matrix product: BLAS may round a row
        # differently by its position, and a row's score must depend on it alone
        score = np.zeros(len(table))
        for j, w in enumerate(self.weights):
            if w:
                score += w * x[:, j]
        return score

    def params(self) -> dict[str, Any]:
        return {"weights": dict(zip(FEATURES, self.weights))}



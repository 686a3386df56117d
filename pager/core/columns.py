"""The numpy columns of the history mirror, kept between calls and extended (issue 23).

``pager.core.history.History`` holds one Python list per fact of each row;
the planner and the heat policies read numpy columns. Rebuilding those over
the whole history on every call made a call cost work in proportion to the
history; ``Columns`` keeps them and appends the new rows. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from pager.core.pages import KIND_CODE, TOOL_KINDS

__all__ = ["Columns"]

# The numpy columns ``History.columns`` returns: name -> (row list it mirrors, dtype, how a value is coded).
_NUMPY_COLUMNS: dict[str, tuple[str, Any]] = {
    "page": ("page", np.int64),
    "tokens": ("tokens", np.int64),
    "stub_tokens": ("stub_tokens", np.int64),
    "compact_tokens": ("compact_tokens", np.int64),
    "unit": ("unit", np.int64),
    "created": ("step", np.int64),
    "last_ref": ("last_ref", np.int64),
    "ref_count": ("ref_count", np.int64),
    "kind": ("kind", np.int8),
    "stale": ("stale", bool),
    "tool": ("kind", bool),
}
# Columns whose values change for rows already there (references, staleness, counted compact lines).
_MUTABLE_COLUMNS = ("last_ref", "ref_count", "stale", "compact_tokens")


def _coded(name: str, values: Sequence[Any]) -> Sequence[Any]:
    """Return a row list's values as the numpy column ``name`` holds them."""
    if name == "kind":
        return [KIND_CODE[k] for k in values]
    if name == "tool":
        return [k in TOOL_KINDS for k in values]
    return values


class Columns:
    """The numpy columns of a ``History``, kept and extended rather than rebuilt each call.

    Each array has spare capacity (doubled when full), so appending rows costs
    work in proportion to the rows appended; rows whose references or
    staleness changed are rewritten one by one. ``views`` returns read-only
    views of the first ``n`` rows: a caller that needs to change a column
    copies it first.
    """

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self.rows = 0
        self.dirty: set[int] = set()

    def views(self, h: Any) -> dict[str, np.ndarray]:
        n = len(h.page)
        if self.rows > n:  # fewer rows than mirrored: History resets on truncate, so only defensively
            self.arrays, self.rows, self.dirty = {}, 0, set()
        cap = len(self.arrays["page"]) if self.arrays else -1
        if n > cap:
            cap = max(n, 2 * cap, 64)
            grown = {}
            for name, (_src, dtype) in _NUMPY_COLUMNS.items():
                a = np.zeros(cap, dtype=dtype)
                if self.arrays:
                    a[: self.rows] = self.arrays[name][: self.rows]
                grown[name] = a
            self.arrays = grown
        m = self.rows
        if n > m:
            for name, (src, _dtype) in _NUMPY_COLUMNS.items():
                self.arrays[name][m:n] = _coded(name, getattr(h, src)[m:n])
        for r in self.dirty:
            if r < m:
                for name in _MUTABLE_COLUMNS:
                    self.arrays[name][r] = getattr(h, name)[r]
        self.dirty.clear()
        self.rows = n
        out = {}
        for name, a in self.arrays.items():
            v = a[:n]
            v.flags.writeable = False
            out[name] = v
        return out

"""A converted history whose head is converted only where it is read (issue 23: a reopen in O(what is read)).

A format that converts turns each wire item into one or more neutral
messages (Anthropic Messages), or a group of items into one (Responses). On
the first call after a reopen the whole history comes back, and converting
all of it cost 1.2 s at 50,000 Anthropic messages, though the stored wire
digest (``pager.core.digest``) already vouches that those items are the
recorded ones and the scheduler reads a few hundred of them.

``LazyRows`` is a ``list`` whose vouched head holds one ``Pending`` per
neutral row: a small object naming its wire item (the group's first) and its
place among that item's rows. Read through the list (an index, a slice,
iteration), a pending row is converted, with the rest of its item's rows,
once, and the neutral message returned; the slot itself keeps its ``Pending``, so the list's
identity for the recorder (``Recorder.same_prefix`` compares lists of rows
by object, in C) is the same on every call, and the list is extended in
place by later calls as any owned conversion is (``pager.formats._heads``).

What reads the raw slots in C sees the ``Pending``: ``==`` (a ``Pending``
compares by its converted value, so equality is value equality), ``in``,
``index``; orjson raises ``TypeError`` on one (the digest then falls back to
the message-by-message path, which reads through the list). Slices and
concatenations are ``LazyRows`` again. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import accumulate, repeat
from typing import Any, SupportsIndex, overload

import numpy as np

__all__ = ["LazyRows", "Pending", "first_pending", "lazy_groups", "lazy_head", "slots"]

Convert = Callable[[int, Any], Sequence[Mapping[str, Any]]]


class _Source:
    """The wire items of a vouched head and their conversions, shared by every ``Pending`` of one head."""

    __slots__ = ("items", "convert", "done")

    def __init__(self, items: Sequence[Any], convert: Convert) -> None:
        self.items = items
        self.convert = convert
        self.done: dict[int, Sequence[Mapping[str, Any]]] = {}

    def rows(self, j: int) -> Sequence[Mapping[str, Any]]:
        out = self.done.get(j)
        if out is None:
            out = self.done[j] = self.convert(j, self.items[j])
        return out


class Pending:
    """Row ``part`` of wire item ``item``'s neutral messages, not converted yet."""

    __slots__ = ("src", "item", "part")

    def __init__(self, src: _Source, item: int, part: int) -> None:
        self.src = src
        self.item = item
        self.part = part

    def value(self) -> Mapping[str, Any]:
        return self.src.rows(self.item)[self.part]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Pending):
            return other.src is self.src and other.item == self.item and other.part == self.part \
                or other.value() == self.value()
        return bool(self.value() == other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = None  # type: ignore[assignment] - as the dict it stands for

    def __repr__(self) -> str:
        return f"Pending(item={self.item}, part={self.part})"


def _read(v: Any) -> Any:
    return v.value() if type(v) is Pending else v


class LazyRows(list):  # type: ignore[type-arg]
    """A list of neutral messages whose ``Pending`` slots convert when read (see the module docstring)."""

    __slots__ = ()

    @overload
    def __getitem__(self, i: SupportsIndex) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> "LazyRows": ...

    def __getitem__(self, i: Any) -> Any:
        v = list.__getitem__(self, i)
        if type(i) is slice:
            return LazyRows(v)
        return v.value() if type(v) is Pending else v

    def __iter__(self) -> Iterator[Any]:
        return map(_read, list.__iter__(self))

    def __reversed__(self) -> Iterator[Any]:
        return map(_read, list.__reversed__(self))

    def copy(self) -> "LazyRows":
        return LazyRows(self)

    def __add__(self, other: Any) -> "LazyRows":  # type: ignore[override]
        out = LazyRows(self)
        out.extend(other)
        return out

    def __radd__(self, other: Any) -> "LazyRows":
        out = LazyRows(other)
        list.extend(out, list.__iter__(self))
        return out

    def pop(self, i: SupportsIndex = -1) -> Any:
        return _read(list.pop(self, i))


def lazy_head(lead: Sequence[Mapping[str, Any]], items: Sequence[Any], count: Callable[[Any], int],
              convert: Convert) -> tuple[LazyRows, list[int]] | None:
    """Return ``(rows, ends)`` for ``items`` unconverted: ``lead``, then a ``Pending`` per neutral row.

    ``count(item)``: how many neutral messages ``convert`` makes of it, or -1 when it cannot tell
    without converting (then None: the caller converts as usual). ``ends[j + 1]``: the rows up to
    item ``j``'s last, as a head memo keeps them (``ends[0]`` is ``len(lead)``).
    """
    counts = list(map(count, items))
    if counts and min(counts) < 0:
        return None
    src = _Source(items, convert)
    rows = LazyRows(lead)
    ends = list(accumulate(counts, initial=len(lead)))
    if counts.count(1) == len(counts):  # one row an item, the usual case
        item_of: Any = range(len(counts))
        part_of: Any = repeat(0)
    else:  # each row's item and place in it, worked out by numpy: the stand-ins are then made in C's loop
        n = np.asarray(counts, dtype=np.int64)
        item_np = np.repeat(np.arange(len(counts), dtype=np.int64), n)
        item_of = item_np.tolist()
        part_of = (np.arange(len(item_np), dtype=np.int64) - (np.asarray(ends[:-1], dtype=np.int64)
                                                              - len(lead))[item_np]).tolist()
    rows.extend(map(Pending, repeat(src), item_of, part_of))
    return rows, ends


def lazy_groups(lead: Sequence[Mapping[str, Any]], items: Sequence[Any], starts: Sequence[int],
                convert: Convert) -> LazyRows:
    """Return ``lead``, then one ``Pending`` row per group of ``items`` (a format that merges items: Responses).

    ``starts``: the first item of each group, ascending; ``convert(j, items[j])`` makes the one
    neutral message of the group starting at ``j`` (a one-element sequence).
    """
    src = _Source(items, convert)
    rows = LazyRows(lead)
    rows.extend([Pending(src, j, 0) for j in starts])
    return rows


def first_pending(rows: Sequence[Any], upto: int) -> int:
    """Return the index of the first ``Pending`` slot of ``rows`` before ``upto`` (``upto`` when none)."""
    if not isinstance(rows, LazyRows):
        return upto
    for i in range(upto):
        if type(list.__getitem__(rows, i)) is Pending:
            return i
    return upto


def slots(rows: Sequence[Any], start: int, stop: int | None = None) -> list[Any]:
    """Return ``rows[start:stop]`` as a plain list of the objects the list holds (a lazy one's stand-ins).

    What the recorder keeps to know rows by identity on the next call: a ``LazyRows`` slot keeps its
    ``Pending`` for good, so keeping the converted message instead would compare every such row by
    value on every later call.
    """
    if isinstance(rows, list):
        return list.__getitem__(rows, slice(start, stop))
    return list(rows[start:stop])

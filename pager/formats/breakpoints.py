"""Cache breakpoints: where pager puts Anthropic's ``cache_control`` marks. Pure.

Theory of operation. Anthropic caches a prompt prefix only up to a block
marked ``cache_control``, at most 4 marks per request; a mark reads the
longest prefix already cached at any block boundary up to about 20 blocks
before it (the lookback), and writes its own prefix. pager knows where its
prompt stays byte-stable between calls, so it marks, in this order of
priority:

1. the end of this prompt, so the next call (this prompt plus what the
   turn appends) reads it;
2. the end of the prefix shared with the previous prompt
   (``RenderHints.previous``), which the previous call's end mark wrote: an
   exact hit however many blocks were appended since, where the lookback
   alone would miss past 20;
3. the end of tools and system (L1), stable for the whole session;
4. the end of the old generation (``RenderHints.stable``), stable until the
   next round.

Marks falling on the same block count once; spare marks go where the gap
between two marks is longer than the lookback, 20 blocks before the later
one, so a later prompt that diverges inside the gap still finds an entry.
Thinking blocks and empty text cannot carry a mark: a mark for one moves to
the nearest markable block before it.

Modes (``cache_marks``): ``"pager"`` (default) strips the caller's marks and
places pager's; ``"merge"`` keeps the caller's (their last four, if more) and
adds pager's in the free slots; ``"caller"`` keeps the caller's and adds none.
pager's marks are 5-minute entries (``{"type": "ephemeral"}``), except in
``merge`` mode before a kept 1-hour mark of the caller's: the API wants
longer-lived marks first, so those live an hour too.
"""

from __future__ import annotations

import bisect
from typing import Callable, Sequence

import attrs

from pager.core.describe import brief
from pager.errors import ConfigError

__all__ = ["LOOKBACK_BLOCKS", "MAX_BREAKPOINTS", "MODES", "Columns", "Slot", "boundary", "check_mode", "columns", "place",
           "place_columns"]

MAX_BREAKPOINTS = 4
LOOKBACK_BLOCKS = 20
MODES = ("pager", "merge", "caller")


@attrs.frozen(slots=True)
class Slot:
    """One block of the prompt, in prompt order (tools, system, messages).

    ``source``: the neutral message it came from (-1 for a tool definition);
    ``markable``: it may carry ``cache_control``; ``caller``: the caller marked it.
    """

    source: int
    markable: bool = True
    caller: bool = False


def check_mode(mode: str) -> str:
    """Return ``mode`` when it is a known ``cache_marks`` mode; ``ConfigError`` otherwise."""
    if mode not in MODES:
        raise ConfigError(f"cache_marks must be one of {list(MODES)}, got {brief(mode)}")
    return mode


@attrs.frozen(slots=True)
class Columns:
    """The slots of a prompt as ``place_columns`` reads them, without a ``Slot`` per block.

    ``markable[i]``: slot ``i`` may carry a mark; ``caller``: the slots the
    caller marked, ascending; ``first_at_least(count)``: the first slot whose
    source is ``count`` or more (``n`` when none). A format that keeps its
    slots between calls answers these without walking the prompt.
    """

    n: int
    markable: Sequence[bool]
    caller: Sequence[int]
    first_at_least: Callable[[int], int]


def columns(slots: Sequence[Slot]) -> Columns:
    """Return ``slots`` as ``Columns`` (the boundaries by bisection on the running maximum of the sources)."""
    top: list[int] = []
    for s in slots:
        top.append(max(top[-1], s.source) if top else s.source)
    return Columns(n=len(slots), markable=[s.markable for s in slots],
                   caller=[i for i, s in enumerate(slots) if s.caller],
                   first_at_least=lambda count: bisect.bisect_left(top, count))


def _markable_at_or_before(markable: Sequence[bool], i: int) -> int | None:
    while i >= 0:
        if markable[i]:
            return i
        i -= 1
    return None


def boundary(slots: Sequence[Slot], count: int) -> int | None:
    """Return the last markable slot whose prefix comes only from neutral messages ``< count``."""
    return _boundary(columns(slots), count)


def _boundary(cols: Columns, count: int) -> int | None:
    return _markable_at_or_before(cols.markable, cols.first_at_least(count) - 1)


def place(
    slots: Sequence[Slot],
    *,
    l1: int,
    stable: int,
    previous: int | None,
    mode: str = "pager",
    limit: int = MAX_BREAKPOINTS,
    lookback: int = LOOKBACK_BLOCKS,
) -> list[int]:
    """Return the slot indices to mark, sorted (at most ``limit``). See the module docstring.

    ``l1``, ``stable`` and ``previous`` are counts of neutral messages (the
    prefix ends after that many).
    """
    return place_columns(columns(slots), l1=l1, stable=stable, previous=previous, mode=mode, limit=limit,
                         lookback=lookback)


def place_columns(
    cols: Columns,
    *,
    l1: int,
    stable: int,
    previous: int | None,
    mode: str = "pager",
    limit: int = MAX_BREAKPOINTS,
    lookback: int = LOOKBACK_BLOCKS,
) -> list[int]:
    """``place`` on ``Columns``: the work is the marks', not the prompt's."""
    check_mode(mode)
    chosen: set[int] = set()
    if mode != "pager":
        chosen.update(cols.caller[-limit:])
        if mode == "caller":
            return sorted(chosen)
    wanted = [_markable_at_or_before(cols.markable, cols.n - 1)]
    if previous is not None:
        wanted.append(_boundary(cols, previous))
    wanted.append(_boundary(cols, l1))
    wanted.append(_boundary(cols, stable))
    for w in wanted:
        if len(chosen) >= limit:
            break
        if w is not None:
            chosen.add(w)
    while chosen and len(chosen) < limit:
        marks = sorted(chosen)
        gaps = [(b - a, b) for a, b in zip([-1, *marks], marks) if b - a > lookback]
        if not gaps:
            break
        _gap, later = max(gaps)
        spot = _markable_at_or_before(cols.markable, later - lookback)
        if spot is None or spot in chosen:
            break
        chosen.add(spot)
    return sorted(chosen)

"""The Responses format's wire digest and its lazy head after a reopen (``pager.formats.lazy``). Pure.

Responses merges a run of model items (reasoning, an assistant message, its
calls) into one neutral message, so a neutral row is a group of items, and
the format's head memo keeps no per-item ends. The wire digest
(``pager.core.digest``, the items without marks, ``id`` or ``status``)
therefore ends where a group starts, all but the newest few items: a reopen
that matches it leaves every group before it unconverted, and the memo's state
(the open calls, every call id, whether the last item was a run) is read off
the items without converting them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pager.core.digest import ITEM_KEYS, NO_DIGEST, WIRE_LAG, RunningDigest, StoredDigest, WireRun, digest_wire
from pager.errors import InputError, MessageError
from pager.formats.lazy import LazyRows, lazy_groups
from pager.formats._convert import as_plain
from pager.formats.responses_items import item_kind, item_parts, output_message, run_message
from pager.formats.responses_render import CALL_TYPES

__all__ = ["vouched_head", "wire_of"]


def _group(items: Sequence[Any], kinds: Sequence[str], start: int) -> dict[str, Any]:
    """Return the neutral message of the group of ``items`` starting at ``start`` (as ``to_messages`` makes it)."""
    kind = kinds[start]
    if kind == "run":
        end = start + 1
        while end < len(items) and kinds[end] == "run":
            end += 1
        return run_message(start, items[start:end])
    if kind == "output":
        return output_message(start, items[start])
    it = items[start]
    return {"role": it["role"], "content": item_parts(start, it.get("content")), "native": it}


def _kind(item: dict[str, Any]) -> str:
    """``item_kind`` of an item the conversion accepted once (a vouched one): without its checks."""
    itype = item.get("type")
    if itype is None or itype == "message":
        return "run" if item.get("role") == "assistant" else "message"
    return "output" if itype.endswith("_output") else "run"


def _starts(kinds: Sequence[str], lo: int, hi: int) -> list[int]:
    """Return the first item of each group that starts in ``[lo, hi)`` (``lo`` starts one)."""
    return [i for i in range(lo, hi) if i == lo or kinds[i] != "run" or kinds[i - 1] != "run"]


def vouched_head(name: str, items: Sequence[Any], lead: Any, vouch: StoredDigest
                 ) -> tuple[LazyRows, tuple[frozenset[str], set[str], bool], RunningDigest] | None:
    """Return ``(rows, state, run)`` for the items a stored wire digest vouches for, unconverted; else None.

    ``rows``: the lead, then a ``Pending`` per group; ``state``: the memo state ``to_messages`` would
    have after converting them; ``run``: the digest, over ``run.rows`` items.
    """
    run = vouch.vouches(name, items, ITEM_KEYS)
    if run is None:
        return None
    n = run.rows
    head = items[:n]
    if not all(type(it) is dict for it in head):
        return None
    kinds = list(map(_kind, head))
    starts = _starts(kinds, 0, n)
    first = [] if lead is None else [lead]
    if len(first) + len(starts) != vouch.wire_rows:
        return None
    rows = lazy_groups(first, head, starts, lambda j, _item: (_group(head, kinds, j),))
    # the memo's state after these items, as the conversion loop leaves it: the calls the last assistant
    # run left open, less those answered since (a message closes them all); every call id of the history
    open_calls: set[str] = set()
    g = len(starts) - 1
    while g >= 0 and kinds[starts[g]] != "run":
        g -= 1
    if g >= 0:
        open_calls = {c["id"] for c in rows[len(first) + g].get("tool_calls") or ()}
        for s in starts[g + 1:]:
            if kinds[s] == "output":
                open_calls.discard(head[s]["call_id"])
            else:
                open_calls = set()
    seen = {it["call_id"] for it in head if it.get("type") in CALL_TYPES}
    return rows, (frozenset(open_calls), seen, kinds[-1] == "run"), run


def wire_of(name: str, items: Sequence[Any], kinds: Sequence[str], k: int, run: RunningDigest | None,
            rows: int) -> tuple[RunningDigest | None, WireRun | None]:
    """Return the items' wire digest, extended to a group start before the newest ``WIRE_LAG`` items, and its ``WireRun``.

    ``kinds``: of ``items[k:]``; ``run``: the digest so far (None: from the first item); ``rows``:
    the neutral rows of all ``items``, the lead included. O(new items) but after a fork or a reopen.
    """
    def kind(i: int) -> str:
        return kinds[i - k] if i >= k else item_kind(i, as_plain(items[i]))

    try:
        upto = max(0, len(items) - WIRE_LAG)
        while 0 < upto and kind(upto) == "run" and kind(upto - 1) == "run":
            upto -= 1
        if run is not NO_DIGEST and (run is None or upto > run.rows):
            run = digest_wire(items, upto, run.copy() if run is not None else None, transport=ITEM_KEYS) or NO_DIGEST
        if run is NO_DIGEST:
            return run, None
        b = run.rows
        tail = [kind(i) for i in range(b, len(items))]
    except (MessageError, InputError, TypeError, AttributeError):
        return run, None
    return run, WireRun(name, run, rows - len(_starts(tail, 0, len(tail))))

"""Tool-call / tool-result pairing: the rules, stated once.

Theory of operation. A provider rejects a prompt in which a tool call has no
result or a result answers no call. pager's planner removes and stubs history,
so every rule that keeps a prompt valid lives here, as pure functions over
lists of OpenAI chat messages (dicts), and nowhere else:

1. A *unit* is an assistant message that makes tool calls together with the
   tool messages answering those calls; any other message is a unit of one.
   Eviction keeps, stubs or drops whole units, never half of one.
2. Every call has exactly one result, placed after its call and before the
   next non-tool message. A call left unanswered in the history gets a
   synthetic result (``SYNTHETIC_RESULT``), derived deterministically from the
   call id so that re-emitting it is byte-identical and the prompt cache holds.
3. A result answering no earlier, still-open call is an *orphan*. In caller
   input it is an error (``MessageError``); in output it is dropped.
4. A stub replaces a result's content only; its ``tool_call_id`` stays, so the
   pair stays a pair.
5. Messages pager inserts (the task-state card, recalled pages, notices) go
   only at unit boundaries, never between a call and its results.

``check`` returns the violations of these rules in a prompt; the property
tests and the replay benchmark both use it.

Between rounds a prompt is the previous one plus a few messages at the tail
(issue 23). ``normalize_after`` reuses the previous result up to the last
*closed point* the two inputs share: a position where no call is open, so no
later message can bind to a unit before it, and the output up to there is
final whatever follows. Its result is ``normalize``'s, always.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import bisect

import attrs

from pager.core.canonical import same_objects

__all__ = [
    "SYNTHETIC_RESULT",
    "Unit",
    "call_ids",
    "check",
    "group_units",
    "Normalized",
    "normalize",
    "normalize_after",
    "synthetic_result",
]

SYNTHETIC_RESULT = "[no result was recorded for this tool call]"


def call_ids(message: Mapping[str, Any]) -> tuple[str, ...]:
    """Return the ids of the tool calls an assistant message makes (in order)."""
    if message.get("role") != "assistant":
        return ()
    return tuple(str(c.get("id")) for c in (message.get("tool_calls") or ()))


def synthetic_result(call_id: str) -> dict[str, Any]:
    """Return the tool message standing in for a call that has no recorded result."""
    return {"role": "tool", "tool_call_id": call_id, "content": SYNTHETIC_RESULT}


@attrs.frozen(slots=True)
class Unit:
    """Positions (into the message list) of one unit: a call message and its results."""

    head: int
    results: tuple[int, ...] = ()
    missing: tuple[str, ...] = ()  # call ids with no result in the history

    @property
    def positions(self) -> tuple[int, ...]:
        return (self.head, *self.results)


def group_units(messages: Sequence[Mapping[str, Any]]) -> tuple[list[Unit], list[int]]:
    """Split messages into units (rule 1); return ``(units, orphan_positions)``.

    A result is bound to the nearest earlier open call with its id, even when
    other messages stand between them; the unit is emitted in call order with
    its results right after it.
    """
    units: list[Unit] = []
    orphans: list[int] = []
    open_calls: dict[str, int] = {}  # call id -> index into units
    results: dict[int, list[int]] = {}
    for pos, msg in enumerate(messages):
        role = msg.get("role")
        if role == "tool":
            cid = str(msg.get("tool_call_id"))
            u = open_calls.pop(cid, None)
            if u is None:
                orphans.append(pos)
            else:
                results.setdefault(u, []).append(pos)
            continue
        ids = call_ids(msg)
        units.append(Unit(head=pos))
        for cid in ids:
            open_calls[cid] = len(units) - 1
    out = []
    for i, unit in enumerate(units):
        res = tuple(results.get(i, ()))
        ids = call_ids(messages[unit.head])
        answered = {str(messages[p].get("tool_call_id")) for p in res}
        missing = tuple(c for c in ids if c not in answered)
        out.append(Unit(head=unit.head, results=res, missing=missing))
    return out, orphans


def normalize(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Return messages that satisfy rules 2 and 3: results follow their calls, none missing, no orphans."""
    return _emit(messages, group_units(messages)[0])


def _emit(messages: Sequence[Mapping[str, Any]], units: Sequence[Unit]) -> list[Mapping[str, Any]]:
    out: list[Mapping[str, Any]] = []
    for unit in units:
        out.append(messages[unit.head])
        out.extend(messages[p] for p in unit.results)
        out.extend(synthetic_result(cid) for cid in unit.missing)
    return out


@attrs.frozen(slots=True)
class Normalized:
    """``normalize(source)`` as ``out``, with the closed points that let a longer prompt reuse it.

    ``points[i]`` is a position of ``source`` where no call is open; ``sizes[i]``
    how many messages of ``out`` come from before it.
    """

    source: Sequence[Mapping[str, Any]]
    out: list[Mapping[str, Any]]
    points: tuple[int, ...] = (0,)
    sizes: tuple[int, ...] = (0,)


def _closed_points(messages: Sequence[Mapping[str, Any]], start: int) -> list[int]:
    """Return the positions from ``start`` on (after the first message) where no call is open.

    Mirrors ``group_units``' binding: a result closes the call it answers; a
    new call with an id already open replaces it (the older one stays
    unanswered for good, so it keeps nothing open).
    """
    points: list[int] = []
    open_calls: set[str] = set()
    for pos in range(start, len(messages)):
        msg = messages[pos]
        if msg.get("role") == "tool":
            open_calls.discard(str(msg.get("tool_call_id")))
        else:
            open_calls.update(call_ids(msg))
        if not open_calls:
            points.append(pos + 1)
    return points


def normalize_after(messages: Sequence[Mapping[str, Any]], prev: Normalized | None = None) -> Normalized:
    """Return ``normalize(messages)`` with its closed points, reusing ``prev`` where the inputs are the same.

    The part of ``messages`` before the last closed point of ``prev`` that
    lies within their run of the very same objects is not looked at again.
    """
    start = size = 0
    points: list[int] = [0]
    sizes: list[int] = [0]
    if prev is not None:
        same = same_objects(messages, prev.source)
        k = bisect.bisect_right(prev.points, same) - 1  # the last closed point inside the shared run
        start, size = prev.points[k], prev.sizes[k]
        points, sizes = list(prev.points[: k + 1]), list(prev.sizes[: k + 1])
    rest = messages[start:]
    units, _orphans = group_units(rest)
    tail = _emit(rest, units)
    out = prev.out[:size] + tail if prev is not None and size else tail
    if rest:
        # the tail's closed points and the output size before each: a closed point ends a run of whole units
        ends = _closed_points(rest, 0)
        emitted, u = 0, 0
        for end in ends:
            while u < len(units) and units[u].head < end:
                emitted += 1 + len(units[u].results) + len(units[u].missing)
                u += 1
            points.append(start + end)
            sizes.append(size + emitted)
    return Normalized(source=list(messages), out=out, points=tuple(points), sizes=tuple(sizes))


def check(messages: Iterable[Mapping[str, Any]]) -> list[str]:
    """Return the pairing violations of a prompt (empty when it is valid for the provider)."""
    problems: list[str] = []
    open_calls: set[str] = set()
    opened_at = -1
    for pos, msg in enumerate(messages):
        role = msg.get("role")
        if role == "tool":
            cid = str(msg.get("tool_call_id"))
            if cid not in open_calls:
                problems.append(f"messages[{pos}]: tool result {cid!r} answers no open call")
            open_calls.discard(cid)
            continue
        if open_calls:
            problems.append(
                f"messages[{opened_at}]: calls {sorted(open_calls)} have no result before messages[{pos}]"
            )
            open_calls = set()
        ids = call_ids(msg)
        if ids:
            open_calls = set(ids)
            opened_at = pos
    if open_calls:
        problems.append(f"messages[{opened_at}]: calls {sorted(open_calls)} have no result")
    return problems

"""A message's identity: its canonical form, without what clients move between calls. Pure.

A client resends its whole history every call, but not always byte for
byte. Some fields are transport, not content, and move from call to call:

- Anthropic ``cache_control`` marks. Claude Code marks the newest block of
  every request, so message N carries a mark in request N and none in N+1;
  other clients mark the system prompt on some calls only.
  A format keeps a marked block list as ``native`` beside its ``content``;
  unmarked, that list is the content, and the canonical form drops it.
- OpenAI Responses item ``id`` and ``status``. An item echoed back from a
  response carries them (``msg_…``, ``"completed"``); Codex serialises its
  history without them, the Agents SDK with them; a client may switch when it
  rebuilds its list. The pairing key of a call is its ``call_id``, which stays.

Comparing and hashing on the canonical form keeps one conversation one
history: a moved mark is not an edit, so nothing forks and the prompt prefix
stays "kept". The canonical form is for identity only: the store keeps the
bytes the caller sent, and the prompt pager emits is built from them.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from itertools import compress, count, islice
from typing import Any

import orjson

__all__ = ["CACHE_KEY", "RESPONSES_ITEM_KEYS", "canonical", "canonical_bytes", "has_transport", "item_has_transport",
           "resent", "same_run", "unmarked", "unmarked_item",
           "same_message", "same_messages", "same_objects"]

CACHE_KEY = "cache_control"
# keys of a Responses item (at the top of a neutral message's ``native``) that are transport
RESPONSES_ITEM_KEYS = ("id", "status")
# item types of the Responses API: only these lose their ``id`` (an Anthropic ``tool_use`` id pairs its result)
_ITEM_TYPES = frozenset({
    "message", "reasoning", "function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output",
    "local_shell_call", "local_shell_call_output", "shell_call", "shell_call_output", "apply_patch_call",
    "apply_patch_call_output", "computer_call", "computer_call_output", "web_search_call", "file_search_call",
    "image_generation_call", "code_interpreter_call", "mcp_call", "mcp_list_tools", "mcp_approval_request",
    "mcp_approval_response",
})
_MARK = b'"cache_control"'


def _is_item(value: Any) -> bool:
    if type(value) is not dict and not isinstance(value, Mapping):  # a dict first: the ABC's check is slower
        return False
    itype = value.get("type")
    if itype is None:
        return "role" in value and ("id" in value or "status" in value)
    return isinstance(itype, str) and itype in _ITEM_TYPES


def item_has_transport(native: Any) -> bool:
    """Return whether a neutral message's ``native`` holds a Responses item with an ``id`` or ``status``."""
    items = native if isinstance(native, (list, tuple)) else (native,)
    return any(_is_item(it) and any(k in it for k in RESPONSES_ITEM_KEYS) for it in items)


def _unmark(value: Any) -> Any:
    """Return ``value`` without ``cache_control`` keys at any depth (copies only what changes)."""
    if isinstance(value, Mapping):
        return {k: _unmark(v) for k, v in value.items() if k != CACHE_KEY}
    if isinstance(value, (list, tuple)):
        return [_unmark(v) for v in value]
    return value


def unmarked(value: Any) -> Any:
    """Return ``value`` without ``cache_control`` keys at any depth (a wire item as its digest sees it)."""
    return _unmark(value)


def unmarked_item(value: Any) -> Any:
    """Return a Responses item without its marks, ``id`` and ``status`` (a wire item as its digest sees it)."""
    return _strip_item(_unmark(value))


def _strip_item(item: Any) -> Any:
    if _is_item(item):
        return {k: v for k, v in item.items() if k not in RESPONSES_ITEM_KEYS}
    return item


def has_transport(message: Mapping[str, Any], raw: bytes | None = None) -> bool:
    """Return whether ``message`` carries a transport-only field (``raw``: its orjson bytes, when known)."""
    if raw is not None:
        if _MARK in raw:
            return True
    elif _MARK in orjson.dumps(message):
        return True
    native = message.get("native")
    return native is not None and item_has_transport(native)


def canonical(message: Mapping[str, Any]) -> Mapping[str, Any]:
    """Return ``message`` in canonical form (``message`` itself when it has no transport field)."""
    if not has_transport(message):
        return message
    out: dict[str, Any] = dict(_unmark(message))
    native = out.get("native")
    if isinstance(native, list):
        out["native"] = [_strip_item(it) for it in native]
    elif native is not None:
        out["native"] = _strip_item(native)
    if "native" in out and out["native"] == out.get("content"):
        # a format keeps the blocks as ``native`` only when they hold more than ``content`` (a mark, say):
        # unmarked, they are the content itself, as the same message sent without a mark converts
        del out["native"]
    return out


def canonical_bytes(message: Mapping[str, Any], raw: bytes | None = None) -> bytes:
    """Return the sorted-key orjson bytes of ``message``'s canonical form (``raw``: its own bytes, if known)."""
    if raw is None:
        raw = orjson.dumps(message, option=orjson.OPT_SORT_KEYS)
    if not has_transport(message, raw):
        return raw
    return orjson.dumps(canonical(message), option=orjson.OPT_SORT_KEYS)


def same_message(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Return whether two messages are the same content (equal, or equal in canonical form)."""
    if a is b or a == b:
        return True
    return canonical(a) == canonical(b)


def same_messages(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> bool:
    """Return whether two message lists are the same content, message by message."""
    return len(a) == len(b) and all(same_message(x, y) for x, y in zip(a, b))


def same_objects(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Return how many leading items of ``a`` and ``b`` are the very same objects.

    The test of the incremental paths (issue 23): a prompt between rounds is
    the previous one plus new messages, so what was worked out for the same
    objects is reused. Identity, never equality: ``{"a": 1} == {"a": True}``,
    yet they serialise differently. The scan runs in C (``map`` over
    ``operator.is_``): a few nanoseconds an item.
    """
    n = min(len(a), len(b))
    same = list(map(operator.is_, _slots(a), _slots(b)))  # stops at the shorter
    try:
        return same.index(False)
    except ValueError:
        return n


def _slots(seq: Sequence[Any]) -> Any:
    """Iterate a list's own slots: a list that converts its items when read (``pager.formats.lazy``)
    is compared by the objects it holds, which stand for the same rows on every call."""
    return list.__iter__(seq) if isinstance(seq, list) else iter(seq)


def resent(previous: Sequence[Any] | None, items: Any) -> Any:
    """Return ``items`` with its leading items equal to ``previous``'s replaced by those very objects.

    A caller that builds its history anew for each call (decoded from JSON,
    rebuilt from its own records, a proxy's parsed body) sends equal values
    in new objects, and every same-object path after it (the formats'
    conversion memos, the recorder, the renderers) would start from scratch:
    an Anthropic history of 1k messages cost ~60 ms a call that way, ~4 ms
    as the same objects (issue 23). Handing back the previous objects for the
    head the two share makes the call cost what is new again.

    Returning ``items`` unchanged is always correct (what follows matches
    messages its own way); this only saves work. So a caller that resends
    the same objects, the common case, costs one identity test: the last
    item the two lists share is the same object, and ``items`` comes back
    whatever the middle holds (a 50k-message history would cost 2-4 ms a
    call to walk). The item before it counts too: a client that moves its
    cache mark to its newest message (Claude Code, through the proxy) resends
    the one it marked before as a new object, every call, and the walk would
    end there anyway with ``items`` unchanged. Otherwise the head is found
    in C: the run of the very same objects, then of equal ones (``==``, stopping at the first that
    differs). Equal is Python's, as the recorder's ``same_prefix`` has it: a
    message resent with only ``1`` swapped for ``1.0`` or ``true`` is the
    message recorded. A value whose ``==`` raises ends the head there.
    """
    if not previous or not isinstance(items, list):
        return items
    n = min(len(previous), len(items))
    if not n or items[n - 1] is previous[n - 1] or (n > 1 and items[n - 2] is previous[n - 2]):
        return items
    k, j = same_run(items, previous)
    if j == k:
        return items
    return [*previous[:j], *items[j:]]


def same_run(a: Sequence[Any], b: Sequence[Any]) -> tuple[int, int]:
    """Return ``(k, j)``: ``a`` and ``b`` lead with ``k`` of the very same objects, then equal (``==``) ones to ``j``.

    The first item that is another object, then the first after it that
    differs in value, each found without a Python step per item (and the
    first at once when the lists share no object). A value whose ``==``
    raises (an SDK object's may) ends the equal run: ``j == k``.
    """
    n = min(len(a), len(b))
    k = next(compress(count(), map(operator.is_not, _slots(a), _slots(b))), n)
    try:
        j = next(compress(count(k), map(operator.ne, islice(_slots(a), k, n), islice(_slots(b), k, n))), n)
    except Exception:  # noqa: BLE001 - whatever a caller's == raises, the equal run ends at the first other object
        return k, k
    return k, j

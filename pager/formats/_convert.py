"""What the non-chat formats share: SDK objects as dicts, counted renditions, the conversion memo.

A neutral message made from a provider shape that chat messages cannot say
(a thinking block, a reasoning item, a tool result with ``is_error``) keeps
two views of it:

``content``
    What pager counts and searches: text parts (``{"type": "text", ...}``,
    the provider's own text parts by reference) and images. A block chat has
    no word for is given a text rendition here, so it is counted, never lost
    from the budget.
``native``
    The provider's payload, verbatim (the very objects the caller sent), which
    the format renders back. Absent when ``content`` already is the payload.

Conversion is memoised per original object: a harness resends its whole
history on every call, and returning the *same* neutral dicts for the same
objects lets the facade skip re-validating and re-hashing them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from pager.core.describe import brief, encode_problem, envelope
from pager.errors import InputError, ToolError

__all__ = [
    "ConversationCache", "ConversionMemo", "ValueMemo", "as_plain", "check_encodable", "flat_tool_name", "function_specs", "id_text",
    "json_text", "tool_arguments", "text_part",
]


def as_plain(obj: Any) -> Any:
    """Return ``obj`` as plain JSON data when it is an SDK (pydantic) object; else ``obj`` itself."""
    if type(obj) is dict:  # what a decoded request holds: no attribute lookup (a miss raises inside getattr)
        return obj
    dump = getattr(obj, "model_dump", None)
    if dump is not None and not isinstance(obj, Mapping):
        # exclude_none: the SDKs model optional fields as None, which the APIs
        # do not always accept back as null
        return dump(mode="json", exclude_none=True)
    return obj


def json_text(value: Any) -> str:
    """Return ``value`` as compact JSON text (keys sorted, so the same value is the same bytes).

    ``InputError`` when it is not JSON; a format checks each message with
    ``check_encodable`` first, so its error names the message.
    """
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except orjson.JSONEncodeError as exc:
        raise InputError(f"cannot encode {brief(value)}: {encode_problem(exc)}") from None


def check_encodable(value: Any, fail: Callable[[str], Exception]) -> None:
    """Raise ``fail(reason)`` when ``value`` cannot be JSON (the store keeps every message as JSON).

    The format boundary's one encoding check: a lone surrogate in any string,
    a key that is not a string, a ``bytearray`` or other non-JSON value, a
    value nested past orjson's limit. ``reason`` says which, in words.
    """
    try:  # inside a request's envelope: a message that passes is one whose request still encodes
        orjson.dumps(envelope(value))
    except orjson.JSONEncodeError as exc:
        raise fail(encode_problem(exc)) from None


def id_text(value: Any, what: str, error: type[Exception] = ToolError) -> str:
    """Return an id or name field as text: a string as is, a number spelled out, None as ``""``.

    Anything else (a list, a ``bytearray``, a dict) raises ``error`` naming its type.
    """
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise error(f"{what} must be a string, got {type(value).__name__}")


def text_part(text: str) -> dict[str, Any]:
    """Return a neutral text part."""
    return {"type": "text", "text": text}


class ConversionMemo:
    """Remember the neutral messages made from each original object, by identity.

    An entry holds the original object, so its ``id()`` cannot be reused by
    another object while the entry lives. ``sig`` is a tuple of sub-objects
    (the message's ``content``) whose identity must also match: a caller that
    replaces a message's content gets a fresh conversion. Least recently used
    entries go past ``capacity``. Thread-safe.
    """

    def __init__(self, capacity: int = 20_000) -> None:
        self.capacity = capacity
        self._d: OrderedDict[int, tuple[Any, tuple[Any, ...], Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, obj: Any, sig: tuple[Any, ...] = ()) -> Any:
        """Return what was stored for ``obj`` (None when nothing, or when ``sig`` changed)."""
        key = id(obj)
        with self._lock:
            hit = self._d.get(key)
            if hit is None or hit[0] is not obj or len(hit[1]) != len(sig):
                return None
            if any(a is not b for a, b in zip(hit[1], sig)):
                return None
            self._d.move_to_end(key)
            return hit[2]

    def put(self, obj: Any, sig: tuple[Any, ...], value: Any) -> None:
        """Remember ``value`` for ``obj``."""
        with self._lock:
            self._d[id(obj)] = (obj, sig, value)
            self._d.move_to_end(id(obj))
            while len(self._d) > self.capacity:
                self._d.popitem(last=False)

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._d.clear()

    def __len__(self) -> int:
        return len(self._d)


class ConversationCache:
    """The last value kept for each recent conversation, least recently used dropped past ``capacity``.

    Conversations are told apart by their first two message objects (the system
    prompt alone is shared by every session that has the same one). What a value
    is resumed from must still be checked against the messages (``same_objects``):
    two conversations that collide cost each other a full pass, never a wrong one.
    Thread-safe.
    """

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self._d: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _key(messages: Sequence[Any]) -> tuple[int, ...]:
        return tuple(id(m) for m in messages[:2])

    def get(self, messages: Sequence[Any]) -> Any:
        """Return the value kept for the conversation ``messages`` begins (None if none)."""
        if not messages:
            return None
        with self._lock:
            return self._d.get(self._key(messages))

    def put(self, messages: Sequence[Any], value: Any) -> None:
        """Keep ``value`` for the conversation ``messages`` begins."""
        if not messages:
            return
        with self._lock:
            key = self._key(messages)
            self._d[key] = value
            self._d.move_to_end(key)
            while len(self._d) > self.capacity:
                self._d.popitem(last=False)


class ValueMemo:
    """Remember the neutral message made from a value (a system prompt), by its JSON bytes.

    A harness often rebuilds its system prompt for every call; equal values
    must give the same neutral object, whichever session asks. Thread-safe.
    """

    def __init__(self, capacity: int = 256) -> None:
        self.capacity = capacity
        self._d: OrderedDict[bytes, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_make(self, value: Any, make: Any, what: str = "the value") -> Any:
        """Return the object remembered for ``value``, making it with ``make(value)`` the first time.

        ``InputError`` naming ``what`` when the value cannot be JSON.
        """
        plain = as_plain(value) if not isinstance(value, list) else [as_plain(v) for v in value]
        try:
            key = orjson.dumps(plain)
        except orjson.JSONEncodeError as exc:
            raise InputError(f"{what} cannot be encoded: {encode_problem(exc)}") from None
        with self._lock:
            hit = self._d.get(key)
            if hit is not None:
                self._d.move_to_end(key)
                return hit
        made = make(value)
        with self._lock:
            self._d[key] = made
            while len(self._d) > self.capacity:
                self._d.popitem(last=False)
        return made


def strip_key(block: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """Return ``block`` without ``key`` (a copy only when it has it)."""
    if key not in block:
        return block
    return {k: v for k, v in block.items() if k != key}


def first_text(parts: Sequence[Any] | str | None) -> str:
    """Return the text of a content value (string or text parts) joined by newlines."""
    if parts is None:
        return ""
    if isinstance(parts, str):
        return parts
    out = []
    for p in parts:
        if isinstance(p, Mapping) and isinstance(p.get("text"), str):
            out.append(p["text"])
    return "\n".join(out)


def function_specs(specs: Sequence[Mapping[str, Any]], schema_key: str, **extra: Any) -> list[dict[str, Any]]:
    """Return OpenAI function-tool JSON as flat tool definitions (``name``, ``schema_key``, description)."""
    out = []
    for s in specs:
        fn = s.get("function") or {}
        spec = {**extra, "name": fn.get("name"), schema_key: fn.get("parameters") or {"type": "object"}}
        if fn.get("description"):
            spec["description"] = fn["description"]
        out.append(spec)
    return out


def flat_tool_name(tool: Any) -> str | None:
    """Return the ``name`` of a flat tool definition (Anthropic, Responses), or None."""
    tool = as_plain(tool)
    if isinstance(tool, Mapping) and isinstance(tool.get("name"), str):
        return tool["name"]
    return None


def tool_arguments(raw: Any, what: str) -> str | Mapping[str, Any]:
    """Return a tool call's raw arguments (a JSON string or a mapping); ``ToolError`` otherwise."""
    if raw is None:
        return "{}"
    if not isinstance(raw, (str, Mapping)):
        raise ToolError(f"{what} must be a JSON string, got {type(raw).__name__}")
    return raw

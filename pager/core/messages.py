"""pager's message model: provider-neutral messages, their text and their page kind.

Inside pager every message is a *neutral message*: a mapping shaped like an
OpenAI chat-completions message, which is the smallest shape that says
everything the scheduler keys on::

    {"role": "system" | "developer" | "user" | "assistant" | "tool",
     "content": str | [part, ...] | None,
     "tool_calls": [{"id": str, "type": "function",
                     "function": {"name": str, "arguments": str}}],   # assistant only
     "tool_call_id": str}                                             # tool only

A wire format (``pager.formats``) turns its provider's request into neutral
messages and renders neutral messages back; whatever a provider has that this
shape lacks (thinking blocks, images, cache marks) travels in content parts
the format reads back verbatim. Pairing, heat, the planner, the store and the
recall index see only neutral messages. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs
import orjson

from pager.core.describe import brief
from pager.core.fileread import file_edits, file_read_path
from pager.core.tokens import content_text
from pager.errors import InputError, MessageError

__all__ = ["ROLES", "Classified", "ToolCall", "check_message", "classify", "message_text", "tool_calls", "validate"]


ROLES = {"system", "developer", "user", "assistant", "tool"}


def _has_lone_surrogate(value: Any) -> bool:
    # orjson refuses lone surrogates; finding them here lets us name the message
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError as exc:
        return "surrogate" in str(exc) or "str is not valid UTF-8" in str(exc)
    return False


def _validate_content(i: int, role: str, content: Any, has_calls: bool, part_types: frozenset[str] | None) -> None:
    if content is None:
        if role == "assistant" and has_calls:
            return
        if role == "assistant":
            return  # an empty assistant turn (refusal or stop) is valid upstream
        raise MessageError(i, f"{role} message has no content")
    if isinstance(content, str):
        return
    if isinstance(content, list):
        for j, part in enumerate(content):
            if not isinstance(part, Mapping):
                raise MessageError(i, f"content[{j}] must be an object, got {type(part).__name__}")
            ptype = part.get("type")
            if not isinstance(ptype, str) or (part_types is not None and ptype not in part_types):
                raise MessageError(i, f"content[{j}] has unknown type {brief(ptype)}")
            if ptype == "text" and not isinstance(part.get("text"), str):
                raise MessageError(i, f"content[{j}].text must be a string")
        return
    raise MessageError(
        i, f"content must be a string, a list of parts or null, got {type(content).__name__}"
    )


def check_message(i: int, msg: Any, part_types: frozenset[str] | None = None) -> None:
    """Check one message's shape (role, content type, tool calls); raise ``MessageError``.

    The history-level rules (results answer open calls, ids unique) are
    ``validate``'s; this is what any reader of chat messages needs.
    """
    if not isinstance(msg, Mapping):
        raise MessageError(i, f"must be an object, got {type(msg).__name__}")
    role = msg.get("role")
    if role is None:
        raise MessageError(i, "missing 'role'")
    if not isinstance(role, str) or role not in ROLES:  # an unhashable role cannot be looked up
        raise MessageError(i, f"unknown role {brief(role)} (expected one of {sorted(ROLES)})")
    calls = msg.get("tool_calls")
    if calls is not None:
        if role != "assistant":
            raise MessageError(i, f"only assistant messages make tool calls, not {role}")
        if not isinstance(calls, list):
            raise MessageError(i, "tool_calls must be a list")
        for j, call in enumerate(calls):
            if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
                raise MessageError(i, f"tool_calls[{j}] must have a 'function' object")
            cid = call.get("id")
            if not isinstance(cid, str) or not cid:
                what = "has no id" if cid is None or cid == "" else f"id must be a string, got {type(cid).__name__}"
                raise MessageError(i, f"tool_calls[{j}] {what}")
            if not isinstance(call["function"].get("arguments", ""), str):
                raise MessageError(i, f"tool_calls[{j}].function.arguments must be a JSON string")
    _validate_content(i, role, msg.get("content"), bool(calls), part_types)
    if role == "tool":
        cid = msg.get("tool_call_id")
        if not isinstance(cid, str) or not cid:
            raise MessageError(i, "tool message has no tool_call_id")


def validate(
    messages: Any,
    *,
    check_encoding: bool = True,
    start: int = 0,
    open_calls: set[str] | None = None,
    known_calls: Mapping[str, int] | None = None,
    part_types: frozenset[str] | None = None,
) -> None:
    """Check that ``messages`` is a valid neutral history; raise ``MessageError`` at the first fault.

    Checks: each message is well formed (``check_message``); tool call ids are
    unique; every tool message answers an earlier call that is still open; no
    lone surrogates (skipped with ``check_encoding=False`` by callers that
    encode every message anyway). ``part_types`` limits the content part
    types (a wire format's own list); None accepts any typed part.

    ``start`` skips messages already validated; ``open_calls`` is then the
    state at ``start`` and ``known_calls`` maps call ids seen before to the
    position of the message that made them (for the duplicate-id check).
    """
    if not isinstance(messages, (list, tuple)):
        raise InputError(f"request['messages'] must be a list, got {type(messages).__name__}")
    open_calls = set(open_calls or ())
    seen_calls: set[str] = set()
    known = known_calls or {}
    for i in range(start, len(messages)):
        msg = messages[i]
        check_message(i, msg, part_types)
        role = msg["role"]
        calls = msg.get("tool_calls") or ()
        for j, call in enumerate(calls):
            cid = call["id"]
            if cid in seen_calls or known.get(cid, i) < start:
                raise MessageError(i, f"tool_calls[{j}] reuses call id {brief(cid)}")
            seen_calls.add(cid)
        if role == "tool":
            cid = msg["tool_call_id"]
            if cid not in open_calls:
                raise MessageError(i, f"tool message answers no open call (tool_call_id {brief(cid)})")
            open_calls.discard(cid)
        elif role == "assistant":
            # calls left open by an earlier turn get a synthetic result on output
            open_calls = {c["id"] for c in calls}
        if check_encoding and _has_lone_surrogate(msg):
            raise MessageError(i, "contains a lone surrogate (text is not valid UTF-8)")


@attrs.frozen(slots=True)
class ToolCall:
    """One tool call of an assistant message: its id, tool name and raw argument string."""

    id: str
    name: str
    arguments: str


def tool_calls(message: Mapping[str, Any]) -> Iterator[ToolCall]:
    """Yield the tool calls of a (validated) neutral message, in order."""
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        args = fn.get("arguments", "")
        yield ToolCall(str(call.get("id") or ""), str(fn.get("name") or ""), args if isinstance(args, str) else str(args))


def message_text(message: Mapping[str, Any]) -> str:
    """Return the searchable text of a message: content plus tool names and arguments."""
    text = content_text(message.get("content"))
    if not message.get("tool_calls"):
        return text
    parts = [text] if text else []
    parts.extend(f"{c.name} {c.arguments}" for c in tool_calls(message))
    return "\n".join(parts)


@attrs.frozen(slots=True)
class Classified:
    """What the scheduler needs to know of one message."""

    kind: str
    role: str
    call_id: str | None = None
    call_ids: tuple[str, ...] = ()
    tool_name: str | None = None
    path: str | None = None  # a file read's page key (``pager.core.fileread``)
    edits: tuple[str, ...] = ()  # the files the call this result answers edited


def classify(
    messages: Sequence[Mapping[str, Any]], start: int = 0, calls: Mapping[str, tuple[str, str]] | None = None
) -> list[Classified]:
    """Classify ``messages[start:]``; ``calls`` maps earlier call ids to (tool name, arguments)."""
    earlier = calls or {}
    known: dict[str, tuple[str, str]] = {}  # this batch's calls, over ``earlier`` (not copied: it holds every call)
    out = []
    for msg in messages[start:]:
        role = msg["role"]
        if role in ("system", "developer"):
            out.append(Classified(kind="system", role=role))
        elif role == "user":
            out.append(Classified(kind="user", role=role))
        elif role == "assistant":
            ids = []
            for call in tool_calls(msg):
                known[call.id] = (call.name, call.arguments)
                ids.append(call.id)
            out.append(Classified(kind="assistant", role=role, call_ids=tuple(ids)))
        else:
            cid = msg["tool_call_id"]
            name, args = known.get(cid) or earlier.get(cid, ("", ""))
            path = file_read_path(name, args)
            out.append(
                Classified(
                    kind="file" if path else "tool", role=role, call_id=cid, tool_name=name or None, path=path,
                    edits=() if path else file_edits(name, args),
                )
            )
    return out

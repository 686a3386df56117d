"""OpenAI chat-completions messages: validation and classification into pages.

``validate(messages)`` raises ``MessageError`` naming the first offending
message; nothing is recorded for a request that fails it. Classification
decides each message's page kind and the facts the scheduler keys on (tool
call ids, the tool's name, the path of a file read).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import orjson

from pager.errors import InputError, MessageError, ToolError
from pager.formats.base import Converted, RenderHints, ToolCallRequest, Usage, register_format
from pager.formats.usage import parse_usage
from pager.core.tokens import content_text

__all__ = ["FORMAT", "OpenAIChat", "check_message", "validate"]

ROLES = {"system", "developer", "user", "assistant", "tool"}
PART_TYPES = {"text", "image_url", "input_audio", "file", "refusal"}


def _has_lone_surrogate(value: Any) -> bool:
    # orjson refuses lone surrogates; finding them here lets us name the message
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError as exc:
        return "surrogate" in str(exc) or "str is not valid UTF-8" in str(exc)
    return False


def _validate_content(i: int, role: str, content: Any, has_calls: bool) -> None:
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
            if ptype not in PART_TYPES:
                raise MessageError(i, f"content[{j}] has unknown type {ptype!r}")
            if ptype == "text" and not isinstance(part.get("text"), str):
                raise MessageError(i, f"content[{j}].text must be a string")
        return
    raise MessageError(
        i, f"content must be a string, a list of parts or null, got {type(content).__name__}"
    )


def check_message(i: int, msg: Any) -> None:
    """Check one message's shape (role, content type, tool calls); raise ``MessageError``.

    The history-level rules (results answer open calls, ids unique) are
    ``validate``'s; this is what any reader of chat messages needs.
    """
    if not isinstance(msg, Mapping):
        raise MessageError(i, f"must be an object, got {type(msg).__name__}")
    role = msg.get("role")
    if role is None:
        raise MessageError(i, "missing 'role'")
    if role not in ROLES:
        raise MessageError(i, f"unknown role {role!r} (expected one of {sorted(ROLES)})")
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
                raise MessageError(i, f"tool_calls[{j}] has no id")
            if not isinstance(call["function"].get("arguments", ""), str):
                raise MessageError(i, f"tool_calls[{j}].function.arguments must be a JSON string")
    _validate_content(i, role, msg.get("content"), bool(calls))
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
) -> None:
    """Check that ``messages`` is a valid chat history; raise ``MessageError`` at the first fault.

    Checks: each message is well formed (``check_message``); tool call ids are
    unique; every tool message answers an earlier call that is still open; no
    lone surrogates (skipped with ``check_encoding=False`` by callers that
    encode every message anyway).

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
        check_message(i, msg)
        role = msg["role"]
        calls = msg.get("tool_calls") or ()
        for j, call in enumerate(calls):
            cid = call["id"]
            if cid in seen_calls or known.get(cid, i) < start:
                raise MessageError(i, f"tool_calls[{j}] reuses call id {cid!r}")
            seen_calls.add(cid)
        if role == "tool":
            cid = msg["tool_call_id"]
            if cid not in open_calls:
                raise MessageError(i, f"tool message answers no open call (tool_call_id {cid!r})")
            open_calls.discard(cid)
        elif role == "assistant":
            # calls left open by an earlier turn get a synthetic result on output
            open_calls = {c["id"] for c in calls}
        if check_encoding and _has_lone_surrogate(msg):
            raise MessageError(i, "contains a lone surrogate (text is not valid UTF-8)")


class OpenAIChat:
    """OpenAI chat completions: ``messages`` in, ``messages`` out.

    Neutral messages are chat-shaped, so conversion is the identity: the
    caller's own message objects flow through, which keeps the facade's
    same-object fast path (see ``Pager._same_prefix``).
    """

    name = "openai-chat"

    def detect(self, request: Mapping[str, Any]) -> bool:
        # Anthropic requests also carry 'messages'; that format claims them first
        return "messages" in request

    def validate(self, request: Mapping[str, Any]) -> None:
        validate(request.get("messages"))

    def to_messages(self, request: Mapping[str, Any]) -> Converted:
        messages = request.get("messages")
        if not isinstance(messages, (list, tuple)):
            raise InputError(f"request['messages'] must be a list, got {type(messages).__name__}")
        tools = request.get("tools") or ()
        if not isinstance(tools, (list, tuple)):
            raise InputError(f"request['tools'] must be a list, got {type(tools).__name__}")
        return Converted(messages=messages, tools=tools)

    def render(
        self,
        request: Mapping[str, Any],
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Any] | None,
        hints: RenderHints,
    ) -> dict[str, Any]:
        out = dict(request)
        out["messages"] = list(messages)
        if tools is not None:
            out["tools"] = list(tools)
        return out

    def tool_specs(self, specs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return [dict(s) for s in specs]

    def tool_name(self, tool: Any) -> str | None:
        if isinstance(tool, Mapping):
            fn = tool.get("function")
            if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
                return fn["name"]
        return None

    def parse_tool_call(self, call: Any) -> ToolCallRequest:
        if hasattr(call, "model_dump"):
            call = call.model_dump()
        if not isinstance(call, Mapping):
            raise ToolError(f"a tool call must be a mapping, got {type(call).__name__}")
        fn = call.get("function")
        if not isinstance(fn, Mapping):
            raise ToolError("a chat tool call needs a 'function' object")
        raw = fn.get("arguments")
        if raw is None:
            raw = "{}"
        if not isinstance(raw, (str, Mapping)):
            raise ToolError(f"function.arguments must be a JSON string, got {type(raw).__name__}")
        return ToolCallRequest(id=str(call.get("id") or ""), name=str(fn.get("name") or ""), arguments=raw)

    def tool_result(self, call_id: str, text: str, is_error: bool = False) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": call_id, "content": text}

    def parse_usage(self, response: Any) -> Usage:
        return parse_usage(response)


FORMAT = register_format(OpenAIChat())

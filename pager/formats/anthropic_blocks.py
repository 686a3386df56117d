"""Anthropic content blocks -> neutral messages: the checks, the conversion, the counted text.

The half of the Anthropic Messages format that reads the caller's request
(``pager.formats.anthropic_messages`` renders); see that module for the
mapping. Pure.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

from pager.core.describe import brief
from pager.errors import InputError, MessageError
from pager.formats._convert import as_plain, check_encodable, json_text, text_part

__all__ = ["ANTHROPIC_ONLY", "block_text", "convert_message", "neutral_count", "system_message"]

ANTHROPIC_ONLY = frozenset(
    {"tool_use", "tool_result", "thinking", "redacted_thinking", "image", "document",
     "server_tool_use", "web_search_tool_result", "web_fetch_tool_result", "search_result",
     "code_execution_tool_result", "mcp_tool_use", "mcp_tool_result", "container_upload"}
)
CHAT_ROLES = frozenset({"system", "developer", "tool"})
CHAT_PARTS = frozenset({"image_url", "input_audio", "file", "refusal"})
UNMARKABLE = frozenset({"thinking", "redacted_thinking"})
# A turn's role owns these blocks; the other role may not send them.
ASSISTANT_ONLY = frozenset({"tool_use", "thinking", "redacted_thinking", "server_tool_use"})


def block_text(block: Mapping[str, Any]) -> str:
    """Return the text a block is counted and searched by (its JSON for unknown types)."""
    btype = block.get("type")
    if btype == "text":
        return str(block.get("text", ""))
    if btype == "thinking":
        return str(block.get("thinking", ""))
    if btype == "redacted_thinking":
        return "[redacted thinking]"
    if btype == "document":
        src = block.get("source")
        if isinstance(src, Mapping) and src.get("type") == "text":
            return str(src.get("data", ""))
        return "[document]"
    return json_text(block)


def _counted(blocks: Sequence[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], bool]:
    """Return the countable parts of ``blocks`` and whether they are ``blocks`` themselves."""
    parts: list[Mapping[str, Any]] = []
    same = True
    for b in blocks:
        btype = b.get("type")
        if btype == "text" and "cache_control" not in b:
            parts.append(b)
        elif btype == "text":
            parts.append(text_part(str(b.get("text", ""))))
            same = False
        elif btype == "image":
            # chat-valid parts only, so the neutral message is a chat message
            parts.append(text_part("[image]"))
            same = False
        elif btype == "tool_use":
            same = False  # counted as the message's tool call
        else:
            parts.append(text_part(block_text(b)))
            same = False
    return parts, same


def _check_block(i: int, j: int, role: str, block: Any) -> Mapping[str, Any]:
    block = as_plain(block)
    if type(block) is not dict and not isinstance(block, Mapping):  # a dict first: the ABC's check is slower
        raise MessageError(i, f"content[{j}] must be an object, got {type(block).__name__}")
    btype = block.get("type")
    if not isinstance(btype, str) or not btype:
        raise MessageError(i, f"content[{j}] has no 'type'")
    if btype == "text" and not isinstance(block.get("text"), str):
        raise MessageError(i, f"content[{j}] (text) needs a string 'text'")
    if btype == "tool_use":
        if not isinstance(block.get("id"), str) or not block["id"]:
            raise MessageError(i, f"content[{j}] (tool_use) {_missing(block.get('id'), 'id')}")
        if not isinstance(block.get("name"), str):
            raise MessageError(i, f"content[{j}] (tool_use) needs a string 'name'")
        if not isinstance(block.get("input", {}), Mapping):
            raise MessageError(i, f"content[{j}] (tool_use) 'input' must be an object")
    elif btype == "tool_result":
        if not isinstance(block.get("tool_use_id"), str) or not block["tool_use_id"]:
            raise MessageError(i, f"content[{j}] (tool_result) {_missing(block.get('tool_use_id'), 'tool_use_id')}")
        inner = block.get("content")
        if inner is not None and not isinstance(inner, (str, list)):
            raise MessageError(i, f"content[{j}] (tool_result) content must be a string or blocks")
        if isinstance(inner, list):
            for k, part in enumerate(inner):
                if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
                    raise MessageError(i, f"content[{j}].content[{k}] must be a block with a 'type'")
        if "is_error" in block and not isinstance(block["is_error"], bool):
            raise MessageError(i, f"content[{j}] (tool_result) is_error must be true or false")
    elif btype == "thinking" and not isinstance(block.get("thinking"), str):
        raise MessageError(i, f"content[{j}] (thinking) needs a string 'thinking'")
    elif btype == "redacted_thinking" and not isinstance(block.get("data"), str):
        raise MessageError(i, f"content[{j}] (redacted_thinking) needs a string 'data'")
    if role == "user" and btype in ASSISTANT_ONLY:
        raise MessageError(i, f"content[{j}]: a user turn cannot carry a {btype} block")
    if role == "assistant" and btype == "tool_result":
        raise MessageError(i, f"content[{j}]: an assistant turn cannot carry a tool_result block")
    return block


def _encodable(i: int, plain: Mapping[str, Any]) -> None:
    # once per message, when first seen (the conversion is memoised): the store keeps it as JSON
    check_encodable(plain, lambda why: MessageError(i, f"cannot be encoded: {why}"))


def _missing(value: Any, key: str) -> str:
    if value is None or value == "":
        return f"has no {key}"
    return f"{key!r} must be a string, got {type(value).__name__}"


def _tool_message(block: Mapping[str, Any]) -> dict[str, Any]:
    inner = block.get("content")
    if inner is None:
        content: Any = ""
    elif isinstance(inner, str):
        content = inner
    else:
        parts = [as_plain(p) for p in inner]
        content, same = _counted(parts)
        if same and all(map(operator.is_, parts, inner)):
            content = inner
    return {"role": "tool", "tool_call_id": block["tool_use_id"], "content": content, "native": block}


def convert_message(i: int, msg: Any) -> tuple[dict[str, Any], ...]:
    """Return the neutral messages of Anthropic message ``i``; ``MessageError`` when malformed."""
    sdk = type(msg) is not dict and not isinstance(msg, Mapping)
    plain = as_plain(msg)
    if sdk and not isinstance(plain, Mapping):
        raise MessageError(i, f"must be an object, got {type(msg).__name__}")
    role = plain.get("role")
    if not isinstance(role, str) or role not in ("user", "assistant"):
        hint = " (a system prompt goes in the top-level 'system')" if role == "system" else ""
        raise MessageError(i, f"role must be 'user' or 'assistant', got {brief(role)}{hint}")
    content = plain.get("content")
    if isinstance(content, str):
        _encodable(i, plain)
        return ({"role": role, "content": content},)
    if not isinstance(content, list):
        raise MessageError(i, f"content must be a string or a list of blocks, got {type(content).__name__}")
    if not content and role == "user":
        raise MessageError(i, "a user turn needs at least one block")
    blocks = [_check_block(i, j, role, b) for j, b in enumerate(content)]
    _encodable(i, plain)
    native = content if not sdk and all(map(operator.is_, blocks, content)) else blocks
    if role == "assistant":
        calls = [
            {"id": b["id"], "type": "function",
             "function": {"name": b["name"], "arguments": json_text(b.get("input", {}))}}
            for b in blocks if b["type"] == "tool_use"
        ]
        parts, same = _counted(blocks)
        out: dict[str, Any] = {"role": "assistant", "content": native if same else (parts or None)}
        if calls:
            out["tool_calls"] = calls
        if not same:
            out["native"] = native
        return (out,)
    results = [_tool_message(b) for b in blocks if b["type"] == "tool_result"]
    rest = [b for b in blocks if b["type"] != "tool_result"]
    if not rest:
        return tuple(results)
    if not results:
        parts, same = _counted(rest)
        user = {"role": "user", "content": native if same else parts}
        if not same:
            user["native"] = native
        return (user,)
    parts, same = _counted(rest)
    user = {"role": "user", "content": rest if same else parts}
    if not same:
        user["native"] = rest
    return (*results, user)


def neutral_count(msg: Any) -> int:
    """Return how many neutral messages ``convert_message`` makes of a valid message (-1: not a plain dict).

    A user turn of blocks is one tool message per ``tool_result`` and one user message for the rest,
    if any; any other turn is one message. For a message ``convert_message`` accepts (a vouched head:
    ``pager.formats.lazy``); the tests hold the two together.
    """
    if type(msg) is not dict:
        return -1
    content = msg.get("content")
    if type(content) is not list or msg.get("role") != "user":
        return 1
    results = 0
    for b in content:
        if type(b) is not dict:
            return -1
        if b.get("type") == "tool_result":
            results += 1
    return results + (results < len(content))


def system_message(system: Any) -> dict[str, Any]:
    if isinstance(system, str):
        return {"role": "system", "content": system}
    if not isinstance(system, list):
        raise InputError(f"request['system'] must be a string or a list of text blocks, got {type(system).__name__}")
    blocks = [as_plain(b) for b in system]
    for j, b in enumerate(blocks):
        if not isinstance(b, Mapping) or b.get("type") != "text" or not isinstance(b.get("text"), str):
            raise InputError(f"request['system'][{j}] must be a text block")
    parts, same = _counted(blocks)
    out = {"role": "system", "content": system if same and blocks == system else parts}
    if not same or blocks != system:
        out["native"] = blocks
    return out

"""OpenAI Responses items -> neutral messages: the checks and the conversion of one item, or one run of items.

The half of the Responses format that reads the caller's ``input``
(``pager.formats.openai_responses`` keeps the memo and the order checks,
``pager.formats.responses_render`` renders); see that module for the mapping.
Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pager.core.describe import brief
from pager.errors import InputError, MessageError
from pager.formats._convert import as_plain, json_text, text_part
from pager.formats.responses_render import CALL_TYPES

__all__ = ["FULL_INPUT", "ItemError", "USER_ROLES", "item_call", "item_kind", "item_parts", "item_text",
           "output_message", "run_message"]

USER_ROLES = frozenset({"user", "system", "developer"})
TEXT_PARTS = frozenset({"input_text", "output_text", "text"})

FULL_INPUT = (
    "pager schedules the whole history itself, so it cannot page a history the server keeps: "
    "send the full input instead (every earlier item in 'input', no previous_response_id)"
)


class ItemError(MessageError):
    """One ``input`` item is malformed; ``index`` is its position in ``input``."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(index, reason)
        self.args = (f"input[{index}]: {reason}",)

    def __str__(self) -> str:
        return f"input[{self.index}]: {self.reason}"


def item_text(item: Mapping[str, Any]) -> str:
    """Return the text an item is counted and searched by (JSON for items with no text)."""
    itype = item.get("type")
    if itype == "reasoning":
        # counted by its summary: encrypted reasoning is not billed back as text
        return "\n".join(str(s.get("text", "")) for s in item.get("summary") or () if isinstance(s, Mapping))
    return json_text({k: v for k, v in item.items() if k not in ("id", "status")})


def item_kind(i: int, item: Mapping[str, Any]) -> str:
    """Return ``message``, ``assistant``, ``output`` (answers a call) or ``run`` (a model item).

    Also checks the fields the conversion reads by type: a string ``role``
    and ``type``, a list ``summary`` on a reasoning item.
    """
    itype = item.get("type")
    if itype is None or itype == "message":
        role = item.get("role")
        if isinstance(role, str) and role in USER_ROLES:
            return "message"
        if role == "assistant":
            return "run"
        raise ItemError(i, f"message role must be user, assistant, system or developer, got {brief(role)}")
    if not isinstance(itype, str):
        raise ItemError(i, f"'type' must be a string, got {type(itype).__name__}")
    if itype == "reasoning" and not isinstance(item.get("summary") or [], list):
        raise ItemError(i, f"reasoning 'summary' must be a list of parts, got {type(item['summary']).__name__}")
    if itype == "item_reference":
        raise InputError(f"input[{i}] is an item_reference: {FULL_INPUT}")
    if itype.endswith("_output"):
        if not isinstance(item.get("call_id"), str) or not item["call_id"]:
            raise ItemError(i, f"{itype} has no call_id")
        return "output"
    return "run"


def item_parts(i: int, content: Any) -> Any:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ItemError(i, f"message content must be a string or a list of parts, got {type(content).__name__}")
    same = True
    parts = []
    for j, part in enumerate(content):
        p = as_plain(part)
        if not isinstance(p, Mapping) or not isinstance(p.get("type"), str):
            raise ItemError(i, f"content[{j}] must be a part with a 'type'")
        if p["type"] in TEXT_PARTS and not isinstance(p.get("text"), str):
            raise ItemError(i, f"content[{j}] ({p['type']}) needs a string 'text'")
        # chat-valid text parts only, so the neutral message is a chat message
        if p["type"] == "text" and set(p) <= {"type", "text"}:
            parts.append(p)
        elif p["type"] in TEXT_PARTS:
            parts.append(text_part(p["text"]))
            same = False
        elif p["type"] == "input_image":
            parts.append(text_part("[image]"))
            same = False
        else:
            parts.append(text_part(json_text(p)))
            same = False
        same = same and p is part
    return content if same else parts


def item_call(i: int, item: Mapping[str, Any]) -> dict[str, Any] | None:
    itype = item.get("type")
    if itype not in CALL_TYPES:
        return None
    cid = item.get("call_id")
    if not isinstance(cid, str) or not cid:
        raise ItemError(i, f"{itype} has no call_id")
    if itype == "function_call":
        args = item.get("arguments", "")
        if not isinstance(args, str):
            raise ItemError(i, "function_call arguments must be a JSON string")
        name = item.get("name")
    elif itype == "custom_tool_call":
        args = item.get("input", "")
        args = args if isinstance(args, str) else json_text(args)
        name = item.get("name")
    else:
        args = json_text(item.get("action", {}))
        name = itype[: -len("_call")]
    if not isinstance(name, str):
        raise ItemError(i, f"{itype} needs a string 'name'")
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def run_message(start: int, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    content: list[Any] = []
    calls = []
    for off, item in enumerate(items):
        i = start + off
        if item.get("type") in (None, "message"):
            parts = item_parts(i, item.get("content"))
            if isinstance(parts, str):
                content.append(text_part(parts))
            else:
                content.extend(parts)
            continue
        call = item_call(i, item)
        if call is not None:
            calls.append(call)
            continue
        text = item_text(item)
        if text:
            content.append(text_part(text))
    out: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        out["tool_calls"] = calls
    out["native"] = list(items)
    return out


def output_message(i: int, item: Mapping[str, Any]) -> dict[str, Any]:
    output = item.get("output", "")
    if output is None:
        output = ""
    content = output if isinstance(output, str) else item_parts(i, output)
    return {"role": "tool", "tool_call_id": item["call_id"], "content": content, "native": item}

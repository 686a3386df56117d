"""Anthropic Messages: ``system`` + ``messages`` of content blocks in, the same out, with cache marks.

Conversion (``to_messages``), one Anthropic message at a time:

- the top-level ``system`` (a string or text blocks) becomes one neutral
  ``system`` message: L1, counted like any page;
- an assistant turn becomes one neutral assistant message: its ``tool_use``
  blocks become ``tool_calls`` (arguments as JSON text), and the whole block
  list is kept verbatim as ``native`` (thinking and redacted thinking with
  their signatures, server tool blocks, unknown blocks: nothing dropped, and a
  thinking block never leaves its turn);
- a user turn's ``tool_result`` blocks become neutral ``tool`` messages, one
  per result, in order (each keeps its block as ``native``: ``is_error``,
  image content), and its other blocks one neutral user message after them.

Every block chat has no word for is given a text rendition in ``content``
(see ``pager.formats._convert``), so it is counted against the budget.

Rendering (``render``) merges neutral messages back into turns: leading
system messages into ``system``; a tool message and any user message pager
inserted (the task-state card, recalled pages) into the user turn after the
assistant turn, ``tool_result`` blocks first and in the order of the calls;
a stub keeps its ``tool_use_id``. Then it places the cache breakpoints
(``pager.formats.breakpoints``).

Malformed input raises ``MessageError`` naming the message and the block
(``messages[3]: content[1] ...``); nothing is recorded for such a request.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import orjson

from pager.core.describe import brief
from pager.errors import InputError, MessageError, ToolError
import pager.formats.breakpoints as bp
from pager.formats._convert import (
    ConversionMemo, HeadMemo, ValueMemo, as_plain, flat_tool_name, function_specs, id_text, strip_key, text_part,
)
from pager.formats.anthropic_blocks import (
    ANTHROPIC_ONLY,
    CHAT_PARTS,
    CHAT_ROLES,
    UNMARKABLE,
    block_text,
    convert_message,
    system_message,
)
from pager.formats.base import Converted, RenderHints, ToolCallRequest, Usage, register_format
from pager.formats._usage import count, own_usage

__all__ = ["DEFAULT_CACHE_MARKS", "EPHEMERAL", "FORMAT", "AnthropicMessages", "block_text", "convert_message"]

EPHEMERAL = {"type": "ephemeral"}
# the cache_marks mode when the caller gives none (see pager.formats.breakpoints)
DEFAULT_CACHE_MARKS = "pager"

# Block types only Anthropic has: one in a request's content claims it.
class AnthropicMessages:
    """Anthropic Messages API requests (``system``, ``messages`` of blocks, ``tools``).

    ``cache_marks`` is the default breakpoint mode (``pager`` / ``merge`` /
    ``caller``, see ``pager.formats.breakpoints``); ``render`` takes one per call.
    """

    name = "anthropic-messages"

    def __init__(self, cache_marks: str = DEFAULT_CACHE_MARKS) -> None:
        self.cache_marks = bp.check_mode(cache_marks)
        self._memo = ConversionMemo()
        self._heads = HeadMemo()
        self._systems = ValueMemo()

    # -- detection and conversion ----------------------------------------------------

    def detect(self, request: Mapping[str, Any]) -> bool:
        if "messages" not in request:
            return False
        if "system" in request:
            return True
        tools = request.get("tools")
        for tool in tools if isinstance(tools, (list, tuple)) else ():  # not a list: to_messages refuses it
            if isinstance(tool, Mapping):
                if "function" in tool:
                    return False
                if "input_schema" in tool or tool.get("type", "custom") != "function":
                    return True
        messages = request.get("messages")
        if not isinstance(messages, (list, tuple)):
            return False
        for m in messages:
            if isinstance(m, Mapping):
                role = m.get("role")
                if (isinstance(role, str) and role in CHAT_ROLES) or "tool_calls" in m or "tool_call_id" in m:
                    return False
                content = m.get("content")
            else:  # an SDK object: read its attributes, no dump on this hot path
                role = getattr(m, "role", None)
                if (isinstance(role, str) and role in CHAT_ROLES) or getattr(m, "tool_calls", None):
                    return False
                content = getattr(m, "content", None)
            if isinstance(content, list):
                for b in content:
                    t = b.get("type") if isinstance(b, Mapping) else getattr(b, "type", None)
                    if not isinstance(t, str):
                        continue  # to_messages says what is wrong with it
                    if t in ANTHROPIC_ONLY:
                        return True
                    if t in CHAT_PARTS:
                        return False
        # a plain user/assistant history: max_tokens is required by Anthropic, optional in chat
        model = request.get("model") if isinstance(request.get("model"), str) else ""
        return "max_tokens" in request and not model.startswith(("gpt", "o1", "o3", "o4", "chatgpt"))

    def validate(self, request: Mapping[str, Any]) -> None:
        self.to_messages(request)

    def to_messages(self, request: Mapping[str, Any]) -> Converted:
        messages = request.get("messages")
        if not isinstance(messages, (list, tuple)):
            raise InputError(f"request['messages'] must be a list, got {type(messages).__name__}")
        out: list[Mapping[str, Any]] = []
        system = request.get("system")
        if system is not None and system != "" and system != []:
            out.append(self._system_neutral(system))
        memo = self._memo
        open_calls: dict[str, int] = {}
        # the head of the last call's list, as the same objects: its neutral messages are taken whole
        k, converted, last, ends = self._heads.head(messages)
        if last and last[0]["role"] == "assistant":
            open_calls = {c["id"]: k - 1 for c in last[0].get("tool_calls") or ()}
        for i in range(k, len(messages)):
            msg = messages[i]
            sig = (msg.get("content"),) if isinstance(msg, Mapping) else ()
            neutral = memo.get(msg, sig)
            fresh = neutral is None
            if fresh:
                neutral = convert_message(i, msg)
            first = neutral[0]["role"] if neutral else None
            if first == "assistant":
                # calls left unanswered get a synthetic result on output (pager.core.pairing)
                open_calls = {c["id"]: i for c in neutral[0].get("tool_calls") or ()}
            else:
                for n in neutral:
                    if n["role"] == "tool":
                        cid = n["tool_call_id"]
                        if cid not in open_calls and fresh:
                            raise MessageError(
                                i, f"tool_result for {brief(cid)} answers no tool_use of the assistant turn before it"
                            )
                        open_calls.pop(cid, None)
                open_calls = {}
            if fresh:
                memo.put(msg, sig, neutral)
            converted.extend(neutral)
            ends.append(len(converted))
        self._heads.put(messages, converted, ends)
        out.extend(converted)
        tools = request.get("tools") or ()
        if not isinstance(tools, (list, tuple)):
            raise InputError(f"request['tools'] must be a list, got {type(tools).__name__}")
        return Converted(messages=out, tools=[as_plain(t) for t in tools])

    def _system_neutral(self, system: Any) -> dict[str, Any]:
        # by value: a harness often rebuilds the same system prompt each call
        return self._systems.get_or_make(system, system_message, "request['system']")

    # -- rendering -------------------------------------------------------------------

    def render(
        self,
        request: Mapping[str, Any],
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Any] | None,
        hints: RenderHints,
        cache_marks: str | None = None,
    ) -> dict[str, Any]:
        # per call, else RenderHints.cache_marks once the facade passes the option, else the default
        mode = bp.check_mode(cache_marks or getattr(hints, "cache_marks", None) or self.cache_marks)
        out = dict(request)
        system_blocks: list[Any] = []
        system_str: list[str] = []
        turns: list[dict[str, Any]] = []
        # per turn: [(source index, block)], tool results kept apart until the turn closes
        pending: list[tuple[int, Any]] = []
        pending_results: list[tuple[int, Any]] = []
        call_order: dict[str, int] = {}
        n_sys = 0
        turn_src: list[list[int]] = []

        def close_user() -> None:
            if not pending and not pending_results:
                return
            results = sorted(pending_results, key=lambda r: call_order.get(r[1]["tool_use_id"], 1 << 30))
            items = results + pending
            if len(items) == 1 and isinstance(items[0][1], str):
                turns.append({"role": "user", "content": items[0][1]})
            else:
                turns.append({"role": "user", "content": [
                    text_part(b) if isinstance(b, str) else b for _k, b in items]})
            turn_src.append([k for k, _b in items])
            pending.clear()
            pending_results.clear()

        for k, m in enumerate(messages):
            role = m.get("role")
            if role in ("system", "developer"):
                n_sys = k + 1 if n_sys == k else n_sys
                native = m.get("native")
                content = native if native is not None else m.get("content")
                if isinstance(content, str):
                    system_str.append(content)
                    system_blocks.append((k, text_part(content)))
                else:
                    system_blocks.extend((k, as_plain(b)) for b in content or ())
            elif role == "assistant":
                close_user()
                blocks = _assistant_blocks(m)
                turns.append({"role": "assistant", "content": blocks})
                turn_src.append([k] * (len(blocks) if isinstance(blocks, list) else 1))
                call_order = {c["id"]: n for n, c in enumerate(m.get("tool_calls") or ())}
            elif role == "tool":
                pending_results.append((k, _result_block(m)))
            else:
                content = m.get("native")
                if content is None:
                    content = m.get("content")
                if isinstance(content, str):
                    pending.append((k, content))
                else:
                    pending.extend((k, as_plain(b)) for b in content or ())
        close_user()
        system_out: Any = None
        if system_blocks:
            if len(system_str) == 1 and len(system_blocks) == 1:
                system_out = system_str[0]
            else:
                system_out = [b for _k, b in system_blocks]
        tools_out = list(tools) if tools is not None else list(request.get("tools") or ())
        self._mark(tools_out, system_blocks, system_out, turns, turn_src, n_sys, hints, mode, out)
        if tools is not None or "tools" in request:
            out["tools"] = tools_out
        out["messages"] = turns
        return out

    def _mark(
        self, tools: list[Any], system_blocks: list[tuple[int, Any]], system_out: Any,
        turns: list[dict[str, Any]], turn_src: list[list[int]], n_sys: int, hints: RenderHints,
        mode: str, out: dict[str, Any],
    ) -> None:
        """Place the cache breakpoints (``pager.formats.breakpoints``), writing ``out['system']``."""
        refs: list[tuple[Any, Any]] = []  # (container, key) per slot
        slots: list[bp.Slot] = []
        for t, tool in enumerate(tools):
            tool = as_plain(tool)
            tools[t] = tool
            slots.append(bp.Slot(-1, isinstance(tool, Mapping), _has_mark(tool)))
            refs.append((tools, t))
        sys_list = None
        if system_out is not None:
            sys_list = [b for _k, b in system_blocks]
            for j, (k, b) in enumerate(system_blocks):
                slots.append(bp.Slot(k, _markable(b), _has_mark(b)))
                refs.append((sys_list, j))
        for turn, src in zip(turns, turn_src):
            content = turn["content"]
            if isinstance(content, str):
                slots.append(bp.Slot(src[0], bool(content)))
                refs.append((turn, None))
                continue
            for j, b in enumerate(content):
                slots.append(bp.Slot(src[j] if j < len(src) else src[-1], _markable(b), _has_mark(b)))
                refs.append((content, j))
        l1 = n_sys if (n_sys or tools) else hints.l1
        chosen = set(bp.place(slots, l1=l1, stable=hints.stable, previous=hints.previous, mode=mode))
        # the API wants longer-lived marks before shorter ones: in merge mode a mark of
        # pager's before a kept 1-hour mark of the caller's lives an hour too
        long_until = -1
        if mode == "merge":
            for idx, (slot, (container, key)) in enumerate(zip(slots, refs)):
                if idx in chosen and slot.caller and _ttl(container[key]) == "1h":
                    long_until = idx
        touched_system = False
        for idx, (slot, (container, key)) in enumerate(zip(slots, refs)):
            want = idx in chosen
            mark = EPHEMERAL if idx > long_until else {**EPHEMERAL, "ttl": "1h"}
            if key is None:  # a string-content turn
                if want:
                    container["content"] = [{**text_part(container["content"]), "cache_control": mark}]
                continue
            block = container[key]
            if want and (not slot.caller or mode == "pager"):
                container[key] = {**_unmark(block), "cache_control": mark}
            elif slot.caller and not want:
                container[key] = _unmark(block)
            else:
                continue
            touched_system |= container is sys_list
        if system_out is not None:
            out["system"] = sys_list if touched_system or not isinstance(system_out, str) else system_out

    # -- tools and usage ---------------------------------------------------------------

    def tool_specs(self, specs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return function_specs(specs, "input_schema")

    def tool_name(self, tool: Any) -> str | None:
        return flat_tool_name(tool)

    def parse_tool_call(self, call: Any) -> ToolCallRequest:
        call = as_plain(call)
        if not isinstance(call, Mapping):
            raise ToolError(f"a tool_use block must be a mapping, got {type(call).__name__}")
        if call.get("type", "tool_use") != "tool_use":
            raise ToolError(f"expected a tool_use block, got type {brief(call.get('type'))}")
        args = call.get("input")
        if args is None:
            args = {}
        if not isinstance(args, (Mapping, str)):
            raise ToolError(f"tool_use input must be an object, got {type(args).__name__}")
        return ToolCallRequest(id=id_text(call.get("id"), "id"), name=id_text(call.get("name"), "name"), arguments=args)

    def tool_result(self, call_id: str, text: str, is_error: bool = False) -> dict[str, Any]:
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "content": text}
        if is_error:
            block["is_error"] = True
        return block

    def usage_claim(self, usage: Mapping[str, Any]) -> int:
        if "input_tokens" not in usage:
            return 0
        if "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage:
            return 2  # Anthropic's own keys
        # bare input/output tokens could be anyone's; Anthropic never sends a total
        return 0 if "total_tokens" in usage else 1

    def parse_usage(self, response: Any) -> Usage:
        """Read Messages usage: ``input_tokens`` is only the uncached part after the last
        breakpoint; ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` are the rest
        of the prompt (the prompt is the sum), read as cached and cache-written."""
        usage = own_usage(response, self.usage_claim, "Anthropic Messages")
        uncached = count(usage, "input_tokens", "Anthropic")
        read = count(usage, "cache_read_input_tokens", "Anthropic") if "cache_read_input_tokens" in usage else 0
        write = (
            count(usage, "cache_creation_input_tokens", "Anthropic")
            if "cache_creation_input_tokens" in usage else 0
        )
        return Usage(
            prompt_tokens=uncached + read + write,
            completion_tokens=count(usage, "output_tokens", "Anthropic"),
            cached_tokens=read,
            cache_write_tokens=write,
        )


def _assistant_blocks(m: Mapping[str, Any]) -> Any:
    native = m.get("native")
    calls = m.get("tool_calls") or ()
    if native is not None:
        ids = [b.get("id") for b in native if isinstance(b, Mapping) and b.get("type") == "tool_use"]
        if ids == [c.get("id") for c in calls]:
            return list(native)
        keep = [b for b in native if not (isinstance(b, Mapping) and b.get("type") == "tool_use")]
    else:
        content = m.get("content")
        if isinstance(content, str) or content is None:
            if not calls:
                return content if content is not None else ""
            keep = [text_part(content)] if content else []
        else:
            keep = list(content)
    for c in calls:
        fn = c.get("function") or {}
        keep.append({"type": "tool_use", "id": c.get("id"), "name": fn.get("name"),
                     "input": _args(fn.get("arguments"))})
    return keep


def _args(raw: Any) -> Any:
    if isinstance(raw, Mapping):
        return raw
    try:
        value = orjson.loads(raw or "{}")
    except (TypeError, ValueError):
        return {"arguments": raw}
    return value if isinstance(value, Mapping) else {"arguments": value}


def _result_block(m: Mapping[str, Any]) -> Mapping[str, Any]:
    native = m.get("native")
    if native is not None and native.get("tool_use_id") == m.get("tool_call_id"):
        return native
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.get("tool_call_id"), "content": m.get("content")}
    if block["content"] is None:
        block["content"] = ""
    if m.get("is_error"):
        block["is_error"] = True
    return block


def _markable(block: Any) -> bool:
    if not isinstance(block, Mapping):
        return False
    btype = block.get("type")
    if btype in UNMARKABLE:
        return False
    return not (btype == "text" and not block.get("text"))


def _ttl(block: Any) -> str | None:
    mark = block.get("cache_control") if isinstance(block, Mapping) else None
    return mark.get("ttl") if isinstance(mark, Mapping) else None


def _has_mark(block: Any) -> bool:
    if not isinstance(block, Mapping):
        return False
    if "cache_control" in block:
        return True
    inner = block.get("content")
    return isinstance(inner, list) and any(isinstance(b, Mapping) and "cache_control" in b for b in inner)


def _unmark(block: Mapping[str, Any]) -> Mapping[str, Any]:
    out = strip_key(block, "cache_control")
    inner = out.get("content")
    if isinstance(inner, list) and any(isinstance(b, Mapping) and "cache_control" in b for b in inner):
        out = {**out, "content": [strip_key(b, "cache_control") if isinstance(b, Mapping) else b for b in inner]}
    return out


FORMAT = register_format(AnthropicMessages())

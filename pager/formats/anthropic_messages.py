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

from collections.abc import Mapping, Sequence
from typing import Any

from pager.core.describe import brief
from pager.errors import InputError, MessageError, ToolError
import pager.formats.breakpoints as bp
from pager.formats._convert import (
    ConversionMemo, ValueMemo, as_plain, flat_tool_name, function_specs, id_text,
)
from pager.core.digest import NO_DIGEST, WIRE_LAG, StoredDigest, WireRun, digest_wire
from pager.formats._heads import HeadMemo, OwnHeads, with_lead
from pager.formats.lazy import lazy_head
from pager.formats.anthropic_render import EPHEMERAL, TurnMemo, mark, merge
from pager.formats.anthropic_blocks import (
    ANTHROPIC_ONLY,
    CHAT_PARTS,
    CHAT_ROLES,
    block_text,
    convert_message,
    neutral_count,
    system_message,
)
from pager.formats.base import Converted, RenderHints, ToolCallRequest, Usage, register_format
from pager.formats._usage import count, own_usage

__all__ = ["DEFAULT_CACHE_MARKS", "EPHEMERAL", "FORMAT", "AnthropicMessages", "block_text", "convert_message"]

# the cache_marks mode when the caller gives none (see pager.formats.breakpoints)
DEFAULT_CACHE_MARKS = "pager"

class AnthropicMessages(OwnHeads):
    """Anthropic Messages API requests (``system``, ``messages`` of blocks, ``tools``).

    ``cache_marks`` is the default breakpoint mode (``pager`` / ``merge`` /
    ``caller``, see ``pager.formats.breakpoints``); ``render`` takes one per call.
    """

    name = "anthropic-messages"
    vouches = True  # to_messages takes ``vouch``: a stored wire digest (``pager.formats.lazy``)
    history_key = "messages"  # the request's list of history items

    def __init__(self, cache_marks: str = DEFAULT_CACHE_MARKS) -> None:
        self.cache_marks = bp.check_mode(cache_marks)
        self._memo = ConversionMemo()
        self._heads = HeadMemo()
        self._systems = ValueMemo()
        self._turns = TurnMemo()

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

    def to_messages(self, request: Mapping[str, Any], *, heads: HeadMemo | None = None,
                    vouch: StoredDigest | None = None) -> Converted:
        """Return the neutral messages of ``request`` (``heads``: a memo the caller owns, ``OwnHeads``).

        With ``heads``, the result carries the wire digest of the items (``Converted.wire``); ``vouch``:
        the stored digest of the recorded branch, whose wire part, if it matches the first items, lets
        them go unconverted until read (``pager.formats.lazy``; the first call after a reopen).
        """
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
        owned = heads is not None
        memo_heads = heads if heads is not None else self._heads
        k, converted, last, ends = memo_heads.head(messages)
        run = None
        vouched = 0
        if owned:
            k, converted, ends = with_lead(memo_heads, k, converted, ends, out[0] if out else None)
            last = last if k else []
            run = memo_heads.wire(k)
            if not k and vouch is not None:
                lazy = self._vouched(messages, converted, vouch)
                if lazy is not None:
                    converted, ends, run = lazy
                    k = run.rows
                    vouched = ends[k]
                    last = converted[ends[k - 1]: ends[k]]
        if last and last[0]["role"] == "assistant":
            open_calls = {c["id"]: k - 1 for c in last[0].get("tool_calls") or ()}
        try:
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
                                raise MessageError(i, f"tool_result for {brief(cid)} answers no tool_use of "
                                                      "the assistant turn before it")
                            open_calls.pop(cid, None)
                    open_calls = {}
                if fresh:
                    memo.put(msg, sig, neutral)
                converted.extend(neutral)
                ends.append(len(converted))
        except BaseException:
            memo_heads.abandon()  # the memo as it was: a corrected request costs what is new
            raise
        wire = None
        if owned:
            out = converted  # the owner's next call extends it, after this one
            # the items' wire digest, but for the last few: a client moves its cache mark off them, and a
            # digest cannot be taken back (pager.core.digest); O(new items) but after a fork or a reopen
            upto = max(0, len(messages) - WIRE_LAG)
            if run is not NO_DIGEST and (run is None or upto > run.rows):
                run = digest_wire(messages, upto, run.copy() if run is not None else None) or NO_DIGEST
            wire = WireRun(self.name, run, ends[run.rows]) if run is not NO_DIGEST else None
        else:
            out.extend(converted)  # before put: once the memo has them, another thread may extend these lists
        memo_heads.put(messages, converted, ends, head=k, wire=run)
        tools = request.get("tools") or ()
        if not isinstance(tools, (list, tuple)):
            raise InputError(f"request['tools'] must be a list, got {type(tools).__name__}")
        return Converted(messages=out, tools=[as_plain(t) for t in tools], wire=wire, vouched=vouched)

    def _vouched(self, messages: Sequence[Any], lead: list[Any], vouch: StoredDigest
                 ) -> tuple[list[Any], list[int], Any] | None:
        """Return ``(rows, ends, run)`` of the first items a stored wire digest vouches for, unconverted; else None."""
        run = vouch.vouches(self.name, messages) if len(lead) < vouch.wire_rows else None
        if run is None:
            return None
        lazy = lazy_head(lead, messages[: run.rows], neutral_count, convert_message)
        if lazy is None or lazy[1][-1] != vouch.wire_rows:
            return None
        return lazy[0], lazy[1], run

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
        done = merge(messages, self._turns)  # only what follows the last call's head (pager.formats.anthropic_render)
        tools_out = list(tools) if tools is not None else list(request.get("tools") or ())
        mark(done, tools_out, hints.l1, hints.stable, hints.previous, mode, out)
        if tools is not None or "tools" in request:
            out["tools"] = tools_out
        return out

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



FORMAT = register_format(AnthropicMessages())

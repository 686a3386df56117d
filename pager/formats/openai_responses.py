"""OpenAI Responses: ``instructions`` + ``input`` items in, the same out.

Conversion (``to_messages``):

- ``instructions`` (a string) becomes a neutral ``system`` message: L1;
- a ``message`` item (``input_text`` / ``output_text`` parts, or a string)
  becomes a neutral message of its role, its parts counted as they are;
- a run of model output items (``reasoning`` with its ``encrypted_content``,
  assistant ``message``, ``function_call``, ``custom_tool_call``, built-in tool
  calls) becomes one neutral assistant message: the calls that expect an
  output item become ``tool_calls``, and the run is kept verbatim as
  ``native``, so a reasoning item never leaves the turn it reasoned for;
- a ``function_call_output`` (or ``custom_tool_call_output``, any
  ``*_call_output`` with a ``call_id``) becomes a neutral ``tool`` message.

Rendering turns them back into items: the caller's own items verbatim, a stub
as an output item of the same type keeping the ``call_id``, pager's inserted
messages as ``{"role": "user", "content": text}``.

Server-kept history cannot be paged. A request with ``previous_response_id``
or ``conversation``, an ``item_reference`` item, or an output item answering a
call that is not in ``input`` (a partial history, as ``store=true`` clients
send) raises ``InputError`` saying to send the full input instead.
``store=true`` with a full ``input`` is accepted: the server may keep the
response; pager still sends everything it schedules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pager.core.describe import brief
from pager.core.digest import StoredDigest
from pager.errors import InputError, ToolError
from pager.formats._convert import (
    ConversionMemo, ValueMemo, as_plain, check_encodable, flat_tool_name, function_specs, id_text, tool_arguments,
)
from pager.formats._heads import HeadMemo, OwnHeads, with_lead
from pager.formats.base import Converted, RenderHints, ToolCallRequest, Usage, register_format
from pager.formats._usage import count, optional_count, own_usage
from pager.formats.responses_items import (
    FULL_INPUT, ItemError, item_kind, item_parts, item_text, output_message, run_message,
)
from pager.formats.responses_lazy import vouched_head, wire_of
from pager.formats.responses_render import ItemMemo

__all__ = ["FORMAT", "ItemError", "OpenAIResponses", "item_text"]


def _ends_of(handed: list[int], k: int, n_items: int, n_converted: int, first: int = 0) -> list[int]:
    """Return the per-item ends the memo keeps for Responses: zeros (not kept), then the neutral count.

    The memo gives back only the whole list (``state``); a list handed over with it (``k`` items) grows.
    ``first``: the neutral messages before the first item's in an owned memo's list (``with_lead``),
    kept as the first end.
    """
    if k:
        del handed[k:]
        handed += [0] * (n_items - k)
    else:
        handed = [first] + [0] * (n_items - 1) if n_items else []
    handed.append(n_converted)
    return handed


def _input_items(request: Mapping[str, Any]) -> Sequence[Any]:
    """Return the request's ``input`` as a list of items; ``InputError`` for a partial or malformed one."""
    for key in ("previous_response_id", "conversation"):
        if request.get(key):
            raise InputError(f"request has {key!r}: {FULL_INPUT}")
    raw = request.get("input")
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    if isinstance(raw, (list, tuple)):
        return raw
    raise InputError(f"request['input'] must be a string or a list of items, got {type(raw).__name__}")


class OpenAIResponses(OwnHeads):
    """OpenAI Responses API requests (``instructions``, ``input`` items, ``tools``)."""

    name = "openai-responses"
    vouches = True  # to_messages takes ``vouch``: a stored wire digest (``pager.formats.lazy``)
    history_key = "input"  # the request's list of history items

    def __init__(self) -> None:
        self._memo = ConversionMemo()
        self._heads = HeadMemo()
        self._instructions = ValueMemo()
        self._items = ItemMemo()

    def detect(self, request: Mapping[str, Any]) -> bool:
        return "input" in request and "messages" not in request

    def validate(self, request: Mapping[str, Any]) -> None:
        self.to_messages(request)

    def to_messages(self, request: Mapping[str, Any], *, heads: HeadMemo | None = None,
                    vouch: StoredDigest | None = None) -> Converted:
        """Return the neutral messages of ``request`` (``heads``: a memo the caller owns, ``OwnHeads``).

        With ``heads``, the result carries the wire digest of the items (``Converted.wire``); ``vouch``:
        the stored digest of the recorded branch, whose wire part, if it matches the first items, lets
        them go unconverted until read (``pager.formats.lazy``; the first call after a reopen).
        """
        items = _input_items(request)
        out: list[Mapping[str, Any]] = []
        ins = request.get("instructions")
        if ins:
            out.append(self._instructions_neutral(ins))
        owned = heads is not None
        memo_heads = heads if heads is not None else self._heads
        lead = out[0] if out else None
        k, converted, _ends, state, run, vouched = self._head(items, memo_heads, owned, lead, vouch)
        added: list[str] = []  # call ids this call adds to the history's set (``seen_calls``)
        try:
            nxt = as_plain(items[k]) if state is not None and state[2] and k < len(items) else None
            if state is None or (isinstance(nxt, Mapping) and item_kind(k, nxt) == "run"):
                k, converted, state = 0, [lead] if owned and lead is not None else [], (set(), set(), False)
                vouched = 0
            # the new items only, item i at i - k (a list of the whole history a call was O(history))
            plain: list[Any] = [as_plain(x) for x in items[k:]]
            kinds: list[Any] = []
            for i in range(k, len(items)):
                item = plain[i - k]
                if not isinstance(item, Mapping):
                    raise ItemError(i, f"must be an object, got {type(items[i]).__name__}")
                kinds.append(item_kind(i, item))
            memo = self._memo
            open_calls: set[str] = set(state[0])
            # every call id of the history: the state's own set, handed over with it (``HeadMemo``) and grown in
            # place (copying it was O(history) a call: 1.6 ms twice over at 27k calls); a failure takes back
            # what this call added
            seen_calls: set[str] = state[1]
            i = k
            while i < len(items):
                end = i + 1
                if kinds[i - k] == "run":
                    while end < len(items) and kinds[end - k] == "run":
                        end += 1
                key = items[i]
                sig = tuple(items[i:end]) + ((items[i].get("content"),) if isinstance(items[i], Mapping) else ())
                neutral = memo.get(key, sig)
                if neutral is None:
                    for j in range(i, end):  # each item once, when first seen: the store keeps it as JSON
                        check_encodable(plain[j - k], lambda why, j=j: ItemError(j, f"cannot be encoded: {why}"))
                    if kinds[i - k] == "run":
                        neutral = run_message(i, plain[i - k:end - k])
                    elif kinds[i - k] == "output":
                        neutral = output_message(i, plain[i - k])
                    else:
                        it = plain[i - k]
                        n: dict[str, Any] = {"role": it["role"], "content": item_parts(i, it.get("content"))}
                        n["native"] = it
                        neutral = n
                    memo.put(key, sig, neutral)
                if neutral["role"] == "assistant":
                    open_calls = {c["id"] for c in neutral.get("tool_calls") or ()}
                    added += open_calls - seen_calls
                    seen_calls |= open_calls
                elif neutral["role"] == "tool":
                    if neutral["tool_call_id"] in seen_calls and neutral["tool_call_id"] not in open_calls:
                        raise ItemError(i, f"output for call {neutral['tool_call_id']!r} must follow its call, "
                                           "before any other message")
                    if neutral["tool_call_id"] not in open_calls:
                        raise InputError(
                            f"input[{i}] answers call {neutral['tool_call_id']!r}, which is not in input "
                            f"(a partial history, as with store=true): {FULL_INPUT}"
                        )
                    open_calls.discard(neutral["tool_call_id"])
                else:
                    open_calls = set()
                converted.append(neutral)
                i = end
            wire = None
            if owned:
                out = converted  # the owner's next call extends it, after this one
                run, wire = wire_of(self.name, items, kinds, k, run, len(converted))
            else:
                out.extend(converted)  # before put: once the memo has them, another thread may extend these lists
            if items:
                last_run = kinds[-1] == "run" if kinds else bool(state[2])
                first = 1 if owned and lead is not None else 0
                memo_heads.put(items, converted, _ends_of(_ends, k, len(items), len(converted), first),
                               (frozenset(open_calls), seen_calls, last_run), head=k, wire=run)
        except BaseException:
            if state is not None:
                state[1].difference_update(added)
            memo_heads.abandon()  # the memo as it was: a corrected request costs what is new
            raise
        tools = request.get("tools") or ()
        if not isinstance(tools, (list, tuple)):
            raise InputError(f"request['tools'] must be a list, got {type(tools).__name__}")
        return Converted(messages=out, tools=[as_plain(t) for t in tools], wire=wire, vouched=vouched)

    def _head(self, items: Sequence[Any], memo_heads: HeadMemo, owned: bool, lead: Any, vouch: StoredDigest | None
              ) -> tuple[int, list[Any], list[int], Any, Any, int]:
        """Return ``(k, converted, ends, state, run, vouched)``: where ``to_messages`` starts converting.

        The last call's list, whole, as the same objects (``HeadMemo``): only the items after it are read,
        unless they would continue the run of items its last message was made of. After a reopen, the
        items a stored wire digest vouches for (``pager.formats.responses_lazy``), left unconverted.
        """
        k, converted, _last, ends, state = memo_heads.head_state(items)
        # the wire digest of the first k items holds whether or not their conversion is reused (a head
        # that is not the whole list is converted again: a Responses run may continue across it)
        run = memo_heads.wire(k) if owned else None
        if owned and state is not None:
            k, converted, ends = with_lead(memo_heads, k, converted, ends, lead)
            state = state if k else None
        if owned and state is None and vouch is not None:
            lazy = vouched_head(self.name, items, lead, vouch)
            if lazy is not None:
                converted, state, run = lazy
                return run.rows, converted, [int(lead is not None)] + [0] * run.rows, state, run, len(converted)
        return k, converted, ends, state, run, 0

    def _instructions_neutral(self, ins: Any) -> dict[str, Any]:
        if not isinstance(ins, str):
            raise InputError(f"request['instructions'] must be a string, got {type(ins).__name__}")
        return self._instructions.get_or_make(ins, lambda text: {"role": "system", "content": text},
                                              "request['instructions']")

    def render(
        self,
        request: Mapping[str, Any],
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Any] | None,
        hints: RenderHints,
    ) -> dict[str, Any]:
        out = dict(request)
        items, instructions = self._items.render(messages)  # what follows the last call's head (responses_render)
        if instructions:
            out["instructions"] = "\n\n".join(instructions)
        if isinstance(request.get("input"), str) and len(items) == 1 and items[0].get("role") == "user" \
                and items[0].get("content") == request["input"]:
            out["input"] = request["input"]
        else:
            out["input"] = items
        if tools is not None:
            out["tools"] = list(tools)
        return out

    def tool_specs(self, specs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return function_specs(specs, "parameters", type="function")

    def tool_name(self, tool: Any) -> str | None:
        return flat_tool_name(tool)

    def parse_tool_call(self, call: Any) -> ToolCallRequest:
        call = as_plain(call)
        if not isinstance(call, Mapping):
            raise ToolError(f"a function_call item must be a mapping, got {type(call).__name__}")
        if call.get("type", "function_call") not in ("function_call", "custom_tool_call"):
            raise ToolError(f"expected a function_call item, got type {brief(call.get('type'))}")
        raw = tool_arguments(call.get("arguments", call.get("input")), "arguments")
        return ToolCallRequest(id=id_text(call.get("call_id"), "call_id"), name=id_text(call.get("name"), "name"),
                               arguments=raw)

    def tool_result(self, call_id: str, text: str, is_error: bool = False) -> dict[str, Any]:
        # Responses has no error flag on an output item: the text says it
        return {"type": "function_call_output", "call_id": call_id, "output": text}

    def usage_claim(self, usage: Mapping[str, Any]) -> int:
        if "input_tokens" not in usage:
            return 0
        if "input_tokens_details" in usage:
            return 2  # Responses' own key
        # a total is sent by Responses and LangChain, never by Anthropic
        return 1 if "total_tokens" in usage else 0

    def parse_usage(self, response: Any) -> Usage:
        """Read Responses usage: ``input_tokens`` (all of the prompt), ``output_tokens``,
        ``input_tokens_details.cached_tokens`` (and ``cache_write_tokens``)."""
        usage = own_usage(response, self.usage_claim, "OpenAI Responses")
        details = usage.get("input_tokens_details")
        return Usage(
            prompt_tokens=count(usage, "input_tokens", "Responses"),
            completion_tokens=count(usage, "output_tokens", "Responses"),
            cached_tokens=optional_count(details, "cached_tokens"),
            cache_write_tokens=optional_count(details, "cache_write_tokens"),
        )


FORMAT = register_format(OpenAIResponses())

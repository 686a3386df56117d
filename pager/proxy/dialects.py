"""What the proxy must know of each wire format beyond ``WireFormat``.

The facade's formats turn requests into pages and back. A proxy also reads
*responses* and *streams*: the usage in the final event, the tool calls a turn
makes (to answer pager's own), and how to continue a conversation upstream
with their results while the client sees one turn. A ``Dialect`` holds that,
one per route; everything here is pure dict work on parsed JSON.

Streams are read event by event (``StreamTurn.feed``). An event is forwarded
the moment it is complete, unless the turn has begun a tool call and pager
serves tools: from that event on the turn is *held*, because only its end
says whether it calls pager's tools (then the held tail is dropped and the
proxy continues upstream) or the client's (then the tail is flushed).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import orjson

__all__ = ["DIALECTS", "Dialect", "StreamTurn", "reuse_items", "sse_data"]

FORWARD, HOLD, DROP = "forward", "hold", "drop"


def reuse_items(previous: Sequence[Any] | None, items: Any) -> Any:
    """Return ``items`` with each leading item equal to the previous request's replaced by that object.

    A client resends its whole history as new JSON each call. Handing pager
    the very objects it saw last time lets its same-object fast path skip
    re-validating and re-hashing them (assemble drops from ~16 to ~8 ms on a
    400-message, 1 MB history); comparing equal dicts costs ~0.3 ms.
    """
    if not previous or not isinstance(items, list):
        return items
    out = list(items)
    for i in range(min(len(previous), len(items))):
        if items[i] != previous[i]:
            break
        out[i] = previous[i]
    return out


def sse_data(event: bytes) -> bytes | None:
    """Return the joined ``data:`` lines of one SSE event (None when it has none)."""
    lines = [ln[5:].lstrip(b" ") if ln.startswith(b"data:") else None for ln in event.splitlines()]
    data = [ln for ln in lines if ln is not None]
    return b"\n".join(data) if data else None


def _json(data: bytes | None) -> Any:
    if not data or data == b"[DONE]":
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def _encode(event_name: str | None, payload: Any) -> bytes:
    head = f"event: {event_name}\n".encode() if event_name else b""
    return head + b"data: " + orjson.dumps(payload) + b"\n\n"


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Sequence):
        return "\n".join(
            str(b.get("text", "")) for b in value if isinstance(b, Mapping) and isinstance(b.get("text"), str)
        )
    return ""


class StreamTurn:
    """The state of one streamed upstream turn. Subclassed per format."""

    def __init__(self, pager_tools: frozenset[str], round_no: int, offset: int, client_usage: bool) -> None:
        self.pager_tools = pager_tools  # names pager added to this request ('' set: no tools served)
        self.round_no = round_no  # 0 for the first upstream call of a client request
        self.offset = offset  # items / blocks already forwarded by earlier rounds
        self.client_usage = client_usage  # chat: did the client ask for the usage chunk itself
        self.holding = False
        self.ended = False  # the terminal event was fed: usage is final
        self.held: list[bytes] = []
        self.usage: dict[str, Any] | None = None
        self.forwarded = 0  # items / blocks forwarded by this round

    def feed(self, event: bytes) -> list[bytes]:
        """Take one complete event (with its terminator); return what to send the client now."""
        raise NotImplementedError

    def calls(self) -> list[dict[str, Any]]:
        """The tool calls this turn made, in the format's call shape."""
        raise NotImplementedError

    def assistant_items(self) -> list[dict[str, Any]]:
        """The turn as history items to append upstream (continuation)."""
        raise NotImplementedError

    def _route(self, event: bytes, starts_call: bool) -> list[bytes]:
        if self.pager_tools and starts_call:
            self.holding = True
        if self.holding:
            self.held.append(event)
            return []
        return [event]

    def flush(self) -> list[bytes]:
        held, self.held = self.held, []
        return held


class Dialect:
    """Per-format proxy knowledge; see the module docstring."""

    format: str
    upstream: str  # "openai" or "anthropic"
    error_style: str  # "openai" or "anthropic"
    history_key: str = "messages"  # the request's list of history items

    def session_seed(self, request: Mapping[str, Any]) -> tuple[Any, Any]:
        """Return (system prompt, first user message) to name a session by."""
        raise NotImplementedError

    def prepare(self, request: dict[str, Any], stream: bool) -> bool:
        """Adjust the upstream request in place; return whether the client asked for usage in the stream."""
        return True

    def calls(self, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def call_name(self, call: Mapping[str, Any]) -> str:
        raise NotImplementedError

    def continue_request(
        self, request: dict[str, Any], items: list[dict[str, Any]], results: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """Return ``request`` with the assistant turn ``items`` and the tool ``results`` appended."""
        raise NotImplementedError

    def assistant_items(self, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def strip_calls(self, response: dict[str, Any], names: frozenset[str]) -> dict[str, Any]:
        """Return ``response`` without its calls to the tools ``names`` (a turn mixing pager's and the client's)."""
        raise NotImplementedError

    def stream_turn(self, pager_tools: frozenset[str], round_no: int, offset: int, client_usage: bool) -> StreamTurn:
        raise NotImplementedError


# -- OpenAI chat completions ---------------------------------------------------------------


class _ChatTurn(StreamTurn):
    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.text: list[str] = []
        self.tool_calls: dict[int, dict[str, Any]] = {}

    def feed(self, event: bytes) -> list[bytes]:
        data = sse_data(event)
        if data == b"[DONE]":
            self.ended = True
            return self._route(event, False)
        chunk = _json(data)
        if not isinstance(chunk, dict):
            return self._route(event, False)
        if isinstance(chunk.get("usage"), Mapping):
            self.usage = {"usage": chunk["usage"]}
            if not chunk.get("choices") and not self.client_usage:
                return []  # the usage chunk pager asked for on the client's behalf
        starts = False
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                self.text.append(delta["content"])
            for tc in delta.get("tool_calls") or ():
                starts = True
                slot = self.tool_calls.setdefault(
                    int(tc.get("index", 0)), {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                if tc.get("id"):
                    slot["id"] = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    slot["function"]["name"] += fn["name"]
                if fn.get("arguments"):
                    slot["function"]["arguments"] += fn["arguments"]
        return self._route(event, starts)

    def calls(self) -> list[dict[str, Any]]:
        return [self.tool_calls[i] for i in sorted(self.tool_calls)]

    def assistant_items(self) -> list[dict[str, Any]]:
        msg: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
        if self.tool_calls:
            msg["tool_calls"] = self.calls()
        return [msg]


class OpenAIChatDialect(Dialect):
    format = "openai-chat"
    upstream = "openai"
    error_style = "openai"

    def session_seed(self, request: Mapping[str, Any]) -> tuple[Any, Any]:
        msgs = request.get("messages") or ()
        sys = next((m.get("content") for m in msgs if isinstance(m, Mapping) and m.get("role") in ("system", "developer")), None)
        user = next((m.get("content") for m in msgs if isinstance(m, Mapping) and m.get("role") == "user"), None)
        return sys, user

    def prepare(self, request: dict[str, Any], stream: bool) -> bool:
        if not stream:
            return True
        opts = dict(request.get("stream_options") or {})
        asked = bool(opts.get("include_usage"))
        if not asked:
            # usage arrives only in a final chunk the client must ask for; ask for
            # it and keep that chunk from a client that did not
            opts["include_usage"] = True
            request["stream_options"] = opts
        return asked

    def calls(self, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        choices = response.get("choices") or ()
        if not choices:
            return []
        return list((choices[0].get("message") or {}).get("tool_calls") or ())

    def call_name(self, call: Mapping[str, Any]) -> str:
        return str((call.get("function") or {}).get("name") or "")

    def assistant_items(self, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        msg = dict((response.get("choices") or [{}])[0].get("message") or {})
        keep = {k: msg[k] for k in ("role", "content", "tool_calls") if k in msg}
        keep.setdefault("role", "assistant")
        return [keep]

    def continue_request(self, request: dict[str, Any], items: list[dict[str, Any]], results: list[dict[str, Any]]) -> dict[str, Any]:
        out = dict(request)
        out["messages"] = [*request["messages"], *items, *results]
        return out

    def strip_calls(self, response: dict[str, Any], names: frozenset[str]) -> dict[str, Any]:
        out = dict(response)
        choices = []
        for choice in response.get("choices") or ():
            msg = dict(choice.get("message") or {})
            msg["tool_calls"] = [c for c in msg.get("tool_calls") or () if self.call_name(c) not in names]
            choices.append({**choice, "message": msg})
        out["choices"] = choices
        return out

    def stream_turn(self, pager_tools: frozenset[str], round_no: int, offset: int, client_usage: bool) -> StreamTurn:
        return _ChatTurn(pager_tools, round_no, offset, client_usage)


# -- Anthropic Messages --------------------------------------------------------------------


class _AnthropicTurn(StreamTurn):
    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.blocks: dict[int, dict[str, Any]] = {}
        self.partial: dict[int, list[str]] = {}
        self.usage = None

    def feed(self, event: bytes) -> list[bytes]:
        msg = _json(sse_data(event))
        if not isinstance(msg, dict):
            return self._route(event, False)
        kind = msg.get("type")
        self.ended = kind == "message_stop"
        if kind == "message_start":
            usage = dict((msg.get("message") or {}).get("usage") or {})
            self.usage = {"usage": usage}
            if self.round_no:
                return []  # the client already has this message open
        elif kind == "message_delta" and isinstance(msg.get("usage"), Mapping):
            base = dict((self.usage or {}).get("usage") or {})
            base.update({k: v for k, v in msg["usage"].items() if v is not None})
            self.usage = {"usage": base}
        starts = False
        if kind in ("content_block_start", "content_block_delta", "content_block_stop"):
            i = int(msg.get("index", 0))
            if kind == "content_block_start":
                block = dict(msg.get("content_block") or {})
                self.blocks[i] = block
                starts = block.get("type") == "tool_use"
            elif kind == "content_block_delta":
                delta = msg.get("delta") or {}
                block = self.blocks.setdefault(i, {"type": "text", "text": ""})
                dt = delta.get("type")
                if dt == "text_delta":
                    block["text"] = block.get("text", "") + delta.get("text", "")
                elif dt == "input_json_delta":
                    self.partial.setdefault(i, []).append(delta.get("partial_json", ""))
                elif dt == "thinking_delta":
                    block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
                elif dt == "signature_delta":
                    block["signature"] = delta.get("signature", "")
            elif kind == "content_block_stop" and i in self.partial:
                raw = "".join(self.partial.pop(i))
                self.blocks[i]["input"] = _json(raw.encode()) if raw else {}
            if self.offset:
                # later rounds continue the client's one message: renumber the blocks
                msg["index"] = i + self.offset
                event = _encode(kind, msg)
            out = self._route(event, starts)
            if out and kind == "content_block_stop":
                self.forwarded += 1
            return out
        return self._route(event, False)

    def calls(self) -> list[dict[str, Any]]:
        return [b for _, b in sorted(self.blocks.items()) if b.get("type") == "tool_use"]

    def assistant_items(self) -> list[dict[str, Any]]:
        return [{"role": "assistant", "content": [b for _, b in sorted(self.blocks.items())]}]


class AnthropicDialect(Dialect):
    format = "anthropic-messages"
    upstream = "anthropic"
    error_style = "anthropic"

    def session_seed(self, request: Mapping[str, Any]) -> tuple[Any, Any]:
        msgs = request.get("messages") or ()
        user = next((m.get("content") for m in msgs if isinstance(m, Mapping) and m.get("role") == "user"), None)
        return _text(request.get("system")), user

    def calls(self, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [b for b in response.get("content") or () if isinstance(b, Mapping) and b.get("type") == "tool_use"]

    def call_name(self, call: Mapping[str, Any]) -> str:
        return str(call.get("name") or "")

    def assistant_items(self, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [{"role": "assistant", "content": list(response.get("content") or ())}]

    def continue_request(self, request: dict[str, Any], items: list[dict[str, Any]], results: list[dict[str, Any]]) -> dict[str, Any]:
        out = dict(request)
        # call_tool answers in a tool_result block; the API wants them in one user turn
        blocks = [r for r in results if r.get("type") == "tool_result"]
        users = [r for r in results if r.get("role") == "user"]
        for u in users:
            blocks.extend(u.get("content") or ())
        out["messages"] = [*request["messages"], *items, {"role": "user", "content": blocks}]
        return out

    def strip_calls(self, response: dict[str, Any], names: frozenset[str]) -> dict[str, Any]:
        out = dict(response)
        out["content"] = [b for b in response.get("content") or () if not (b.get("type") == "tool_use" and b.get("name") in names)]
        return out

    def stream_turn(self, pager_tools: frozenset[str], round_no: int, offset: int, client_usage: bool) -> StreamTurn:
        return _AnthropicTurn(pager_tools, round_no, offset, client_usage)


# -- OpenAI Responses ----------------------------------------------------------------------


class _ResponsesTurn(StreamTurn):
    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.output: list[dict[str, Any]] = []

    def feed(self, event: bytes) -> list[bytes]:
        msg = _json(sse_data(event))
        if not isinstance(msg, dict):
            return self._route(event, False)
        kind = str(msg.get("type") or "")
        if kind in ("response.completed", "response.incomplete", "response.failed"):
            self.ended = True
            resp = msg.get("response") or {}
            self.output = list(resp.get("output") or ())
            if isinstance(resp.get("usage"), Mapping):
                self.usage = {"usage": resp["usage"]}
        if self.round_no and kind in ("response.created", "response.in_progress"):
            return []
        starts = kind == "response.output_item.added" and (msg.get("item") or {}).get("type") == "function_call"
        if "output_index" in msg and self.offset:
            msg["output_index"] = int(msg["output_index"]) + self.offset
            event = _encode(kind, msg)
        out = self._route(event, starts)
        if out and kind == "response.output_item.done":
            self.forwarded += 1
        return out

    def calls(self) -> list[dict[str, Any]]:
        return [i for i in self.output if i.get("type") == "function_call"]

    def assistant_items(self) -> list[dict[str, Any]]:
        return list(self.output)


class ResponsesDialect(Dialect):
    format = "openai-responses"
    upstream = "openai"
    error_style = "openai"
    history_key = "input"

    def session_seed(self, request: Mapping[str, Any]) -> tuple[Any, Any]:
        items = request.get("input")
        if isinstance(items, str):
            return request.get("instructions"), items
        user = next(
            (i.get("content") for i in items or () if isinstance(i, Mapping) and i.get("role") == "user"), None
        )
        return request.get("instructions"), user

    def calls(self, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [i for i in response.get("output") or () if isinstance(i, Mapping) and i.get("type") == "function_call"]

    def call_name(self, call: Mapping[str, Any]) -> str:
        return str(call.get("name") or "")

    def assistant_items(self, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        return list(response.get("output") or ())

    def continue_request(self, request: dict[str, Any], items: list[dict[str, Any]], results: list[dict[str, Any]]) -> dict[str, Any]:
        out = dict(request)
        prior = request.get("input")
        if isinstance(prior, str):
            prior = [{"role": "user", "content": prior}]
        out["input"] = [*(prior or ()), *items, *results]
        return out

    def strip_calls(self, response: dict[str, Any], names: frozenset[str]) -> dict[str, Any]:
        out = dict(response)
        out["output"] = [
            i for i in response.get("output") or () if not (i.get("type") == "function_call" and i.get("name") in names)
        ]
        return out

    def stream_turn(self, pager_tools: frozenset[str], round_no: int, offset: int, client_usage: bool) -> StreamTurn:
        return _ResponsesTurn(pager_tools, round_no, offset, client_usage)


DIALECTS: dict[str, Dialect] = {
    "/v1/chat/completions": OpenAIChatDialect(),
    "/v1/messages": AnthropicDialect(),
    "/v1/responses": ResponsesDialect(),
}

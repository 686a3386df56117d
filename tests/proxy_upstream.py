"""A small model server for the proxy tests and benchmark: canned answers on loopback.

It speaks OpenAI chat completions, Anthropic Messages and OpenAI Responses,
streaming and not, with usage (cached tokens included). The request's
``model`` picks a behaviour:

- any name: answer "echo: <last user text>";
- ``fault-429`` / ``fault-500``: the provider's error status and body;
- ``hang``: never answer (the proxy's timeout must fire);
- ``hang-mid``: stream the first event, then go silent;
- ``slow``: answer after ``SLOW_SECONDS`` (graceful shutdown);
- ``use-recall``: call pager's ``recall`` tool when it is offered and no tool
  result came back yet, then answer with the result's first line;
- ``use-both``: call ``recall`` and the client's ``get_weather`` in one turn;
- ``recall-user``: as ``use-recall``, with the last user message as the query.

Every request received is kept in ``app.state.seen`` (path, headers, body).
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

SLOW_SECONDS = 0.5
USAGE = {"prompt": 40, "completion": 6, "cached": 32}
ERR_429 = {"error": {"message": "Rate limit reached for requests", "type": "requests", "param": None,
                     "code": "rate_limit_exceeded"}}
ERR_500 = {"error": {"message": "The server had an error", "type": "server_error", "param": None, "code": None}}
ANT_429 = {"type": "error", "error": {"type": "rate_limit_error", "message": "Number of requests exceeded"}}
ANT_500 = {"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    out = []
    for part in content or ():
        if isinstance(part, dict):
            if isinstance(part.get("text"), str):
                out.append(part["text"])
            elif part.get("type") == "tool_result":
                out.append(_text_of(part.get("content")))
    return "\n".join(out)


def _first_line(text: str) -> str:
    return (text.splitlines() or [""])[0]


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    body = data if isinstance(data, bytes) else orjson.dumps(data)
    return head + b"data: " + body + b"\n\n"


async def _fault(model: str, anthropic: bool) -> Response | None:
    if model == "fault-429":
        return JSONResponse(ANT_429 if anthropic else ERR_429, status_code=429, headers={"retry-after": "7"})
    if model == "fault-500":
        return JSONResponse(ANT_500 if anthropic else ERR_500, status_code=500)
    if model == "hang":
        await asyncio.sleep(20)
    if model == "slow":
        await asyncio.sleep(SLOW_SECONDS)
    return None


def _tool_names(tools: Any) -> set[str]:
    names = set()
    for t in tools or ():
        fn = t.get("function") if isinstance(t.get("function"), dict) else t
        names.add(fn.get("name"))
    return names


# -- OpenAI chat ---------------------------------------------------------------------------


def _chat_plan(body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """Return (text, tool calls) the canned model answers with."""
    msgs = body.get("messages") or []
    last = msgs[-1] if msgs else {}
    model = body.get("model", "")
    if "recall" in _tool_names(body.get("tools")) and (
            model == "recall-forever" or (model in ("use-recall", "use-both", "recall-user") and last.get("role") != "tool")):
        query = _text_of(last.get("content")) if model == "recall-user" else "ZEBRA-42"
        calls = [{"id": f"call_r{len(msgs)}", "type": "function",
                  "function": {"name": "recall", "arguments": orjson.dumps({"query": query}).decode()}}]
        if model == "use-both":
            calls.append({"id": f"call_w{len(msgs)}", "type": "function",
                          "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}})
        return "", calls
    if last.get("role") == "tool":
        return "tool said: " + _first_line(_text_of(last.get("content"))), []
    user = next((m for m in reversed(msgs) if m.get("role") == "user"), {})
    return "echo: " + _text_of(user.get("content")), []


def _chat_usage() -> dict[str, Any]:
    return {"prompt_tokens": USAGE["prompt"], "completion_tokens": USAGE["completion"],
            "total_tokens": USAGE["prompt"] + USAGE["completion"],
            "prompt_tokens_details": {"cached_tokens": USAGE["cached"]}}


async def chat(request: Request) -> Response:
    body = orjson.loads(await request.body())
    request.app.state.seen.append(("/v1/chat/completions", dict(request.headers), body))
    fault = await _fault(body.get("model", ""), False)
    if fault is not None:
        return fault
    text, calls = _chat_plan(body)
    if not body.get("stream"):
        msg: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            msg["tool_calls"] = calls
        return JSONResponse({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": body.get("model"),
            "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": _chat_usage(),
        })
    usage = bool((body.get("stream_options") or {}).get("include_usage"))

    async def events():
        base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": body.get("model")}
        yield _sse({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})
        if body.get("model") == "hang-mid":
            await asyncio.sleep(20)
        for i in range(0, len(text), 8):
            yield _sse({**base, "choices": [{"index": 0, "delta": {"content": text[i:i + 8]}, "finish_reason": None}]})
        for j, c in enumerate(calls):
            yield _sse({**base, "choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": j, "id": c["id"], "type": "function", "function": {"name": c["function"]["name"], "arguments": ""}}]},
                "finish_reason": None}]})
            yield _sse({**base, "choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": j, "function": {"arguments": c["function"]["arguments"]}}]}, "finish_reason": None}]})
        yield _sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls" if calls else "stop"}]})
        if usage:
            yield _sse({**base, "choices": [], "usage": _chat_usage()})
        yield _sse(b"[DONE]")

    return StreamingResponse(events(), media_type="text/event-stream")


# -- Anthropic Messages --------------------------------------------------------------------


def _anthropic_usage() -> dict[str, Any]:
    return {"input_tokens": USAGE["prompt"] - USAGE["cached"], "cache_read_input_tokens": USAGE["cached"],
            "cache_creation_input_tokens": 0, "output_tokens": USAGE["completion"]}


async def messages(request: Request) -> Response:
    body = orjson.loads(await request.body())
    request.app.state.seen.append(("/v1/messages", dict(request.headers), body))
    fault = await _fault(body.get("model", ""), True)
    if fault is not None:
        return fault
    msgs = body.get("messages") or []
    last = msgs[-1] if msgs else {}
    results = [b for b in last.get("content") or () if isinstance(b, dict) and b.get("type") == "tool_result"] \
        if isinstance(last.get("content"), list) else []
    blocks: list[dict[str, Any]]
    if body.get("model") == "use-recall" and not results and "recall" in _tool_names(body.get("tools")):
        blocks = [{"type": "text", "text": "Let me look."},
                  {"type": "tool_use", "id": f"toolu_{len(msgs)}", "name": "recall", "input": {"query": "ZEBRA-42"}}]
    elif results:
        blocks = [{"type": "text", "text": "tool said: " + _first_line(_text_of(results[0].get("content")))}]
    else:
        blocks = [{"type": "text", "text": "echo: " + _text_of(last.get("content"))}]
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": body.get("model"),
               "content": blocks, "stop_reason": stop, "stop_sequence": None, "usage": _anthropic_usage()}
    if not body.get("stream"):
        return JSONResponse(message)

    async def events():
        start = {**message, "content": [], "stop_reason": None,
                 "usage": {**_anthropic_usage(), "output_tokens": 1}}
        yield _sse({"type": "message_start", "message": start}, "message_start")
        for i, b in enumerate(blocks):
            if b["type"] == "text":
                yield _sse({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}, "content_block_start")
                yield _sse({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": b["text"]}}, "content_block_delta")
            else:
                yield _sse({"type": "content_block_start", "index": i, "content_block": {**b, "input": {}}}, "content_block_start")
                yield _sse({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": orjson.dumps(b["input"]).decode()}}, "content_block_delta")
            yield _sse({"type": "content_block_stop", "index": i}, "content_block_stop")
        yield _sse({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": USAGE["completion"]}}, "message_delta")
        yield _sse({"type": "message_stop"}, "message_stop")

    return StreamingResponse(events(), media_type="text/event-stream")


# -- OpenAI Responses ----------------------------------------------------------------------


def _responses_usage() -> dict[str, Any]:
    return {"input_tokens": USAGE["prompt"], "input_tokens_details": {"cached_tokens": USAGE["cached"]},
            "output_tokens": USAGE["completion"], "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": USAGE["prompt"] + USAGE["completion"]}


async def responses(request: Request) -> Response:
    body = orjson.loads(await request.body())
    request.app.state.seen.append(("/v1/responses", dict(request.headers), body))
    fault = await _fault(body.get("model", ""), False)
    if fault is not None:
        return fault
    items = body.get("input")
    items = [{"role": "user", "content": items}] if isinstance(items, str) else list(items or [])
    last = items[-1] if items else {}
    if body.get("model") == "use-recall" and last.get("type") != "function_call_output" and "recall" in _tool_names(body.get("tools")):
        output = [{"type": "function_call", "id": f"fc_{len(items)}", "call_id": f"call_{len(items)}", "name": "recall",
                   "arguments": orjson.dumps({"query": "ZEBRA-42"}).decode(), "status": "completed"}]
    else:
        said = ("tool said: " + _first_line(str(last.get("output", "")))) if last.get("type") == "function_call_output" \
            else "echo: " + _text_of(last.get("content"))
        output = [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": said, "annotations": []}]}]
    response = {"id": "resp_1", "object": "response", "created_at": 1, "model": body.get("model"), "status": "completed",
                "output": output, "usage": _responses_usage(), "parallel_tool_calls": True, "tool_choice": "auto",
                "tools": body.get("tools") or []}
    if not body.get("stream"):
        return JSONResponse(response)

    async def events():
        seq = iter(range(1000))
        shell = {**response, "status": "in_progress", "output": [], "usage": None}
        yield _sse({"type": "response.created", "sequence_number": next(seq), "response": shell}, "response.created")
        for i, item in enumerate(output):
            yield _sse({"type": "response.output_item.added", "sequence_number": next(seq), "output_index": i,
                        "item": {**item, "status": "in_progress"}}, "response.output_item.added")
            if item["type"] == "message":
                yield _sse({"type": "response.output_text.delta", "sequence_number": next(seq), "output_index": i,
                            "item_id": item["id"], "content_index": 0, "delta": item["content"][0]["text"], "logprobs": []},
                           "response.output_text.delta")
            yield _sse({"type": "response.output_item.done", "sequence_number": next(seq), "output_index": i, "item": item},
                       "response.output_item.done")
        yield _sse({"type": "response.completed", "sequence_number": next(seq), "response": response}, "response.completed")

    return StreamingResponse(events(), media_type="text/event-stream")


def make_upstream() -> Starlette:
    """Return the canned model server (an ASGI app)."""
    app = Starlette(routes=[
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
    ])
    app.state.seen = []
    return app

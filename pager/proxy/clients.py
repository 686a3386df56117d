"""What the proxy knows of real clients' requests beyond the wire format. Pure dict work.

Three kinds of request are not a conversation's next turn and are forwarded
untouched, unrecorded (``passthrough_kind``):

``compaction``
    The client's own summarisation of its history: Claude Code ("Your task is
    to create a detailed summary of the conversation so far…", or "…of the
    RECENT portion of the conversation…"), Codex ("You are performing a
    CONTEXT CHECKPOINT COMPACTION…"), opencode ("Provide a detailed prompt for
    continuing our conversation above…"). It must summarise the full history,
    not pager's paged one, and its answer replaces the history on the client
    side: recording it would fork the conversation for nothing.
``side``
    A short one-off request with no tools, no tool calls and no assistant turn
    in its history: title generation (opencode), topic detection and the quota
    probe (Claude Code, on a small model). It is not part of the conversation
    and there is nothing to page in it. A tool-less chat of the caller's own is
    recorded from its second call on (its first is one-off by this rule), with
    its whole history: nothing of it is lost.

A tool result that refuses a re-read because "the earlier result is still
there" is a page fault pager caused: the earlier result is what pager moved
off the prompt. ``serve_refusals`` puts the earlier content back into the
refusing result (followed by a note that keeps the refusal's own words, so
nothing the client sent is lost) before pager records the request; the result
then is a newer read of that file, and the earlier one goes stale.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from itertools import compress
from operator import not_
from typing import Any, Callable

import orjson

from pager.core.fileread import file_read_path

__all__ = ["REFUSAL", "SIDE_MAX_BYTES", "is_refusal", "passthrough_kind", "serve_refusals"]

SIDE_MAX_BYTES = 64 * 1024  # a no-tools request larger than this is a conversation, not a side request
_COMPACTION = (
    "your task is to create a detailed summary of the conversation so far",
    "your task is to create a detailed summary of the recent portion of the conversation",
    "you are performing a context checkpoint compaction",
    "provide a detailed prompt for continuing our conversation above",
)
# Claude Code: "Wasted call — file unchanged since your last Read. Refer to that earlier tool_result instead."
# (older builds: "File unchanged since last read"); other agents: "File X has not changed since last read",
# "File unchanged since last read. The content from the earlier read_file result … is still current".
REFUSAL = re.compile(
    r"(?:file\b[^\n]{0,200}?\b(?:unchanged|has not changed|hasn't changed|not changed)\s+since\s+(?:your\s+|the\s+)?last\s+read"
    r"|refer to that earlier tool_result)",
    re.IGNORECASE,
)
_REFUSAL_MAX_CHARS = 600  # a refusal is one short sentence; a long result that quotes one is a real result


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    return ""


def _short(content: Any) -> bool:
    """Return whether ``content``'s text may be short enough to be a refusal (without joining it)."""
    if isinstance(content, str):
        return len(content) <= _REFUSAL_MAX_CHARS
    if isinstance(content, (list, tuple)):
        n = 0
        for p in content:
            if isinstance(p, Mapping):
                text = p.get("text")
                if isinstance(text, str):
                    n += len(text) + 1
                    if n > _REFUSAL_MAX_CHARS + 1:
                        return False
        return True
    return False


def is_refusal(content: Any) -> bool:
    """Return whether a tool result's content is a client's "you already have this file" reply."""
    if not _short(content):  # most results are long: not joined, not searched (issue 23: per-call cost)
        return False
    text = _text(content)
    if not text or len(text) > _REFUSAL_MAX_CHARS or text.startswith("[pager:"):  # a stub or a served read
        return False
    return REFUSAL.search(text) is not None


def _last_user_text(fmt: str, req: Mapping[str, Any]) -> str:
    items = req.get("input") if fmt == "openai-responses" else req.get("messages")
    if isinstance(items, str):
        return items
    for item in reversed(items or ()):
        if isinstance(item, Mapping) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, list) and fmt == "anthropic-messages":
                # the summary prompt follows any tool results of the same turn
                content = [b for b in content if isinstance(b, Mapping) and b.get("type") == "text"]
            return _text(content)
    return ""


def passthrough_kind(
    fmt: str, req: Mapping[str, Any], body_size: int, named: bool = False, helper: str = ""
) -> str | None:
    """Return ``"compaction"`` or ``"side"`` for a request to forward untouched, else None.

    ``named``: the caller named the session (``x-pager-session``): it says the
    request belongs to that conversation, so it is never taken for a side request.
    ``helper``: the ``x-stainless-helper`` header (Claude Code's SDK sends
    ``compaction`` on its summary request).
    """
    text = _last_user_text(fmt, req).lower()
    if "compaction" in helper.lower() or any(marker in text for marker in _COMPACTION):
        return "compaction"
    if not named and not req.get("tools") and body_size <= SIDE_MAX_BYTES and not _has_turns(req):
        return "side"
    return None


def _has_turns(req: Mapping[str, Any]) -> bool:
    """Return whether the history holds an assistant turn or tool traffic (a conversation, not a one-off)."""
    items = req.get("input") if "input" in req else req.get("messages")
    if not isinstance(items, list):
        return False
    for item in items:
        if not isinstance(item, Mapping):
            continue
        if item.get("role") == "assistant" or item.get("tool_calls") or item.get("role") == "tool" or str(item.get("type", "")).endswith("call") \
                or str(item.get("type", "")).endswith("_output"):
            return True
        content = item.get("content")
        if isinstance(content, list) and any(
                isinstance(b, Mapping) and b.get("type") in ("tool_use", "tool_result") for b in content):
            return True
    return False


# -- refused re-reads -----------------------------------------------------------------------


def _note(refusal: str) -> str:
    # after the content, so a stub of this result shows the file's head
    quoted = " ".join(refusal.split())[:300]
    return (f"\n[pager: the client answered this read from its cache ({quoted!r}), but pager had moved that "
            "earlier result off the prompt; above is its content again]")


def _args_key(name: str, args: Any) -> tuple[str, str] | None:
    """Return what identifies one read (tool and arguments), or None when the call reads no file."""
    path = file_read_path(name, args)
    if path is None:
        return None
    if isinstance(args, str):
        try:
            args = orjson.loads(args)
        except orjson.JSONDecodeError:
            args = {"command": args}
    rest = {k: v for k, v in args.items()} if isinstance(args, Mapping) else {}
    return name.lower(), orjson.dumps(rest, option=orjson.OPT_SORT_KEYS).decode()


def _serve(
    results: Sequence[tuple[str, Any]], calls: Mapping[str, tuple[str, Any]],
    put: Callable[[int, str, Any], None],
) -> int:
    """Serve refusals among ``results`` (call id, content) in order; ``put(i, refusal, earlier)`` rewrites one."""
    if not any(is_refusal(content) for _cid, content in results):
        return 0  # the common case: no read parsed, nothing copied
    earlier: dict[tuple[str, str], Any] = {}
    served = 0
    for i, (cid, content) in enumerate(results):
        call = calls.get(cid)
        key = _args_key(*call) if call is not None else None
        if key is None:
            continue
        if is_refusal(content):
            if key in earlier:
                put(i, _text(content), earlier[key])
                served += 1
            continue
        earlier[key] = content
    return served


def _anthropic(req: dict[str, Any]) -> int:
    messages = list(req.get("messages") or ())
    calls: dict[str, tuple[str, Any]] = {}
    where: list[tuple[int, int]] = []
    results: list[tuple[str, Any]] = []
    for m, msg in enumerate(messages):
        content = msg.get("content") if isinstance(msg, Mapping) else None
        if not isinstance(content, list):
            continue
        for b, block in enumerate(content):
            if not isinstance(block, Mapping):
                continue
            if block.get("type") == "tool_use":
                calls[str(block.get("id"))] = (str(block.get("name") or ""), block.get("input") or {})
            elif block.get("type") == "tool_result":
                where.append((m, b))
                results.append((str(block.get("tool_use_id")), block.get("content")))

    def put(i: int, refusal: str, content: Any) -> None:
        m, b = where[i]
        msg = dict(messages[m])
        blocks = list(msg["content"])
        body = content if isinstance(content, list) else [{"type": "text", "text": _text(content)}]
        blocks[b] = {**blocks[b], "content": [*body, {"type": "text", "text": _note(refusal)}]}
        msg["content"] = blocks
        messages[m] = msg

    served = _serve(results, calls, put)
    if served:
        req["messages"] = messages
    return served


def _chat(req: dict[str, Any]) -> int:
    messages = list(req.get("messages") or ())
    calls: dict[str, tuple[str, Any]] = {}
    where: list[int] = []
    results: list[tuple[str, Any]] = []
    for m, msg in enumerate(messages):
        if not isinstance(msg, Mapping):
            continue
        for call in msg.get("tool_calls") or ():
            if not isinstance(call, Mapping):
                continue
            fn = call.get("function") or {}
            calls[str(call.get("id"))] = (str(fn.get("name") or ""), fn.get("arguments") or "{}")
        if msg.get("role") == "tool":
            where.append(m)
            results.append((str(msg.get("tool_call_id")), msg.get("content")))

    def put(i: int, refusal: str, content: Any) -> None:
        m = where[i]
        messages[m] = {**messages[m], "content": _text(content) + _note(refusal)}

    served = _serve(results, calls, put)
    if served:
        req["messages"] = messages
    return served


def _responses(req: dict[str, Any]) -> int:
    items = req.get("input")
    if not isinstance(items, list):
        return 0
    items = list(items)
    calls: dict[str, tuple[str, Any]] = {}
    where: list[int] = []
    results: list[tuple[str, Any]] = []
    for n, item in enumerate(items):
        if not isinstance(item, Mapping):
            continue
        itype = item.get("type")
        if itype == "function_call":
            calls[str(item.get("call_id"))] = (str(item.get("name") or ""), item.get("arguments") or "{}")
        elif itype == "custom_tool_call":
            calls[str(item.get("call_id"))] = (str(item.get("name") or ""), {"input": item.get("input")})
        elif itype == "local_shell_call":
            calls[str(item.get("call_id"))] = ("local_shell", item.get("action") or {})
        elif isinstance(itype, str) and itype.endswith("_call_output"):
            where.append(n)
            results.append((str(item.get("call_id")), item.get("output")))

    def put(i: int, refusal: str, content: Any) -> None:
        n = where[i]
        items[n] = {**items[n], "output": _text(content) + _note(refusal)}

    served = _serve(results, calls, put)
    if served:
        req["input"] = items
    return served


_SERVERS = {"anthropic-messages": _anthropic, "openai-chat": _chat, "openai-responses": _responses}


def _refuses(item: Any) -> bool:
    """Return whether one history item (of any format) holds a tool result that is a refusal."""
    if not isinstance(item, Mapping):
        return False
    if item.get("role") == "tool":  # chat
        return is_refusal(item.get("content"))
    itype = item.get("type")
    if isinstance(itype, str) and itype.endswith("_call_output"):  # Responses
        return is_refusal(item.get("output"))
    content = item.get("content")
    if isinstance(content, list):  # Anthropic: tool_result blocks in a user turn
        return any(isinstance(b, Mapping) and b.get("type") == "tool_result" and is_refusal(b.get("content"))
                   for b in content)
    return False


MEMO_MAX = 200_000  # items remembered by a memo before it starts over
_REFUSING = "refusing"  # the memo's count of remembered items that hold a refusal (a str: never an id)


def _any_refusal(items: list[Any], memo: dict[Any, Any]) -> bool:
    """Return whether any of ``items`` holds a refusal, searching only the items ``memo`` has not seen.

    A memo entry holds its item, so the item's id cannot be reused while the
    entry lives: an id found in the memo is that very object. Which items are
    new is found at C speed (no Python step per seen item); while no
    remembered item refuses, the seen ones are not looked at again.
    """
    if len(memo) > MEMO_MAX:
        memo.clear()
    fresh = list(compress(items, map(not_, map(memo.__contains__, map(id, items)))))
    found = False
    for item in fresh:
        hit = memo[id(item)] = (item, _refuses(item))
        if hit[1]:
            memo[_REFUSING] = memo.get(_REFUSING, 0) + 1
            found = True
    if found or not memo.get(_REFUSING):
        return found
    return any(memo[id(item)][1] for item in items)  # rare: some remembered item refuses


def serve_refusals(fmt: str, req: dict[str, Any], memo: dict[Any, Any] | None = None) -> int:
    """Put earlier content back into refused re-reads of ``req`` (in place, new lists); return how many.

    ``memo``: a dict the caller keeps between calls, so that a history item seen
    before (the same object: ``pager.proxy.bodies`` hands back the previous
    request's) is not searched again; it holds the items it remembers.
    """
    server = _SERVERS.get(fmt)
    if server is None:
        return 0
    items = req.get("input") if fmt == "openai-responses" else req.get("messages")
    if memo is not None and isinstance(items, list) and not _any_refusal(items, memo):
        return 0  # the common case: no refusal anywhere, nothing parsed or copied
    return server(req)

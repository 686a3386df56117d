"""Refused re-reads: a client's "you already have this file" answer, served with the file again. Pure dict work.

A tool result that refuses a re-read because "the earlier result is still
there" is a page fault pager caused: the earlier result is what pager moved
off the prompt. ``serve_refusals`` puts the earlier content back into the
refusing result (followed by a note that keeps the refusal's own words, so
nothing the client sent is lost) before pager records the request; the result
then is a newer read of that file, and the earlier one goes stale.

Theory of operation
-------------------
A client sends its refusal once, then resends it, unserved, in every later
request: the serving is done again on every call, the same way (the same
rewritten item at the same place, so the history pager records does not
fork). Finding refusals and the reads they refer to is a Python pass over
every item and block of the history; done on every call it cost 8 ms a
request at 1k messages and 86 ms at 10k on the proxy's event loop, once a
refusal was anywhere in the conversation (issue 23).

So with a ``memo`` (the proxy keeps one), each conversation's pass is kept:
the calls seen, the latest content of each file read, the rewritten items.
The pass covers all of a request's items but the last ``TAIL``: a client
that moves its cache mark (Claude Code marks its newest block) sends the last
one or two items of the request before as new objects, re-parsed without the
mark. A request whose item where the pass ends is the very object the pass
ended with extends it (the proxy's body cache hands back the previous
request's objects for the bytes it resends unchanged): the pass takes its
items up to its own last ``TAIL``, and those are scanned on every call, their
calls and reads kept apart; the kept rewrites are put back at their places (a
copy of the item list, in C). Anything else (the conversation's first
request, a fork, a request behind the last one) is scanned whole, and its
pass kept instead. The reads before the first refusal are not parsed until
one comes: most conversations never refuse, and their results are only
tested for being a refusal (a length check, for most).
"""

from __future__ import annotations

import re
from collections import ChainMap
from collections.abc import Mapping, MutableMapping
from typing import Any, Callable

import attrs
import orjson

from pager.core.fileread import file_read_path

__all__ = ["MEMO_CONVERSATIONS", "REFUSAL", "TAIL", "is_refusal", "serve_refusals", "text_of"]

# Claude Code: "Wasted call — file unchanged since your last Read. Refer to that earlier tool_result instead."
# (older builds: "File unchanged since last read"); other agents: "File X has not changed since last read",
# "File unchanged since last read. The content from the earlier read_file result … is still current".
REFUSAL = re.compile(
    r"(?:file\b[^\n]{0,200}?\b(?:unchanged|has not changed|hasn't changed|not changed)\s+since\s+(?:your\s+|the\s+)?last\s+read"
    r"|refer to that earlier tool_result)",
    re.IGNORECASE,
)
_REFUSAL_MAX_CHARS = 600  # a refusal is one short sentence; a long result that quotes one is a real result
# conversations a memo keeps the pass of, the least recently served dropped first: as many as the proxy's body
# cache keeps (``pager.proxy.bodies``); past it a request's items are new objects and a pass starts over anyway
MEMO_CONVERSATIONS = 64
TAIL = 4  # the last items of a request, scanned on every call (a client may send them as new objects)


def text_of(content: Any) -> str:
    """Return the text of a tool result's or message's content (a string, or the text of its parts)."""
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
    text = text_of(content)
    if not text or len(text) > _REFUSAL_MAX_CHARS or text.startswith("[pager:"):  # a stub or a served read
        return False
    return REFUSAL.search(text) is not None


def _note(refusal: str) -> str:
    # after the content, so a stub of this result shows the file's head
    quoted = " ".join(refusal.split())[:300]
    return (f"\n[pager: the client answered this read from its cache ({quoted!r}), but pager had moved that "
            "earlier result off the prompt; above is its content again]")


def _read_key(name: str, args: Any) -> tuple[str, str] | None:
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


# -- each format: where its calls and results are, and how a served result is written ------------

# a result: (item index, block index or -1, call id, content)
_Result = tuple[int, int, str, Any]


def _scan_anthropic(items: list[Any], start: int, end: int, calls: dict[str, tuple[str, Any]],
                    results: list[_Result]) -> None:
    for m in range(start, end):
        msg = items[m]
        content = msg.get("content") if isinstance(msg, Mapping) else None
        if not isinstance(content, list):
            continue
        for b, block in enumerate(content):
            if not isinstance(block, Mapping):
                continue
            btype = block.get("type")
            if btype == "tool_use":
                calls[str(block.get("id"))] = (str(block.get("name") or ""), block.get("input") or {})
            elif btype == "tool_result":
                results.append((m, b, str(block.get("tool_use_id")), block.get("content")))


def _write_anthropic(item: Any, b: int, refusal: str, earlier: Any) -> Any:
    msg = dict(item)
    blocks = list(msg["content"])
    body = earlier if isinstance(earlier, list) else [{"type": "text", "text": text_of(earlier)}]
    blocks[b] = {**blocks[b], "content": [*body, {"type": "text", "text": _note(refusal)}]}
    msg["content"] = blocks
    return msg


def _scan_chat(items: list[Any], start: int, end: int, calls: dict[str, tuple[str, Any]],
               results: list[_Result]) -> None:
    for m in range(start, end):
        msg = items[m]
        if not isinstance(msg, Mapping):
            continue
        for call in msg.get("tool_calls") or ():
            if not isinstance(call, Mapping):
                continue
            fn = call.get("function") or {}
            calls[str(call.get("id"))] = (str(fn.get("name") or ""), fn.get("arguments") or "{}")
        if msg.get("role") == "tool":
            results.append((m, -1, str(msg.get("tool_call_id")), msg.get("content")))


def _write_chat(item: Any, _b: int, refusal: str, earlier: Any) -> Any:
    return {**item, "content": text_of(earlier) + _note(refusal)}


def _scan_responses(items: list[Any], start: int, end: int, calls: dict[str, tuple[str, Any]],
                    results: list[_Result]) -> None:
    for n in range(start, end):
        item = items[n]
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
            results.append((n, -1, str(item.get("call_id")), item.get("output")))


def _write_responses(item: Any, _b: int, refusal: str, earlier: Any) -> Any:
    return {**item, "output": text_of(earlier) + _note(refusal)}


_Scan = Callable[[list[Any], int, int, dict[str, tuple[str, Any]], list[_Result]], None]
_Write = Callable[[Any, int, str, Any], Any]
_FORMATS: dict[str, tuple[str, _Scan, _Write]] = {
    "anthropic-messages": ("messages", _scan_anthropic, _write_anthropic),
    "openai-chat": ("messages", _scan_chat, _write_chat),
    "openai-responses": ("input", _scan_responses, _write_responses),
}


@attrs.define(slots=True, eq=False)
class _Pass:
    """One conversation's pass over its items so far (mutable: extended by each request that extends it)."""

    n: int = 0  # items taken in for good: all of the last request's but its last TAIL
    last: Any = None  # the last of them: a request whose item ``n - 1`` is this object extends the pass
    calls: dict[str, tuple[str, Any]] = attrs.field(factory=dict)
    unread: list[tuple[str, Any]] = attrs.field(factory=list)  # results not yet keyed (no refusal seen yet)
    keyed: bool = False  # a refusal was seen: every result is keyed as it comes
    earlier: dict[tuple[str, str], Any] = attrs.field(factory=dict)  # the latest content of each read
    rewritten: dict[int, Any] = attrs.field(factory=dict)  # item index -> the item with its refusals served
    served: int = 0


def _take(items: list[Any], results: list[_Result], write: _Write, calls: Mapping[str, tuple[str, Any]],
          earlier: MutableMapping[tuple[str, str], Any], rewritten: dict[int, Any]) -> int:
    """Serve the refusals among ``results`` (in order) from ``earlier``, which they update; return how many."""
    served = 0
    for m, b, cid, content in results:
        call = calls.get(cid)
        key = _read_key(*call) if call is not None else None
        if key is None:
            continue
        if is_refusal(content):
            if key in earlier:
                rewritten[m] = write(rewritten.get(m, items[m]), b, text_of(content), earlier[key])
                served += 1
            continue
        earlier[key] = content
    return served


def _key_reads(p: _Pass) -> None:
    """Parse the reads taken in before the first refusal (``unread``), once: every result is keyed from now on."""
    for cid, content in p.unread:
        call = p.calls.get(cid)
        key = _read_key(*call) if call is not None else None
        if key is not None and not is_refusal(content):  # a refusal there served nothing: no read came before
            p.earlier[key] = content
    p.unread = []
    p.keyed = True


def _advance(p: _Pass, items: list[Any], upto: int, scan: _Scan, write: _Write) -> None:
    """Take ``items[p.n:upto]`` into the pass for good."""
    results: list[_Result] = []
    scan(items, p.n, upto, p.calls, results)
    if not p.keyed and any(is_refusal(r[3]) for r in results):
        _key_reads(p)
    if p.keyed:
        p.served += _take(items, results, write, p.calls, p.earlier, p.rewritten)
    else:
        p.unread.extend((cid, content) for _m, _b, cid, content in results)
    p.n, p.last = upto, items[upto - 1]


def serve_refusals(fmt: str, req: dict[str, Any], memo: dict[Any, Any] | None = None, conversation: str = "") -> int:
    """Put earlier content back into refused re-reads of ``req`` (in a new item list); return how many.

    The client's objects are not changed: a served item is a new one, and
    ``req``'s history is replaced by a new list when anything is served.
    ``memo``: a dict the caller keeps between calls, with ``conversation``
    naming the conversation ``req`` belongs to, so that a request extending
    the last one of that conversation (its items up to the last one's length
    the same objects, the last of them checked) is scanned for its new items
    only; see the module docstring. One thread at a time.
    """
    spec = _FORMATS.get(fmt)
    if spec is None:
        return 0
    key, scan, write = spec
    items = req.get(key)
    if isinstance(items, tuple) and key == "messages":
        items = list(items)
    if not isinstance(items, list):
        return 0
    p = memo.pop(conversation, None) if memo is not None else None
    if not isinstance(p, _Pass) or len(items) < p.n or (p.n and items[p.n - 1] is not p.last):
        p = _Pass()
    # the pass takes all but the last TAIL items for good; those are scanned anew each call, their calls and
    # reads kept apart (a client that moves its cache mark sends the last one or two as new objects)
    if len(items) - TAIL > p.n:
        _advance(p, items, len(items) - TAIL, scan, write)
    if memo is not None:
        memo[conversation] = p  # the most recent last, so the oldest go first
        while len(memo) > MEMO_CONVERSATIONS:
            del memo[next(iter(memo))]
    tail_calls: dict[str, tuple[str, Any]] = {}
    results: list[_Result] = []
    scan(items, p.n, len(items), tail_calls, results)
    served, tail = p.served, {}
    if results and (p.keyed or any(is_refusal(r[3]) for r in results)):
        if not p.keyed:
            _key_reads(p)
        served += _take(items, results, write, ChainMap(tail_calls, p.calls), ChainMap({}, p.earlier), tail)
    if not p.rewritten and not tail:
        return 0  # the common case: nothing served anywhere, nothing copied
    out = list(items)
    for m, item in (*p.rewritten.items(), *tail.items()):
        out[m] = item
    req[key] = out
    return served

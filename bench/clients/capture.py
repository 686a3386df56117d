"""Write a run's request sequence as redacted JSONL: what a client really sends, minus its own prose and secrets.

Redacted: headers ``authorization`` / ``x-api-key`` / ``cookie`` (dropped);
the client's own system prompt text (Anthropic ``system``, Responses
``instructions`` and developer messages, chat system messages, Claude Code's
``<system-reminder>`` blocks) and tool descriptions, each replaced by a
placeholder of the same length, so token counts stay close. Kept: tool names
and input schemas, cache_control marks, metadata, prompt_cache_key, ids,
session headers, the bed's prompt, every tool call and result, and the
scripted answer each request got (``reply``), so a replay can answer alike.
"""

from __future__ import annotations

import copy
import gzip
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

import orjson

__all__ = ["redact", "write_capture"]

SECRET_HEADERS = frozenset({"authorization", "x-api-key", "cookie", "proxy-authorization"})
_FILL = "redacted client text "
_REMINDER = re.compile(r"<system-reminder>(.*?)</system-reminder>", re.S)


def placeholder(what: str, text: str) -> str:
    """Return a placeholder for ``text`` of (about) its length."""
    n = len(text)
    head = f"[redacted {what}: {n} chars]"
    if n <= len(head):
        return head
    body = (_FILL * (n // len(_FILL) + 1))[: n - len(head) - 1]
    return head + " " + body


def _text_blocks(content: Any, what: str) -> Any:
    if isinstance(content, str):
        return placeholder(what, content)
    if isinstance(content, list):
        out = []
        for b in content:
            if isinstance(b, dict) and isinstance(b.get("text"), str):
                b = {**b, "text": placeholder(what, b["text"])}
            out.append(b)
        return out
    return content


def _reminders(content: Any) -> Any:
    def sub(s: str) -> str:
        return _REMINDER.sub(lambda m: "<system-reminder>" + placeholder("reminder", m.group(1)) + "</system-reminder>", s)

    if isinstance(content, str):
        return sub(content)
    if isinstance(content, list):
        return [({**b, "text": sub(b["text"])} if isinstance(b, dict) and isinstance(b.get("text"), str) else b)
                for b in content]
    return content


def _tools(tools: Any) -> Any:
    if not isinstance(tools, list):
        return tools
    out = []
    for t in tools:
        if not isinstance(t, dict):
            out.append(t)
            continue
        t = dict(t)
        if isinstance(t.get("description"), str):
            t["description"] = placeholder("tool description", t["description"])
        if isinstance(t.get("function"), dict) and isinstance(t["function"].get("description"), str):
            t["function"] = {**t["function"], "description": placeholder("tool description", t["function"]["description"])}
        if isinstance(t.get("tools"), list):  # a namespace of tools (Codex)
            t["tools"] = _tools(t["tools"])
        out.append(t)
    return out


def redact(body: Any) -> Any:
    """Return ``body`` (a request body) with the client's own prose replaced by placeholders."""
    if not isinstance(body, dict):
        return body
    b = copy.deepcopy(body)
    if "system" in b:
        b["system"] = _text_blocks(b["system"], "system prompt")
    if isinstance(b.get("instructions"), str):
        b["instructions"] = placeholder("instructions", b["instructions"])
    if "tools" in b:
        b["tools"] = _tools(b["tools"])
    for key in ("messages", "input"):
        items = b.get(key)
        if not isinstance(items, list):
            continue
        for m in items:
            if not isinstance(m, dict):
                continue
            if m.get("role") in ("system", "developer"):
                m["content"] = _text_blocks(m.get("content"), f"{m['role']} prompt")
            elif m.get("role") == "user":
                m["content"] = _reminders(m.get("content"))
    return b


def _headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in SECRET_HEADERS}


def write_capture(path: Path, records: Iterable[Mapping[str, Any]], meta: Mapping[str, Any]) -> Path:
    """Write ``records`` (upstream log entries) to ``path`` (.jsonl or .jsonl.gz), a header line first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    records = list(records)
    t0 = records[0]["t0"] if records else 0.0
    lines = [orjson.dumps({"type": "capture", **meta})]
    for i, r in enumerate(records):
        lines.append(orjson.dumps({
            "seq": i, "t": round(r["t0"] - t0, 4), "method": r["method"], "path": r["path"], "query": r["query"],
            "headers": _headers(r["headers"]), "body": redact(r["body"]), "status": r["status"], "kind": r["kind"],
            "reply": r["reply"], "violations": r["violations"],
        }))
    data = b"\n".join(lines) + b"\n"
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(data, mtime=0))
    else:
        path.write_bytes(data)
    return path

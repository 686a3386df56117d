"""Importers: original agent logs -> native histories (Anthropic Messages, OpenAI Responses).

``claude_code(path)`` reads a Claude Code session log (``~/.claude/projects/*.jsonl``:
one JSON object per line; ``user`` and ``assistant`` lines carry a ``message``
in Anthropic Messages shape). Claude Code writes one line per streamed content
block and one line per tool result, so the importer

- joins the lines of one assistant message (same ``message.id``) into one turn;
- joins consecutive user lines into one user turn, ``tool_result`` blocks first,
  in the order of the ``tool_use`` blocks they answer;
- drops a ``tool_result`` that answers no ``tool_use`` of the turn before it
  (left by ``/compact`` or an interrupted write) and counts it in
  ``dropped_results``; a ``tool_use`` left unanswered stays (pager answers it
  with a synthetic result on output);
- skips progress, snapshot, queue and system lines (not sent to the model).

``responses_log(path)`` reads OpenAI Responses items, one per line, either
bare items or Codex rollout lines (``{"type": "response_item", "payload": item}``).

Each returns a ``NativeSession``: an id, a header, the request key holding the
history (``messages`` or ``input``) and the history itself.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import orjson

from pager.errors import InputError

__all__ = ["NativeSession", "chat_messages", "claude_code", "detect_log", "load_native", "responses_log"]


@attrs.frozen
class NativeSession:
    """One imported session in its provider's own shape."""

    id: str
    format: str  # a wire format name: "anthropic-messages" or "openai-responses"
    history: tuple[Any, ...]
    header: Mapping[str, Any] = attrs.field(factory=dict)
    path: str = ""

    @property
    def key(self) -> str:
        """Return the request key the history goes under (``messages`` or ``input``)."""
        return "input" if self.format == "openai-responses" else "messages"

    def request(self, upto: int, **extra: Any) -> dict[str, Any]:
        """Return a request carrying the history before position ``upto``."""
        return {**extra, self.key: list(self.history[:upto])}

    def turns(self) -> list[int]:
        """Return the positions of the model's turns (each replayed with the history before it)."""
        if self.format == "openai-responses":
            out = []
            for i, item in enumerate(self.history):
                prev = self.history[i - 1] if i else None
                if _is_model_item(item) and not (prev is not None and _is_model_item(prev)):
                    out.append(i)
            return [i for i in out if i > 0]
        return [i for i, m in enumerate(self.history) if m.get("role") == "assistant" and i > 0]


def _is_model_item(item: Mapping[str, Any]) -> bool:
    itype = item.get("type")
    if itype in (None, "message"):
        return item.get("role") == "assistant"
    return not str(itype).endswith("_output")


def _lines(path: Path) -> Iterable[tuple[int, Any]]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield n, orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise InputError(f"{path} line {n}: invalid JSON: {exc}") from exc


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content or ())


def claude_code(path: str | os.PathLike[str]) -> NativeSession:
    """Import one Claude Code session log as Anthropic Messages (see the module docstring)."""
    p = Path(path)
    turns: list[dict[str, Any]] = []
    last_msg_id: str | None = None
    session_id = ""
    dropped = 0
    resets = 0
    for _n, obj in _lines(p):
        if not isinstance(obj, Mapping) or obj.get("type") not in ("user", "assistant"):
            continue
        msg = obj.get("message")
        if not isinstance(msg, Mapping) or msg.get("role") not in ("user", "assistant"):
            continue
        session_id = session_id or str(obj.get("sessionId") or "")
        if obj.get("isCompactSummary"):
            resets += 1
        role = msg["role"]
        if role == "assistant":
            mid = msg.get("id")
            if turns and turns[-1]["role"] == "assistant" and mid is not None and mid == last_msg_id:
                turns[-1]["content"].extend(_blocks(msg.get("content")))
            else:
                turns.append({"role": "assistant", "content": _blocks(msg.get("content"))})
            last_msg_id = mid
            continue
        last_msg_id = None
        content = msg.get("content")
        if turns and turns[-1]["role"] == "user":
            if isinstance(turns[-1]["content"], str):
                turns[-1]["content"] = _blocks(turns[-1]["content"])
            turns[-1]["content"].extend(_blocks(content))
        else:
            turns.append({"role": "user", "content": content if isinstance(content, str) else list(content or ())})
    out: list[dict[str, Any]] = []
    for t in turns:
        if t["role"] == "user" and not isinstance(t["content"], str):
            prev = out[-1] if out and out[-1]["role"] == "assistant" else None
            order = {b.get("id"): k for k, b in enumerate(prev["content"]) if b.get("type") == "tool_use"} if prev else {}
            results = [b for b in t["content"] if b.get("type") == "tool_result"]
            kept = [b for b in results if b.get("tool_use_id") in order]
            dropped += len(results) - len(kept)
            kept.sort(key=lambda b: order[b["tool_use_id"]])
            seen: set[str] = set()
            kept = [b for b in kept if not (b["tool_use_id"] in seen or seen.add(b["tool_use_id"]))]
            rest = [b for b in t["content"] if b.get("type") != "tool_result"]
            t = {"role": "user", "content": kept + rest}
            if not t["content"]:
                continue
        if t["role"] == "assistant" and not t["content"]:
            continue
        out.append(t)
    sid = session_id or p.stem
    header = {"type": "session", "id": p.stem, "source": "claude-code", "format": "anthropic-messages",
              "session_id": sid, "dropped_results": dropped, "context_resets": resets}
    return NativeSession(id=p.stem, format="anthropic-messages", history=tuple(out), header=header, path=str(p))


def responses_log(path: str | os.PathLike[str]) -> NativeSession:
    """Import a log of OpenAI Responses items (bare, or Codex ``response_item`` lines)."""
    p = Path(path)
    items: list[Any] = []
    header: dict[str, Any] = {"type": "session", "id": p.stem, "source": "responses", "format": "openai-responses"}
    for n, obj in _lines(p):
        if not isinstance(obj, Mapping):
            raise InputError(f"{p} line {n}: expected an object")
        if obj.get("type") == "session":
            header.update(obj)
            continue
        if obj.get("type") == "response_item" and isinstance(obj.get("payload"), Mapping):
            items.append(dict(obj["payload"]))
        elif obj.get("type") in ("session_meta", "turn_context", "event_msg", "compacted"):
            continue  # Codex bookkeeping lines: not model input
        elif "type" in obj or "role" in obj:
            items.append(dict(obj))
    header["format"] = "openai-responses"
    return NativeSession(id=str(header.get("id") or p.stem), format="openai-responses", history=tuple(items),
                         header=header, path=str(p))


def detect_log(path: str | os.PathLike[str]) -> str:
    """Return ``claude-code``, ``responses`` or ``chat`` (a pager session file) for a log file."""
    for _n, obj in _lines(Path(path)):
        if not isinstance(obj, Mapping):
            break
        if obj.get("type") == "session":
            return "responses" if obj.get("format") == "openai-responses" else "chat"
        if "sessionId" in obj or obj.get("type") in ("file-history-snapshot", "summary"):
            return "claude-code"
        if obj.get("type") in ("response_item", "session_meta") or obj.get("type") in (
                "message", "function_call", "function_call_output", "reasoning"):
            return "responses"
    raise InputError(f"{path}: not a log format pager can import")


def load_native(path: str | os.PathLike[str]) -> NativeSession:
    """Import one log file, detecting its format; ``InputError`` for chat session files."""
    kind = detect_log(path)
    if kind == "claude-code":
        return claude_code(path)
    if kind == "responses":
        return responses_log(path)
    raise InputError(f"{path} is a chat session file: load it with pager.lab.replay.load_session")


def chat_messages(native: NativeSession) -> list[dict[str, Any]]:
    """Return an imported history as plain chat messages (what ``pager replay`` / ``bench`` read).

    The history goes through its wire format to neutral messages, then to
    plain chat messages (``pager.formats.export.to_chat``): thinking as
    ``reasoning_content``, provider-only blocks by their text rendition.
    """
    from pager.formats.base import get_format
    from pager.formats.export import to_chat

    fmt = get_format(native.format)
    request: dict[str, Any] = {native.key: list(native.history)}
    if native.format == "anthropic-messages":
        request["max_tokens"] = 1
    return to_chat(fmt.to_messages(request).messages)

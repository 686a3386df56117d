"""The agent tools: ``recall``, ``expand``, ``note`` (and ``new_context`` in rollover mode).

``tool_specs`` returns OpenAI function-tool JSON; ``call`` executes one tool
call against a ``Pager`` and returns the tool message answering it. Every
failure the model can cause (bad JSON, an unknown handle, a handle of another
session) becomes an error *result* the model can read, never an exception
in the harness.

``recall`` is fail-fast by design: no match means the answer is not in this
session's history, and the model is told to go back to the workspace rather
than handed a list of near misses to chase.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import orjson

from pager.errors import HandleError, PagerError, ToolError

if TYPE_CHECKING:  # pragma: no cover
    from pager.options import Options
    from pager.pager import Pager

__all__ = ["NOTE_MAX_CHARS", "RECALL_MAX_CHARS", "call", "tool_specs"]

NOTE_MAX_CHARS = 500
RECALL_MAX_K = 8
RECALL_MAX_CHARS = 2_400
EXPAND_MAX_CHARS = 40_000
NO_MATCH = (
    "No match in this session's history. Do not search again with other words: "
    "go back to the workspace (read the file, rerun the command) instead."
)

RECALL_TOOL = {
    "type": "function",
    "function": {
        "name": "recall",
        "description": (
            "Search this session's earlier messages and tool outputs that are no longer in the prompt. "
            "Use exact identifiers, paths or error strings. One miss means it is not there: go back to "
            "the workspace instead of searching again."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Identifiers, paths, error strings to look for."},
                "k": {"type": "integer", "minimum": 1, "maximum": RECALL_MAX_K, "description": "How many hits (default 3)."},
            },
            "required": ["query"],
        },
    },
}

EXPAND_TOOL = {
    "type": "function",
    "function": {
        "name": "expand",
        "description": (
            "Return the full text behind a handle (like pg:12-a1b2c3) shown in a stub or a recall result, "
            "optionally only lines start_line..end_line (1-based, inclusive)."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "handle": {"type": "string"},
                "start_line": {"type": "integer", "minimum": 1},
                "end_line": {"type": "integer", "minimum": 1},
            },
            "required": ["handle"],
        },
    },
}

NOTE_TOOL = {
    "type": "function",
    "function": {
        "name": "note",
        "description": (
            "Keep a short note (a decision, a rejected approach and why, the next step) in the task-state "
            "card that stays in every prompt. The card shows the most recent notes; older ones stay in the store."
        ),
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string", "maxLength": NOTE_MAX_CHARS}},
            "required": ["text"],
        },
    },
}


def tool_specs(options: "Options") -> list[dict[str, Any]]:
    """Return the tools a session offers, in a stable order (the prompt cache likes it)."""
    specs = [RECALL_TOOL, EXPAND_TOOL, NOTE_TOOL]
    if options.mode == "rollover":
        from pager.core.handoff import NEW_CONTEXT_TOOL

        specs = [*specs, NEW_CONTEXT_TOOL]
    return [dict(s) for s in specs]


def _parse_call(tool_call: Any) -> tuple[str, str, Mapping[str, Any]]:
    if hasattr(tool_call, "model_dump"):
        tool_call = tool_call.model_dump()
    if not isinstance(tool_call, Mapping):
        raise ToolError(f"a tool call must be a mapping, got {type(tool_call).__name__}")
    cid = str(tool_call.get("id") or "")
    fn = tool_call.get("function") or {}
    name = str(fn.get("name") or "")
    raw = fn.get("arguments") or "{}"
    if isinstance(raw, Mapping):
        return cid, name, raw
    try:
        args = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ToolError(f"arguments are not valid JSON: {exc}") from exc
    if not isinstance(args, dict):
        raise ToolError("arguments must be a JSON object")
    return cid, name, args


def _call_id(tool_call: Any) -> str:
    # read first, so even a call with broken arguments gets an answer it can pair with
    if hasattr(tool_call, "id"):
        return str(getattr(tool_call, "id") or "")
    if isinstance(tool_call, Mapping):
        return str(tool_call.get("id") or "")
    return ""


def _result(cid: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": text}


def call(pager: "Pager", tool_call: Any) -> dict[str, Any]:
    """Execute one pager tool call and return the tool message answering it."""
    cid = _call_id(tool_call)
    try:
        cid, name, args = _parse_call(tool_call)
        if name == "recall":
            return _result(cid, _recall(pager, args))
        if name == "expand":
            return _result(cid, _expand(pager, args))
        if name == "note":
            text = args.get("text")
            if not isinstance(text, str) or not text.strip():
                raise ToolError("note needs a non-empty 'text'")
            shown = pager.note(text)
            return _result(cid, f"Noted ({shown}/{pager.options.max_notes} notes kept in the task-state card).")
        if name == "new_context" and pager.options.mode == "rollover":
            return _result(cid, pager.declare_rollover(args, cid))
        raise ToolError(f"unknown pager tool {name!r}; pager offers: {[s['function']['name'] for s in pager.tools()]}")
    except HandleError as exc:
        return _result(cid, f"Error: {exc}")
    except PagerError as exc:
        return _result(cid, f"Error: {exc}")


def _recall(pager: "Pager", args: Mapping[str, Any]) -> str:
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ToolError("recall needs a non-empty 'query'")
    k = args.get("k", 3)
    if not isinstance(k, int) or isinstance(k, bool):
        raise ToolError("k must be an integer")
    k = max(1, min(RECALL_MAX_K, k))
    hits = pager.search(query, k=k)
    if not hits:
        return NO_MATCH
    lines = [f"{len(hits)} match(es) in this session's history; expand(handle) for the full text:"]
    size = len(lines[0])
    for hit in hits:
        where = f" path={hit.path}" if hit.path else ""
        line = f"- {hit.handle} (step {hit.step}, {hit.kind}{where}): {hit.snippet}"
        if size + len(line) > RECALL_MAX_CHARS:
            lines.append("- … more matches cut; narrow the query")
            break
        lines.append(line)
        size += len(line)
    return "\n".join(lines)


def _expand(pager: "Pager", args: Mapping[str, Any]) -> str:
    handle = args.get("handle")
    if not isinstance(handle, str):
        raise ToolError("expand needs a 'handle' string")
    text = pager.expand(handle, args.get("start_line"), args.get("end_line"))
    if len(text) > EXPAND_MAX_CHARS:
        lines = text[:EXPAND_MAX_CHARS].count("\n") + 1
        return (
            text[:EXPAND_MAX_CHARS]
            + f"\n… [cut at {EXPAND_MAX_CHARS} chars, about line {lines}; call expand with "
            "start_line/end_line for the rest]"
        )
    return text

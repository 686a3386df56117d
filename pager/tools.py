"""The agent tools: ``recall``, ``expand``, ``note`` (and ``new_context`` in rollover mode).

``tool_specs`` returns OpenAI function-tool JSON (a wire format converts it to
its own tool shape); ``call`` executes one tool call, read by the request's
wire format, against a ``ToolHost`` (the facade) and returns the answer in
that format. Every failure the model can cause (bad JSON, an unknown handle,
a handle of another session, arguments of the wrong type) becomes an error
*result* the model can read, never an exception in the harness.

``recall`` is fail-fast by design: no match means the answer is not in this
session's history, and the model is told to go back to the workspace rather
than handed a list of near misses to chase.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import orjson

from pager.core.budget import ROLLOVER_TOOL
from pager.core.describe import brief
from pager.core.handoff import NEW_CONTEXT_TOOL
from pager.errors import PagerError, ToolError
from pager.formats.base import WireFormat
from pager.options import Options

__all__ = ["NOTE_MAX_CHARS", "PAGER_TOOLS", "RECALL_MAX_CHARS", "ToolHost", "call", "tool_specs"]

# Arguments are parsed from the model's JSON: cap them so a runaway call cannot stall the harness.
MAX_ARGUMENT_CHARS = 64_000

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


PAGER_TOOLS = frozenset({"recall", "expand", "note", ROLLOVER_TOOL})


class ToolHost(Protocol):
    """What the agent tools need of a session (the facade provides it)."""

    options: Options
    session: str

    def search(self, query: str, k: int = 5, *, cross_session: bool = False) -> Sequence[Any]: ...

    def expand(self, handle: str, start_line: int | None = None, end_line: int | None = None) -> str: ...

    def note(self, text: str) -> int: ...

    def declare_rollover(self, args: Mapping[str, Any], cid: str) -> str: ...


def tool_specs(options: Options) -> list[dict[str, Any]]:
    """Return the tools a session offers, in a stable order (the prompt cache likes it)."""
    specs = [RECALL_TOOL, EXPAND_TOOL, NOTE_TOOL]
    if options.mode == "rollover":
        specs = [*specs, NEW_CONTEXT_TOOL]
    return [dict(s) for s in specs]


def _arguments(raw: Any) -> Mapping[str, Any]:
    if isinstance(raw, Mapping):
        return raw
    if not isinstance(raw, (str, bytes)):
        raise ToolError(f"arguments must be a JSON object, got {type(raw).__name__}")
    if len(raw) > MAX_ARGUMENT_CHARS:
        raise ToolError(f"arguments are {len(raw)} characters; pager's tools take at most {MAX_ARGUMENT_CHARS}")
    try:
        args = orjson.loads(raw or "{}")
    except orjson.JSONDecodeError as exc:
        raise ToolError(f"arguments are not valid JSON: {exc}") from exc
    if not isinstance(args, dict):
        raise ToolError("arguments must be a JSON object")
    return args


def _call_id(tool_call: Any) -> str:
    # read first, so even a call with broken arguments gets an answer it can pair with
    cid = getattr(tool_call, "id", None) if not isinstance(tool_call, Mapping) else tool_call.get("id")
    if cid is None and isinstance(tool_call, Mapping):
        cid = tool_call.get("call_id")  # Responses items carry the pairing id there
    return cid if isinstance(cid, str) else ""


def call(host: ToolHost, fmt: WireFormat, tool_call: Any) -> dict[str, Any]:
    """Execute one pager tool call and return the answer in ``fmt``'s shape."""
    cid = _call_id(tool_call)
    try:
        parsed = fmt.parse_tool_call(tool_call)
        cid = parsed.id or cid
        name, args = parsed.name, _arguments(parsed.arguments)
        if name == "recall":
            return fmt.tool_result(cid, _recall(host, args))
        if name == "expand":
            return fmt.tool_result(cid, _expand(host, args))
        if name == "note":
            text = args.get("text")
            if not isinstance(text, str) or not text.strip():
                raise ToolError("note needs a non-empty 'text'")
            shown = host.note(text)
            return fmt.tool_result(cid, f"Noted ({shown}/{host.options.max_notes} notes kept in the task-state card).")
        if name == ROLLOVER_TOOL and host.options.mode == "rollover":
            return fmt.tool_result(cid, host.declare_rollover(args, cid))
        offered = [s["function"]["name"] for s in tool_specs(host.options)]
        raise ToolError(f"unknown pager tool {brief(name)}; pager offers: {offered}")
    except PagerError as exc:
        return fmt.tool_result(cid, f"Error: {exc}", is_error=True)


def _recall(pager: ToolHost, args: Mapping[str, Any]) -> str:
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ToolError("recall needs a non-empty 'query'")
    k = args.get("k", 3)
    if not isinstance(k, int) or isinstance(k, bool):
        raise ToolError("k must be an integer")
    k = max(1, min(RECALL_MAX_K, k))
    # everything the session may read: its own pages first in kind, pools and shared pages labelled
    hits = pager.search(query, k=k, cross_session=True)
    if not hits:
        return NO_MATCH
    own = getattr(pager, "session", None)
    foreign = [own is not None and h.session != own for h in hits]
    searched = "this session's history and the pools it may read" if any(foreign) else "this session's history"
    lines = [f"{len(hits)} match(es) in {searched}; expand(handle) for the full text:"]
    size = len(lines[0])
    for hit, other in zip(hits, foreign):
        where = f" path={hit.path}" if hit.path else ""
        # a page from beyond this session says where it comes from, so the model can weigh it
        source = ""
        if other:
            source = f", from session {hit.session}"
            if getattr(hit, "pool", None):
                source += f" pool {hit.pool}"
            if getattr(hit, "owner", None):
                source += f" owner {hit.owner}"
            if getattr(hit, "created", None):
                source += f" written {time.strftime('%Y-%m-%d', time.gmtime(hit.created))}"
        line = f"- {hit.handle} (step {hit.step}, {hit.kind}{where}{source}): {hit.snippet}"
        if size + len(line) > RECALL_MAX_CHARS:
            lines.append("- … more matches cut; narrow the query")
            break
        lines.append(line)
        size += len(line)
    return "\n".join(lines)


def _expand(pager: ToolHost, args: Mapping[str, Any]) -> str:
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

"""Hand-made request sequences in the shape real clients send, for ``test_proxy_clients``.

Each builder returns a capture: a header (``{"type": "capture", ...}``) and the
requests in the order the client sent them, as ``bench/clients`` writes real
ones (``method``, ``path``, ``headers``, ``body``, ``kind``). What each shape
copies from its client:

- Claude Code (``/v1/messages``): ``system`` as marked text blocks;
  ``metadata.user_id`` a JSON string holding the ``session_id`` a
  conversation shares with its subagents; ``cache_control`` on the newest
  block of every request only (so it moves each call); ``Read`` / ``Edit`` /
  ``Bash`` tools; a re-``Read`` answered from its read cache ("Wasted call —
  file unchanged since your last Read. …"); a subagent (``Task``) with its
  own first message; a quota probe and a topic request on a small model with
  no tools; at the end its compaction request ("Your task is to create a
  detailed summary of the conversation so far…").
- Codex (``/v1/responses``): no system field but ``instructions``; its first
  user item an ``<environment_context>`` block the same for every
  conversation in one directory; ``prompt_cache_key`` and a ``session_id``
  header per conversation; ``shell`` with an argv ``["bash", "-lc", ...]``,
  ``exec_command`` with ``cmd``, ``apply_patch`` as a custom tool; reasoning
  items with ``encrypted_content``; two conversations interleaved.
- opencode (``/v1/chat/completions``): two system messages, ``read`` /
  ``edit`` / ``bash`` tools with ``filePath``; a title request with no tools on
  a small model; two conversations interleaved.
"""

from __future__ import annotations

import copy
from typing import Any, Iterator

import orjson

REFUSAL = "Wasted call — file unchanged since your last Read. Refer to that earlier tool_result instead."
MARK = {"type": "ephemeral"}


def source(name: str, n: int = 120) -> str:
    """Return a file's text of ``n`` lines (about 12 tokens each), naming ``name`` in its lines."""
    return "\n".join(f"def {name}_{i}(x):  # step {i} of {name}, returns x * {i} + {i % 7}" for i in range(n))


def _record(path: str, headers: dict[str, str], body: dict[str, Any], kind: str = "conversation") -> dict[str, Any]:
    return {"method": "POST", "path": path, "headers": headers, "body": copy.deepcopy(body), "kind": kind}


# -- Claude Code ------------------------------------------------------------------------------------

CC_TOOLS = [
    {"name": n, "description": f"{n} tool", "input_schema": {"type": "object", "properties": {}}}
    for n in ("Task", "Bash", "Glob", "Grep", "Read", "Edit", "Write", "TodoWrite")
]


def _cc_headers() -> dict[str, str]:
    return {"anthropic-version": "2023-06-01", "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14",
            "user-agent": "claude-cli/2.1.0 (external, cli)", "x-app": "cli", "content-type": "application/json"}


def _cc_body(session_id: str, messages: list[dict[str, Any]], *, system: str = "You are Claude Code.") -> dict[str, Any]:
    msgs = copy.deepcopy(messages)
    last = msgs[-1]
    if isinstance(last["content"], str):
        last["content"] = [{"type": "text", "text": last["content"]}]
    last["content"][-1]["cache_control"] = MARK  # the newest block only: the mark moves every call
    user_id = orjson.dumps({"device_id": "d" * 64, "account_uuid": "", "session_id": session_id}).decode()
    return {
        "model": "claude-sonnet-4-5-20250929", "max_tokens": 32000, "stream": True,
        "system": [{"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.",
                    "cache_control": MARK},
                   {"type": "text", "text": system + " Use the tools to do the task.", "cache_control": MARK}],
        "messages": msgs, "tools": CC_TOOLS, "metadata": {"user_id": user_id},
    }


class _Turns:
    """A conversation's history built one tool call at a time (Anthropic blocks)."""

    def __init__(self, first: str) -> None:
        self.messages: list[dict[str, Any]] = [{"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>\nAs you answer, use this context: CLAUDE.md says run pytest."
                                     "\n</system-reminder>"},
            {"type": "text", "text": first}]}]
        self.n = 0

    def call(self, name: str, args: dict[str, Any], result: str, text: str = "") -> None:
        self.n += 1
        cid = f"toolu_{self.n:02d}"
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        blocks.append({"type": "tool_use", "id": cid, "name": name, "input": args})
        self.messages.append({"role": "assistant", "content": blocks})
        self.messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": cid, "content": result}]})


def claude_code() -> dict[str, Any]:
    """Return a Claude Code session: a main conversation, one subagent, side requests, a compaction."""
    sid = "5a1d7c1e-0c1a-4d1e-9a77-3f2b1c0d9e8f"
    headers = _cc_headers()
    out: list[dict[str, Any]] = []
    side = {"model": "claude-haiku-4-5-20251001", "max_tokens": 1, "messages": [{"role": "user", "content": "quota"}],
            "metadata": {"user_id": orjson.dumps({"session_id": sid}).decode()}}
    out.append(_record("/v1/messages", headers, side, "side"))
    main = _Turns("Fix the failing test in src/calc.py (CALC-77).")
    out.append(_record("/v1/messages", headers, _cc_body(sid, main.messages)))
    topic = {"model": "claude-haiku-4-5-20251001", "max_tokens": 512, "stream": True,
             "system": [{"type": "text", "text": "Analyze if this message indicates a new conversation topic."}],
             "messages": [{"role": "user", "content": "Fix the failing test in src/calc.py (CALC-77)."}],
             "metadata": {"user_id": orjson.dumps({"session_id": sid}).decode()}}
    out.append(_record("/v1/messages", headers, topic, "side"))
    steps = [
        ("Read", {"file_path": "/repo/src/calc.py"}, source("calc"), "Let me read the code."),
        ("Bash", {"command": "pytest -q tests/test_calc.py"}, "F\n" + "\n".join(
            f"tests/test_calc.py:{i}: AssertionError CALC-77 expected {i}" for i in range(150)), ""),
        ("Read", {"file_path": "/repo/tests/test_calc.py", "offset": 1, "limit": 100}, source("test_calc", 100), ""),
        ("Read", {"file_path": "/repo/src/util.py"}, source("util"), "And the helper."),
        ("Grep", {"pattern": "CALC-77", "path": "/repo"}, "src/calc.py:12\ntests/test_calc.py:40", ""),
        ("Read", {"file_path": "/repo/src/calc.py"}, REFUSAL, "Back to calc.py."),  # its read cache answers
        ("Edit", {"file_path": "/repo/src/calc.py", "old_string": "x * 3", "new_string": "x * 4"},
         "The file /repo/src/calc.py has been updated.", ""),
        ("Bash", {"command": "pytest -q"}, "12 passed", ""),
    ]
    for k, (name, args, result, text) in enumerate(steps):
        main.call(name, args, result, text)
        out.append(_record("/v1/messages", headers, _cc_body(sid, main.messages)))
        if k == 3:
            # a subagent: the same metadata session, its own first message (the Task prompt)
            sub = _Turns("Search the repository for every caller of calc_3 and report them.")
            out.append(_record("/v1/messages", headers, _cc_body(sid, sub.messages, system="You are a search agent.")))
            for j in range(3):
                sub.call("Read", {"file_path": f"/repo/src/mod{j}.py"}, source(f"mod{j}"))
                out.append(_record("/v1/messages", headers, _cc_body(sid, sub.messages, system="You are a search agent.")))
    main.messages.append({"role": "assistant", "content": [{"type": "text", "text": "Fixed: calc_3 now multiplies by 4."}]})
    main.messages.append({"role": "user", "content": "Thanks. Now also add a docstring."})
    out.append(_record("/v1/messages", headers, _cc_body(sid, main.messages)))
    main.messages.append({"role": "assistant", "content": [{"type": "text", "text": "Added."}]})
    compact = main.messages + [{"role": "user", "content": [{"type": "text", "text": (
        "Your task is to create a detailed summary of the conversation so far, paying close attention to the "
        "user's explicit requests and your previous actions.\n...\nIMPORTANT: Do NOT use any tools.")}]}]
    out.append(_record("/v1/messages", headers, _cc_body(sid, compact), "compaction"))
    return {"header": {"type": "capture", "client": "claude-code", "source": "hand-made", "conversations": 2},
            "records": out}


# -- Codex ------------------------------------------------------------------------------------------

ENV = ("<environment_context>\n  <cwd>/work/repo</cwd>\n  <approval_policy>on-request</approval_policy>\n"
       "  <sandbox_mode>workspace-write</sandbox_mode>\n  <network_access>restricted</network_access>\n"
       "  <shell>bash</shell>\n</environment_context>")
CODEX_TOOLS = [
    {"type": "function", "name": "shell", "description": "Runs a shell command", "strict": False,
     "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}}}},
    {"type": "function", "name": "exec_command", "description": "Runs a command in a PTY", "strict": False,
     "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}},
    {"type": "custom", "name": "apply_patch", "description": "Edit files with a patch",
     "format": {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch hunk+ end_patch"}},
]


def _codex_body(key: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "gpt-5-codex", "instructions": "You are Codex, a coding agent.", "input": copy.deepcopy(items),
            "tools": CODEX_TOOLS, "tool_choice": "auto", "parallel_tool_calls": False,
            "reasoning": {"effort": "medium", "summary": "auto"}, "store": False, "stream": True,
            "include": ["reasoning.encrypted_content"], "prompt_cache_key": key}


def _codex_conversation(key: str, prompt: str, tag: str) -> Iterator[list[dict[str, Any]]]:
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": ENV}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]},
    ]
    yield items
    steps = [
        ("function_call", "shell", {"command": ["bash", "-lc", f"sed -n '1,120p' src/{tag}.rs"], "workdir": "/work/repo"},
         source(tag)),
        ("function_call", "exec_command", {"cmd": "cargo test 2>&1 | tail -n 300"},
         "\n".join(f"test {tag}::case_{i} ... FAILED ({tag.upper()}-{i})" for i in range(150))),
        ("function_call", "shell", {"command": ["bash", "-lc", f"cat src/{tag}_util.rs"]}, source(f"{tag}_util")),
        ("custom_tool_call", "apply_patch", f"*** Begin Patch\n*** Update File: src/{tag}.rs\n@@\n-a\n+b\n*** End Patch",
         "Success. Updated the following files:\nM src/" + tag + ".rs"),
        ("function_call", "shell", {"command": ["bash", "-lc", f"sed -n '1,120p' src/{tag}.rs"]}, source(tag + "_v2")),
    ]
    for n, (itype, name, args, result) in enumerate(steps, 1):
        cid = f"call_{tag}_{n}"
        reasoning = {"type": "reasoning", "summary": [], "content": None, "encrypted_content": f"gAAAA{tag}{n}" * 8}
        if itype == "function_call":
            call = {"type": "function_call", "name": name, "arguments": orjson.dumps(args).decode(), "call_id": cid}
            output = {"type": "function_call_output", "call_id": cid, "output": result}
        else:
            call = {"type": "custom_tool_call", "name": name, "input": args, "call_id": cid}
            output = {"type": "custom_tool_call_output", "call_id": cid, "output": result}
        # the newest output item comes back with its id and status; the client drops them afterwards
        items = [({k: v for k, v in it.items() if k not in ("id", "status")}) for it in items]
        items += [{**reasoning, "id": f"rs_{tag}{n}"}, {**call, "id": f"fc_{tag}{n}", "status": "completed"}, output]
        yield items
    items = items + [{"type": "message", "role": "assistant", "content": [
        {"type": "output_text", "text": f"Fixed {tag}.", "annotations": []}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Run the tests once more."}]}]
    yield items


def codex() -> dict[str, Any]:
    """Return two Codex conversations in one directory, interleaved request by request."""
    headers = {"originator": "codex_cli_rs", "user-agent": "codex_cli_rs/0.17.0", "content-type": "application/json",
               "openai-beta": "responses=experimental"}
    a = list(_codex_conversation("0199a1b2-aaaa-7000-8000-000000000001", "Fix the parser bug (PARSE-5).", "parser"))
    b = list(_codex_conversation("0199a1b2-bbbb-7000-8000-000000000002", "Fix the lexer bug (LEX-9).", "lexer"))
    out = []
    for x, y in zip(a, b):
        for key, items in (("0199a1b2-aaaa-7000-8000-000000000001", x), ("0199a1b2-bbbb-7000-8000-000000000002", y)):
            out.append(_record("/v1/responses", {**headers, "session_id": key}, _codex_body(key, items)))
    return {"header": {"type": "capture", "client": "codex", "source": "hand-made", "conversations": 2},
            "records": out}


# -- opencode ---------------------------------------------------------------------------------------

OC_TOOLS = [
    {"type": "function", "function": {"name": n, "description": f"{n} tool",
                                      "parameters": {"type": "object", "properties": {}}}}
    for n in ("bash", "edit", "glob", "grep", "list", "read", "write", "task", "todowrite", "webfetch")
]


def _oc_body(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "gpt-4.1", "messages": copy.deepcopy(messages), "tools": OC_TOOLS, "tool_choice": "auto",
            "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 32000}


def _oc_conversation(prompt: str, tag: str) -> Iterator[list[dict[str, Any]]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are opencode, an interactive CLI tool."},
        {"role": "system", "content": "Here is some useful information about the environment: /work/repo, linux"},
        {"role": "user", "content": prompt},
    ]
    yield msgs
    steps = [
        ("read", {"filePath": f"/work/repo/src/{tag}.ts"}, source(tag)),
        ("bash", {"command": "npm test", "description": "Run tests"},
         "\n".join(f"FAIL src/{tag}.test.ts case {i} ({tag.upper()}-{i})" for i in range(150))),
        ("read", {"filePath": f"/work/repo/src/{tag}_util.ts", "offset": 0, "limit": 100}, source(f"{tag}_util", 100)),
        ("edit", {"filePath": f"/work/repo/src/{tag}.ts", "oldString": "a", "newString": "b"}, "Edit applied."),
        ("bash", {"command": f"cat src/{tag}.ts", "description": "Show file"}, source(tag + "_v2")),
    ]
    for n, (name, args, result) in enumerate(steps, 1):
        cid = f"call_{tag}{n}"
        msgs = msgs + [
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": orjson.dumps(args).decode()}}]},
            {"role": "tool", "tool_call_id": cid, "content": result},
        ]
        yield msgs


def opencode() -> dict[str, Any]:
    """Return two opencode conversations interleaved, each preceded by its title request."""
    headers = {"user-agent": "opencode/0.15.0 ai-sdk/openai-compatible", "content-type": "application/json"}
    out = []
    convs = [list(_oc_conversation("Make the dates parse (DATE-3).", "dates")),
             list(_oc_conversation("Make the money format (MONEY-8).", "money"))]
    for conv in convs:
        title = {"model": "gpt-4.1-mini", "max_tokens": 1500, "stream": True, "messages": [
            {"role": "system", "content": "You are a title generator. You output ONLY a thread title."},
            {"role": "user", "content": "Generate a title for this conversation:\n"},
            {"role": "user", "content": conv[0][-1]["content"]}]}
        out.append(_record("/v1/chat/completions", headers, title, "side"))
    for x, y in zip(*convs):
        out.append(_record("/v1/chat/completions", headers, _oc_body(x)))
        out.append(_record("/v1/chat/completions", headers, _oc_body(y)))
    return {"header": {"type": "capture", "client": "opencode", "source": "hand-made", "conversations": 2},
            "records": out}


HAND_MADE = {"claude-code": claude_code, "codex": codex, "opencode": opencode}

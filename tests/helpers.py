"""Small builders for chat histories used across the tests."""

from __future__ import annotations

import json
from typing import Any


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def system(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text}


def call(cid: str, name: str = "bash", **args: Any) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def assistant(text: str | None = None, *calls: dict[str, Any]) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        msg["tool_calls"] = list(calls)
    return msg


def tool(cid: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": content}


def big_text(n_lines: int, tag: str = "line") -> str:
    return "".join(f"{tag} {i}: value_{i} = compute_{tag}({i}) # padding text here\n" for i in range(n_lines))


def coding_session(steps: int, *, output_lines: int = 40, seed_text: str = "fix parse_config in src/app/config.py") -> list[dict[str, Any]]:
    """Return a history: system, task, then ``steps`` call/result steps (no final assistant)."""
    msgs = [system("You are a coding agent."), user(seed_text)]
    for i in range(steps):
        cid = f"call_{i}"
        if i % 3 == 0:
            msgs.append(assistant(f"Reading file number {i}", call(cid, "bash", command=f"cat src/mod_{i % 7}.py")))
        else:
            msgs.append(assistant(f"Step {i}: run tests", call(cid, "bash", command=f"pytest -k test_{i}")))
        msgs.append(tool(cid, big_text(output_lines, tag=f"out{i}")))
    return msgs

"""Shared helpers for the replay benchmark tests: a word counter and tiny sessions."""

from __future__ import annotations

from typing import Any

import orjson

from pager.lab.replay.facts import Facts
from pager.lab.replay.session import Session


class WordCounter:
    """Count whitespace-separated words: token counts a person can do by hand."""

    name = "words"

    def count(self, text: str) -> int:
        return len(text.split())


def word_facts() -> Facts:
    return Facts(WordCounter())


def call(cid: str, command: str) -> dict[str, Any]:
    return {"id": cid, "type": "function",
            "function": {"name": "bash", "arguments": orjson.dumps({"command": command}).decode()}}


# Word-counted tokens (4 per message + words; a tool call adds 3 + name + argument words):
#   0 system     "sys prompt"                              6
#   1 user       "fix parse_header in src/app.py"          8
#   2 assistant  "reading src/app.py" + cat call          12  (4 + 2 + 3 + 1 + 2: the
#                arguments are '{"command":"cat src/app.py"}', two words)
#   3 tool       "def parse_header(): MAX_SIZE = 4096"      9
#   4 assistant  "MAX_SIZE is 4096 in src/app.py"           9
#   5 user       "now check load_config"                    7
#   6 assistant  "load_config uses MAX_SIZE"                7
TINY = [
    {"role": "system", "content": "sys prompt"},
    {"role": "user", "content": "fix parse_header in src/app.py"},
    {"role": "assistant", "content": "reading src/app.py", "tool_calls": [call("c1", "cat src/app.py")]},
    {"role": "tool", "tool_call_id": "c1", "content": "def parse_header(): MAX_SIZE = 4096"},
    {"role": "assistant", "content": "MAX_SIZE is 4096 in src/app.py"},
    {"role": "user", "content": "now check load_config"},
    {"role": "assistant", "content": "load_config uses MAX_SIZE"},
]


def tiny_session(sid: str = "tiny") -> Session:
    return Session(id=sid, header={"type": "session", "id": sid, "source": "test"},
                   messages=tuple(TINY), path=f"{sid}.jsonl")


def write_session(path, messages, sid: str = "s", **header: Any) -> None:
    head = {"type": "session", "id": sid, "source": "test", **header}
    path.write_bytes(b"".join(orjson.dumps(o) + b"\n" for o in (head, *messages)))

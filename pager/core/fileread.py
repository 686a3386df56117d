"""Recognise a tool call that reads a file, and which path it reads.

A file page is keyed by path: a newer read of the same path makes older ones
stale. Recognition is deliberately conservative: a command that pipes,
redirects or writes is not a read, because its output is not the file.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Mapping

import orjson

__all__ = ["file_read_path"]

_READ_TOOLS = {"read", "read_file", "readfile", "view_file", "open_file", "cat", "view", "open"}
_EDITOR_TOOLS = {"str_replace_editor", "str_replace_based_edit_tool", "editor", "text_editor"}
_SHELL_TOOLS = {"bash", "shell", "execute_bash", "run", "terminal", "run_shell_command", "exec", "execute_command", "local_shell"}
_PATH_KEYS = ("file_path", "path", "filename", "file", "target_file", "absolute_path")
_READ_COMMANDS = {"cat", "head", "tail", "nl", "sed", "less", "more", "bat", "open", "view"}
_SHELL_META = re.compile(r"[|><;&`$]|\|\||&&")
_OPEN_FILE_CALL = re.compile(r"""^\s*open_file\(\s*['"]([^'"]+)['"]""")
# A command that reads one file is short; anything longer is not parsed at all, which keeps a
# model-written megabyte-long command from costing more than a length check (shlex is quadratic).
MAX_COMMAND_CHARS = 4_096


def _args(arguments: Any) -> Mapping[str, Any]:
    if isinstance(arguments, Mapping):
        return arguments
    if isinstance(arguments, str):
        try:
            value = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return {"command": arguments}
        if isinstance(value, Mapping):
            return value
    return {}


def _path_arg(args: Mapping[str, Any]) -> str | None:
    for key in _PATH_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


_CD_PREFIX = re.compile(r"^\s*cd\s+[^\s;&|]+\s*&&\s*")


def _command_path(command: str) -> str | None:
    # "cd /repo && cat x" is how many agents read; the cd changes nothing we key on
    if len(command) > MAX_COMMAND_CHARS:
        return None
    command = _CD_PREFIX.sub("", command.strip(), count=1)
    if not command or "\n" in command or _SHELL_META.search(command):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if not words or words[0] not in _READ_COMMANDS:
        return None
    if words[0] == "sed" and not any(w == "-n" or w.startswith("-n") for w in words[1:]):
        return None  # sed without -n is an edit, not a read
    operands = [w for w in words[1:] if not w.startswith("-")]
    if words[0] in ("head", "tail"):
        # "head -n 40 file": the count is an operand of -n, not a path
        operands = [w for w in operands if not w.isdigit()]
    if words[0] == "sed":
        operands = operands[1:]  # the script
    if words[0] == "open":
        operands = operands[:1]  # swe-agent's "open path [line]"
    if len(operands) != 1 or any(ch in operands[0] for ch in "*?["):
        return None  # several files (or a glob) are not one file page
    return operands[0]


def file_read_path(tool_name: str | None, arguments: Any) -> str | None:
    """Return the path a tool call reads, or None when it is not a plain file read."""
    name = (tool_name or "").strip().lower()
    args = _args(arguments)
    if name in _EDITOR_TOOLS:
        if str(args.get("command", "")).strip() == "view":
            path = _path_arg(args)
            # a directory listing is not a file page
            return path if path and not path.endswith("/") else None
        return None
    if name in _READ_TOOLS:
        path = _path_arg(args)
        if path:
            return path
        command = args.get("command")
        if isinstance(command, str):
            return _command_path(command if name != "open" or command.startswith("open") else f"open {command}")
        return None
    if name in _SHELL_TOOLS:
        command = args.get("command") or args.get("cmd")
        if isinstance(command, list):
            command = " ".join(str(c) for c in command[:64])
        if isinstance(command, str):
            return _command_path(command)
        return None
    if name in ("execute_ipython_cell", "ipython", "python"):
        code = args.get("code")
        if isinstance(code, str):
            m = _OPEN_FILE_CALL.match(code[:MAX_COMMAND_CHARS])
            if m and "\n" not in code.strip():
                return m.group(1)
    return None

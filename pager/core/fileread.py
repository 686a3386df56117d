"""Recognise a tool call that reads a file (which path, which part) or edits files.

A file page is keyed by path: a newer read of the same path makes older ones
stale. A partial read (Claude Code's ``Read`` with ``offset``/``limit``,
opencode's ``read`` likewise, ``sed -n 'a,bp' path``) is a page of that range,
keyed ``path#<range>`` (``range_key``): only a read of the same range or of
the whole file makes it stale. An edit (``file_edits``: ``Edit``, ``MultiEdit``,
``Write``, ``apply_patch``, opencode's ``edit`` / ``write``) makes every earlier
read of the files it touched stale.

The real clients' tools are known by name: Claude Code's ``Read`` / ``Edit`` /
``MultiEdit`` / ``Write`` / ``Bash``; Codex's ``exec_command`` (``cmd``, a
string or an argv list), ``shell`` (``command`` as argv, often ``["bash",
"-lc", script]``), ``shell_command`` and ``apply_patch``; opencode's ``read``
/ ``edit`` / ``write`` / ``bash`` (``filePath``).

Recognition is deliberately conservative: a command that pipes, redirects or
writes is not a read, because its output is not the file (one exception:
Codex's habitual ``nl -ba path | sed -n 'a,bp'``, a numbered range of one file).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

import orjson

__all__ = ["RANGE_MARK", "base_path", "file_edits", "file_read_path", "range_key"]

_READ_TOOLS = {"read", "read_file", "readfile", "view_file", "open_file", "cat", "view", "open"}
_EDITOR_TOOLS = {"str_replace_editor", "str_replace_based_edit_tool", "editor", "text_editor"}
_SHELL_TOOLS = {
    "bash", "shell", "execute_bash", "run", "terminal", "run_shell_command", "exec", "execute_command", "local_shell",
    "exec_command", "shell_command", "container.exec",
}
_EDIT_TOOLS = {"edit", "multiedit", "multi_edit", "write", "write_file", "create_file", "notebookedit", "edit_file"}
_PATCH_TOOLS = {"apply_patch", "applypatch"}
_PATH_KEYS = ("file_path", "filePath", "path", "filename", "file", "target_file", "absolute_path", "notebook_path")
_SHELLS = {"bash", "sh", "zsh", "/bin/bash", "/bin/sh", "/bin/zsh", "/usr/bin/bash"}
# the separator of a partial read's key: "src/app.py#L10-59"
RANGE_MARK = "#L"
_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+?)\s*$|^\*\*\* Move to: (.+?)\s*$", re.MULTILINE)
_NL_SED = re.compile(r"""^nl\s+(?:-\w+\s+)*(\S+)\s*\|\s*sed\s+-n\s+['"]?(\d+),(\d+)p['"]?\s*$""")
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


def range_key(path: str, start: Any, end: Any) -> str:
    """Return the key of a partial read of ``path`` (lines ``start``..``end`` as the client gave them)."""
    return f"{path}{RANGE_MARK}{start}-{end}"


def base_path(key: str) -> str:
    """Return the file path of a page key (a partial read's key without its range)."""
    i = key.rfind(RANGE_MARK)
    return key[:i] if i > 0 else key


def _offset_limit(path: str, args: Mapping[str, Any]) -> str:
    offset, limit = args.get("offset"), args.get("limit")
    if offset in (None, "", 0, 1) and limit in (None, ""):
        return path  # from the top, the client's default length: the file
    start = int(offset) if isinstance(offset, (int, float)) or (isinstance(offset, str) and offset.isdigit()) else 1
    if isinstance(limit, (int, float)) or (isinstance(limit, str) and limit.isdigit()):
        return range_key(path, start, start + int(limit) - 1)
    return range_key(path, start, "")


def _path_arg(args: Mapping[str, Any]) -> str | None:
    for key in _PATH_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


_CD_PREFIX = re.compile(r"^\s*cd\s+[^\s;&|]+\s*&&\s*")


def _script(command: Any) -> str | None:
    """Return the shell text of a command: a string, or an argv list (``["bash", "-lc", script]``)."""
    if isinstance(command, str):
        return command
    if isinstance(command, list) and command and all(isinstance(c, str) for c in command[:64]):
        if len(command) == 3 and command[0] in _SHELLS and command[1] in ("-lc", "-c", "-l", "-ic"):
            return command[2]
        return " ".join(shlex.quote(c) for c in command[:64])
    return None


# shlex.split, for a command with no quote or backslash: then its POSIX lexer (whitespace_split, no
# comments) only splits at its whitespace, " \t\r\n", which a regex does at C speed (issue 23: shlex's
# per-character loop was half of classifying a call's messages). tests/test_fileread_words.py holds both equal.
_PLAIN = re.compile(r"[^'\"\\]*+\Z")
_WORD = re.compile(r"[^ \t\r\n]+")
# a first word shlex reads as it is: no quote or backslash in it, up to its whitespace (or the end)
_FIRST_WORD = re.compile(r"[^ \t\r\n'\"\\]++(?=[ \t\r\n]|\Z)")


def _words(command: str) -> list[str] | None:
    """Return ``shlex.split(command)``, or None where it raises (an unclosed quote, a trailing backslash)."""
    if _PLAIN.match(command):
        return _WORD.findall(command)
    try:
        return shlex.split(command)
    except ValueError:
        return None


def _command_path(command: str) -> str | None:
    # "cd /repo && cat x" is how many agents read; the cd changes nothing we key on
    if len(command) > MAX_COMMAND_CHARS:
        return None
    command = _CD_PREFIX.sub("", command.strip(), count=1)
    m = _NL_SED.match(command)
    if m and not any(ch in m.group(1) for ch in "*?[;&|$`"):
        return range_key(m.group(1), m.group(2), m.group(3))
    if not command or "\n" in command or _SHELL_META.search(command):
        return None
    first = _FIRST_WORD.match(command)
    if first is not None and first.group() not in _READ_COMMANDS:
        # shlex's first word is this one (no quote or backslash in it, and it ends at its whitespace), and
        # it reads nothing: no need to lex the rest (a quoted grep pattern sent every command through shlex)
        return None
    words = _words(command)
    if words is None:
        return None
    if not words or words[0] not in _READ_COMMANDS:
        return None
    if words[0] == "sed" and not any(w == "-n" or w.startswith("-n") for w in words[1:]):
        return None  # sed without -n is an edit, not a read
    operands = [w for w in words[1:] if not w.startswith("-")]
    if words[0] in ("head", "tail"):
        # "head -n 40 file": the count is an operand of -n, not a path
        operands = [w for w in operands if not w.isdigit()]
    script = None
    if words[0] == "sed":
        script, operands = (operands[0] if operands else ""), operands[1:]
    if words[0] == "open":
        operands = operands[:1]  # swe-agent's "open path [line]"
    if len(operands) != 1 or any(ch in operands[0] for ch in "*?["):
        return None  # several files (or a glob) are not one file page
    m = re.fullmatch(r"(\d+),(\d+)p", script or "")
    if m:
        return range_key(operands[0], m.group(1), m.group(2))  # sed -n 'a,bp': a page of that range
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
            return _offset_limit(path, args)
        command = args.get("command")
        if isinstance(command, str):
            return _command_path(command if name != "open" or command.startswith("open") else f"open {command}")
        return None
    if name in _SHELL_TOOLS:
        script = _script(args.get("command") or args.get("cmd"))
        if script is not None:
            return _command_path(script)
        return None
    if name in ("execute_ipython_cell", "ipython", "python"):
        code = args.get("code")
        if isinstance(code, str):
            m = _OPEN_FILE_CALL.match(code[:MAX_COMMAND_CHARS])
            if m and "\n" not in code.strip():
                return m.group(1)
    return None


def _patch_files(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys((a or b).strip() for a, b in _PATCH_FILE.findall(text[:1_000_000])))


def file_edits(tool_name: str | None, arguments: Any) -> tuple[str, ...]:
    """Return the paths a tool call edits (empty when it edits none that pager can tell)."""
    name = (tool_name or "").strip().lower()
    if name in _EDIT_TOOLS:
        args = _args(arguments)
        path = _path_arg(args)
        return (path,) if path else ()
    if name in _EDITOR_TOOLS:
        args = _args(arguments)
        if str(args.get("command", "")).strip() in ("create", "str_replace", "insert", "undo_edit"):
            path = _path_arg(args)
            return (path,) if path else ()
        return ()
    if name in _PATCH_TOOLS:
        # a freeform tool (the patch text itself) or a function with the patch under "input" / "patch"
        args = _args(arguments)
        text = args.get("input") or args.get("patch") or args.get("command")
        if not isinstance(text, str):
            text = arguments if isinstance(arguments, str) else ""
        return _patch_files(text)
    if name in _SHELL_TOOLS:
        args = _args(arguments)
        script = _script(args.get("command") or args.get("cmd"))
        if script is not None and "*** Begin Patch" in script:  # Codex: apply_patch through the shell
            return _patch_files(script)
    return ()

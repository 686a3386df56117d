"""The scripted "model": what it answers to each request of a bed conversation.

Stateless on purpose: the next step is read off the request itself. Every
tool call the model makes carries its step number in its id
(``…bedstep017x<task>…``), and clients pass ids back unchanged, so the step
is one more than the highest own id in the request, whatever pager did to the
older messages. The task is named by a ``[bed-task:NAME]`` tag in the user's
prompt (its first occurrence in the request).

Before a step that needs a file's content (``needs``) the model checks that
the file's sentinel is in its prompt. If not, it acts as a careful model
would: it opens the pager handle with ``expand`` when that tool is offered and
the stub names the file, else it re-reads the file with the client's own
tool, once (all missing files in one turn, as parallel calls; expands first,
alone); what is still missing after that is reported as MISSING in the final
answer, so a lost file changes the outcome.

Each client gets the calls in its own tools: Claude Code ``Read`` / ``Bash`` /
``Edit``; Codex ``exec_command`` (``cat``, ``sed -n``, ``grep``) and the
freeform ``apply_patch``; opencode ``read`` / ``bash`` / ``edit``.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Mapping

import attrs

from fixture import BIG_FILES, SENTINELS, TOTAL_BUGGY, TOTAL_FIXED

__all__ = ["Call", "Reply", "SCRIPTS", "next_reply", "task_of"]

CORE, STORAGE, REPORT, UTIL, DESIGN, PRICING = list(BIG_FILES)

# (kind, args..., needs): kinds read / sh / grep / edit / final
Step = tuple


def _main_script() -> list[Step]:
    s: list[Step] = [
        ("grep", "def total", "src"),
        ("read", CORE), ("read", STORAGE), ("read", REPORT), ("read", UTIL), ("read", DESIGN), ("read", PRICING),
        ("sh", "python3 run_tests.py"),
        ("read", CORE, 1, 20),
        ("edit", CORE, TOTAL_BUGGY.strip("\n"), TOTAL_FIXED.strip("\n")),
        ("sh", "python3 run_tests.py"),
        ("read", STORAGE),  # unchanged since the last read: Claude Code refuses it ("Wasted call")
        ("sh", "wc -l src/inv/*.py docs/DESIGN.md", (STORAGE,)),
        ("read", "NOTES.txt"),
        ("edit", "NOTES.txt", "todo: fix total", "done: fix total (off by one)"),
    ]
    words = "ledger shard batch invoice rebate margin audit cursor snapshot checksum tariff region".split()
    files = [CORE, STORAGE, REPORT, UTIL, PRICING]
    for i in range(24):
        f = files[i % len(files)]
        if i % 3 == 0:
            s.append(("grep", f"def [a-z]*_{words[i % len(words)]}_", "src"))
        elif i % 3 == 1:
            a = 40 + 13 * i
            s.append(("read", f, a, a + 30))
        else:
            s.append(("sh", f"python3 -c \"import sys; sys.path.insert(0, 'src'); import inv.{f.split('/')[-1][:-3]} as m; "
                            f"print(len([n for n in dir(m) if not n.startswith('_')]))\""))
        if i == 11:
            s.append(("read", UTIL))  # unchanged: refused again by Claude Code
            s.append(("sh", "ls src/inv", (UTIL,)))
    s.append(("sh", "python3 run_tests.py"))
    s.append(("final", tuple(BIG_FILES)))
    return s


def _pair_script(files: tuple[str, ...], extra: str) -> list[Step]:
    s: list[Step] = [("read", f) for f in files]
    s += [("grep", extra, "src"), ("sh", "ls src/inv"), ("read", files[0], 30, 60), ("sh", "python3 run_tests.py")]
    s += [("read", files[1], 100, 140), ("grep", "def ", files[1]), ("final", files)]
    return s


SCRIPTS: dict[str, list[Step]] = {
    "main": _main_script(),
    "serial": _main_script(),  # the same session; the model opens what it lost one handle per turn
    "pair-a": _pair_script((CORE, UTIL, DESIGN), "LEDGER"),
    "pair-b": _pair_script((STORAGE, PRICING, REPORT), "SHARD"),
}

_TAG = re.compile(r"\[bed-task:([a-z0-9-]+)\]")
_STUB = re.compile(r"\[pager: file (\S+) stored off-prompt as (pg:[0-9a-z-]+)")
_PAGE = re.compile(r'<page handle="(pg:[0-9a-z-]+)"[^>]*path="([^"]+)"')


@attrs.frozen
class Call:
    id: str
    name: str
    args: Any  # a dict (function tools) or a string (a freeform tool's input)
    custom: bool = False


@attrs.frozen
class Reply:
    text: str = ""
    calls: tuple[Call, ...] = ()
    step: int = -1
    recovery: str = ""  # "expand" / "reread" when the reply recovers a missing file


def task_of(raw: str) -> str | None:
    """Return the full task tag (``main-claude-direct-…``) named in a request, or None."""
    m = _TAG.search(raw)
    return m.group(1) if m else None


def _ids(tag: str, raw: str, kind: str) -> list[int]:
    return [int(n) for n in re.findall(rf"bed{kind}(\d{{3}})x{re.escape(tag)}x", raw)]


def _render(client: str, step: Step, repo: str, tools: frozenset[str]) -> tuple[str, Any, bool]:
    """Return (tool name, arguments, freeform) for one abstract step in ``client``'s tools."""
    kind, rest = step[0], step[1:]
    if kind == "read":
        path, lo, hi = rest[0], (rest[1] if len(rest) > 2 and isinstance(rest[1], int) else None), \
            (rest[2] if len(rest) > 2 and isinstance(rest[2], int) else None)
        if client == "claude":
            args = {"file_path": f"{repo}/{path}"}
            if lo:
                args |= {"offset": lo, "limit": hi - lo + 1}
            return "Read", args, False
        if client == "opencode":
            args = {"filePath": f"{repo}/{path}"}
            if lo:
                args |= {"offset": lo, "limit": hi - lo + 1}
            return "read", args, False
        cmd = f"sed -n '{lo},{hi}p' {path}" if lo else f"cat {path}"
        return _codex_exec(cmd, tools)
    if kind in ("sh", "grep"):
        cmd = rest[0] if kind == "sh" else f"grep -rn '{rest[0]}' {rest[1]}"
        if client == "claude":
            return "Bash", {"command": cmd, "description": "Run " + cmd.split()[0]}, False
        if client == "opencode":
            # not opencode's grep tool: it needs ripgrep, which this machine lacks ("ripgrep execution failed")
            return "bash", {"command": cmd, "description": "Run " + cmd.split()[0]}, False
        return _codex_exec(cmd, tools)
    if kind == "edit":
        path, old, new = rest[0], rest[1], rest[2]
        if client == "claude":
            return "Edit", {"file_path": f"{repo}/{path}", "old_string": old, "new_string": new}, False
        if client == "opencode":
            return "edit", {"filePath": f"{repo}/{path}", "oldString": old, "newString": new}, False
        patch = f"*** Begin Patch\n*** Update File: {path}\n@@\n-{old}\n+{new}\n*** End Patch\n"
        if "apply_patch" in tools:
            return "apply_patch", patch, True
        return _codex_exec(f"python3 - <<'EOF'\nimport pathlib\np = pathlib.Path({path!r})\n"
                           f"p.write_text(p.read_text().replace({old!r}, {new!r}, 1))\nEOF", tools)
    raise ValueError(f"no rendering for step kind {kind!r}")


def _codex_exec(cmd: str, tools: frozenset[str]) -> tuple[str, Any, bool]:
    if "exec_command" in tools:
        return "exec_command", {"cmd": cmd, "yield_time_ms": 10000}, False
    if "shell_command" in tools:
        return "shell_command", {"command": cmd}, False
    return "shell", {"command": ["bash", "-lc", cmd]}, False


def _final_text(raw: str, needs: tuple[str, ...]) -> str:
    seen = [f"{p}={SENTINELS[p]}" for p in needs if SENTINELS[p] in raw]
    missing = [p for p in needs if SENTINELS[p] not in raw]
    tests = "PASS" if "PASS test_total" in raw else "not seen passing"
    out = f"Report: total() fixed (off by one), tests {tests}. Sentinels read: {', '.join(seen) or 'none'}."
    if missing:
        out += f" MISSING (content not in my prompt): {', '.join(missing)}."
    return out


def next_reply(client: str, tag: str, raw: str, tools: frozenset[str], repo: str) -> Reply:
    """Return the model's answer to a request of conversation ``tag`` whose raw JSON text is ``raw``."""
    script = SCRIPTS[tag.split("-")[0] if not tag.startswith("pair-") else "-".join(tag.split("-")[:2])]
    done = _ids(tag, raw, "step")
    step = max(done) + 1 if done else 0
    step = min(step, len(script) - 1)
    spec = script[step]
    needs = spec[-1] if spec[0] == "final" else (spec[-1] if isinstance(spec[-1], tuple) else ())
    short = hashlib.blake2b(f"{tag}{step}".encode(), digest_size=3).hexdigest()
    # every missing file at once, as parallel calls (one round, as a model asks for all it lacks)
    recover: list[Call] = []
    how = set()
    for k, path in enumerate(needs):
        if SENTINELS[path] in raw:
            continue
        fix_id = f"{step:03d}{k}"
        if re.search(rf"bedfix{fix_id}x{re.escape(tag)}x", raw):
            continue  # tried once already: give up on it, the report says MISSING
        cid = f"call_bedfix{fix_id}x{tag}x{short}"
        handle = _handle_for(raw, path)
        if handle and "expand" in tools:
            recover.append(Call(cid, "expand", {"handle": handle}))
            how.add("expand")
        else:
            name, args, custom = _render(client, ("read", path), repo, tools)
            recover.append(Call(cid, name, args, custom))
            how.add("reread")
    if recover and tag.startswith("serial-"):
        recover = recover[:1]  # one call per turn: a model that opens its handles one after the other
    if recover:
        # pager's tools alone in a turn: a turn mixing them with the client's own is not answered by the proxy
        # (it strips pager's calls), so the re-reads wait for the next turn
        if "expand" in how:
            recover, how = [c for c in recover if c.name == "expand"], {"expand"}
        return Reply(calls=tuple(recover), step=step, recovery="+".join(sorted(how)))
    if spec[0] == "final":
        return Reply(text=_final_text(raw, needs), step=step)
    name, args, custom = _render(client, spec[:-1] if isinstance(spec[-1], tuple) else spec, repo, tools)
    return Reply(calls=(Call(f"call_bedstep{step:03d}x{tag}x{short}", name, args, custom),), step=step)


def _handle_for(raw: str, path: str) -> str | None:
    for m in _STUB.finditer(raw):
        if m.group(1).endswith(path):
            return m.group(2)
    for m in _PAGE.finditer(raw):
        if m.group(2).endswith(path):
            return m.group(1)
    return None


def side_text(req: Mapping[str, Any]) -> str:
    """The canned answer to a side request (title, summary, quota probe)."""
    return "Fix total in inv"

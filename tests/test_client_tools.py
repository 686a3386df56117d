"""The real clients' tools: which calls read a file (and which part), which edit one, per client."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

import pager
from pager.core.fileread import base_path, file_edits, file_read_path

PATCH = "*** Begin Patch\n*** Update File: src/lib.rs\n@@\n-a\n+b\n*** Add File: docs/new.md\n+hi\n*** End Patch"


def js(**kw: Any) -> str:
    return orjson.dumps(kw).decode()


@pytest.mark.parametrize("name, args, want", [
    # Claude Code
    ("Read", js(file_path="/w/a.py"), "/w/a.py"),
    ("Read", js(file_path="/w/a.py", offset=40, limit=20), "/w/a.py#L40-59"),  # a page of that range
    ("Read", js(file_path="/w/a.py", offset=1, limit=2000), "/w/a.py#L1-2000"),
    ("Bash", js(command="cat src/a.py"), "src/a.py"),
    ("Bash", js(command="sed -n '10,30p' src/a.py"), "src/a.py#L10-30"),
    ("Grep", js(pattern="x", path="/w"), None),
    ("Glob", js(pattern="**/*.py"), None),
    ("Edit", js(file_path="/w/a.py", old_string="a", new_string="b"), None),
    # Codex
    ("exec_command", js(cmd="cat src/lib.rs"), "src/lib.rs"),
    ("exec_command", js(cmd=["bash", "-lc", "sed -n '1,200p' src/lib.rs"]), "src/lib.rs#L1-200"),
    ("shell", js(command=["bash", "-lc", "nl -ba src/lib.rs | sed -n '1,120p'"], workdir="/r"), "src/lib.rs#L1-120"),
    ("shell", js(command=["cat", "README.md"]), "README.md"),
    ("shell", js(command=["bash", "-lc", "rg -n foo src"]), None),
    ("shell_command", js(command="cat Cargo.toml", workdir="/r"), "Cargo.toml"),
    ("apply_patch", PATCH, None),
    # opencode
    ("read", js(filePath="/w/src/x.ts"), "/w/src/x.ts"),
    ("read", js(filePath="/w/src/x.ts", offset=100, limit=50), "/w/src/x.ts#L100-149"),
    ("bash", js(command="cat src/x.ts", description="Show"), "src/x.ts"),
    ("write", js(filePath="/w/src/x.ts", content="x"), None),
])
def test_reads(name, args, want):
    assert file_read_path(name, args) == want
    if want:
        assert base_path(want) == want.split("#L")[0]


@pytest.mark.parametrize("name, args, want", [
    ("Edit", js(file_path="/w/a.py", old_string="a", new_string="b"), ("/w/a.py",)),
    ("MultiEdit", js(file_path="/w/a.py", edits=[]), ("/w/a.py",)),
    ("Write", js(file_path="/w/b.py", content="x"), ("/w/b.py",)),
    ("apply_patch", PATCH, ("src/lib.rs", "docs/new.md")),  # Codex's freeform tool: the patch is the input
    ("apply_patch", js(input=PATCH), ("src/lib.rs", "docs/new.md")),
    ("exec_command", js(cmd=f"apply_patch <<'EOF'\n{PATCH}\nEOF"), ("src/lib.rs", "docs/new.md")),
    ("shell", js(command=["apply_patch", PATCH]), ("src/lib.rs", "docs/new.md")),
    ("edit", js(filePath="/w/x.ts", oldString="a", newString="b"), ("/w/x.ts",)),
    ("write", js(filePath="/w/y.ts", content=""), ("/w/y.ts",)),
    ("Read", js(file_path="/w/a.py"), ()),
    ("Bash", js(command="pytest -q"), ()),
])
def test_edits(name, args, want):
    assert file_edits(name, args) == want


def _call(cid: str, name: str, args: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": cid, "type": "function", "function": {"name": name, "arguments": args}}]}


def stale_after(steps: list[tuple[str, str, str]]) -> dict[str, bool]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "work"}]
    for n, (name, args, result) in enumerate(steps):
        msgs += [_call(f"c{n}", name, args), {"role": "tool", "tool_call_id": f"c{n}", "content": result}]
    with pager.open(":memory:", "s", context_window=100_000) as p:
        p.assemble({"model": "m", "messages": msgs})
        h = p.history
        return {f"{i}:{h.path[i]}": h.stale[i] for i in range(len(h)) if h.kind[i] == "file"}


def test_an_edit_makes_earlier_reads_of_the_file_stale_for_each_client():
    # Claude Code: Read, Edit; the other file's read stays current
    got = stale_after([("Read", js(file_path="/w/a.py"), "a"), ("Read", js(file_path="/w/b.py"), "b"),
                       ("Edit", js(file_path="/w/a.py", old_string="x", new_string="y"), "updated")])
    assert got == {"2:/w/a.py": True, "4:/w/b.py": False}
    # Codex: shell reads, apply_patch
    got = stale_after([("shell", js(command=["bash", "-lc", "sed -n '1,50p' src/lib.rs"]), "1..50"),
                       ("apply_patch", PATCH, "Success.")])
    assert got == {"2:src/lib.rs#L1-50": True}
    # opencode: read, write
    got = stale_after([("read", js(filePath="/w/x.ts"), "x"), ("write", js(filePath="/w/x.ts", content="z"), "ok")])
    assert got == {"2:/w/x.ts": True}


def test_partial_reads_are_pages_of_their_range():
    got = stale_after([
        ("Read", js(file_path="/w/a.py", offset=1, limit=100), "1..100"),
        ("Read", js(file_path="/w/a.py", offset=101, limit=100), "101..200"),  # another range: both current
        ("Read", js(file_path="/w/a.py", offset=1, limit=100), "1..100 again"),  # the same range: the first stale
    ])
    assert got == {"2:/w/a.py#L1-100": True, "4:/w/a.py#L101-200": False, "6:/w/a.py#L1-100": False}
    got = stale_after([("Read", js(file_path="/w/a.py", offset=1, limit=100), "1..100"),
                       ("Read", js(file_path="/w/a.py"), "all")])  # the whole file covers every range
    assert got == {"2:/w/a.py#L1-100": True, "4:/w/a.py": False}


def test_without_expand_only_rereadable_reads_are_stubbed_and_say_how():
    big = "\n".join(f"line {i} of the module, value {i * 7}" for i in range(600))
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "agent"}, {"role": "user", "content": "work"}]
    steps = [("Read", js(file_path="/w/a.py")), ("Bash", js(command="make 2>&1")), ("Read", js(file_path="/w/b.py"))]
    for n, (name, args) in enumerate(steps * 2):
        msgs += [_call(f"c{n}", name, args), {"role": "tool", "tool_call_id": f"c{n}", "content": f"{big}\n{n}"}]
    msgs.append({"role": "user", "content": "go on"})
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in ("Read", "Bash")]
    request = {"model": "m", "messages": msgs, "tools": tools}
    with pager.open(":memory:", "s", context_window=40_000) as p:
        out = p.assemble(request, reread_only=True)
        text = orjson.dumps(out).decode()
        assert "pg:" not in text and "expand" not in text  # no handle, no tool the model lacks
        assert text.count("re-read it with Read") == p.last_report.pages_stubbed > 0
        bash = {c["id"] for m in out["messages"] for c in m.get("tool_calls") or () if c["function"]["name"] == "Bash"}
        shown = [m["content"] for m in out["messages"] if m["role"] == "tool" and m["tool_call_id"] in bash]
        assert all("line 599" in c for c in shown)  # what no client tool can redo is shown whole or dropped
    with pager.open(":memory:", "s", context_window=40_000) as p:
        out = p.assemble(request)  # expand offered by the harness: any big output may be a stub
        assert "pg:" in orjson.dumps(out).decode()

"""``pager mcp``: the official mcp client talks to the server over stdio (a subprocess) and HTTP."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from lazy import lazy_module  # noqa: E402

# the mcp SDK (~1.3 s of CPU) is imported by the first test that uses it, not at collection (tests/lazy.py)
mcp = lazy_module("mcp")
mcp_stdio = lazy_module("mcp.client.stdio")

import pager  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _history() -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a build agent."},
        {"role": "user", "content": "Fix the build."},
    ]
    for i in range(40):  # enough pages that the harness commits its index
        out = f"step {i}: ok" if i != 7 else "linker error: undefined symbol ZEBRA_42 in module_7.o"
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": f"{{\"cmd\": \"make {i}\"}}"}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": out},
        ]
    msgs.append({"role": "user", "content": "go on"})
    return msgs


def _params(store: Path) -> Any:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return mcp_stdio.StdioServerParameters(command=sys.executable,
                                           args=["-m", "pager", "mcp", str(store), "--session", "s1"],
                                           env=env, cwd=str(ROOT))


def _text(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def test_stdio_server_tools_against_an_open_harness(tmp_path):
    store = tmp_path / "ctx"
    harness = pager.open(store, session="s1", context_window=32_000)
    try:
        harness.assemble({"model": "m", "messages": _history()})

        async def session() -> dict[str, Any]:
            async with mcp.Client(_params(store), read_timeout_seconds=60) as client:
                names = sorted(t.name for t in (await client.list_tools()).tools)
                recall = _text(await client.call_tool("recall", {"query": "ZEBRA_42 linker"}))
                handle = next(w for w in recall.split() if w.startswith("pg:"))
                expanded = _text(await client.call_tool("expand", {"handle": handle}))
                missing = _text(await client.call_tool("expand", {"handle": "pg:999-nope"}))
                hits = await client.call_tool("search", {"query": "module_7.o", "k": 2})
                noted = _text(await client.call_tool("note", {"text": "decided: relink with -lzebra"}))
                return {"names": names, "recall": recall, "expanded": expanded, "missing": missing,
                        "hits": hits.structured_content, "noted": noted}

        out = asyncio.run(session())
        assert out["names"] == ["expand", "note", "recall", "search"]
        assert "linker error" in out["recall"]
        assert out["expanded"] == "linker error: undefined symbol ZEBRA_42 in module_7.o"
        assert out["missing"].startswith("Error:")  # a result the model reads, not a crash
        assert "module_7.o" in str(out["hits"])
        assert out["noted"].startswith("Noted")
        assert "decided: relink with -lzebra" in pager.open(store, session="s1").notes()  # in the store
    finally:
        harness.close()


def test_a_note_written_through_mcp_reaches_the_open_harness(tmp_path):
    store = tmp_path / "ctx"
    harness = pager.open(store, session="s1", context_window=32_000, scope="project", pool="repo")
    try:
        harness.grant("repo", readers=["*"])
        msgs = _history()
        harness.assemble({"model": "m", "messages": msgs})

        from pager.mcp_server import build_server

        server, tools = build_server(store, "s1")  # in-process: the stdio test above covers the transport

        async def note() -> None:
            async with mcp.Client(server) as client:
                await client.call_tool("note", {"text": "decided: relink with -lzebra"})

        try:
            asyncio.run(note())
        finally:
            tools.close()
        out = harness.assemble({"model": "m", "messages": msgs + [{"role": "user", "content": "next?"}]})
        assert any("relink with -lzebra" in str(m.get("content")) for m in out["messages"])
        # the note is a page of the session's pool too: another agent on the pool finds it
        with pager.open(store, session="s2", owner="bob") as other:
            hits = other.search("relink lzebra", cross_session=True)
            assert [(h.session, h.kind, h.pool) for h in hits][:1] == [("s1", "note", "repo")]
    finally:
        harness.close()


def test_streamable_http_server(tmp_path):
    from pager.mcp_server import build_server
    from pager.proxy import ServerThread

    store = tmp_path / "ctx"
    with pager.open(store, session="s1", context_window=32_000) as p:
        p.assemble({"model": "m", "messages": _history()})
    server, tools = build_server(store, "s1")
    try:
        with ServerThread(server.streamable_http_app()) as url:
            async def go() -> str:
                async with mcp.Client(url + "/mcp", read_timeout_seconds=30) as client:
                    return _text(await client.call_tool("recall", {"query": "ZEBRA_42"}))

            assert "linker error" in asyncio.run(go())
    finally:
        tools.close()


def test_mcp_and_reindex_serve_a_postgresql_store(pg_dsn, capsys):
    """``pager mcp postgresql://...`` over stdio, and ``pager reindex postgresql://...``: the Store protocol."""
    harness = pager.open(pg_dsn, session="s1", context_window=32_000, owner="alice")
    try:
        harness.assemble({"model": "m", "messages": _history()})

        async def session() -> dict[str, Any]:
            params = mcp_stdio.StdioServerParameters(command=sys.executable,
                                                     args=["-m", "pager", "mcp", pg_dsn, "--session", "s1"],
                                                     env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=str(ROOT))
            async with mcp.Client(params, read_timeout_seconds=60) as client:
                recall = _text(await client.call_tool("recall", {"query": "ZEBRA_42 linker"}))
                handle = next(w for w in recall.split() if w.startswith("pg:"))
                return {
                    "recall": recall,
                    "expanded": _text(await client.call_tool("expand", {"handle": handle})),
                    "lines": _text(await client.call_tool("expand", {"handle": handle, "start_line": 0})),
                    "missing": _text(await client.call_tool("expand", {"handle": "pg:999-nope"})),
                    "hits": (await client.call_tool("search", {"query": "module_7.o", "k": 2})).structured_content,
                    "noted": _text(await client.call_tool("note", {"text": "decided: relink with -lzebra"})),
                }

        out = asyncio.run(session())
        assert "linker error" in out["recall"]
        assert out["expanded"] == "linker error: undefined symbol ZEBRA_42 in module_7.o"
        # the facade's own checks and texts (pager.sharing.read_handle), not a copy of them
        for key, call in (("lines", lambda: harness.expand("pg:0-x", start_line=0)),
                          ("missing", lambda: harness.expand("pg:999-nope"))):
            with pytest.raises(pager.PagerError) as exc:
                call()
            assert out[key] == f"Error: {exc.value}"
        assert "module_7.o" in str(out["hits"])
        assert out["noted"].startswith("Noted")
        nxt = harness.assemble({"model": "m", "messages": _history() + [{"role": "user", "content": "next?"}]})
        assert any("relink with -lzebra" in str(m.get("content")) for m in nxt["messages"])  # in the store

        # the CLI in this process (what a subprocess adds is an interpreter start and pager's imports)
        from pager.cli import main

        capsys.readouterr()
        returncode = main(["reindex", pg_dsn])
        done = capsys.readouterr()
        assert returncode == 0, done.err
        pages = harness.store.count_pages()
        assert done.out.strip().endswith(f": {pages} pages") and "postgresql://" in done.out
        assert [h.kind for h in harness.search("ZEBRA_42 linker", k=1)] == ["tool"]  # recallable after it
    finally:
        harness.close()


def test_mcp_and_reindex_refuse_a_folder_with_no_store(tmp_path, capsys):
    # the CLI in this process: a refusal serves nothing, and two interpreters starting (pager and
    # the mcp SDK imported in each) were all of this test's time; the tests above start `pager mcp`
    from pager.cli import main

    for argv in (["reindex", str(tmp_path / "none")], ["mcp", str(tmp_path / "none"), "--session", "s"]):
        returncode = main(argv)
        assert returncode != 0 and "holds no pager store" in capsys.readouterr().err
        assert not (tmp_path / "none").exists()

"""``pager.aopen``: the async API shares the sync implementation, runs it off the loop, one call at a time."""

from __future__ import annotations

import asyncio
import threading

import pytest

import pager
from pager.aio import AsyncPager


def _history(n: int) -> list[dict]:
    msgs = [{"role": "system", "content": "You are a build agent."}, {"role": "user", "content": "Fix the build."}]
    for i in range(n):
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"output {i} ZEBRA-{i}"},
        ]
    return msgs


def test_async_context_manager_and_many_tasks(tmp_path):
    async def main() -> tuple[list[int], list[str], dict, bool]:
        async with pager.aopen(tmp_path / "ctx", session="s1", context_window=32_000) as p:
            assert isinstance(p, AsyncPager) and p.session == "s1"
            loop_thread = threading.get_ident()
            worker = await p.run(threading.get_ident)
            history = _history(30)
            # many tasks at once: assembles of a growing history, notes, searches
            outs = await asyncio.gather(
                *(p.aassemble({"model": "m", "messages": history[: 4 + 2 * i]}) for i in range(10)),
                *(p.anote(f"note {i}") for i in range(10)),
            )
            hits = await p.asearch("ZEBRA-3")
            reply = await p.acall_tool({"id": "r1", "type": "function",
                                        "function": {"name": "expand", "arguments": "{\"handle\": \"pg:0-nope\"}"}})
            usage = await p.aobserve({"usage": {"prompt_tokens": 100, "completion_tokens": 5,
                                                "prompt_tokens_details": {"cached_tokens": 80}}})
            notes = p.pager.notes()
        return [len(o["messages"]) for o in outs[:10]], notes, {"hits": hits, "reply": reply, "usage": usage, "pager": p}, \
            worker != loop_thread

    lengths, notes, rest, off_loop = asyncio.run(main())
    assert off_loop  # the pager's work ran in a worker thread
    assert lengths == sorted(lengths) and lengths[0] < lengths[-1]  # in the order awaited
    assert sorted(notes) == sorted(f"note {i}" for i in range(10))
    assert rest["hits"] and rest["reply"]["content"].startswith("Error:")
    assert rest["usage"]["cached_tokens"] == 80
    with pytest.raises(pager.PagerError, match="closed"):  # closed on leaving the block
        rest["pager"].pager.assemble({"model": "m", "messages": _history(1)})


def test_await_aopen(tmp_path):
    async def main() -> int:
        p = await pager.aopen(tmp_path / "ctx", session="s2", context_window=32_000)
        try:
            out = await p.aassemble({"model": "m", "messages": _history(2)}, format="openai-chat")
            return len(out["messages"])
        finally:
            await p.aclose()

    assert asyncio.run(main()) == 6


def _params(fn) -> tuple:
    """Return a signature without ``self`` as comparable values (string annotations, quotes dropped)."""
    import inspect

    sig = inspect.signature(fn)
    params = list(sig.parameters.values())[1:]
    ann = lambda a: str(a).strip("'\"")  # noqa: E731
    return tuple((p.name, p.kind, p.default, ann(p.annotation)) for p in params), ann(sig.return_annotation)


def test_async_pager_has_a_counterpart_of_every_public_name_of_pager(tmp_path):
    import inspect

    p = pager.open(tmp_path / "ctx", session="s", context_window=32_000)
    try:
        a = AsyncPager(p)
        names = sorted(n for n in dir(p) if not n.startswith("_"))
        assert {"assemble", "grant", "task_state", "options", "last_report"} <= set(names)
        problems = []
        for name in names:
            member = inspect.getattr_static(type(p), name, None)
            if inspect.isfunction(member):  # a method: a coroutine "a<name>", or the pure tools() as it is
                mine = getattr(AsyncPager, name if name == "tools" else f"a{name}", None)
                if mine is None:
                    problems.append(f"no AsyncPager.a{name}")
                elif name != "tools" and not inspect.iscoroutinefunction(mine):
                    problems.append(f"AsyncPager.a{name} is not a coroutine")
                elif _params(mine) != _params(member):
                    problems.append(f"AsyncPager.a{name}{_params(mine)} differs from Pager.{name}{_params(member)}")
            elif not hasattr(a, name) or getattr(a, name) is not getattr(p, name):
                problems.append(f"AsyncPager.{name} does not read Pager.{name}")
        assert not problems, "\n".join(problems)
    finally:
        p.close()


def test_the_new_async_counterparts_do_what_the_pager_does(tmp_path):
    async def main() -> dict:
        async with pager.aopen(tmp_path / "ctx", session="s", context_window=32_000) as p:
            out = await p.aassemble({"model": "m", "messages": _history(3)})
            await p.apin("keep the build green")
            await p.anote("tried -j1")
            acl = await p.agrant("repo", readers=["*"])
            handle = next(h.handle for h in await p.asearch("ZEBRA-1") if h.handle)
            moved = await p.ademote(handle, "private")
            shared = await p.apromote(handle, "project", pool="repo")
            state = await p.atask_state()
            return {
                "out": out, "pins": await p.apins(), "notes": await p.anotes(), "acl": acl,
                "pools": await p.apools(), "moved": moved, "shared": shared, "state": state, "reindexed": await p.areindex(),
                "intercept": await p.aintercept({"id": "c9", "type": "function",
                                                 "function": {"name": "bash", "arguments": "{}"}}),
                "report": p.last_report, "options": p.options, "tools": p.tools(format="anthropic-messages"),
            }

    r = asyncio.run(main())
    assert r["pins"] == ["keep the build green"] and r["notes"] == ["tried -j1"]
    assert r["acl"].readers == frozenset({"*"}) and "repo" in r["pools"]
    assert r["moved"].scope == "private" and (r["shared"].scope, r["shared"].pool) == ("project", "repo")
    assert "keep the build green" in r["state"].goal
    assert r["reindexed"] >= 8 and r["intercept"] is None  # paging mode: nothing to intercept
    assert r["report"] is not None and r["options"].context_window == 32_000
    assert [t["name"] for t in r["tools"]] == ["recall", "expand", "note"]  # format= reaches Pager.tools

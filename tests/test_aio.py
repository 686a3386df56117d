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

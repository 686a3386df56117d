"""``assemble``'s contract, and the early hand-over the proxy uses (``Pager._assemble``'s ``ready``).

``assemble`` returns once the call is persisted (its pages committed, its
report line written), as it always did. ``_assemble(ready=...)`` hands the
rendered request over before the COMMIT; ``AsyncPager.aassemble_early``
wraps it for asyncio code, and the session's next call runs after the rest.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

import pager
from helpers import committed_pages
from pager.aio import AsyncPager
from pager.errors import StoreError


def history(n: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a build agent."},
                                  {"role": "user", "content": "Fix the build."}]
    for i in range(n):
        msgs += [{"role": "assistant", "content": f"step {i}"}, {"role": "user", "content": f"go on {i}"}]
    return msgs


def report_lines(store: Path) -> list[dict[str, Any]]:
    path = store / "reports.jsonl"
    lines = path.read_bytes().splitlines() if path.exists() else []
    return [r for r in map(orjson.loads, lines) if r.get("type") == "assemble"]


def test_assemble_returns_with_the_call_persisted(tmp_path: Path) -> None:
    store = tmp_path / "ctx"
    with pager.open(store, session="s", context_window=32_000) as p:
        out = p.assemble({"model": "m", "messages": history(2)})
        assert out["messages"]
        assert committed_pages(store) == 6  # another connection sees every page at once
        assert [r["call"] for r in report_lines(store)] == [1]
        assert p.last_report is not None and p.last_report.call == 1


def test_ready_gets_the_request_before_the_commit_and_assemble_persists_after(tmp_path: Path) -> None:
    store = tmp_path / "ctx"
    with pager.open(store, session="s", context_window=32_000) as p:
        p.assemble({"model": "m", "messages": history(1)})
        seen: list[Any] = []

        def ready(out: dict[str, Any]) -> None:
            # rendered, but not committed: another connection still sees the last call's pages only
            seen.append((out, committed_pages(store), len(report_lines(store))))

        out = p._assemble({"model": "m", "messages": history(3)}, ready=ready)
        assert len(seen) == 1 and seen[0][0] is out and seen[0][1:] == (4, 1)
        assert committed_pages(store) == 8 and [r["call"] for r in report_lines(store)] == [1, 2]
        # the same request as assemble renders: the early hand-over changes when, not what
        again = pager.open(tmp_path / "other", session="s", context_window=32_000)
        try:
            again.assemble({"model": "m", "messages": history(1)})
            assert again.assemble({"model": "m", "messages": history(3)}) == out
        finally:
            again.close()


def test_a_failure_after_ready_rolls_the_call_back_and_the_next_records_everything(tmp_path: Path) -> None:
    store = tmp_path / "ctx"
    with pager.open(store, session="s", context_window=32_000) as p:
        p.assemble({"model": "m", "messages": history(1)})

        def ready(_out: dict[str, Any]) -> None:
            raise StoreError("the disk went away")

        with pytest.raises(StoreError):
            p._assemble({"model": "m", "messages": history(3)}, ready=ready)
        assert committed_pages(store) == 4 and len(p.history) == 4  # nothing of that call kept
        p.assemble({"model": "m", "messages": history(4)})
        assert committed_pages(store) == len(p.history) == 10
        assert p.last_report is not None and p.last_report.new_pages == 6


def test_aassemble_early_returns_before_the_rest_and_the_next_call_waits_for_it(tmp_path: Path) -> None:
    async def main() -> None:
        async with pager.aopen(tmp_path / "ctx", session="s", context_window=32_000) as p:
            assert isinstance(p, AsyncPager)
            hold = threading.Event()
            out, done = await p.aassemble_early({"model": "m", "messages": history(2)}, hold=hold)
            assert out["messages"] and not done.done()  # the rest waits for the hold
            # the session's next call, queued now, runs after the rest: it finds the report line written
            nxt = asyncio.ensure_future(p.run(lambda: (len(report_lines(tmp_path / "ctx")), committed_pages(
                tmp_path / "ctx"))))
            hold.set()
            assert await done is out
            assert await nxt == (1, 6)

    asyncio.run(main())


def test_aassemble_early_raises_what_fails_before_the_request_is_ready(tmp_path: Path) -> None:
    async def main() -> None:
        async with pager.aopen(tmp_path / "ctx", session="s", context_window=32_000) as p:
            with pytest.raises(pager.InputError):
                await p.aassemble_early({"model": "m", "messages": "not a list"})
            out, done = await p.aassemble_early({"model": "m", "messages": history(1)})
            await done
            assert out["messages"]

    asyncio.run(main())

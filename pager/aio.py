"""The async API: ``pager.aopen`` and ``AsyncPager``.

::

    async with pager.aopen("ctx/", session="s1", context_window=200_000) as p:
        request = await p.aassemble({"model": "...", "messages": history})
        response = await client.chat.completions.create(**request)
        await p.aobserve(response)

One implementation: every ``a``-method runs the very same ``Pager`` method in a
worker thread (SQLite and Tantivy block), so the event loop never waits on
disk or on a planner round. Calls are serialised per session by an
``asyncio.Lock`` — queued on the loop, not in blocked threads — so any number
of tasks can share one ``AsyncPager``. The wrapped ``Pager`` stays reachable
as ``.pager`` for synchronous use outside the loop.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any, Callable, Generator, Mapping, TypeVar

if TYPE_CHECKING:  # pragma: no cover
    from pager.pager import Pager

__all__ = ["AsyncPager", "aopen"]

T = TypeVar("T")


class AsyncPager:
    """A ``Pager`` for asyncio code: awaitable methods, blocking work in a thread.

    Safe to share between tasks: calls run one at a time, in the order they
    were awaited. Build it with ``pager.aopen`` (or wrap an open ``Pager``).
    """

    def __init__(self, pager: "Pager") -> None:
        self.pager = pager
        self._lock: asyncio.Lock | None = None

    @property
    def session(self) -> str:
        return self.pager.session

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` in a worker thread, serialised with this session's other calls."""
        if self._lock is None:  # created lazily: bound to the loop that first uses it
            self._lock = asyncio.Lock()
        async with self._lock:
            return await asyncio.to_thread(fn, *args, **kwargs)

    async def aassemble(
        self, request: Mapping[str, Any], *, format: str | None = None, expose_tools: bool | None = None,
        reread_only: bool = False,
    ) -> dict[str, Any]:
        """``Pager.assemble``, off the event loop."""
        return await self.run(self.pager.assemble, request, format=format, expose_tools=expose_tools,
                              reread_only=reread_only)

    async def aobserve(self, response: Any, *, format: str | None = None) -> dict[str, int]:
        """``Pager.observe``, off the event loop."""
        return await self.run(self.pager.observe, response, format=format)

    async def acall_tool(self, tool_call: Any, *, format: str | None = None) -> dict[str, Any]:
        """``Pager.call_tool``, off the event loop."""
        return await self.run(self.pager.call_tool, tool_call, format=format)

    async def asearch(self, query: str, k: int = 5, **kwargs: Any) -> list[Any]:
        """``Pager.search``, off the event loop."""
        return await self.run(self.pager.search, query, k, **kwargs)

    async def aexpand(self, handle: str, start_line: int | None = None, end_line: int | None = None) -> str:
        """``Pager.expand``, off the event loop."""
        return await self.run(self.pager.expand, handle, start_line, end_line)

    async def anote(self, text: str) -> int:
        """``Pager.note``, off the event loop."""
        return await self.run(self.pager.note, text)

    async def apin(self, text: str) -> None:
        """``Pager.pin``, off the event loop."""
        return await self.run(self.pager.pin, text)

    def tools(self) -> list[dict[str, Any]]:
        """The agent tools (pure: no I/O, so not a coroutine)."""
        return self.pager.tools()

    async def astats(self) -> dict[str, Any]:
        return await self.run(self.pager.stats)

    async def aclose(self) -> None:
        """Close the pager once every queued call has run. Idempotent."""
        await self.run(self.pager.close)

    async def __aenter__(self) -> "AsyncPager":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _Opening:
    """What ``aopen`` returns: await it, or use it as ``async with``."""

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._args = args
        self._kwargs = kwargs
        self._pager: AsyncPager | None = None

    async def _open(self) -> AsyncPager:
        from pager.pager import open as open_

        return AsyncPager(await asyncio.to_thread(open_, *self._args, **self._kwargs))

    def __await__(self) -> Generator[Any, None, AsyncPager]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncPager:
        self._pager = await self._open()
        return self._pager

    async def __aexit__(self, *exc: object) -> None:
        if self._pager is not None:
            await self._pager.aclose()


def aopen(
    path: str | os.PathLike[str], session: str = "default", context_window: int | None = None, **options: Any
) -> _Opening:
    """Open a store and session like ``pager.open``, for asyncio code.

    ``async with pager.aopen(...) as p`` closes it on exit; ``p = await
    pager.aopen(...)`` leaves closing (``await p.aclose()``) to the caller.
    Opening itself (SQLite, the index) runs in a worker thread.
    """
    return _Opening((path, session, context_window), options)

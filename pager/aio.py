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

Parity: every public method of ``Pager`` has an ``a``-prefixed coroutine
here with the same parameters (``pins`` → ``apins``, ``close`` →
``aclose``), except ``tools``, which does no I/O and stays synchronous; every
public attribute (``options``, ``store``, ``last_report``, ...) reads through.
``tests/test_aio.py`` enumerates ``Pager``'s public names and fails on one
missing here.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import os
import threading
from typing import TYPE_CHECKING, Any, Callable, Generator, Mapping, Sequence, TypeVar

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    from pager.core.heat import HeatPolicy
    from pager.core.history import History
    from pager.core.pages import PageRecord
    from pager.core.pools import PoolAcl
    from pager.core.tokens import TokenCounter
    from pager.options import Options
    from pager.pager import Pager
    from pager.report import Report, ReportLog
    from pager.statefiles import TaskState
    from pager.storage.base import Store

__all__ = ["AsyncPager", "aopen"]

T = TypeVar("T")

# aassemble_early's ``hold``: a caller that never sets it delays the call's COMMIT by this much, no more
HOLD_MAX = 1.0


class AsyncPager:
    """A ``Pager`` for asyncio code: awaitable methods, blocking work in a thread.

    Safe to share between tasks: calls run one at a time, in the order they
    were awaited. Build it with ``pager.aopen`` (or wrap an open ``Pager``).
    """

    def __init__(self, pager: "Pager") -> None:
        self.pager = pager
        self._lock: asyncio.Lock | None = None

    def _session_lock(self) -> asyncio.Lock:
        if self._lock is None:  # created lazily: bound to the loop that first uses it
            self._lock = asyncio.Lock()
        return self._lock

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` in a worker thread, serialised with this session's other calls."""
        async with self._session_lock():
            return await asyncio.to_thread(fn, *args, **kwargs)

    # -- the facade's attributes: plain reads, no I/O ------------------------------------

    @property
    def session(self) -> str:
        return self.pager.session

    @property
    def options(self) -> "Options":
        return self.pager.options

    @property
    def store(self) -> "Store":
        return self.pager.store

    @property
    def path(self) -> "Path | None":
        return self.pager.path

    @property
    def counter(self) -> "TokenCounter":
        return self.pager.counter

    @property
    def policy(self) -> "HeatPolicy":
        return self.pager.policy

    @property
    def history(self) -> "History":
        return self.pager.history

    @property
    def reports(self) -> "ReportLog":
        return self.pager.reports

    @property
    def last_report(self) -> "Report | None":
        return self.pager.last_report

    def tools(self, *, format: str | None = None) -> list[dict[str, Any]]:
        """``Pager.tools``: pure (no I/O), so not a coroutine."""
        return self.pager.tools(format=format)

    # -- the facade's methods, off the event loop ------------------------------------------

    async def aassemble(
        self, request: Mapping[str, Any], *, expose_tools: bool | None = None, format: str | None = None,
        reread_only: bool = False,
    ) -> dict[str, Any]:
        """``Pager.assemble``, off the event loop."""
        return await self.run(self.pager.assemble, request, format=format, expose_tools=expose_tools,
                              reread_only=reread_only)

    async def aassemble_early(
        self, request: Mapping[str, Any], *, expose_tools: bool | None = None, format: str | None = None,
        reread_only: bool = False, wrap: Callable[..., Any] | None = None, hold: threading.Event | None = None,
    ) -> "tuple[dict[str, Any], asyncio.Future[dict[str, Any]]]":
        """``aassemble``, handing the request back before the work it does not depend on; return ``(request, done)``.

        ``request`` is what ``aassemble`` returns, as soon as it is rendered;
        the rest of the call (the store's COMMIT, and the writes of the call's
        rows before it: SQLite's always, PostgreSQL's when the call did not
        search; the checkpoint files, a round's index flush, the report line)
        goes on in the same worker
        thread (``Pager._assemble``'s ``ready``), while the caller sends the
        request on. ``done`` resolves when that rest ran, or takes its
        exception (a ``PagerError``: then nothing of the call was kept, and
        the session's next call records the messages again, as the caller
        resends them). Await ``done`` or add a callback that reads its
        exception. This session's later calls run after ``done``. An error
        before the request was rendered (``InputError``, ``BudgetError``)
        raises here, as from ``aassemble``. ``wrap``: the call runs as
        ``wrap(fn, *args, **kwargs)`` in the worker (a timer, a profiler).
        ``hold``: the rest waits until this event is set (at most
        ``HOLD_MAX`` seconds), so that it does not compete for the
        interpreter with the caller's sending of the request (set it once
        the request is written).
        """
        lock = self._session_lock()
        await lock.acquire()
        loop = asyncio.get_running_loop()
        early: asyncio.Future[dict[str, Any]] = loop.create_future()

        def ready(out: dict[str, Any]) -> None:  # in the worker, under the Pager's lock, before the COMMIT
            loop.call_soon_threadsafe(_resolve, early, out)
            if hold is not None:
                hold.wait(HOLD_MAX)

        def settled(f: "asyncio.Future[dict[str, Any]]") -> None:
            lock.release()
            if not early.done():  # it failed before the request was ready: the caller gets that error
                exc = f.exception() if not f.cancelled() else asyncio.CancelledError()
                early.set_exception(exc if exc is not None else RuntimeError("assemble returned without a request"))

        head = (wrap, self.pager._assemble) if wrap is not None else (self.pager._assemble,)
        job = functools.partial(*head, request, expose_tools=expose_tools, format=format, reread_only=reread_only,
                                ready=ready)
        try:
            done = loop.run_in_executor(None, functools.partial(contextvars.copy_context().run, job))
        except BaseException:
            lock.release()
            raise
        done.add_done_callback(settled)
        try:
            out = await early
        except asyncio.CancelledError:  # the caller went away: nobody will read the rest's outcome, so log it
            done.add_done_callback(_log_failure)
            raise
        return out, done

    async def aobserve(self, response: Any, *, format: str | None = None) -> dict[str, int]:
        """``Pager.observe``, off the event loop."""
        return await self.run(self.pager.observe, response, format=format)

    async def acall_tool(self, tool_call: Any, *, format: str | None = None) -> dict[str, Any]:
        """``Pager.call_tool``, off the event loop."""
        return await self.run(self.pager.call_tool, tool_call, format=format)

    async def aintercept(self, tool_call: Any, *, format: str | None = None) -> dict[str, Any] | None:
        """``Pager.intercept``, off the event loop."""
        return await self.run(self.pager.intercept, tool_call, format=format)

    async def adeclare_rollover(self, args: Mapping[str, Any], cid: str) -> str:
        """``Pager.declare_rollover``, off the event loop."""
        return await self.run(self.pager.declare_rollover, args, cid)

    async def asearch(self, query: str, k: int = 5, *, cross_session: bool = False) -> list[Any]:
        """``Pager.search``, off the event loop."""
        return await self.run(self.pager.search, query, k, cross_session=cross_session)

    async def aexpand(self, handle: str, start_line: int | None = None, end_line: int | None = None) -> str:
        """``Pager.expand``, off the event loop."""
        return await self.run(self.pager.expand, handle, start_line, end_line)

    async def anote(self, text: str) -> int:
        """``Pager.note``, off the event loop."""
        return await self.run(self.pager.note, text)

    async def anotes(self) -> list[str]:
        """``Pager.notes``, after the calls queued before it."""
        return await self.run(self.pager.notes)

    async def apin(self, text: str) -> None:
        """``Pager.pin``, off the event loop."""
        return await self.run(self.pager.pin, text)

    async def apins(self) -> list[str]:
        """``Pager.pins``, after the calls queued before it."""
        return await self.run(self.pager.pins)

    async def atask_state(self) -> "TaskState":
        """``Pager.task_state``, off the event loop."""
        return await self.run(self.pager.task_state)

    async def astats(self) -> dict[str, Any]:
        """``Pager.stats``, off the event loop."""
        return await self.run(self.pager.stats)

    async def areindex(self) -> int:
        """``Pager.reindex``, off the event loop."""
        return await self.run(self.pager.reindex)

    async def agrant(self, pool: str, *, readers: Sequence[str] = (), writers: Sequence[str] = ()) -> "PoolAcl":
        """``Pager.grant``, off the event loop."""
        return await self.run(self.pager.grant, pool, readers=readers, writers=writers)

    async def apools(self) -> "dict[str, PoolAcl]":
        """``Pager.pools``, off the event loop."""
        return await self.run(self.pager.pools)

    async def apromote(self, handle: str, to: str = "project", *, pool: str | None = None) -> "PageRecord":
        """``Pager.promote``, off the event loop."""
        return await self.run(self.pager.promote, handle, to, pool=pool)

    async def ademote(self, handle: str, to: str = "private", *, pool: str | None = None) -> "PageRecord":
        """``Pager.demote``, off the event loop."""
        return await self.run(self.pager.demote, handle, to, pool=pool)

    async def aretire(self, handle: str, *, reason: str) -> "PageRecord":
        """``Pager.retire``, off the event loop."""
        return await self.run(self.pager.retire, handle, reason=reason)

    async def aclose(self) -> None:
        """Close the pager once every queued call has run. Idempotent."""
        await self.run(self.pager.close)

    async def __aenter__(self) -> "AsyncPager":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _log_failure(fut: "asyncio.Future[Any]") -> None:
    exc = None if fut.cancelled() else fut.exception()
    if exc is not None:
        logging.getLogger("pager").error("assemble failed after its request was handed over: %s: %s",
                                         type(exc).__name__, exc)


def _resolve(fut: "asyncio.Future[Any]", value: Any) -> None:
    if not fut.done():  # its awaiter may have been cancelled (a client gone)
        fut.set_result(value)


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

"""The proxy's open sessions: one ``AsyncPager`` per session, opened on first use.

Clients that do not name a session get one named by a stable hash of their
system prompt and first user message: an agent resending its history sends
both unchanged on every call, so every call of one conversation lands in one
session, and two conversations land in two.

Sessions are kept open (opening one loads its history); past ``max_open`` the
least recently used idle one is closed. Calls for one session are serialised
by its ``AsyncPager``; different sessions run in parallel worker threads.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections import OrderedDict
from typing import Any, Mapping

import orjson

from pager.aio import AsyncPager

__all__ = ["SessionPool", "session_name"]

SESSION_HEADER = "x-pager-session"


def session_name(seed: tuple[Any, Any]) -> str:
    """Return the session name for a (system prompt, first user message) pair."""
    raw = orjson.dumps(list(seed), option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY, default=str)
    return "proxy-" + hashlib.sha256(raw).hexdigest()[:16]


class SessionPool:
    """Open sessions of one store, by name. See the module docstring."""

    def __init__(self, store: str | os.PathLike[str], options: Mapping[str, Any], max_open: int = 256) -> None:
        self.store = store
        self.options = dict(options)
        self.max_open = max_open
        self._open: OrderedDict[str, AsyncPager] = OrderedDict()
        self.last: dict[str, list[Any]] = {}  # each session's last history, for dialects.reuse_items
        self._busy: dict[str, int] = {}
        self._opening: dict[str, asyncio.Lock] = {}
        self._closed = False

    async def acquire(self, name: str) -> AsyncPager:
        """Return the session ``name``, opening it if needed; pair with ``release``."""
        if self._closed:
            raise RuntimeError("the session pool is closed")
        self._busy[name] = self._busy.get(name, 0) + 1
        try:
            p = self._open.get(name)
            if p is None:
                lock = self._opening.setdefault(name, asyncio.Lock())
                async with lock:
                    p = self._open.get(name)
                    if p is None:
                        from pager.pager import open as open_

                        p = AsyncPager(await asyncio.to_thread(open_, self.store, name, **self.options))
                        self._open[name] = p
                self._opening.pop(name, None)
            self._open.move_to_end(name)
        except BaseException:
            self.release(name)
            raise
        await self._evict()
        return p

    def release(self, name: str) -> None:
        n = self._busy.get(name, 1) - 1
        if n <= 0:
            self._busy.pop(name, None)
        else:
            self._busy[name] = n

    async def _evict(self) -> None:
        while len(self._open) > self.max_open:
            victim = next((n for n in self._open if n not in self._busy), None)
            if victim is None:
                return
            self.last.pop(victim, None)
            await self._open.pop(victim).aclose()

    def names(self) -> list[str]:
        return list(self._open)

    async def aclose(self) -> None:
        """Close every session (after their queued calls)."""
        self._closed = True
        pagers, self._open = list(self._open.values()), OrderedDict()
        self.last.clear()
        await asyncio.gather(*(p.aclose() for p in pagers))

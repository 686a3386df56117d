"""The proxy's open sessions: one ``AsyncPager`` per session, opened on first use.

A request's session (``session_for``) is, in order:

1. ``x-pager-session``, as given;
2. the client's own conversation key: ``prompt_cache_key`` in the body, a
   ``session_id`` / ``session-id`` / ``thread-id`` header (Codex sends its
   conversation id in both); Claude Code's ``metadata.user_id`` names a
   ``session_id`` that a conversation shares with its subagents, so it is
   taken together with the conversation's root: a subagent is its own session;
3. else the root: a hash of the system prompt and the first user message in
   canonical form (``pager.core.canonical``), which an agent resends unchanged
   on every call (a cache mark on the first request does not split it).

So two conversations never share a session, even when their root is the same
(Codex's first message is an environment block, the same for every
conversation started in one directory on one day), and one never splits.

Sessions are kept open (opening one loads its history); past ``max_open`` the
least recently used idle one is closed. Calls for one session are serialised
by its ``AsyncPager``; different sessions run in parallel worker threads.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import orjson

from pager.aio import AsyncPager
from pager.errors import PagerError

log = logging.getLogger("pager.proxy")

__all__ = ["CLIENT_KEY_HEADERS", "SessionPool", "claude_session_id", "session_for", "session_name"]

SESSION_HEADER = "x-pager-session"
# headers a client names its conversation by (Codex: its conversation id, as session_id and session-id)
CLIENT_KEY_HEADERS = ("session_id", "session-id", "thread-id", "thread_id", "conversation_id", "conversation-id")
_LEGACY_USER_ID = re.compile(r"_session_([0-9A-Za-z-]{8,})$")


def session_name(seed: Any) -> str:
    """Return the session name for a seed (a root, or a client key with its kind)."""
    raw = orjson.dumps(list(seed), option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY, default=str)
    return "proxy-" + hashlib.sha256(raw).hexdigest()[:16]


def claude_session_id(request: Mapping[str, Any]) -> str | None:
    """Return the ``session_id`` Claude Code puts in ``metadata.user_id`` (JSON text, or the older flat form)."""
    meta = request.get("metadata")
    user = meta.get("user_id") if isinstance(meta, Mapping) else None
    if not isinstance(user, str) or not user:
        return None
    if user.startswith("{"):
        try:
            value = orjson.loads(user)
        except orjson.JSONDecodeError:
            return None
        sid = value.get("session_id") if isinstance(value, Mapping) else None
        return sid if isinstance(sid, str) and sid else None
    m = _LEGACY_USER_ID.search(user)  # "user_<hash>_account_<uuid>_session_<uuid>"
    return m.group(1) if m else None


def session_for(root: Any, request: Mapping[str, Any], headers: Mapping[str, str]) -> str:
    """Return the session of a request (see the module docstring); ``root`` is its dialect's seed."""
    named = headers.get(SESSION_HEADER)
    if named:
        return named
    key = request.get("prompt_cache_key")
    if isinstance(key, str) and key:
        return session_name(("prompt_cache_key", key))
    for h in CLIENT_KEY_HEADERS:
        value = headers.get(h)
        if value:
            return session_name(("client-session", value))
    sid = claude_session_id(request)
    if sid is not None:
        return session_name(("claude-session", sid, root))
    return session_name(root)


class SessionPool:
    """Open sessions of one store, by name. See the module docstring."""

    def __init__(self, store: str | os.PathLike[str], options: Mapping[str, Any], max_open: int = 256) -> None:
        self.store = store
        self.options = dict(options)
        self.max_open = max_open
        self._open: OrderedDict[str, AsyncPager] = OrderedDict()
        self._busy: dict[str, int] = {}
        self._opening: dict[str, asyncio.Lock] = {}
        self._closed = False
        self._warm: Any = None  # (store, index feeder) held open from ``warm`` to ``aclose``

    async def warm(self) -> None:
        """Pay the one-time costs before the first request: imports, the tokenizer, the store and its index.

        Measured on the first request of a fresh proxy: ~1.6 s of imports and
        ~0.3 s opening the index; held open here, the sessions share it.
        """
        def work() -> Any:
            import pager.pager  # noqa: F401 - the facade and everything it imports
            from pager.core.tokens import default_counter
            from pager.session import open_store
            from pager.storage.indexing import IndexFeeder

            default_counter().count("warm")
            store = open_store(self.store)
            try:
                return store, IndexFeeder(store)
            except BaseException:
                store.close()
                raise

        try:
            self._warm = await asyncio.to_thread(work)
        except PagerError as exc:  # the first request will say what is wrong with the store
            log.warning("could not open the store ahead of the first request: %s", exc)

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

    def idle(self) -> bool:
        """Return whether no session is acquired (no model call in flight)."""
        return not self._busy

    async def _evict(self) -> None:
        while len(self._open) > self.max_open:
            victim = next((n for n in self._open if n not in self._busy), None)
            if victim is None:
                return
            await self._open.pop(victim).aclose()

    def names(self) -> list[str]:
        return list(self._open)

    async def aclose(self) -> None:
        """Close every session (after their queued calls)."""
        self._closed = True
        pagers, self._open = list(self._open.values()), OrderedDict()
        await asyncio.gather(*(p.aclose() for p in pagers))
        if self._warm is not None:
            store, feeder = self._warm
            self._warm = None
            feeder.close()
            store.close()

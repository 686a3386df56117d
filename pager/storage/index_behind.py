"""The recall index's background commits (a mixin of ``PageIndex``): ``commit(wait=False)`` and the wait for it.

``PageIndex.commit(wait=False)`` takes the buffered pages as the batch to
commit, starts ``_commit_behind`` on it in a thread and returns; every later
use of the object that reads it or commits calls ``_join`` first
(``_guarded`` does, and ``delete``, ``clear``, ``close``, ``pending``,
``indexed_upto``), so what it sees is what it saw when the commit ran in the
caller's thread. ``add`` does not wait: what it adds goes to the next batch,
which the running commit never touches. The one read that need not wait is
``beyond_session`` when its answer is False both before and after the running
commit (``_nothing_beyond``): the calls of a long session ask it far more often
than they search (issue 23), and a commit takes tens of milliseconds. The
thread does not heal a damaged index (a rebuild reads the store through the
caller's connection): ``_join`` does, in the thread that waits, exactly as a
commit in that thread would have (``DiskMixin._guarded``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["BehindMixin"]


class BehindMixin:
    """Background commits of ``PageIndex`` (which provides ``_commit``, ``_guarded`` and the lock)."""

    _lock: threading.RLock
    _bg: threading.Thread | None
    _bg_failed: tuple[BaseException, int | None] | None
    _bg_keys: frozenset[str]
    _beyond: dict[tuple[int, tuple[str, ...]], bool]
    generation: int
    _seen_meta: bytes | None
    _alone: int | None
    # ``commit(wait=False)`` is offered (``IndexFeeder.flush`` asks for it where offered)
    commits_in_background = True

    # provided by PageIndex and DiskMixin (annotations only: this mixin comes first in PageIndex's bases)
    _commit: Callable[..., None]
    _guarded: Callable[[str, Callable[[], None]], None]
    _take: Callable[[], tuple[Any, Any, int, frozenset[str]]]
    _meta_bytes: Callable[[], bytes | None]

    def _start_behind(self, upto_page_id: int | None) -> bool:
        """Start a background commit; False when another thread's is still under way (commit here, then)."""
        with self._lock:
            if self._bg is not None:
                return False
            batch = self._take()  # what is buffered now; later adds wait for the next commit
            self._bg_keys = batch[3]
            t = threading.Thread(target=self._commit_behind, args=(upto_page_id, batch), name="pager-index-commit")
            t.start()
            self._bg = t  # under the lock: a use that takes it next finds a started thread
            return True

    def wait(self) -> None:
        """Wait for a background commit (``commit(wait=False)``); raise what it failed with, typed."""
        self._join()

    def _commit_behind(self, upto_page_id: int | None, batch: Any) -> None:
        # no healing here: a rebuild reads the store, whose connection is the caller's; ``_join`` heals
        try:
            self._commit(upto_page_id, batch)
        except BaseException as e:  # delivered by _join, in the thread that next uses the index
            self._bg_failed = (e, upto_page_id)

    def _nothing_beyond(self, readers: tuple[str, ...]) -> bool:
        """Return True when ``beyond_session`` for ``readers`` is False, as the running commit will leave it.

        Decided without waiting for (or locking out) the commit under way: the
        committed state said False (its answer is memoized per searcher
        generation), the commit adds no page any of ``readers`` may read (it
        can only delete or merge others away), it has not failed, and no other
        writer committed since that state (the commit loads what another writer
        committed before it took the writer, refresh or not): either the commit
        holds the writer on this very state, or ``meta.json`` is as it was when
        the searcher was loaded. False whenever it cannot tell: the caller then
        waits. Another process's commit landing after this check is one it
        would also have missed by landing a moment later.
        """
        bg = self._bg
        if bg is None or self._bg_failed is not None:
            return False  # nothing to wait for, or a failure the caller must see: the plain path
        keys = self._bg_keys  # set before ``_bg``: these are ``bg``'s pages' (checked again below)
        # read in this order (``_load_searcher`` writes them in the other): a meta.json seen
        # before the generation it goes with makes a new one look changed, never the reverse
        seen = self._seen_meta
        generation = self.generation
        if self._beyond.get((generation, readers)) is not False or not keys.isdisjoint(readers):
            return False
        # the commit holds the writer and built on this state (nobody else commits now), or no
        # commit landed since this state was loaded
        quiet = self._alone == generation or self._meta_bytes() == seen
        return quiet and self._bg is bg  # and no other commit was started meanwhile by another thread

    def _join(self) -> None:
        """Wait for a background commit; raise what it failed with, as ``commit`` would have.

        A thread that already holds the lock does not wait (the commit needs the
        lock to run: it runs once that thread lets go, as if that thread's call
        had come first).
        """
        if self._bg is None or self._lock._is_owned():  # type: ignore[attr-defined]
            return
        with self._lock:
            t = self._bg
        if t is None or t is threading.current_thread():
            return
        t.join()  # not under the lock: the commit holds it
        with self._lock:
            if self._bg is t:
                self._bg = None
            failed, self._bg_failed = self._bg_failed, None
        if failed is None:
            return
        error, upto = failed
        tries = [error]

        def again() -> None:  # the first try is the one that failed; a healed index commits again
            if tries:
                raise tries.pop()
            self._commit(upto)

        self._guarded("cannot commit the recall index", again)

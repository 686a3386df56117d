"""The recall index's background commits (a mixin of ``PageIndex``): ``commit(wait=False)`` and the wait for it.

``PageIndex.commit(wait=False)`` starts ``_commit_behind`` in a thread and
returns; every later use of the object calls ``_join`` first (``_guarded`` does,
and ``add``, ``delete``, ``clear``, ``close``, ``pending``, ``indexed_upto``), so
what it sees is what it saw when the commit ran in the caller's thread. The
thread does not heal a damaged index (a rebuild reads the store through the
caller's connection): ``_join`` does, in the thread that waits, exactly as a
commit in that thread would have (``DiskMixin._guarded``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["BehindMixin"]


class BehindMixin:
    """Background commits of ``PageIndex`` (which provides ``_commit``, ``_guarded`` and the lock)."""

    _lock: threading.RLock
    _bg: threading.Thread | None
    _bg_failed: tuple[BaseException, int | None] | None
    # ``commit(wait=False)`` is offered (``IndexFeeder.flush`` asks for it where offered)
    commits_in_background = True

    # provided by PageIndex and DiskMixin (annotations only: this mixin comes first in PageIndex's bases)
    _commit: Callable[[int | None], None]
    _guarded: Callable[[str, Callable[[], None]], None]

    def _start_behind(self, upto_page_id: int | None) -> bool:
        """Start a background commit; False when another thread's is still under way (commit here, then)."""
        with self._lock:
            if self._bg is not None:
                return False
            t = threading.Thread(target=self._commit_behind, args=(upto_page_id,), name="pager-index-commit")
            t.start()
            self._bg = t  # under the lock: a use that takes it next finds a started thread
            return True

    def wait(self) -> None:
        """Wait for a background commit (``commit(wait=False)``); raise what it failed with, typed."""
        self._join()

    def _commit_behind(self, upto_page_id: int | None) -> None:
        # no healing here: a rebuild reads the store, whose connection is the caller's; ``_join`` heals
        try:
            self._commit(upto_page_id)
        except BaseException as e:  # delivered by _join, in the thread that next uses the index
            self._bg_failed = (e, upto_page_id)

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

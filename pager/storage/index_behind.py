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

A commit's segment merges are not waited for by ``_join``. Tantivy merges
after a commit, in its own threads, and the writer (Tantivy's lock on the
folder) can only be let go once they end: 80-140 ms for a 1k-message
session's index, where the commit itself takes 10-20. The searcher is loaded
as the commit left the index, before the merges, so ``_join`` returns then;
the thread goes on waiting for the merges (``_settling``) with no lock of
ours held. A merge changes no answer only while nobody reloads meanwhile
(it drops deleted documents, which BM25's document count still includes),
so no reload follows one: ``DiskMixin._refresh`` loads a new searcher when
the opstamp in ``meta.json`` moved, which a commit does and a merge never
does. What comes next in this object and needs the writer or the folder
(``commit``, ``clear``, ``close``, a rebuild) waits for the merges first
(``_settled``), so the state a commit builds on is the same whenever the
merges ended; a background commit asked for meanwhile waits for them in its
own thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["BehindMixin"]

log = logging.getLogger("pager.index")


class BehindMixin:
    """Background commits of ``PageIndex`` (which provides ``_commit``, ``_guarded`` and the lock)."""

    _lock: threading.RLock
    _bg: threading.Thread | None  # a background commit whose searcher no use has waited for yet
    _bg_ready: threading.Event  # set by ``_bg`` once its searcher is loaded (or it failed)
    _settling: threading.Thread | None  # a background commit that may still wait for its merges
    _bg_failed: tuple[BaseException, int | None] | None
    _bg_keys: frozenset[str]
    _beyond: dict[tuple[int, tuple[str, ...]], bool]
    generation: int
    _seen_stamp: tuple[int, int] | None
    _alone: int | None
    # ``commit(wait=False)`` is offered (``IndexFeeder.flush`` asks for it where offered)
    commits_in_background = True

    # provided by PageIndex and DiskMixin (annotations only: this mixin comes first in PageIndex's bases)
    _commit: Callable[..., Any]
    _settle: Callable[[Any], None]
    _guarded: Callable[[str, Callable[[], None]], None]
    _take: Callable[[], tuple[Any, Any, int, frozenset[str]]]
    _meta_stamp: Callable[[], tuple[int, int] | None]

    def _start_behind(self, upto_page_id: int | None) -> bool:
        """Start a background commit; False when another thread's is still under way (commit here, then)."""
        with self._lock:
            if self._bg is not None:
                return False
            batch = self._take()  # what is buffered now; later adds wait for the next commit
            self._bg_keys = batch[3]
            # the one before may still wait for its merges: this commit waits for them in its thread
            before, self._settling = self._settling, None
            ready = threading.Event()
            t = threading.Thread(target=self._commit_behind, args=(upto_page_id, batch, before, ready),
                                 name="pager-index-commit")
            self._bg_ready = ready
            t.start()
            self._bg = t  # under the lock: a use that takes it next finds a started thread
            return True

    def wait(self) -> None:
        """Wait for a background commit (``commit(wait=False)``) and its merges; raise what it failed with, typed."""
        self._join()
        self._settled()

    def _commit_behind(self, upto_page_id: int | None, batch: Any, before: threading.Thread | None = None,
                       ready: threading.Event | None = None) -> None:
        # no healing here: a rebuild reads the store, whose connection is the caller's; ``_join`` heals
        try:
            if before is not None:
                before.join()  # its merges: the writer is free, and the state it left is final
            writer = self._commit(upto_page_id, batch)
        except BaseException as e:  # delivered by _join, in the thread that next uses the index
            self._bg_failed = (e, upto_page_id)
            return
        finally:
            if ready is not None:
                ready.set()
        try:
            self._settle(writer)
        except BaseException as e:  # the commit landed and its searcher is loaded: only its merges failed
            log.warning("recall index: waiting for merges failed: %s", e)

    def _settled(self) -> None:
        """Wait until no background commit of this object waits for merges (the writer and folder are free)."""
        t = self._settling
        if t is not None and t is not threading.current_thread():
            t.join()  # it takes no lock of ours: waiting under ``_lock`` is safe
            if self._settling is t:
                self._settling = None

    def _nothing_beyond(self, readers: tuple[str, ...]) -> bool:
        """Return True when ``beyond_session`` for ``readers`` is False, as the running commit will leave it.

        Decided without waiting for (or locking out) the commit under way: the
        committed state said False (its answer is memoized per searcher
        generation), the commit adds no page any of ``readers`` may read (it
        can only delete or merge others away), it has not failed, and no other
        writer committed since that state (the commit loads what another writer
        committed before it took the writer, refresh or not): either the commit
        holds the writer on this very state, or the opstamp in ``meta.json`` is
        the one it was when the searcher was loaded. False whenever it cannot tell: the caller then
        waits. Another process's commit landing after this check is one it
        would also have missed by landing a moment later.
        """
        bg = self._bg
        if bg is None or self._bg_failed is not None:
            return False  # nothing to wait for, or a failure the caller must see: the plain path
        keys = self._bg_keys  # set before ``_bg``: these are ``bg``'s pages' (checked again below)
        # read in this order (``_load_searcher`` writes them in the other): a meta.json seen
        # before the generation it goes with makes a new one look changed, never the reverse
        seen = self._seen_stamp
        generation = self.generation
        if self._beyond.get((generation, readers)) is not False or not keys.isdisjoint(readers):
            return False
        # the commit holds the writer and built on this state (nobody else commits now), or no
        # commit landed since this state was loaded
        quiet = self._alone == generation or self._meta_stamp() == seen
        return quiet and self._bg is bg  # and no other commit was started meanwhile by another thread

    def _join(self) -> None:
        """Wait for a background commit's searcher; raise what it failed with, as ``commit`` would have.

        Its merges are not waited for (``_settled`` does). A thread that
        already holds the lock does not wait (the commit needs the lock to
        run: it runs once that thread lets go, as if that thread's call had
        come first).
        """
        if self._bg is None or self._lock._is_owned():  # type: ignore[attr-defined]
            return
        with self._lock:
            t, ready = self._bg, self._bg_ready
        if t is None or t is threading.current_thread():
            return
        ready.wait()  # not under the lock: the commit holds it
        with self._lock:
            if self._bg is t:
                self._bg = None
                if t.is_alive():
                    self._settling = t
            failed, self._bg_failed = self._bg_failed, None
        if failed is None:
            return
        error, upto = failed
        tries = [error]

        def again() -> None:  # the first try is the one that failed; a healed index commits again
            if tries:
                raise tries.pop()
            self._settle(self._commit(upto))

        self._guarded("cannot commit the recall index", again)

"""The recall index's background and deferred commits (a mixin of ``PageIndex``): ``commit(wait=False)``,
``commit(defer=True)`` and the wait for them.

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

``commit(defer=True)`` (a demotion round's flush, issue 23) writes nothing: it
takes the buffered pages as a batch, joined to any batch deferred before, to be
committed by the first use that reads the index (``_settle``: a search,
``refresh``, ``len``, ``indexed_upto``, ``close``; ``wait``), or by the next
commit that runs (one Tantivy commit for all of them). Which pages a search
sees is therefore decided by the calls made, never by a thread's timing, and
it is what it was when each round committed at once; what is saved is the
commits themselves (~15-30 ms CPU each, whatever they hold), since most calls
of a long session do not search. A batch holding a page that anyone but its
own session may read, or ``DEFER_MAX`` pages, is committed at once in the
background instead: other processes see those as soon as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["BehindMixin", "DEFER_MAX"]

# A deferred batch this large is committed in the background at once (memory; a process killed
# before its next search loses it from the index only: the store re-feeds it on the next open).
DEFER_MAX = 256

_Batch = tuple[dict[int, Any], set[int], int, frozenset[str], bool]  # buffer, deletes, highest id, keys, wide


def _merge(old: _Batch, new: _Batch) -> _Batch:
    """Return ``old`` then ``new`` as one batch: what committing them one after the other leaves."""
    buffer, deletes = old[0], old[1]
    for pid in new[1]:
        buffer.pop(pid, None)
        deletes.add(pid)
    for pid, doc in new[0].items():
        buffer[pid] = doc
        deletes.discard(pid)
    return buffer, deletes, max(old[2], new[2]), old[3] | new[3], old[4] or new[4]


def _merge_upto(old: int | None, new: int | None, highest: int) -> int | None:
    """Return the watermark of two batches committed as one (None: the larger of the old one and the ids)."""
    if old is None and new is None:
        return None
    if old is None or new is None:
        return max(old or 0, new or 0, highest)
    return max(old, new)


class BehindMixin:
    """Background commits of ``PageIndex`` (which provides ``_commit``, ``_guarded`` and the lock)."""

    _lock: threading.RLock
    _bg: threading.Thread | None
    _bg_failed: tuple[BaseException, int | None] | None
    _bg_keys: frozenset[str]
    _deferred: _Batch | None  # pages to commit before the index is next read (``commit(defer=True)``)
    _deferred_upto: int | None
    _beyond: dict[tuple[int, tuple[str, ...]], bool]
    generation: int
    _seen_meta: bytes | None
    _alone: int | None
    # ``commit(wait=False)`` is offered (``IndexFeeder.flush`` asks for it where offered)
    commits_in_background = True
    # ``commit(defer=True)`` is offered (``IndexFeeder.flush(defer=True)``, a round's flush)
    commits_deferred = True

    # provided by PageIndex and DiskMixin (annotations only: this mixin comes first in PageIndex's bases)
    _commit: Callable[..., None]
    _guarded: Callable[..., None]
    _take: Callable[[], _Batch]
    _meta_bytes: Callable[[], bytes | None]

    def _claim(self, upto_page_id: int | None) -> tuple[_Batch, int | None]:
        """Return the batch a commit asked for now writes, and its watermark (under ``_lock``).

        The deferred batch, if any, then what is buffered now: one Tantivy commit for both.
        """
        batch = self._take()
        deferred, self._deferred = self._deferred, None
        if deferred is None:
            return batch, upto_page_id
        return _merge(deferred, batch), _merge_upto(self._deferred_upto, upto_page_id, batch[2])

    def _defer(self, upto_page_id: int | None) -> None:
        """Join what is buffered to the deferred batch; commit it in the background at once if it must not wait."""
        with self._lock:
            batch = self._take()
            if self._deferred is not None:
                upto_page_id = _merge_upto(self._deferred_upto, upto_page_id, batch[2])
                batch = _merge(self._deferred, batch)
            self._deferred, self._deferred_upto = batch, upto_page_id
            urgent = batch[4] or len(batch[0]) + len(batch[1]) >= DEFER_MAX
        if urgent:
            # a page other sessions may read is seen by them (other processes too) as soon as before
            self._join()
            if not self._start_behind(None):
                self._join()
                self._guarded("cannot commit the recall index", lambda: self._commit(None))

    @property
    def deferred(self) -> int:
        """Return how many pages (and deletions) wait in a deferred batch for the next read (no wait)."""
        d = self._deferred
        return 0 if d is None else len(d[0]) + len(d[1])

    def _settle(self) -> None:
        """Wait for a background commit, then commit the deferred batch (alone): a read shows both."""
        self._join()
        if self._deferred is None:
            return
        with self._lock:  # taken and committed under one hold: no other thread reads in between
            batch, self._deferred = self._deferred, None
            if batch is None:
                return
            upto = self._deferred_upto
            self._guarded("cannot commit the recall index", lambda: self._commit(upto, batch))

    def _start_behind(self, upto_page_id: int | None) -> bool:
        """Start a background commit; False when another thread's is still under way (commit here, then)."""
        with self._lock:
            if self._bg is not None:
                return False
            batch, upto_page_id = self._claim(upto_page_id)  # what is buffered now; later adds go to the next
            self._bg_keys = batch[3]
            t = threading.Thread(target=self._commit_behind, args=(upto_page_id, batch), name="pager-index-commit")
            t.start()
            self._bg = t  # under the lock: a use that takes it next finds a started thread
            return True

    def wait(self) -> None:
        """Wait for a background commit (``commit(wait=False)``) and commit a deferred batch; raise failures typed."""
        self._settle()

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
        if not self._deferred_unread(readers):
            return False
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

    def _deferred_unread(self, readers: tuple[str, ...]) -> bool:
        """Return True when the deferred batch holds no page any of ``readers`` may read (or there is none)."""
        d = self._deferred
        return d is None or d[3].isdisjoint(readers)

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

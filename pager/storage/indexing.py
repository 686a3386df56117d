"""Feeding the recall index from the store: the index is derived, so this is all it takes.

``IndexFeeder`` keeps one session's index current: pages are added after the
store committed them and the index is committed every ``COMMIT_EVERY`` pages
(and before any search that could need them, and after a demotion round).
Each commit records the highest page id it holds; on open the feeder catches
up from that watermark, so a crash between the store's commit and the
index's only means the index catches up on the next open. ``feed_index``
also serves ``Pager.reindex`` and ``pager reindex``.
"""

from __future__ import annotations

import logging
from collections.abc import Container
from typing import Any, Sequence

from pager.core.messages import message_text
from pager.errors import RecallIndexError, StoreError
from pager.core.pages import PageRecord
from pager.storage.base import RecallIndex, Store
from pager.storage.index import IndexDoc

__all__ = [
    "COMMIT_EVERY", "IndexFeeder", "feed_index", "heal_index", "index_doc", "page_ids_after", "present_pages",
    "search_ids",
]

log = logging.getLogger("pager.index")

# A Tantivy commit costs ~100 ms: batch them. The store is the source of
# truth, so a crash only means the index catches up on the next open.
COMMIT_EVERY = 64


def index_doc(rec: PageRecord, msg: Any, text: str | None = None) -> IndexDoc:
    """Return the index document for a stored page and its message (or its text, when known)."""
    return IndexDoc(
        page_id=rec.id, session=rec.session, step=rec.step, kind=rec.kind,
        text=message_text(msg) if text is None else text, labels=rec.labels, path=rec.path,
        handle=rec.handle, scope=rec.scope or "session", owner=rec.owner or "", pool=rec.pool,
    )


def feed_index(store: Store, index: RecallIndex, after: int = 0, progress: Any = None,
               held: Container[int] = ()) -> int:
    """Index every stored page with id > ``after`` and commit; return how many.

    ``held``: pages already added to ``index`` and not committed (another session's of this process,
    ``buffered_session_ids``): they are left to the commit that will take them, and the watermark this
    commit records stops below the first of them; when every page after ``after`` is held, nothing is
    committed.
    ``progress(done, total)`` is called after each batch when given.
    """
    total = store.count_pages()
    batch: list[IndexDoc] = []
    done = 0
    last = after
    first_held: int | None = None
    start = after
    ids = page_ids_after(store, after) if held else None
    if ids is not None:
        # read no held page back from the store: a proxy's new session found every page of the sessions
        # opened before it held, and read them all (messages decoded) to skip them (issue 23)
        first_held = next((i for i in ids if i in held), None)
        todo = next((i for i in ids if i not in held), None)
        if todo is None:
            if progress:
                progress(0, total)
            return 0
        start = todo - 1
    for rec, msg in store.iter_pages(start):
        if rec.id in held:
            if first_held is None:
                first_held = rec.id
            continue
        batch.append(index_doc(rec, msg))
        last = rec.id
        if len(batch) >= 1000:
            done += index.add(batch)
            batch = []
            if progress:
                progress(done, total)
    if batch:
        done += index.add(batch)
    if done or first_held is None:
        index.commit(upto_page_id=last if first_held is None else min(last, first_held - 1))
    if progress:
        progress(done, total)
    return done


def heal_index(store: Store, index: RecallIndex, progress: Any = None) -> int:
    """Bring ``index`` in line with ``store``: catch up from its watermark, fill any gap, drop phantoms.

    The watermark is the highest page id a commit covered; with several
    writers, a page below it may still be missing (its writer died before its
    own commit). When the index holds fewer pages than the store, the missing
    ones are found by id and indexed. When it holds more, the extra ones are
    *phantoms*: documents committed by a writer killed before its store
    transaction committed (no page behind them); they are deleted. Returns how
    many pages were indexed.
    """
    done = 0
    upto = index.indexed_upto()
    top = store.max_page_id()
    # pages this very index object holds uncommitted that no other session may read: another session
    # of this process recorded them (a proxy's), and its next commit takes them. Fed and committed here,
    # every session a proxy opened paid a Tantivy commit (~30 ms) while the sessions before it had not
    # reached theirs (issue 23). A page other sessions may read (a note shared with a pool, say) is
    # committed here as before, so that the session opening now can recall it
    buffered = getattr(index, "buffered_session_ids", None)
    held = {pid for pid in buffered() if pid <= top} if buffered is not None and upto < top else set()
    if upto < top:
        done += feed_index(store, index, upto, progress, held=held)
    total = store.count_pages()
    if len(index) + len(held) < total and hasattr(index, "page_ids"):
        have = index.page_ids()
        batch = [index_doc(rec, msg) for rec, msg in store.iter_pages(0) if rec.id not in have and rec.id not in held]
        if batch:
            log.info("recall index: %d pages were missing below the watermark; indexing them", len(batch))
            index.add(batch)
            index.commit()
            done += len(batch)
    if len(index) > store.count_pages() and hasattr(index, "page_ids"):
        # Under the store's write lock: another writer's pages whose index commit came before its
        # store commit (a large assemble commits the index every COMMIT_EVERY pages) are committed
        # by the time we hold it, so whatever is still missing from the store is a phantom.
        with store.transaction():
            have = index.page_ids()
            phantoms = have - present_pages(store, sorted(have))
            if phantoms:
                log.warning("recall index: %d documents had no page behind them (a writer killed "
                            "mid-commit); removing them", len(phantoms))
                index.delete(sorted(phantoms))
                index.commit()
    return done


def search_ids(index: RecallIndex, terms: Sequence[str], stored: Container[int] = (),
               **kw: Any) -> list[tuple[int, float]]:
    """Return ``(page id, score)`` of ``index.search_terms(terms, **kw)``, best first.

    Through the index's ``search_ids`` when it has one (no document read
    back: the caller holds the text; ``stored``, pages the caller knows the
    store has, are not checked against it); any other ``RecallIndex`` is
    asked for its hits.
    """
    fn = getattr(index, "search_ids", None)
    if fn is not None:
        return list(fn(terms, stored=stored, **kw))
    return [(h.page_id, h.score) for h in index.search_terms(terms, **kw)]


def page_ids_after(store: Store, after: int) -> list[int] | None:
    """Return the ids of ``store``'s pages with id > ``after``, ascending; None when the store cannot say cheaply."""
    fn = getattr(store, "page_ids_after", None)
    return None if fn is None else list(fn(after))


def present_pages(store: Store, page_ids: Sequence[int]) -> set[int]:
    """Return which of ``page_ids`` ``store`` holds (one query where the store offers ``present_pages``)."""
    fn = getattr(store, "present_pages", None)
    if fn is not None:
        return set(fn(page_ids))
    out = set()
    for pid in page_ids:
        try:
            store.load_pages([pid])
        except StoreError:
            continue
        out.add(pid)
    return out


class _Source:
    """What a ``PageIndex`` needs of its store to heal itself: a rebuild, and which hits are real pages."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def rebuild(self, index: RecallIndex) -> int:
        return feed_index(self.store, index, 0)

    def present(self, page_ids: Sequence[int]) -> set[int]:
        return present_pages(self.store, page_ids)


class IndexFeeder:
    """One open index, kept current with the store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.index = store.open_index()
        self._pending = 0
        self._upto = 0
        self._low: int | None = None  # the lowest page id added since the last commit
        self._source = _Source(store)
        bind = getattr(self.index, "bind_source", None)
        if bind is not None:
            bind(self._source)  # a damaged index rebuilds itself from this store, at any call
        try:
            # derived data: bring it up to date with the store (it may be missing,
            # behind after a crash between the two commits, or damaged)
            heal_index(store, self.index)
        except RecallIndexError as exc:
            log.warning("recall index unusable (%s); rebuilding it from the store", exc)
            try:
                self.index.clear()
                feed_index(store, self.index, 0)
            except BaseException:
                self._unbind()
                self.index.close()
                raise
        except BaseException:
            self._unbind()
            self.index.close()
            raise

    def _unbind(self) -> None:
        unbind = getattr(self.index, "unbind_source", None)
        if unbind is not None:
            unbind(self._source)

    def add(self, docs: Sequence[IndexDoc]) -> None:
        """Add documents of pages the store has committed; commit every ``COMMIT_EVERY``."""
        if not docs:
            return
        self.index.add(docs)
        self._pending += len(docs)
        ids = [d.page_id for d in docs]
        self._upto = max(self._upto, max(ids))
        self._low = min(ids) if self._low is None else min(self._low, min(ids))
        if self._pending >= COMMIT_EVERY:
            self.flush()

    def forget(self, page_ids: Sequence[int]) -> None:
        """Drop documents of pages whose store transaction rolled back (their ids may be reused)."""
        if page_ids:
            self.index.delete(page_ids)
            self.index.commit(upto_page_id=self.index.indexed_upto())
            self._pending, self._low = 0, None

    def buffers(self, upto: int | None = None) -> bool:
        """Return whether a page added since the last commit may have an id up to ``upto`` (None: any id).

        A round asks before committing the pages it demoted: what it left out
        of the prompt is searchable already when every page added since is
        newer (the working set at the tail), and a commit with the merges after
        it costs ~40 ms of CPU at 50,000 pages (issue 23).
        """
        if not self._pending:
            return False
        return upto is None or self._low is None or self._low <= upto

    def flush(self, wait: bool = False) -> None:
        """Commit what was added, recording the highest page id it holds as the watermark.

        Sessions of one store in one process share the index (and its buffer):
        when another session's commit already took our pages, there is nothing
        to commit, and a Tantivy commit costs tens of milliseconds. An index
        that offers it commits in the background unless ``wait``
        (``PageIndex.commit``: every later use of it waits for that commit).
        """
        if self._pending:
            if getattr(self.index, "pending", 1):
                upto = max(self._upto, self.index.indexed_upto())
                if not wait and getattr(self.index, "commits_in_background", False):
                    # off the caller's path; every later use of the index waits for it (PageIndex.commit)
                    self.index.commit(upto_page_id=upto, wait=False)
                else:
                    self.index.commit(upto_page_id=upto)
            self._pending, self._low = 0, None
        if wait:
            join = getattr(self.index, "wait", None)
            if join is not None:
                join()  # an earlier flush's background commit too: it fails here, not after the store is unbound

    def rebuild(self) -> int:
        """Rebuild the index from the store outright; return the pages indexed."""
        self.flush(wait=True)  # pending adds would otherwise outlive the clear
        self.index.clear()
        feed_index(self.store, self.index, 0)
        return len(self.index)

    def close(self) -> None:
        try:
            self.flush(wait=True)  # while this store is bound: a damaged index heals from it
        finally:
            self._unbind()
            self.index.close()

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

from typing import Any, Sequence

from pager.core.messages import message_text
from pager.core.pages import PageRecord
from pager.storage.base import RecallIndex, Store
from pager.storage.index import IndexDoc

__all__ = ["COMMIT_EVERY", "IndexFeeder", "feed_index", "index_doc"]

# A Tantivy commit costs ~100 ms: batch them. The store is the source of
# truth, so a crash only means the index catches up on the next open.
COMMIT_EVERY = 64


def index_doc(rec: PageRecord, msg: Any, text: str | None = None) -> IndexDoc:
    """Return the index document for a stored page and its message (or its text, when known)."""
    return IndexDoc(
        page_id=rec.id, session=rec.session, step=rec.step, kind=rec.kind,
        text=message_text(msg) if text is None else text, labels=rec.labels, path=rec.path,
        handle=rec.handle, scope=rec.scope or "session", owner=rec.owner or "",
    )


def feed_index(store: Store, index: RecallIndex, after: int = 0, progress: Any = None) -> int:
    """Index every stored page with id > ``after`` and commit; return how many.

    ``progress(done, total)`` is called after each batch when given.
    """
    total = store.count_pages()
    batch: list[IndexDoc] = []
    done = 0
    last = after
    for rec, msg in store.iter_pages(after):
        batch.append(index_doc(rec, msg))
        last = rec.id
        if len(batch) >= 1000:
            done += index.add(batch)
            batch = []
            if progress:
                progress(done, total)
    if batch:
        done += index.add(batch)
    index.commit(upto_page_id=last)
    if progress:
        progress(done, total)
    return done


class IndexFeeder:
    """One open index, kept current with the store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.index = store.open_index()
        self._pending = 0
        self._upto = 0
        try:
            # derived data: bring it up to date with the store (it may be missing,
            # or behind after a crash between the two commits)
            if self.index.indexed_upto() < store.max_page_id():
                feed_index(store, self.index, self.index.indexed_upto())
        except BaseException:
            self.index.close()
            raise

    def add(self, docs: Sequence[IndexDoc]) -> None:
        """Add documents of pages the store has committed; commit every ``COMMIT_EVERY``."""
        if not docs:
            return
        self.index.add(docs)
        self._pending += len(docs)
        self._upto = max(self._upto, max(d.page_id for d in docs))
        if self._pending >= COMMIT_EVERY:
            self.flush()

    def forget(self, page_ids: Sequence[int]) -> None:
        """Drop documents of pages whose store transaction rolled back (their ids may be reused)."""
        if page_ids:
            self.index.delete(page_ids)
            self.index.commit(upto_page_id=self.index.indexed_upto())
            self._pending = 0

    def flush(self) -> None:
        """Commit what was added, recording the highest page id it holds as the watermark."""
        if self._pending:
            self.index.commit(upto_page_id=max(self._upto, self.index.indexed_upto()))
            self._pending = 0

    def rebuild(self) -> int:
        """Rebuild the index from the store outright; return the pages indexed."""
        self.flush()  # pending adds would otherwise outlive the clear
        self.index.clear()
        feed_index(self.store, self.index, 0)
        return len(self.index)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self.index.close()

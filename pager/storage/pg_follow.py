"""The other recall index for PostgreSQL: a Tantivy index in this process, following the change feed.

Theory of operation
-------------------
``PostgresStore(dsn, index="tantivy")`` makes ``open_index()`` return a
``FeedIndex``: an in-memory ``PageIndex`` (the SQLite store's index, so the
same ranking and sub-millisecond queries) that reads ``store.changes(after)``
— pages in commit order, numbered by the feed — from where it stopped. It
catches up when opened and before a search when its last poll is older than
``POLL_EVERY`` (a quarter second), so a page another host committed is
searchable here within that; pages this process records are searchable at once. Pages this process records are
also added directly (the feed brings them again later; ``PageIndex.add``
replaces a page id it already holds, so nothing is doubled).

One follower serves every session opened on the same store object (the
store shuts it down when it closes). The price is per process: when first
opened it indexes every page of the store, and it holds them all in memory. That suits stores of up to some hundred thousand
pages; past that the index of record (``PgIndex``) needs no warm-up at all.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Container, Iterable, Sequence
from typing import Any

from pager.errors import RecallIndexError, StoreError
from pager.storage.index import Hit, IndexDoc, PageIndex
from pager.storage.indexing import index_doc

__all__ = ["FeedIndex"]

_BATCH = 1000
# A search polls the feed when the last poll is older than this: a round trip
# per query would cost more than the query (measured ~3 ms against ~0.4 ms).
POLL_EVERY = 0.25


class FeedIndex:
    """A ``RecallIndex`` over a ``PostgresStore``, kept current from its change feed."""

    def __init__(self, store: Any) -> None:  # a PostgresStore (not imported: it imports this module)
        self._store = store
        self._index = PageIndex(None)
        self._feed = 0  # the last feed number applied
        self._max_id = 0
        self._lock = threading.Lock()
        self._polled = 0.0
        self.sync()

    def sync(self) -> int:
        """Index every page committed since the last sync; return how many."""
        done = 0
        with self._lock:
            self._polled = time.monotonic()
            try:
                while True:
                    got = self._store.changes(self._feed, _BATCH)
                    if not got:
                        break
                    self._index.add([index_doc(rec, msg) for _seq, rec, msg in got])
                    self._feed = got[-1][0]
                    self._max_id = max(self._max_id, max(rec.id for _seq, rec, _m in got))
                    done += len(got)
            except StoreError as exc:
                raise RecallIndexError(f"cannot follow the store's change feed: {exc}") from exc
            if done:
                self._index.commit()
        return done

    def _maybe_sync(self) -> None:
        if time.monotonic() - self._polled >= POLL_EVERY:
            self.sync()

    # -- the RecallIndex protocol --------------------------------------------------

    def add(self, docs: Sequence[IndexDoc]) -> int:
        """Index pages this process just recorded (searchable before the feed brings them)."""
        with self._lock:
            return self._index.add(docs)

    def commit(self, upto_page_id: int | None = None) -> None:
        with self._lock:
            self._index.commit()

    def indexed_upto(self) -> int:
        """Return the highest page id the feed has delivered (everything committed below it is in)."""
        self.sync()
        return self._max_id

    def search(
        self, query: str, *, session: str, k: int = 5, exclude: Collection[int] = (),
        kinds: Collection[str] | None = None, cross_session: bool = False, min_score: float = 0.0,
        audiences: Collection[str] = (),
    ) -> list[Hit]:
        self._maybe_sync()
        return self._index.search(query, session=session, k=k, exclude=exclude, kinds=kinds,
                                  cross_session=cross_session, min_score=min_score, audiences=audiences)

    def search_terms(
        self, terms: Iterable[str], *, session: str, k: int = 5, exclude: Collection[int] = (),
        kinds: Collection[str] | None = None, cross_session: bool = False, min_score: float = 0.0,
        audiences: Collection[str] = (),
    ) -> list[Hit]:
        self._maybe_sync()
        return self._index.search_terms(terms, session=session, k=k, exclude=exclude, kinds=kinds,
                                        cross_session=cross_session, min_score=min_score, audiences=audiences)

    def search_ids(
        self, terms: Iterable[str], *, session: str, k: int = 5, exclude: Collection[int] = (),
        kinds: Collection[str] | None = None, cross_session: bool = False, min_score: float = 0.0,
        audiences: Collection[str] = (), stored: Container[int] = (),
    ) -> list[tuple[int, float]]:
        """Return ``(page id, score)`` of what ``search_terms`` finds, reading no document back."""
        self._maybe_sync()
        return self._index.search_ids(terms, session=session, k=k, exclude=exclude, kinds=kinds,
                                      cross_session=cross_session, min_score=min_score, audiences=audiences,
                                      stored=stored)

    def delete(self, page_ids: Iterable[int]) -> None:
        with self._lock:
            self._index.delete(page_ids)

    def page_ids(self) -> set[int]:
        self.sync()
        return self._index.page_ids()

    def clear(self) -> None:
        """Drop everything and follow the feed from its start again."""
        with self._lock:
            self._index.clear()
            self._feed = self._max_id = 0

    def close(self) -> None:
        """Nothing: the follower is shared by the store's sessions; the store shuts it down."""

    def shutdown(self) -> None:
        """Release the index (the store calls this when it closes)."""
        self._index.close()

    def __len__(self) -> int:
        """Return the pages indexed, after catching up (so it is never behind a count taken before)."""
        self.sync()
        return len(self._index)

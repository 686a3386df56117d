"""The Store protocol: what the facade needs of a durable store, over frozen values.

A store keeps every original message of every session forever (pages are only
ever demoted in a prompt, never deleted here), the branches of each session's
history, session state, pins, notes and events. Three stores implement it:
``pager.storage.sqlite.SQLiteStore`` (the default, one file per folder),
``pager.storage.memory.MemoryStore`` (``pager.open(":memory:")``, for tests and
throwaway sessions) and, as an optional extra, PostgreSQL. Each passes the one
conformance suite in ``pager.testing`` — a third-party store runs it too.

Contract, in brief:

- ``transaction()`` is a context manager for one write transaction, and
  re-entrant: calls inside an open transaction join it. The facade wraps one
  ``assemble`` in one transaction, so what it records, the statistics it
  updates and the session state it saves commit together or not at all.
- Page ids are positive, unique in the store and grow with insertion order.
- ``record`` appends pages to a branch (forking a new branch that shares the
  parent's first ``fork_seq`` pages when the caller's history diverged) and
  returns the new ids in order. ``record_aside`` stores pages of no branch:
  pins, notes and handoffs, so one recall surface finds them too.
- Every write to a session (``record``, ``save_state``, ``add_note``,
  ``add_pin``) raises its version, read with ``lock_session`` inside a
  transaction; that is how a second writer of the same session notices the
  first and catches up instead of duplicating its pages.
- Reading an unknown page id raises ``StoreError``; an unknown handle reads as
  ``None``. Errors of the underlying database are translated into the
  ``PagerError`` tree (``StoreError`` and its subclasses) at the store.
- ``branch_columns(branch)``, optional: the branch's pages as ``PageColumns``
  (what ``load_pages`` of its ids gives, as columns). A reopen uses it when a
  store has it (``SQLiteStore``: the snapshot its last close kept, and one
  query for the pages it does not cover; no object per page) and builds the
  columns from ``load_pages`` otherwise (``branch_columns`` below).
- ``save_snapshot(session, version, history)``, optional: keep a snapshot
  of the session's mirror, at close, for the next reopen (derived data: the
  store validates it on open and falls back to its rows).
- ``open_index()`` returns the recall index that belongs to this store (the
  index is derived data: it can be dropped and rebuilt from ``iter_pages``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, ContextManager, Iterator, Protocol, Sequence, runtime_checkable

import attrs

from pager.core.pages import SCOPES, NewPage, PageColumns, PageRecord, StatUpdate

if TYPE_CHECKING:  # pragma: no cover
    from pager.core.pools import PoolAcl
    from pager.storage.index import Hit, IndexDoc

__all__ = [
    "SCOPES",
    "Branch",
    "Event",
    "NewPage",
    "PageColumns",
    "PageRecord",
    "RecallIndex",
    "StatUpdate",
    "Store",
    "TimelineEntry",
    "branch_columns",
    "is_store",
]



@attrs.frozen(slots=True)
class Branch:
    """One branch of a session's history: ``parent`` shares its first ``fork_seq`` pages."""

    id: int
    parent: int | None
    fork_seq: int


@attrs.frozen(slots=True)
class Event:
    """A recorded state transition (a rollover intent, a rollover, ...) and its JSON payload."""

    kind: str
    payload: Any
    created: float


@attrs.frozen(slots=True)
class TimelineEntry:
    """A pin or a note, in creation order (the invariants file is append-only)."""

    created: float
    kind: str  # "pin" or "note"
    id: int
    text: str


@runtime_checkable
class RecallIndex(Protocol):
    """The recall index a store provides: derived data, fed from the store, rebuildable."""

    def add(self, docs: Sequence["IndexDoc"]) -> int: ...

    def commit(self, upto_page_id: int | None = None) -> None: ...

    def indexed_upto(self) -> int: ...

    def search(
        self, query: str, *, session: str, k: int = 5, cross_session: bool = False, audiences: Sequence[str] = ()
    ) -> list["Hit"]: ...

    def search_terms(
        self, terms: Sequence[str], *, session: str, k: int = 5, exclude: Any = (), min_score: float = 0.0,
        cross_session: bool = False, audiences: Sequence[str] = (),
    ) -> list["Hit"]: ...

    def clear(self) -> None: ...

    def close(self) -> None: ...

    def __len__(self) -> int: ...


@runtime_checkable
class Store(Protocol):
    """A durable page store. See the module docstring for the contract."""

    # -- lifecycle and settings
    def close(self) -> None: ...

    def transaction(self) -> ContextManager[None]: ...

    def setting(self, key: str, default: str | None = None) -> str | None: ...

    def set_setting(self, key: str, value: str) -> None: ...

    def open_index(self) -> RecallIndex: ...

    # -- sessions and branches
    def sessions(self) -> list[str]: ...

    def has_session(self, session: str) -> bool: ...

    def ensure_session(self, session: str) -> int: ...

    def branches(self, session: str) -> list[Branch]: ...

    def branch_page_ids(self, branch: int) -> list[int]: ...

    def lock_session(self, session: str) -> int:
        """Return the session's version, locking the session against other writers until commit.

        Called inside ``transaction()``. The version grows with every write to
        the session (pages, state, pins, notes), so a writer that finds a
        version it did not write knows another writer changed the session.
        """
        ...

    def load_state(self, session: str) -> Any: ...

    def save_state(self, session: str, state: Any) -> None: ...

    # -- pages
    def record(
        self, session: str, branch: int, fork: tuple[int, int] | None, start_seq: int, pages: Sequence[NewPage]
    ) -> tuple[int, list[int]]: ...

    def record_aside(self, session: str, seq: int, pages: Sequence[NewPage]) -> list[int]:
        """Record pages that belong to no branch (pins, notes, handoffs); return their ids.

        They are searchable, expandable and promotable like any page, but no
        history loads them. ``seq`` is the history position they were written at.
        """
        ...

    def aside_pages(self, session: str) -> list[int]:
        """Return the ids of the session's pages of no branch (pins, notes, handoffs), oldest first."""
        ...

    def load_pages(self, ids: Sequence[int]) -> list[PageRecord]: ...

    def page_by_handle(self, session: str, handle: str) -> int | None: ...

    def message(self, page_id: int) -> tuple[str, dict[str, Any]]: ...

    def iter_pages(self, after_id: int = 0, batch: int = 500) -> Iterator[tuple[PageRecord, dict[str, Any]]]: ...

    def max_page_id(self) -> int: ...

    def count_pages(self, session: str | None = None) -> int: ...

    def update_stats(self, stats: Sequence[StatUpdate], session: str | None = None) -> None:
        """Store what later messages changed of pages (last reference, reference count, staleness).

        ``session``: the session every page of ``stats`` belongs to, when the
        caller knows it (a store may spare a lookup a page with it).
        """
        ...

    def pages_by_handle(self, handle: str) -> list[int]:
        """Return the ids of the pages with ``handle`` in any session, newest first (callers check access)."""
        ...

    def set_scope(self, page_id: int, scope: str, pool: str | None) -> None:
        """Move a page to another scope and pool (raises its session's version)."""
        ...

    # -- pools
    def set_pool_acl(self, pool: str, readers: Sequence[str], writers: Sequence[str]) -> None: ...

    def pool_acls(self) -> dict[str, "PoolAcl"]: ...

    # -- pins, notes, events
    def add_note(self, session: str, text: str, step: int) -> None: ...

    def notes(self, session: str) -> list[str]: ...

    def add_pin(self, session: str, text: str) -> None: ...

    def pins(self, session: str) -> list[str]: ...

    def timeline(self, session: str) -> list[TimelineEntry]: ...

    def add_event(self, session: str, kind: str, payload: Any) -> None: ...

    def events(self, session: str, kind: str | None = None) -> list[Event]: ...


def is_store(where: object) -> bool:
    """Return whether ``where`` is a ``Store`` object rather than a place naming one (a path or URL).

    A path or string is answered without the protocol's runtime check, which walks
    every method the protocol names (~70 us a call; ``pager.open`` asked twice).
    """
    if isinstance(where, (str, bytes, os.PathLike)):
        return False
    return isinstance(where, Store)


def branch_columns(store: Store, branch: int) -> PageColumns:
    """Return the pages of ``branch`` in order as columns: the store's own ``branch_columns`` if it has one."""
    own = getattr(store, "branch_columns", None)
    if own is not None:
        return own(branch)  # type: ignore[no-any-return]
    return PageColumns.of(store.load_pages(store.branch_page_ids(branch)))

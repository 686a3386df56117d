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
  returns the new ids in order.
- Reading an unknown page id raises ``StoreError``; an unknown handle reads as
  ``None``. Errors of the underlying database are translated into the
  ``PagerError`` tree (``StoreError`` and its subclasses) at the store.
- ``open_index()`` returns the recall index that belongs to this store (the
  index is derived data: it can be dropped and rebuilt from ``iter_pages``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ContextManager, Iterator, Mapping, Protocol, Sequence, runtime_checkable

import attrs

if TYPE_CHECKING:  # pragma: no cover
    from pager.storage.index import Hit, IndexDoc

__all__ = [
    "SCOPES",
    "Branch",
    "Event",
    "NewPage",
    "PageRecord",
    "RecallIndex",
    "StatUpdate",
    "Store",
    "TimelineEntry",
]

# Who may see a page: its session only, its owner only, or every session of the store.
SCOPES = ("session", "private", "shared")


def _tuple(value: Any) -> tuple[str, ...]:
    return tuple(value or ())


@attrs.frozen(slots=True)
class NewPage:
    """A page to record: a classified neutral message and the figures the scheduler keeps.

    ``message`` is the neutral message encoded with ``orjson`` (sorted keys);
    ``hash`` is the digest of those bytes (``pager.core.pages.hash_bytes``).
    """

    hash: str
    kind: str
    role: str
    step: int
    tokens: int
    stub_tokens: int
    chars: int
    handle: str
    message: bytes
    call_id: str | None = None
    call_ids: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    tool_name: str | None = None
    path: str | None = None
    labels: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    scope: str = "session"
    owner: str | None = None


@attrs.frozen(slots=True)
class PageRecord:
    """A stored page, without its message bytes (read those with ``Store.message``)."""

    id: int
    session: str
    hash: str
    kind: str
    role: str
    seq: int
    step: int
    tokens: int
    stub_tokens: int
    chars: int
    call_id: str | None
    call_ids: tuple[str, ...]
    tool_name: str | None
    path: str | None
    stale: bool
    labels: tuple[str, ...]
    last_ref: int
    ref_count: int
    scope: str
    handle: str
    owner: str | None = None


@attrs.frozen(slots=True)
class StatUpdate:
    """What later messages changed of a page: its last reference, reference count, staleness."""

    page_id: int
    last_ref: int
    ref_count: int
    stale: bool


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

    def search(self, query: str, *, session: str, k: int = 5, cross_session: bool = False) -> list["Hit"]: ...

    def search_terms(
        self, terms: Sequence[str], *, session: str, k: int = 5, exclude: Any = (), min_score: float = 0.0
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

    def load_state(self, session: str) -> Any: ...

    def save_state(self, session: str, state: Any) -> None: ...

    # -- pages
    def record(
        self, session: str, branch: int, fork: tuple[int, int] | None, start_seq: int, pages: Sequence[NewPage]
    ) -> tuple[int, list[int]]: ...

    def load_pages(self, ids: Sequence[int]) -> list[PageRecord]: ...

    def page_by_handle(self, session: str, handle: str) -> int | None: ...

    def message(self, page_id: int) -> tuple[str, dict[str, Any]]: ...

    def iter_pages(self, after_id: int = 0, batch: int = 500) -> Iterator[tuple[PageRecord, dict[str, Any]]]: ...

    def max_page_id(self) -> int: ...

    def count_pages(self, session: str | None = None) -> int: ...

    def update_stats(self, stats: Sequence[StatUpdate]) -> None: ...

    # -- pins, notes, events
    def add_note(self, session: str, text: str, step: int) -> None: ...

    def notes(self, session: str) -> list[str]: ...

    def add_pin(self, session: str, text: str) -> None: ...

    def pins(self, session: str) -> list[str]: ...

    def timeline(self, session: str) -> list[TimelineEntry]: ...

    def add_event(self, session: str, kind: str, payload: Any) -> None: ...

    def events(self, session: str, kind: str | None = None) -> list[Event]: ...


def page_record(values: Mapping[str, Any]) -> PageRecord:
    """Build a ``PageRecord`` from a row mapping as stores read it (JSON columns decoded here)."""
    import orjson

    def seq(v: Any) -> tuple[str, ...]:
        if isinstance(v, (bytes, str)):
            return tuple(orjson.loads(v or "[]"))
        return tuple(v or ())

    return PageRecord(
        id=int(values["id"]), session=values["session"], hash=values["hash"], kind=values["kind"],
        role=values["role"], seq=int(values["seq"]), step=int(values["step"]), tokens=int(values["tokens"]),
        stub_tokens=int(values["stub_tokens"]), chars=int(values["chars"]), call_id=values["call_id"],
        call_ids=seq(values["call_ids"]), tool_name=values["tool_name"], path=values["path"],
        stale=bool(values["stale"]), labels=seq(values["labels"]), last_ref=int(values["last_ref"]),
        ref_count=int(values["ref_count"]), scope=values["scope"] or "session", handle=values["handle"],
        owner=values.get("owner"),
    )

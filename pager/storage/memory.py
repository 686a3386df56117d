"""An in-memory store: the Store protocol over dicts, for tests and throwaway sessions.

``pager.open(":memory:")`` uses it. Nothing survives ``close()``. Writes take
one process-local lock, and a transaction is undone on error by restoring a
snapshot of the tables it touched, so the contract (all or nothing, re-entrant)
holds exactly as on SQLite; the conformance suite in ``pager.testing`` runs
against both.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from typing import Any, Iterator, Sequence

import attrs
import orjson

from pager.core.aside import ASIDE_KINDS
from pager.core.pools import PoolAcl
from pager.errors import StoreError
from pager.storage.base import (
    Branch,
    Event,
    NewPage,
    PageRecord,
    StatUpdate,
    TimelineEntry,
)

__all__ = ["MemoryStore"]


class MemoryStore:
    """A store that lives in this process only (``pager.open(":memory:")``)."""

    def __init__(self) -> None:
        self.path = None
        self._lock = threading.RLock()
        self._depth = 0
        self._closed = False
        self._settings: dict[str, str] = {}
        self._sessions: dict[str, dict[str, Any]] = {}  # name -> {"head", "created", "state"}
        self._branches: dict[int, Branch] = {}
        self._branch_session: dict[int, str] = {}
        self._branch_pages: dict[int, list[int]] = {}
        self._pages: dict[int, PageRecord] = {}
        self._messages: dict[int, bytes] = {}
        self._pins: list[tuple[str, TimelineEntry]] = []
        self._notes: list[tuple[str, TimelineEntry]] = []
        self._events: list[tuple[str, Event]] = []
        self._pools: dict[str, PoolAcl] = {}
        self._next = {"page": 1, "branch": 1, "pin": 1, "note": 1}
        self._index: Any = None

    # -- plumbing -------------------------------------------------------------------

    _TABLES = ("_settings", "_sessions", "_branches", "_branch_session", "_branch_pages", "_pages",
               "_messages", "_pins", "_notes", "_events", "_next", "_pools")

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Run a write transaction: all of it or none of it; re-entrant."""
        self._check()
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield None
                finally:
                    self._depth -= 1
                return
            # values are frozen or bytes: a shallow copy of each container restores them
            saved = {name: copy.copy(getattr(self, name)) for name in self._TABLES}
            saved["_branch_pages"] = {k: list(v) for k, v in self._branch_pages.items()}
            saved["_sessions"] = {k: dict(v) for k, v in self._sessions.items()}
            self._depth = 1
            try:
                yield None
            except BaseException:
                for name, value in saved.items():
                    setattr(self, name, value)
                raise
            finally:
                self._depth = 0

    def _check(self) -> None:
        if self._closed:
            raise StoreError("the in-memory store is closed")

    def close(self) -> None:
        self._closed = True
        if self._index is not None:
            self._index.close()

    def open_index(self) -> Any:
        """Return an in-RAM Tantivy index (derived data, rebuilt from this store on demand)."""
        from pager.storage.index import PageIndex

        return PageIndex(None)

    def setting(self, key: str, default: str | None = None) -> str | None:
        return self._settings.get(key, default)

    def set_setting(self, key: str, value: str) -> None:
        with self.transaction():
            self._settings[key] = value

    # -- sessions and branches --------------------------------------------------------

    def sessions(self) -> list[str]:
        return [n for n, _ in sorted(self._sessions.items(), key=lambda kv: (kv[1]["created"], kv[0]))]

    def has_session(self, session: str) -> bool:
        return session in self._sessions

    def _new_branch(self, session: str, parent: int | None, fork_seq: int) -> int:
        bid = self._next["branch"]
        self._next["branch"] += 1
        self._branches[bid] = Branch(bid, parent, fork_seq)
        self._branch_session[bid] = session
        self._branch_pages[bid] = list(self._branch_pages[parent][:fork_seq]) if parent else []
        return bid

    def ensure_session(self, session: str) -> int:
        with self.transaction():
            row = self._sessions.get(session)
            if row is None:
                row = {"head": self._new_branch(session, None, 0), "created": time.time(), "state": None,
                       "version": 0}
                self._sessions[session] = row
            return int(row["head"])

    def branches(self, session: str) -> list[Branch]:
        return [b for bid, b in sorted(self._branches.items()) if self._branch_session[bid] == session]

    def branch_page_ids(self, branch: int) -> list[int]:
        return list(self._branch_pages.get(branch, ()))

    def lock_session(self, session: str) -> int:
        row = self._sessions.get(session)
        return int(row["version"]) if row else 0

    def _bump(self, session: str) -> None:
        if session in self._sessions:
            self._sessions[session]["version"] += 1

    def load_state(self, session: str) -> Any:
        row = self._sessions.get(session)
        return orjson.loads(row["state"]) if row and row["state"] else None

    def save_state(self, session: str, state: Any) -> None:
        with self.transaction():
            if session in self._sessions:
                self._sessions[session]["state"] = orjson.dumps(state)
                self._bump(session)

    # -- pages ---------------------------------------------------------------------------

    def record(
        self, session: str, branch: int, fork: tuple[int, int] | None, start_seq: int, pages: Sequence[NewPage]
    ) -> tuple[int, list[int]]:
        ids: list[int] = []
        with self.transaction():
            self._bump(session)
            if fork is not None:
                parent, fork_seq = fork
                branch = self._new_branch(session, parent, fork_seq)
                self._sessions[session]["head"] = branch
            seq_list = self._branch_pages.setdefault(branch, [])
            for offset, p in enumerate(pages):
                pid = self._insert(session, start_seq + offset, p)
                del seq_list[start_seq + offset :]
                seq_list.append(pid)
                ids.append(pid)
        return branch, ids

    def record_aside(self, session: str, seq: int, pages: Sequence[NewPage]) -> list[int]:
        with self.transaction():
            self._bump(session)
            return [self._insert(session, seq, p) for p in pages]

    def _insert(self, session: str, seq: int, p: NewPage) -> int:
        pid = self._next["page"]
        self._next["page"] += 1
        self._pages[pid] = PageRecord(
            id=pid, session=session, hash=p.hash, kind=p.kind, role=p.role, seq=seq,
            step=p.step, tokens=p.tokens, stub_tokens=p.stub_tokens, chars=p.chars, call_id=p.call_id,
            call_ids=p.call_ids, tool_name=p.tool_name, path=p.path, stale=False, labels=p.labels,
            last_ref=p.step, ref_count=0, scope=p.scope, handle=p.handle, owner=p.owner,
            terms=p.terms, pool=p.pool, created=time.time(), digest=p.digest,
        )
        self._messages[pid] = bytes(p.message)
        return pid

    def load_pages(self, ids: Sequence[int]) -> list[PageRecord]:
        try:
            return [self._pages[i] for i in ids]
        except KeyError as exc:
            raise StoreError(f"in-memory store: no page with id {exc.args[0]}") from None

    def page_by_handle(self, session: str, handle: str) -> int | None:
        found = [pid for pid, r in self._pages.items() if r.handle == handle and r.session == session]
        return max(found) if found else None

    def message(self, page_id: int) -> tuple[str, dict[str, Any]]:
        rec = self._pages.get(page_id)
        if rec is None:
            raise StoreError(f"in-memory store: no page with id {page_id}")
        return rec.session, orjson.loads(self._messages[page_id])

    def iter_pages(self, after_id: int = 0, batch: int = 500) -> Iterator[tuple[PageRecord, dict[str, Any]]]:
        for pid in sorted(i for i in self._pages if i > after_id):
            yield self._pages[pid], orjson.loads(self._messages[pid])

    def page_ids_after(self, after_id: int) -> list[int]:
        return sorted(i for i in self._pages if i > after_id)

    def max_page_id(self) -> int:
        return max(self._pages, default=0)

    def count_pages(self, session: str | None = None) -> int:
        if session is None:
            return len(self._pages)
        return sum(1 for r in self._pages.values() if r.session == session)

    def aside_pages(self, session: str) -> list[int]:
        return sorted(pid for pid, r in self._pages.items() if r.session == session and r.kind in ASIDE_KINDS)

    def pages_by_handle(self, handle: str) -> list[int]:
        return sorted((pid for pid, r in self._pages.items() if r.handle == handle), reverse=True)

    def present_pages(self, page_ids: Sequence[int]) -> set[int]:
        return {pid for pid in page_ids if pid in self._pages}

    def set_scope(self, page_id: int, scope: str, pool: str | None) -> None:
        with self.transaction():
            rec = self._pages.get(page_id)
            if rec is None:
                raise StoreError(f"in-memory store: no page with id {page_id}")
            self._pages[page_id] = attrs.evolve(rec, scope=scope, pool=pool)
            self._bump(rec.session)

    def set_pool_acl(self, pool: str, readers: Sequence[str], writers: Sequence[str]) -> None:
        with self.transaction():
            self._pools[pool] = PoolAcl(readers, writers)

    def pool_acls(self) -> dict[str, PoolAcl]:
        return dict(self._pools)

    def update_stats(self, stats: Sequence[StatUpdate], session: str | None = None) -> None:
        with self.transaction():
            for u in stats:
                rec = self._pages.get(u.page_id)
                if rec is not None:
                    self._pages[u.page_id] = attrs.evolve(
                        rec, last_ref=u.last_ref, ref_count=u.ref_count, stale=bool(u.stale)
                    )

    # -- notes, pins, events --------------------------------------------------------------

    def _add(self, table: list[tuple[str, TimelineEntry]], kind: str, session: str, text: str) -> None:
        with self.transaction():
            nid = self._next[kind]
            self._next[kind] += 1
            table.append((session, TimelineEntry(time.time(), kind, nid, text)))

    def add_note(self, session: str, text: str, step: int) -> None:
        with self.transaction():
            self._add(self._notes, "note", session, text)
            self._bump(session)

    def notes(self, session: str) -> list[str]:
        return [e.text for s, e in self._notes if s == session]

    def add_pin(self, session: str, text: str) -> None:
        with self.transaction():
            self._add(self._pins, "pin", session, text)
            self._bump(session)

    def pins(self, session: str) -> list[str]:
        return [e.text for s, e in self._pins if s == session]

    def timeline(self, session: str) -> list[TimelineEntry]:
        entries = [e for s, e in self._pins + self._notes if s == session]
        return sorted(entries, key=lambda e: (e.created, e.kind != "pin", e.id))

    def add_event(self, session: str, kind: str, payload: Any) -> None:
        with self.transaction():
            self._events.append((session, Event(kind, orjson.loads(orjson.dumps(payload)), time.time())))

    def events(self, session: str, kind: str | None = None) -> list[Event]:
        return [e for s, e in self._events if s == session and (kind is None or e.kind == kind)]

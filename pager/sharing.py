"""Shared page pools for the facade: promote, retire, demote, grant, and reading across sessions.

The rules are ``pager.core.pools`` (pure); ``Pools``, one part of the facade
(``pager.pager.Pager``), applies them to the store and keeps the recall
index in step: a page moved to another scope is indexed again under its new
audiences in the same call. It also does the facade's reads beyond the
session's own history: the recall search with the pools it may read, other
sessions' pages checked against their stored scope, dated hits.

Promotion is a one-way gate (seed 002: "晋升是单向门", so undistilled noise
does not flow in and out of a shared pool): a page in a pool (``project`` or
``shared``) is never demoted back into a session (``PromotionGateError``).
Taking it out is ``retire``, a separate act with a reason, recorded with who
and when: the page leaves the pool's audience (other sessions no longer find,
recall or expand it) and returns to the scope it had before its first
promotion. Nothing is deleted; its own session keeps it as history.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Mapping, Sequence

import attrs

from pager.core.describe import brief
from pager.core.l1guard import item_text as l1_item_text
from pager.core.messages import message_text
from pager.core.pages import SCOPES, PageRecord
from pager.core.pools import PoolAcl, Reader, audiences, can_read, can_write, widen
from pager.core.render import line_range
from pager.core.terms import extract_terms
from pager.errors import ConfigError, HandleError, PromotionGateError, StoreError, ToolError
from pager.schedulers.base import RecallHit, RecallRequest, RecallSource
from pager.storage.base import Store
from pager.storage.indexing import IndexFeeder, index_doc, present_pages, search_ids

if TYPE_CHECKING:  # pragma: no cover
    from pager.core.history import History

__all__ = ["POOL_SCOPES", "Pools", "check_retire_reason", "read_handle", "readable_page"]

# The scopes a promotion gates: a page there is read beyond its session, and only ``retire`` takes it out.
POOL_SCOPES = ("project", "shared")


def readable_page(store: Store, reader: Reader, handle: str) -> int | None:
    """Return the page ``handle`` names that ``reader`` may read (its own session's first), else None."""
    pid = store.page_by_handle(reader.session, handle)
    if pid is not None:
        return pid
    acls = store.pool_acls()
    for other in store.pages_by_handle(handle):
        if can_read(store.load_pages([other])[0], reader, acls):
            return other
    return None


def read_handle(
    store: Store, reader: Reader, handle: Any, start_line: Any = None, end_line: Any = None,
    pins: Sequence[str] = (), notes: Sequence[str] = (),
) -> tuple[int | None, str]:
    """Return ``(page id, text)`` of what ``expand(handle, start_line, end_line)`` answers ``reader``.

    The one check behind ``Pager.expand`` and the MCP server's ``expand``:
    line numbers are positive integers; ``pin:N`` / ``note:N`` (the L1
    guard's pointers) read ``pins`` / ``notes`` (page id None); a page handle
    must name a page ``reader`` may read, and an unreadable one answers
    exactly like an unknown one. Raises ``ToolError`` or ``HandleError``.
    """
    for name, v in (("start_line", start_line), ("end_line", end_line)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise ToolError(f"{name} must be a positive integer, got {brief(v)}")
    moved = l1_item_text(handle, pins, notes)
    if moved is not None:
        return None, line_range(moved, start_line, end_line)
    if not isinstance(handle, str) or not handle.startswith("pg:"):
        raise HandleError(f"{brief(handle)} is not a pager handle (they look like pg:12-a1b2c3)")
    pid = readable_page(store, reader, handle)  # its own session's, or a readable pool's
    if pid is None:
        raise HandleError(f"unknown handle {brief(handle)} in session {reader.session!r}")
    _session, msg = store.message(pid)
    return pid, line_range(message_text(msg), start_line, end_line)


def check_retire_reason(reason: Any) -> str:
    """Return ``reason`` stripped; ``ConfigError`` unless it is a non-empty string."""
    if not isinstance(reason, str) or not reason.strip():
        raise ConfigError("retiring a page needs reason=<why it leaves the pool> (it is recorded)")
    return reason.strip()


class Pools:
    """One session's reads across sessions and its pool operations (the facade locks and checks it is open)."""

    def __init__(
        self, store: Store, session: str, owner: str | None, recall_pools: bool, feeder: IndexFeeder,
        writing: Callable[[], ContextManager[None]],
    ) -> None:
        self.store = store
        self.session = session
        self.recall_pools = recall_pools
        self.feeder = feeder
        self.writing = writing  # the facade's write transaction (catching up with other writers)
        self.reader = Reader(session, owner)

    # -- reading ----------------------------------------------------------------------------

    def search_recall(self, req: RecallRequest, history: "History",
                      messages: Sequence[Mapping[str, Any]] | None = None) -> list[RecallHit]:
        """Return the recall hits of ``req``: this history's pages and the pools' it may read, best first.

        One index query, reading no document back: a page of this history
        is recognised by its id and its text is the caller's message (the
        history's rows, issue 23); only pages beyond it are read from the
        store, in one batch, to learn whose they are.
        """
        # no index flush here: a tantivy commit costs ~100 ms, and pages not yet
        # committed are the newest ones, which are in the prompt anyway
        pools = self.recall_pools
        index = self.feeder.index
        acls = self.store.pool_acls() if pools else {}  # read once: a round trip on a database server
        if req.beyond_only and not self._beyond_indexed(index, acls):
            # only another audience's page could be recalled, and the index holds none (other processes'
            # commits seen): most calls of a long session, and a commit under way is not waited for
            return []
        refresh = getattr(index, "refresh", None)  # an index shared between processes has one
        if pools and refresh is not None:
            refresh()  # other processes' commits: their pools' pages are candidates too (a file read when none)
        row_of = history.row_of
        ranked = search_ids(
            # twice the candidates when pools are read: other sessions' pages must not crowd out our own
            index, list(req.terms), session=self.session, k=req.k * 2 if pools else req.k,
            exclude=set(req.exclude), min_score=req.min_score,
            cross_session=pools, audiences=audiences(self.reader, acls) if pools else (),
            stored=row_of,  # the history's pages are stored (the mirror holds them): checked only beyond it
        )
        # a page beyond the history: another session's, or this one's from another branch, a pin,
        # a note, a handoff (the card has those). Without pools every hit is this session's.
        beyond = [pid for pid, _ in ranked if pid not in row_of] if pools else []
        records = self._records(beyond)
        own: list[int] = []
        others: list[PageRecord] = []
        for pid, _score in ranked:
            rec = records.get(pid)
            if rec is None:
                if pid in row_of or not pools:
                    own.append(pid)
            elif rec.session == self.session:
                own.append(pid)
            else:
                others.append(rec)
        found = {h.page_id: h for h in self._foreign(others[: req.k], acls)}
        for pid in own[: req.k]:  # what a session-only search finds
            r = row_of.get(pid)
            if r is not None:
                # the caller's messages are the history's rows: the text is at hand, no read per hit
                msg = messages[r] if messages is not None else self.store.message(pid)[1]
                found[pid] = RecallHit(pid, message_text(msg))
        return [found[pid] for pid, _ in ranked if pid in found]  # best first, as the index ranked them

    def _beyond_indexed(self, index: Any, acls: Mapping[str, Any]) -> bool:
        """Return whether the recall index may hold a page this session reads beyond its own session's.

        Asked of an index that can tell (``PageIndex.beyond_session``); any other is assumed to.
        """
        if not self.recall_pools:
            return False
        fn = getattr(index, "beyond_session", None)
        if fn is None:
            return True
        # refresh: what other processes committed counts, as the search would have seen it
        return bool(fn(session=self.session, audiences=audiences(self.reader, acls), cross_session=True,
                       refresh=True))

    def _records(self, page_ids: Sequence[int]) -> dict[int, PageRecord]:
        """Return the stored records of ``page_ids`` by id, in one read; a page the store lacks is left out."""
        if not page_ids:
            return {}
        try:
            recs = self.store.load_pages(list(page_ids))
        except StoreError:  # a phantom the index could not check: read what is there
            recs = self.store.load_pages(sorted(present_pages(self.store, page_ids)))
        return {r.id: r for r in recs}

    def audiences(self) -> tuple[str, ...]:
        """Return the index audiences this session reads beside its own: its owner, its readable pools."""
        return audiences(self.reader, self.store.pool_acls())

    def foreign_hits(self, page_ids: Sequence[int], acls: Mapping[str, Any] | None = None) -> list[RecallHit]:
        """Return the pages of other sessions among ``page_ids`` that this session may read now, with their source.

        Checked on the stored page, not only by the index: a page demoted or a
        pool closed since the index saw it is not shown.
        """
        if not page_ids:
            return []
        return self._foreign(self.store.load_pages(list(page_ids)), acls)

    def _foreign(self, records: Sequence[PageRecord], acls: Mapping[str, Any] | None = None) -> list[RecallHit]:
        """Return the hits of ``records`` that are other sessions' pages this session may read now."""
        if not records:
            return []
        reader = self.reader
        acls = self.store.pool_acls() if acls is None else acls
        out = []
        for rec in records:
            if rec.session == self.session or not can_read(rec, reader, acls):
                continue
            written = time.strftime("%Y-%m-%d", time.gmtime(rec.created)) if rec.created else None
            terms = frozenset(rec.terms) if rec.terms is not None else None
            text = message_text(self.store.message(rec.id)[1])
            source = RecallSource(
                session=rec.session, handle=rec.handle, kind=rec.kind, step=rec.step, path=rec.path, pool=rec.pool,
                owner=rec.owner, written=written, terms=terms if terms is not None else extract_terms(text),
            )
            out.append(RecallHit(rec.id, text, source))
        return out

    def kept_foreign(self, page_ids: Sequence[int]) -> list[RecallHit]:
        """Return the other sessions' pages the last prompt showed (``page_ids``), if still readable."""
        if not page_ids:
            return []
        try:
            return self.foreign_hits(page_ids)
        except StoreError:
            return []  # a page gone from the store: the planner rebuilds without its block

    def dated(self, hits: list[Any]) -> list[Any]:
        """Return ``hits`` with the date each other session's page was stored (a label the model weighs).

        Another session's hit is checked against its stored page again: an
        index another process (or another ``Pager``) has not refreshed yet
        may still hold a page that was retired from its pool since.
        """
        foreign = [h.page_id for h in hits if h.session != self.session]
        if not foreign:
            return hits
        reader, acls = self.reader, self.store.pool_acls()
        records = {r.id: r for r in self.store.load_pages(foreign)}
        return [attrs.evolve(h, created=records[h.page_id].created) if h.page_id in records else h for h in hits
                if h.session == self.session or (h.page_id in records and can_read(records[h.page_id], reader, acls))]

    def readable_page(self, handle: str) -> int | None:
        """Return the page ``handle`` names that this session may read (its own first), else None.

        An unreadable handle answers exactly like an unknown one: its existence does not leak.
        """
        return readable_page(self.store, self.reader, handle)

    # -- pool operations ------------------------------------------------------------------

    def grant(self, pool: str, readers: Sequence[str] = (), writers: Sequence[str] = ()) -> PoolAcl:
        """Set who may read and write ``pool``; see ``Pager.grant``."""
        if not isinstance(pool, str) or not pool.strip():
            raise ConfigError("a pool name is a non-empty string")
        names = [readers] if isinstance(readers, str) else list(readers)
        wnames = [writers] if isinstance(writers, str) else list(writers)
        if not all(isinstance(x, str) and x for x in names + wnames):
            raise ConfigError("readers and writers are non-empty strings (identities, or '*')")
        reader = self.reader
        acls = self.store.pool_acls()
        current = acls.get(pool)
        if current is not None and not current.allows(reader.names, write=True):
            raise HandleError(f"session {self.session!r} may not change pool {pool!r}")
        if current is None and reader.identity not in wnames:
            wnames.append(reader.identity)
        self.store.set_pool_acl(pool, names, wnames)
        self.store.add_event(self.session, "grant", {
            "pool": pool, "readers": sorted(names), "writers": sorted(wnames),
            "by": reader.identity, "at": time.time()})
        return self.store.pool_acls()[pool]

    def retire(self, handle: str, reason: str) -> PageRecord:
        """Take the promoted page behind ``handle`` out of its pool; see ``Pager.retire``."""
        pid, page = self._page_for(handle)
        if page.scope not in POOL_SCOPES:
            raise ConfigError(f"{handle!r} is a {page.scope!r} page, in no pool: only a promoted page is retired")
        reader = self.reader
        if not can_write(page, page.scope, page.pool, reader, self.store.pool_acls()):
            raise HandleError(f"session {self.session!r} may not retire {handle!r} from its {page.scope!r} pool")
        before = [e.payload for e in self.store.events(page.session, "promote")
                  if e.payload.get("page") == pid and e.payload.get("from") not in POOL_SCOPES]
        to = str(before[0]["from"]) if before else "session"
        return self._set_scope(pid, page, to, None, "retire", reader, reason=reason)

    def _page_for(self, handle: str) -> tuple[int, PageRecord]:
        """Return the id and record of the page ``handle`` names that this session may read."""
        if not isinstance(handle, str):
            raise HandleError(f"{handle!r} is not a pager handle")
        pid = self.readable_page(handle)
        if pid is None:
            raise HandleError(f"unknown handle {handle!r} in session {self.session!r}")
        return pid, self.store.load_pages([pid])[0]

    def _set_scope(self, pid: int, page: PageRecord, to: str, pool: str | None, kind: str, reader: Reader,
                   **extra: Any) -> PageRecord:
        """Move the page, record the ``kind`` event (who, when, from where) and index it under its new audiences."""
        with self.writing():
            self.store.set_scope(pid, to, pool)
            self.store.add_event(page.session, kind, {
                "page": pid, "handle": page.handle, "from": page.scope, "from_pool": page.pool, "to": to,
                "pool": pool, "by": reader.identity, "at": time.time(), **extra})
        moved = self.store.load_pages([pid])[0]
        self.feeder.add([index_doc(moved, self.store.message(pid)[1])])
        self.feeder.flush()
        return moved

    def move(self, handle: str, to: str, pool: str | None, *, promote: bool) -> PageRecord:
        """Promote or demote the page behind ``handle``; see ``Pager.promote`` and ``Pager.demote``."""
        if to not in SCOPES:
            raise ConfigError(f"scope must be one of {SCOPES}, got {to!r}")
        if to == "project" and not pool:
            raise ConfigError("promoting to 'project' needs pool=<name>")
        pool = pool if to == "project" else None
        pid, page = self._page_for(handle)
        if (page.scope, page.pool) == (to, pool):
            return page
        if not promote and page.scope in POOL_SCOPES:
            # the one-way gate: checked before access, so the answer is the same for anyone who can read it
            where = f"pool {page.pool!r}" if page.pool else "the shared pool"
            raise PromotionGateError(
                f"{handle!r} was promoted to {where} ({page.scope}); promotion is one-way and a promoted "
                f"page is not demoted back into a session. Retiring it is a separate, recorded act: "
                f"Pager.retire({handle!r}, reason=...) or `pager pool retire STORE {handle} --reason ...`")
        if widen(page.scope, to) != promote and page.scope != to:
            verb = "promote" if promote else "demote"
            raise ConfigError(f"cannot {verb} a {page.scope!r} page to {to!r}")
        reader = self.reader
        if not can_write(page, to, pool, reader, self.store.pool_acls()):
            raise HandleError(f"session {self.session!r} may not move {handle!r} to {to!r}")
        return self._set_scope(pid, page, to, pool, "promote" if promote else "demote", reader)

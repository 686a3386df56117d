"""Shared page pools for the facade: promote, retire, demote, grant, and reading across sessions.

The rules are ``pager.core.pools`` (pure); this mixin applies them to the
store and keeps the recall index in step: a page moved to another scope is
indexed again under its new audiences in the same call.

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
from typing import TYPE_CHECKING, Any, Sequence

import attrs

from pager.core.describe import brief
from pager.core.l1guard import item_text as l1_item_text
from pager.core.messages import message_text
from pager.core.pages import SCOPES, PageRecord
from pager.core.pools import PoolAcl, Reader, can_read, can_write, widen
from pager.core.render import line_range
from pager.errors import ConfigError, HandleError, PromotionGateError, ToolError
from pager.storage.base import Store
from pager.storage.indexing import index_doc

if TYPE_CHECKING:  # pragma: no cover
    from pager.session import Session

__all__ = ["POOL_SCOPES", "Sharing", "read_handle", "readable_page"]

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


class Sharing:
    """Pool operations of a ``Pager`` (a mixin over ``pager.session.Session``)."""

    def _dated(self: "Session", hits: list[Any]) -> list[Any]:
        """Return ``hits`` with the date each other session's page was stored (a label the model weighs).

        Another session's hit is checked against its stored page again: an
        index another process (or another ``Pager``) has not refreshed yet
        may still hold a page that was retired from its pool since.
        """
        foreign = [h.page_id for h in hits if h.session != self.session]
        if not foreign:
            return hits
        reader, acls = self._reader(), self.store.pool_acls()
        records = {r.id: r for r in self.store.load_pages(foreign)}
        return [attrs.evolve(h, created=records[h.page_id].created) if h.page_id in records else h for h in hits
                if h.session == self.session or (h.page_id in records and can_read(records[h.page_id], reader, acls))]

    def _readable_page(self: "Session", handle: str) -> int | None:
        """Return the page ``handle`` names that this session may read (its own first), else None.

        An unreadable handle answers exactly like an unknown one: its existence does not leak.
        """
        return readable_page(self.store, self._reader(), handle)

    def pools(self: "Session") -> dict[str, PoolAcl]:
        """Return the store's pool ACLs by pool name."""
        with self._lock:  # type: ignore[attr-defined]
            self._check_open()
            return self.store.pool_acls()

    def grant(self: "Session", pool: str, *, readers: Sequence[str] = (), writers: Sequence[str] = ()) -> PoolAcl:
        """Set who may read and write ``pool`` (identities; ``"*"`` is anyone); return the new ACL.

        A new pool's creator becomes one of its writers; changing an existing
        pool's ACL needs write access to it.
        """
        with self._lock:  # type: ignore[attr-defined]
            self._check_open()
            if not isinstance(pool, str) or not pool.strip():
                raise ConfigError("a pool name is a non-empty string")
            names = [readers] if isinstance(readers, str) else list(readers)
            wnames = [writers] if isinstance(writers, str) else list(writers)
            if not all(isinstance(x, str) and x for x in names + wnames):
                raise ConfigError("readers and writers are non-empty strings (identities, or '*')")
            reader = self._reader()
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

    def promote(self: "Session", handle: str, to: str = "project", *, pool: str | None = None) -> PageRecord:
        """Move the page behind ``handle`` to a wider scope (``project`` needs ``pool``); return it.

        Needs write access where the page is and where it goes
        (``pager.core.pools.can_write``); recorded as an event with who and when.
        """
        return self._move(handle, to, pool, promote=True)

    def demote(self: "Session", handle: str, to: str = "private", *, pool: str | None = None) -> PageRecord:
        """Move a ``session`` page to ``private`` (its owner only); the same rules as ``promote``.

        A promoted page (``project`` or ``shared``) is not demoted: promotion
        is a one-way gate and ``PromotionGateError`` says so. ``retire`` takes
        a page out of its pool, as a separate, recorded act.
        """
        return self._move(handle, to, pool, promote=False)

    def retire(self: "Session", handle: str, *, reason: str) -> PageRecord:
        """Take the promoted page behind ``handle`` out of its pool; return it.

        The page leaves the pool's audience (other sessions no longer find,
        recall or expand it) and returns to the scope it had before its first
        promotion (``session`` for a page written straight into a pool). It is
        never deleted. Needs write access where the page is (a configured
        pool's writers; else the page's owner or session); recorded as a
        ``retire`` event with ``reason``, who and when.
        """
        if not isinstance(reason, str) or not reason.strip():
            raise ConfigError("retiring a page needs reason=<why it leaves the pool> (it is recorded)")
        with self._lock:  # type: ignore[attr-defined]
            self._check_open()
            pid, page = self._page_for(handle)
            if page.scope not in POOL_SCOPES:
                raise ConfigError(f"{handle!r} is a {page.scope!r} page, in no pool: only a promoted page is retired")
            reader = self._reader()
            if not can_write(page, page.scope, page.pool, reader, self.store.pool_acls()):
                raise HandleError(f"session {self.session!r} may not retire {handle!r} from its {page.scope!r} pool")
            before = [e.payload for e in self.store.events(page.session, "promote")
                      if e.payload.get("page") == pid and e.payload.get("from") not in POOL_SCOPES]
            to = str(before[0]["from"]) if before else "session"
            return self._set_scope(pid, page, to, None, "retire", reader, reason=reason.strip())

    def _page_for(self: Any, handle: str) -> tuple[int, PageRecord]:
        """Return the id and record of the page ``handle`` names that this session may read."""
        if not isinstance(handle, str):
            raise HandleError(f"{handle!r} is not a pager handle")
        pid = self._readable_page(handle)
        if pid is None:
            raise HandleError(f"unknown handle {handle!r} in session {self.session!r}")
        return pid, self.store.load_pages([pid])[0]

    def _set_scope(self: Any, pid: int, page: PageRecord, to: str, pool: str | None, kind: str, reader: Reader,
                   **extra: Any) -> PageRecord:
        """Move the page, record the ``kind`` event (who, when, from where) and index it under its new audiences."""
        with self._writing():
            self.store.set_scope(pid, to, pool)
            self.store.add_event(page.session, kind, {
                "page": pid, "handle": page.handle, "from": page.scope, "from_pool": page.pool, "to": to,
                "pool": pool, "by": reader.identity, "at": time.time(), **extra})
        moved = self.store.load_pages([pid])[0]
        self._feeder.add([index_doc(moved, self.store.message(pid)[1])])
        self._feeder.flush()
        return moved

    def _move(self: Any, handle: str, to: str, pool: str | None, *, promote: bool) -> PageRecord:
        with self._lock:
            self._check_open()
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
            reader = self._reader()
            if not can_write(page, to, pool, reader, self.store.pool_acls()):
                raise HandleError(f"session {self.session!r} may not move {handle!r} to {to!r}")
            return self._set_scope(pid, page, to, pool, "promote" if promote else "demote", reader)

"""Who may read and write which pages: scopes, owners and pool ACLs. Pure.

Every page has an owner (the identity given at ``open``; the session's name
when none was given) and a scope, narrowest first:

``private``  its owner only, in any of the owner's sessions;
``session``  its session (the default);
``project``  its session, and whoever the ACL of its pool (a named pool, e.g. a
             repository) lets read;
``shared``   every session of the store.

A pool's ACL lists readers and writers by identity (``"*"`` is anyone);
writers may read. A reader's identity is the owner it was opened with, else
its session's name: a session opened with an owner is admitted by that owner
only, never by its session's name (which a proxy client picks in a header). A pool nobody configured is
closed: its pages stay visible to their own session only. Promotion
(``Pager.promote``) moves a page to a wider scope, demotion to a narrower
one; both need write access to where the page is and where it goes
(``can_write``). Nothing is promoted automatically.

Audiences
---------
Who may see a page is one rule, stated once here: a page is visible to a set
of *audiences* (``page_audiences``), a reader holds a set of audiences
(``reader_audiences``), and the reader sees the page when the two meet.
``can_read`` (``expand``, ``inspect``, the facade's checks) is exactly that
intersection, and the recall indexes (search, the ``recall`` tool, automatic
recall) index each page under its audiences and query a reader's: the two
checks cannot disagree.

An audience is typed: ``"s:" + session``, ``"o:" + owner``, ``"p:" + pool``,
or ``SHARED``. Session names, owner names and pool names are chosen by
different people (a proxy client picks its session name in a header), so
each kind has its own key space: a session *named* ``pool:repo`` or
``alice`` holds ``s:pool:repo`` or ``s:alice``, never ``p:repo`` or
``o:alice``. (Until 2026-12 the three shared one key space and such a session
read the pool's or the owner's pages through search and recall.)
"""

from __future__ import annotations

from typing import Mapping, Sequence

import attrs

from pager.core.pages import SCOPES, PageRecord

__all__ = [
    "ANYONE",
    "SHARED",
    "PoolAcl",
    "Reader",
    "audiences",
    "can_read",
    "can_write",
    "is_audience",
    "owner_audience",
    "page_audiences",
    "pool_audience",
    "reader_audiences",
    "session_audience",
    "widen",
]

ANYONE = "*"
SHARED = "*"  # the audience of shared pages: every session that reads across sessions
_KINDS = ("s:", "o:", "p:")


def session_audience(session: str) -> str:
    """Return the audience of session ``session``'s own pages."""
    return "s:" + session


def owner_audience(owner: str) -> str:
    """Return the audience of owner ``owner``'s private pages."""
    return "o:" + owner


def pool_audience(pool: str) -> str:
    """Return the audience of project pool ``pool``'s pages."""
    return "p:" + pool


def is_audience(value: object) -> bool:
    """Whether ``value`` is a typed audience (``s:``, ``o:``, ``p:`` or ``SHARED``), not a bare name."""
    return isinstance(value, str) and (value == SHARED or value[:2] in _KINDS)


def page_audiences(scope: str, session: str, owner: str | None, pool: str | None) -> tuple[str, ...]:
    """Return who may see a page, by scope: the one rule every check and index reads.

    ``private``: its owner (its session's name when it has none); ``project``:
    its session and its pool; ``shared``: its session and ``SHARED``;
    ``session`` (and a ``project`` page without a pool): its session.
    """
    if scope == "private":
        return (owner_audience(owner or session),)
    if scope == "project" and pool:
        return (session_audience(session), pool_audience(pool))
    if scope == "shared":
        return (session_audience(session), SHARED)
    return (session_audience(session),)


def _names(value: object) -> frozenset[str]:
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset({value})
    return frozenset(str(v) for v in value)  # type: ignore[union-attr]


@attrs.frozen(slots=True)
class PoolAcl:
    """Who may read and who may write one pool (identities; ``"*"`` is anyone)."""

    readers: frozenset[str] = attrs.field(default=frozenset({ANYONE}), converter=_names)
    writers: frozenset[str] = attrs.field(default=frozenset(), converter=_names)

    def allows(self, who: Sequence[str], write: bool = False) -> bool:
        names = self.writers if write else self.readers | self.writers
        return ANYONE in names or any(w in names for w in who)


@attrs.frozen(slots=True)
class Reader:
    """Who is asking: a session and the owner identity it was opened with."""

    session: str
    owner: str | None = None

    @property
    def identity(self) -> str:
        return self.owner or self.session

    @property
    def names(self) -> tuple[str, ...]:
        """Return the names an ACL admits this reader by: its identity only.

        Until 2026-12 its session's name counted too, so a session opened as
        ``mallory`` but *named* ``bob`` passed an ACL granting ``bob`` (issue 20).
        """
        return (self.identity,)


def audiences(reader: Reader, acls: Mapping[str, PoolAcl]) -> tuple[str, ...]:
    """Return the typed audiences ``reader`` may query beside its session: its owner, its readable pools.

    A pool nobody configured is closed: it is in no ACL, so its pages stay in their session.
    """
    out = [owner_audience(reader.identity)]
    out.extend(pool_audience(name) for name, acl in sorted(acls.items()) if acl.allows(reader.names))
    return tuple(out)


def reader_audiences(reader: Reader, acls: Mapping[str, PoolAcl], *, cross_session: bool = True) -> tuple[str, ...]:
    """Return every audience ``reader`` holds: its session, ``audiences`` and (cross-session) ``SHARED``."""
    out = (session_audience(reader.session), *audiences(reader, acls))
    return (*out, SHARED) if cross_session else out


def can_read(page: PageRecord, reader: Reader, acls: Mapping[str, PoolAcl]) -> bool:
    """Whether ``reader`` may see ``page`` (search, recall, expand, inspect): their audiences meet."""
    mine = reader_audiences(reader, acls)
    return any(a in mine for a in page_audiences(page.scope, page.session, page.owner, page.pool))


def _may_write(scope: str, pool: str | None, page: PageRecord, who: Reader, acls: Mapping[str, PoolAcl]) -> bool:
    mine = (page.owner or page.session) == who.identity or page.session == who.session
    if scope == "project" and pool and pool in acls:
        return acls[pool].allows(who.names, write=True)
    return mine


def can_write(page: PageRecord, to_scope: str, to_pool: str | None, who: Reader,
              acls: Mapping[str, PoolAcl]) -> bool:
    """Whether ``who`` may move ``page`` from where it is to ``to_scope`` (and ``to_pool``).

    Both places must be writable by ``who``: a configured pool by its ACL's
    writers; anything else (private, session, shared, an unconfigured pool)
    by the page's owner or its session.
    """
    return _may_write(page.scope, page.pool, page, who, acls) and _may_write(to_scope, to_pool, page, who, acls)


def widen(scope: str, to: str) -> bool:
    """Whether moving from ``scope`` to ``to`` widens who may read (a promotion)."""
    return SCOPES.index(to) > SCOPES.index(scope)

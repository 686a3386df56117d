"""Who may read and write which pages: scopes, owners and pool ACLs. Pure.

Every page has an owner (the identity given at ``open``; the session's name
when none was given) and a scope, narrowest first:

``private``  its owner only, in any of the owner's sessions;
``session``  its session (the default);
``project``  its session, and whoever the ACL of its pool (a named pool, e.g. a
             repository) lets read;
``shared``   every session of the store.

A pool's ACL lists readers and writers by identity (an owner or a session
name; ``"*"`` is anyone); writers may read. A pool nobody configured is
closed: its pages stay visible to their own session only. Promotion
(``Pager.promote``) moves a page to a wider scope, demotion to a narrower
one; both need write access to where the page is and where it goes
(``can_write``). Nothing is promoted automatically.

The recall index enforces reading by audience keys (``audiences``); ``expand``
and ``inspect`` check ``can_read`` on the stored page. Both read the rules here.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import attrs

from pager.core.pages import SCOPES, PageRecord

__all__ = ["ANYONE", "PoolAcl", "Reader", "audiences", "can_read", "can_write", "widen"]

ANYONE = "*"


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
        return (self.identity, self.session)


def audiences(reader: Reader, acls: Mapping[str, PoolAcl]) -> tuple[str, ...]:
    """Return the index audiences ``reader`` may query beside its session: its owner, its readable pools."""
    out = [reader.identity]
    out.extend(f"pool:{name}" for name, acl in sorted(acls.items()) if acl.allows(reader.names))
    return tuple(out)


def can_read(page: PageRecord, reader: Reader, acls: Mapping[str, PoolAcl]) -> bool:
    """Whether ``reader`` may see ``page`` (search, recall, expand, inspect)."""
    owner = page.owner or page.session
    if page.scope == "private":
        return owner == reader.identity
    if page.session == reader.session or page.scope == "shared":
        return True
    if page.scope == "project" and page.pool and page.pool in acls:
        return acls[page.pool].allows(reader.names)
    return False  # a pool nobody configured is closed: its pages stay in their session


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

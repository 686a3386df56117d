"""``pager pool``: shared page pools from the command line.

    pager pool list STORE [--json]
    pager pool grant STORE POOL --as SESSION [--owner OWNER] [--readers ID ...] [--writers ID ...]
    pager pool promote STORE HANDLE --as SESSION [--owner OWNER] --to SCOPE [--pool POOL]
    pager pool demote STORE HANDLE --as SESSION [--owner OWNER] --to SCOPE [--pool POOL]
    pager pool retire STORE HANDLE --as SESSION [--owner OWNER] --reason TEXT

Every change acts as one session and its owner identity, exactly as
``Pager.grant`` / ``promote`` / ``demote`` / ``retire`` do in code: the same
ACL checks, recorded as events with who and when. Promotion is one-way: a
promoted page is not demoted (``demote`` refuses it); ``retire`` takes it out
of its pool, with a reason, and never deletes it. ``list`` prints each pool's
readers and writers.
"""

from __future__ import annotations

import argparse
from typing import Any

import orjson

from pager.core.pages import SCOPES
from pager.errors import ConfigError

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "pool", help="list pools, set a pool's ACL, promote, retire or demote a page",
        description="Shared page pools: list them, set who may read and write one, move a page between scopes.",
    )
    sub = parser.add_subparsers(dest="pool_command", metavar="ACTION")
    sub.required = True

    ls = sub.add_parser("list", help="print every pool's readers and writers")
    ls.add_argument("store", metavar="STORE", help="a store folder or a postgresql:// URL")
    ls.add_argument("--json", action="store_true", help="print JSON instead of text")
    ls.set_defaults(func=run_list)

    grant = sub.add_parser("grant", help="set who may read and write a pool (needs write access to it)")
    grant.add_argument("store", metavar="STORE", help="a store folder or a postgresql:// URL")
    grant.add_argument("pool", metavar="POOL", help="the pool (e.g. a repository's name)")
    _identity(grant)
    grant.add_argument("--readers", nargs="*", default=[], metavar="ID", help="identities that may read ('*': anyone)")
    grant.add_argument("--writers", nargs="*", default=[], metavar="ID", help="identities that may write (and read)")
    grant.set_defaults(func=run_grant)

    for verb, helptext in (("promote", "move a page to a wider scope (one-way: retire takes it out again)"),
                           ("demote", "move a session page to private (a promoted page is retired, not demoted)")):
        p = sub.add_parser(verb, help=helptext)
        p.add_argument("store", metavar="STORE", help="a store folder or a postgresql:// URL")
        p.add_argument("handle", metavar="HANDLE", help="the page's handle (pg:12-a1b2c3)")
        _identity(p)
        p.add_argument("--to", required=True, choices=SCOPES, help="the scope the page goes to")
        p.add_argument("--pool", help="with --to project: the pool it goes to")
        p.set_defaults(func=run_move, verb=verb)

    retire = sub.add_parser("retire", help="take a promoted page out of its pool (recorded; never deleted)",
                            description="Take a promoted page out of its pool: other sessions no longer find it; "
                                        "it returns to the scope it had before its first promotion. Recorded "
                                        "as an event with who, when and the reason; the page is never deleted.")
    retire.add_argument("store", metavar="STORE", help="a store folder or a postgresql:// URL")
    retire.add_argument("handle", metavar="HANDLE", help="the page's handle (pg:12-a1b2c3)")
    _identity(retire)
    retire.add_argument("--reason", required=True, help="why it leaves the pool (recorded with the event)")
    retire.set_defaults(func=run_retire)


def _identity(p: argparse.ArgumentParser) -> None:
    p.add_argument("--as", dest="session", required=True, metavar="SESSION",
                   help="act as this session of the store (it must exist)")
    p.add_argument("--owner", help="the owner identity that session was opened with")


def _open(args: argparse.Namespace) -> Any:
    import pager
    from pager.session import open_store

    store = open_store(args.store, must_exist=True)
    try:
        if not store.has_session(args.session):
            raise ConfigError(f"no session {args.session!r} in {args.store}; act as one of {store.sessions()}")
    except BaseException:
        store.close()
        raise
    opts = {"owner": args.owner} if args.owner else {}
    return store, pager.open(store, session=args.session, log_reports=False, **opts)


def run_list(args: argparse.Namespace) -> int:
    from pager.session import open_store

    store = open_store(args.store, must_exist=True)
    try:
        acls = store.pool_acls()
    finally:
        store.close()
    rows = {name: {"readers": sorted(acl.readers), "writers": sorted(acl.writers)} for name, acl in sorted(acls.items())}
    if args.json:
        print(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
    elif not rows:
        print("no pools configured (a project pool nobody configured is closed: its pages stay in their session)")
    else:
        for name, acl in rows.items():
            print(f"{name}: readers {', '.join(acl['readers']) or '-'}; writers {', '.join(acl['writers']) or '-'}")
    return 0


def run_grant(args: argparse.Namespace) -> int:
    store, p = _open(args)
    try:
        acl = p.grant(args.pool, readers=args.readers, writers=args.writers)
    finally:
        p.close()
        store.close()
    print(f"{args.pool}: readers {', '.join(sorted(acl.readers)) or '-'}; writers {', '.join(sorted(acl.writers))}")
    return 0


def run_move(args: argparse.Namespace) -> int:
    store, p = _open(args)
    try:
        move = p.promote if args.verb == "promote" else p.demote
        page = move(args.handle, args.to, pool=args.pool)
    finally:
        p.close()
        store.close()
    print(f"{args.handle} (session {page.session}) is now {page.scope}" + (f" in pool {page.pool}" if page.pool else ""))
    return 0


def run_retire(args: argparse.Namespace) -> int:
    store, p = _open(args)
    try:
        page = p.retire(args.handle, reason=args.reason)
    finally:
        p.close()
        store.close()
    print(f"{args.handle} (session {page.session}) is retired: now {page.scope}, in no pool")
    return 0

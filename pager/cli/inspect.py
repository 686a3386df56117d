"""``pager inspect STORE``: sessions, pages and layers of a store, for a person.

Without ``--as`` it shows everything in the store: whoever holds the store's
folder or database credentials can read it all anyway. ``--as SESSION`` (with
``--owner`` for the identity that session was opened with) shows exactly what
that session may read (``pager.core.pools.can_read``): its own pages, pins,
notes and last prompt, and of every other session only the pages its pools,
owner and scopes let it see, pins, notes and handoffs included. A session
with nothing readable is not listed.
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

import orjson

from pager.core.messages import message_text
from pager.core.pools import Reader, can_read
from pager.errors import ConfigError
from pager.ui.source import store_label as _name  # shared with the viewer, which names its store too

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser("inspect", help="show a store's sessions, pages and layers",
                       description="Show the sessions of a store, their pages by kind and the last prompt's layers.")
    p.add_argument("store", help="the store: a folder (as given to pager.open) or a postgresql:// URL")
    p.add_argument("--session", help="only this session")
    p.add_argument("--as", dest="reader", metavar="SESSION",
                   help="show only what this session may read (its pools, its owner's private pages, shared pages)")
    p.add_argument("--owner", help="with --as: the owner identity that session was opened with")
    p.add_argument("--pages", action="store_true", help="list every page of the head branch")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--format", metavar="NAME",
                   help="print each session's history as a request in wire format NAME "
                   "(openai-chat, anthropic-messages, openai-responses)")
    p.set_defaults(func=run)


def _summary(store: Any, session: str, report: dict[str, Any] | None, aside: list[Any],
             visible: Any = None) -> dict[str, Any]:
    """Return one session's summary; ``visible(page)`` (when given) keeps only what a reader may see."""
    branch = store.ensure_session(session)
    rows = store.load_pages(store.branch_page_ids(branch))
    own = visible is None or visible.own(session)
    if not own:
        rows = [r for r in rows if visible(r)]
        aside = [a for a in aside if visible(a[0])]
    kinds = Counter(r.kind for r in rows)
    tokens: Counter[str] = Counter()
    for r in rows:
        tokens[r.kind] += r.tokens
    state = (store.load_state(session) or {}) if own else {}
    layout = (state.get("layout") or {}).get("slots") or []
    shown = Counter(s[0] for s in layout)
    return {
        "session": session,
        "branches": len(store.branches(session)) if own else None,
        "pages": len(rows),
        "pages_by_kind": dict(kinds),
        "tokens_by_kind": dict(tokens),
        "history_tokens": sum(tokens.values()),
        "stale_file_pages": sum(1 for r in rows if r.stale),
        "pins": store.pins(session) if own else [text for rec, text in aside if rec.kind == "pin"],
        "notes": store.notes(session) if own else [text for rec, text in aside if rec.kind == "note"],
        "aside": [{"kind": rec.kind, "handle": rec.handle, "scope": rec.scope, "pool": rec.pool, "owner": rec.owner,
                   "text": text} for rec, text in aside],
        "last_layout": dict(shown),
        "last_report": report if own else None,
        "rows": [
            {"seq": r.seq, "kind": r.kind, "tokens": r.tokens, "handle": r.handle, "path": r.path, "stale": r.stale,
             "refs": r.ref_count, "labels": list(r.labels), "scope": r.scope, "pool": r.pool, "owner": r.owner}
            for r in rows
        ],
    }


class _Visible:
    """What one reader may see: ``can_read`` with the store's pool ACLs, read once."""

    def __init__(self, reader: Reader, acls: Any) -> None:
        self.reader, self.acls = reader, acls

    def own(self, session: str) -> bool:
        return session == self.reader.session

    def __call__(self, page: Any) -> bool:
        return can_read(page, self.reader, self.acls)


def _aside_pages(store: Any, session: str) -> list[tuple[Any, str]]:
    """Return the session's pins, notes and handoffs kept as pages, oldest first, with their text."""
    recs = store.load_pages(store.aside_pages(session))
    return [(rec, message_text(store.message(rec.id)[1])) for rec in recs]


def _export(store: Any, sessions: list[str], format: str) -> int:
    """Print each session's head branch as one request in wire format ``format`` (JSON lines)."""
    from pager.formats.base import get_format
    from pager.formats.export import export_request

    get_format(format)  # ConfigError naming the known formats
    for session in sessions:
        ids = store.branch_page_ids(store.ensure_session(session))
        messages = [store.message(pid)[1] for pid in ids]
        print(orjson.dumps({"session": session, "request": export_request(messages, format)}).decode())
    return 0


def run(args: argparse.Namespace) -> int:
    from pager.report import ReportLog
    from pager.session import open_store

    if args.owner and not args.reader:
        raise ConfigError("--owner goes with --as SESSION (the session it was opened with)")
    store = open_store(args.store, must_exist=True)
    try:
        sessions = store.sessions()
        if args.session:
            if args.session not in sessions:
                raise ConfigError(f"no session {args.session!r} in {_name(args.store)}; sessions: {sessions}")
            sessions = [args.session]
        last: dict[str, dict[str, Any]] = {}
        for rec in ReportLog(store.path).read():
            if rec.get("type") == "assemble":
                last[rec["session"]] = rec
        visible = _Visible(Reader(args.reader, args.owner), store.pool_acls()) if args.reader else None
        if args.format:
            if visible is not None:
                raise ConfigError("--format prints whole histories; it does not combine with --as")
            return _export(store, sessions, args.format)
        out = [_summary(store, s, last.get(s), _aside_pages(store, s), visible) for s in sessions]
        if visible is not None:
            out = [s for s in out if visible.own(s["session"]) or s["pages"] or s["aside"]]
    finally:
        store.close()
    if args.json:
        print(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode())
        return 0
    seen = f" as seen by session {args.reader!r}" + (f" (owner {args.owner!r})" if args.owner else "") if args.reader else ""
    print(f"store {_name(args.store)}{seen}: {len(out)} session(s)")
    for s in out:
        branches = f"{s['branches']} branch(es), " if s["branches"] is not None else ""
        print(f"\nsession {s['session']}  ({branches}{s['pages']} pages, "
              f"{s['history_tokens']:,} tokens of history)")
        for kind, n in sorted(s["pages_by_kind"].items()):
            print(f"  {kind:<9} {n:>6} pages {s['tokens_by_kind'][kind]:>10,} tokens")
        if s["stale_file_pages"]:
            print(f"  stale file reads: {s['stale_file_pages']}")
        for pin in s["pins"]:
            print(f"  pinned: {pin}")
        for note in s["notes"][-5:]:
            print(f"  note: {note}")
        for item in s["aside"]:
            if item["kind"] == "handoff":
                print(f"  handoff {item['handle']}: {item['text'].splitlines()[0] if item['text'] else ''}")
        rep = s["last_report"]
        if rep:
            layers = "  ".join(f"{k}={v:,}" for k, v in rep["layers"].items())
            print(f"  last prompt: {rep['tokens']:,} of {rep['budget']:,} tokens  [{layers}]")
            print(f"    kept {rep['pages_kept']}, stubbed {rep['pages_stubbed']}, dropped {rep['pages_dropped']}, "
                  f"recalled {rep['pages_recalled']}; prefix {'kept' if rep['prefix_kept'] else 'rewritten'}; "
                  f"faults {rep['faults']}")
        if args.pages:
            print(f"  {'seq':>5} {'kind':<9} {'tokens':>7} {'refs':>4}  {'labels':<8} handle / path")
            for r in s["rows"]:
                flag = " (stale)" if r["stale"] else ""
                print(f"  {r['seq']:>5} {r['kind']:<9} {r['tokens']:>7} {r['refs']:>4}  "
                      f"{','.join(r['labels']):<8} {r['handle']}{'  ' + r['path'] if r['path'] else ''}{flag}")
    return 0

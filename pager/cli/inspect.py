"""``pager inspect STORE``: sessions, pages and layers of a store, for a person."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from pager.errors import ConfigError

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser("inspect", help="show a store's sessions, pages and layers",
                       description="Show the sessions of a store, their pages by kind and the last prompt's layers.")
    p.add_argument("store", help="the store folder (as given to pager.open)")
    p.add_argument("--session", help="only this session")
    p.add_argument("--pages", action="store_true", help="list every page of the head branch")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--format", metavar="NAME",
                   help="print each session's history as a request in wire format NAME "
                   "(openai-chat, anthropic-messages, openai-responses)")
    p.set_defaults(func=run)


def _summary(store: Any, session: str, report: dict[str, Any] | None) -> dict[str, Any]:
    branch = store.ensure_session(session)
    ids = store.branch_page_ids(branch)
    rows = store.load_pages(ids)
    kinds = Counter(r.kind for r in rows)
    tokens: Counter[str] = Counter()
    for r in rows:
        tokens[r.kind] += r.tokens
    state = store.load_state(session) or {}
    layout = (state.get("layout") or {}).get("slots") or []
    shown = Counter(s[0] for s in layout)
    return {
        "session": session,
        "branches": len(store.branches(session)),
        "pages": len(rows),
        "pages_by_kind": dict(kinds),
        "tokens_by_kind": dict(tokens),
        "history_tokens": sum(tokens.values()),
        "stale_file_pages": sum(1 for r in rows if r.stale),
        "pins": store.pins(session),
        "notes": store.notes(session),
        "last_layout": dict(shown),
        "last_report": report,
        "rows": [
            {"seq": r.seq, "kind": r.kind, "tokens": r.tokens, "handle": r.handle,
             "path": r.path, "stale": r.stale, "refs": r.ref_count, "labels": list(r.labels)}
            for r in rows
        ],
    }


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
    from pager.storage.sqlite import DB_NAME, Store

    folder = Path(args.store)
    if not (folder / DB_NAME).exists():
        raise ConfigError(f"{folder} holds no pager store (no {DB_NAME})")
    store = Store(folder)
    try:
        sessions = store.sessions()
        if args.session:
            if args.session not in sessions:
                raise ConfigError(f"no session {args.session!r} in {folder}; sessions: {sessions}")
            sessions = [args.session]
        last: dict[str, dict[str, Any]] = {}
        for rec in ReportLog(folder).read():
            if rec.get("type") == "assemble":
                last[rec["session"]] = rec
        if args.format:
            return _export(store, sessions, args.format)
        out = [_summary(store, s, last.get(s)) for s in sessions]
    finally:
        store.close()
    if args.json:
        print(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode())
        return 0
    print(f"store {folder}: {len(out)} session(s)")
    for s in out:
        print(f"\nsession {s['session']}  ({s['branches']} branch(es), {s['pages']} pages, "
              f"{s['history_tokens']:,} tokens of history)")
        for kind, n in sorted(s["pages_by_kind"].items()):
            print(f"  {kind:<9} {n:>6} pages {s['tokens_by_kind'][kind]:>10,} tokens")
        if s["stale_file_pages"]:
            print(f"  stale file reads: {s['stale_file_pages']}")
        for pin in s["pins"]:
            print(f"  pinned: {pin}")
        for note in s["notes"][-5:]:
            print(f"  note: {note}")
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

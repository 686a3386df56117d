"""``pager ui STORE``: serve a live, read-only view of a store's sessions, calls, pages and prompts."""

from __future__ import annotations

import argparse
import logging
from typing import Any

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "ui", help="serve a live, read-only view of what the agents see (sessions, calls, pages, prompts)",
        description=("Serve the store's sessions, each call's prompt by layer, the page map, each call's prompt "
                     "beside the client's request, and search, at http://HOST:PORT/pager/. Read-only; new calls "
                     "appear as they are made. The same pages are under /pager/ on a running `pager proxy`."),
    )
    p.add_argument("store", help="the store: a folder (as given to pager.open) or a postgresql:// URL")
    p.add_argument("--port", type=int, default=8789, help="port to listen on (default 8789)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow an address other than loopback (the view shows every page's text)")
    p.add_argument("--as", dest="reader", metavar="SESSION",
                   help="show only what this session may read (as `pager inspect --as`)")
    p.add_argument("--owner", help="with --as: the owner identity that session was opened with")
    p.add_argument("--pricing", default="auto", choices=["auto", "anthropic", "openai", "none"],
                   help="how cached tokens are priced (default auto: anthropic when the usage has cache writes)")
    p.add_argument("--usd-per-mtok", type=float, default=3.0, metavar="USD",
                   help="the model's base input price in dollars per million tokens, for the cost columns "
                   "(default 3.0; 0 shows base-token units)")
    p.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pager.ui.source import store_label as _name
    from pager.proxy.server import check_bind, serve
    from pager.ui import open_view, standalone

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    check_bind(args.host, args.allow_remote)
    view = open_view(args.store, reader=args.reader, owner=args.owner, pricing=args.pricing,
                     usd_per_mtok=args.usd_per_mtok)
    try:
        print(f"pager ui: http://{args.host}:{args.port}/pager/ ({_name(args.store)}, read-only; Ctrl-C stops)")
        serve(standalone(view, store_name=_name(args.store)), args.host, args.port, allow_remote=args.allow_remote,
              graceful=2.0, log_level=args.log_level)
    finally:
        view.close()
    return 0

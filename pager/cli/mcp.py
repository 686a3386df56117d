"""``pager mcp STORE --session S``: serve recall / expand / note / search over MCP, for any store."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "mcp", help="serve a session's recall / expand / note / search as an MCP server",
        description="An MCP server (official mcp SDK) over stdio, or streamable HTTP with --http.",
    )
    p.add_argument("store", help="the store: a folder or a postgresql:// URL")
    p.add_argument("--session", required=True, help="the session the tools act on")
    p.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8788)
    p.add_argument("--allow-remote", action="store_true", help="allow an address other than loopback")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pager.mcp_server import build_server

    server, tools = build_server(args.store, args.session)
    try:
        if args.http:
            from pager.proxy.server import check_bind

            check_bind(args.host, args.allow_remote)
            server.run("streamable-http", host=args.host, port=args.port)
        else:
            server.run("stdio")
    finally:
        tools.close()
    return 0

"""``pager proxy``: serve the OpenAI- and Anthropic-compatible paging proxy."""

from __future__ import annotations

import argparse
import importlib
import logging
from typing import Any

from pager.errors import ConfigError

__all__ = ["byte_size", "register", "upstream_pair"]

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def byte_size(text: str) -> int:
    """Parse ``32M``, ``512K``, ``1G`` or a plain byte count (binary units); refuse anything else."""
    raw = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = raw[-1:] if raw[-1:] in _UNITS and raw[-1:] else ""
    number = raw[: len(raw) - len(unit)]
    if not number.isdigit() or int(number) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (a positive byte count, or e.g. 512K, 32M, 1G)")
    return int(number) * _UNITS[unit]


def upstream_pair(text: str) -> tuple[str, str]:
    """Parse ``NAME=URL`` (an upstream's name in ``pager.proxy.dialects.UPSTREAMS`` and its base URL)."""
    name, sep, url = text.partition("=")
    if not sep or not name.strip() or not url.strip().startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=URL (e.g. openai=http://127.0.0.1:4000)")
    return name.strip(), url.strip()


def register(sub: Any) -> None:
    p = sub.add_parser(
        "proxy", help="serve an OpenAI/Anthropic-compatible proxy that pages every request",
        description=(
            "Serve POST /v1/chat/completions, /v1/responses, /v1/messages (and /v1/messages/count_tokens, "
            "answered locally). Each request is assembled in its session (x-pager-session header, else the "
            "client's own conversation key, else a hash of the system prompt and first user message) and "
            "forwarded upstream with the client's own API key."
        ),
    )
    p.add_argument("--store", required=True,
                   help="the store: a folder (created if missing) or a postgresql:// URL shared by a team")
    p.add_argument("--owner", help="the identity every session served here belongs to (pools' ACLs name it)")
    p.add_argument("--scope", choices=["private", "session", "project", "shared"],
                   help="who may read the pages recorded here (default: the session only)")
    p.add_argument("--pool", help="with --scope project: the project pool the pages go to (e.g. the repository)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8787)
    p.add_argument("--allow-remote", action="store_true", help="allow an address other than loopback")
    p.add_argument("--upstream-openai", default="https://api.openai.com", metavar="URL",
                   help="where chat completions and responses go (default https://api.openai.com)")
    p.add_argument("--upstream-anthropic", default="https://api.anthropic.com", metavar="URL",
                   help="where Anthropic messages go (default https://api.anthropic.com)")
    p.add_argument("--upstream", action="append", type=upstream_pair, default=[], metavar="NAME=URL",
                   help="the base URL of any upstream by its name (openai, anthropic, or one a --load module "
                        "registers); repeatable; wins over --upstream-openai / --upstream-anthropic")
    p.add_argument("--load", action="append", default=[], metavar="MODULE",
                   help="import MODULE first (repeatable): it registers a wire format, a dialect and its "
                        "upstream (pager.proxy.dialects.register_dialect / register_upstream)")
    tools = p.add_mutually_exclusive_group()
    tools.add_argument("--no-tools", dest="tools", action="store_false",
                       help="do not add pager's recall / expand / note tools (then only file reads the client's "
                            "own tools can redo are stubbed); by default they are added to every request that "
                            "has tools of its own, and the proxy answers the model's calls to them")
    tools.add_argument("--tools", dest="tools", action="store_true", help=argparse.SUPPRESS)  # the default now
    p.set_defaults(tools=True)
    p.add_argument("--max-tool-rounds", type=int, default=8, metavar="N",
                   help="rounds of pager's tools the proxy answers in one client turn (default 8)")
    p.add_argument("--context-window", type=int, default=200_000, help="the models' window in tokens")
    p.add_argument("--config", help="a JSON options file (as `pager tune --write` makes)")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds an upstream may stay silent before the client gets a 504 (default 600)")
    p.add_argument("--max-body", type=byte_size, default=None, metavar="SIZE",
                   help="the largest request body accepted, in bytes or with a K/M/G suffix (binary); a bigger one "
                        "gets a 413 before it is read (default 32M)")
    p.add_argument("--session-header-required", action="store_true",
                   help="refuse (400) a model call without an x-pager-session header instead of naming its session "
                        "from its first messages")
    p.add_argument("--graceful", type=float, default=30.0,
                   help="seconds in-flight requests get to finish on shutdown (default 30)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--gc", choices=["tuned", "default"], default="tuned",
                   help="the garbage collector: 'tuned' (default) freezes what survives each full collection, so "
                        "the next walks only what is new (pager.proxy.gcpolicy); 'default' leaves Python's")
    p.add_argument("--timings", metavar="FILE",
                   help="append one JSON line per model call to FILE: where its time went (body read and parsed, "
                        "assemble, upstream, first event relayed, garbage collection), in ms")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pager.proxy import ProxyConfig, check_bind, create_app, serve

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    check_bind(args.host, args.allow_remote)  # before anything is opened
    for module in args.load:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(f"--load {module}: {exc}") from exc
    options: dict[str, Any] = {"context_window": args.context_window}
    if args.config:
        options["config"] = args.config
    for name in ("owner", "scope", "pool"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    if args.scope == "project" and not args.pool:
        raise ConfigError("--scope project needs --pool NAME (the project pool the pages go to)")
    config = ProxyConfig(
        store=args.store, upstream_openai=args.upstream_openai, upstream_anthropic=args.upstream_anthropic,
        tools=args.tools, timeout=args.timeout, options=options, max_tool_rounds=args.max_tool_rounds,
        session_header_required=args.session_header_required, upstreams=dict(args.upstream), timings=args.timings,
        **({"max_body": args.max_body} if args.max_body is not None else {}),
    )
    serve(create_app(config), args.host, args.port, allow_remote=args.allow_remote,
          graceful=args.graceful, log_level=args.log_level, tune_gc=args.gc == "tuned")
    return 0

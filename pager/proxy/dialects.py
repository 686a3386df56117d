"""What the proxy must know of each wire format beyond ``WireFormat``.

The facade's formats turn requests into pages and back. A proxy also reads
*responses* and *streams*: the usage in the final event, the tool calls a turn
makes (to answer pager's own), and how to continue a conversation upstream
with their results while the client sees one turn. A ``Dialect`` holds that,
one per route; everything here is pure dict work on parsed JSON.

Streams are read event by event by the format's ``StreamTurn``
(``pager.proxy.streams``).

Upstreams are data. Each dialect names its upstream (``Dialect.upstream``),
an ``Upstream`` value in the ``UPSTREAMS`` table: its base URL, the header its
clients send their key in and that header's scheme, the headers only its
clients send (how an unrouted ``/v1/...`` call finds its upstream), and the
error shape its clients read. A new provider is a format module, a dialect
served at a path (``register_dialect``) and its upstream
(``register_upstream``); ``ProxyConfig(upstreams={name: url})`` and
``pager proxy --upstream NAME=URL`` move any upstream's base URL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from pager.core.canonical import canonical
from pager.errors import ConfigError
from pager.proxy.streams import AnthropicTurn, ChatTurn, ResponsesTurn, StreamTurn

__all__ = [
    "DIALECTS",
    "UPSTREAMS",
    "Dialect",
    "Upstream",
    "base_url",
    "check_upstreams",
    "register_dialect",
    "register_upstream",
    "upstream_for",
]


@attrs.frozen(slots=True)
class Upstream:
    """Where one provider's calls go, and how its clients speak to it.

    The proxy forwards the client's own key, never one of its own:
    ``auth_header`` / ``auth_scheme`` say how that key travels (for the
    docs, and to tell a provider's clients apart); ``client_headers`` are
    the headers only this provider's clients send. ``error_style`` is the
    error body shape they read (``pager.proxy.replies``).
    """

    name: str
    base_url: str
    auth_header: str = "authorization"
    auth_scheme: str = "Bearer"
    client_headers: tuple[str, ...] = ()
    error_style: str = "openai"

    def __attrs_post_init__(self) -> None:
        if not self.name or not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"an upstream needs a name and an http(s) base URL, got {self.name!r} {self.base_url!r}")


UPSTREAMS: dict[str, Upstream] = {}
DEFAULT_UPSTREAM = "openai"  # an unrouted call that carries no provider's own headers goes here


def register_upstream(upstream: Upstream) -> Upstream:
    """Add ``upstream`` to ``UPSTREAMS`` (replacing one of the same name); return it."""
    UPSTREAMS[upstream.name] = upstream
    return upstream


def base_url(name: str, overrides: Mapping[str, str] = {}) -> str:
    """Return the base URL calls to upstream ``name`` go to (an override first), without a trailing ``/v1``."""
    if name not in UPSTREAMS:
        raise ConfigError(f"unknown upstream {name!r}; known: {sorted(UPSTREAMS)}")
    base = (overrides.get(name) or UPSTREAMS[name].base_url).rstrip("/")
    # accept a base URL given with its /v1, as SDKs take it
    return base[:-3] if base.endswith("/v1") else base


def check_upstreams(_instance: Any, _attribute: Any, overrides: Mapping[str, str]) -> None:
    """Refuse base-URL ``overrides`` (name -> URL) of unknown upstreams or with no http(s) URL (an attrs validator)."""
    for name, url in overrides.items():
        if name not in UPSTREAMS:
            raise ConfigError(f"unknown upstream {name!r}; known: {sorted(UPSTREAMS)}")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError(f"upstream {name!r} needs an http(s) base URL, got {url!r}")


def upstream_for(headers: Mapping[str, str]) -> Upstream:
    """Return the upstream of an unrouted ``/v1/...`` call: the first whose clients' own headers it carries."""
    for up in UPSTREAMS.values():
        if any(h in headers for h in up.client_headers):
            return up
    return UPSTREAMS[DEFAULT_UPSTREAM]


def _root(system: Any, user: Any) -> tuple[Any, Any]:
    # canonical: the first request marks the first user message, later ones do not
    return canonical({"content": system})["content"], canonical({"content": user})["content"]


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Sequence):
        return "\n".join(
            str(b.get("text", "")) for b in value if isinstance(b, Mapping) and isinstance(b.get("text"), str)
        )
    return ""


class Dialect:
    """Per-format proxy knowledge; see the module docstring."""

    format: str
    upstream: str  # its name in UPSTREAMS
    upstream_path: str | None = None  # the path upstream (None: the path the client called)
    error_style: str  # "openai" or "anthropic"
    history_key: str = "messages"  # the request's list of history items

    def session_seed(self, request: Mapping[str, Any]) -> tuple[Any, Any]:
        """Return (system prompt, first user message) to name a session by."""
        raise NotImplementedError

    def prepare(self, request: dict[str, Any], stream: bool) -> bool:
        """Adjust the upstream request in place; return whether the client asked for usage in the stream."""
        return True

    def calls(self, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def call_name(self, call: Mapping[str, Any]) -> str:
        raise NotImplementedError

    def continue_request(
        self, request: dict[str, Any], items: list[dict[str, Any]], results: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """Return ``request`` with the assistant turn ``items`` and the tool ``results`` appended."""
        raise NotImplementedError

    def assistant_items(self, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def strip_calls(self, response: dict[str, Any], names: frozenset[str]) -> dict[str, Any]:
        """Return ``response`` without its calls to the tools ``names`` (a turn mixing pager's and the client's)."""
        raise NotImplementedError

    def stream_turn(self, pager_tools: frozenset[str], round_no: int, offset: int, client_usage: bool) -> StreamTurn:
        raise NotImplementedError


# -- OpenAI chat completions ---------------------------------------------------------------


class OpenAIChatDialect(Dialect):
    format = "openai-chat"
    upstream = "openai"
    error_style = "openai"

    def session_seed(self, request: Mapping[str, Any]) -> tuple[Any, Any]:
        msgs = request.get("messages") or ()
        sys = next((m.get("content") for m in msgs if isinstance(m, Mapping) and m.get("role") in ("system", "developer")), None)
        user = next((m.get("content") for m in msgs if isinstance(m, Mapping) and m.get("role") == "user"), None)
        return _root(sys, user)

    def prepare(self, request: dict[str, Any], stream: bool) -> bool:
        if not stream:
            return True
        opts = dict(request.get("stream_options") or {})
        asked = bool(opts.get("include_usage"))
        if not asked:
            # usage arrives only in a final chunk the client must ask for; ask for
            # it and keep that chunk from a client that did not
            opts["include_usage"] = True
            request["stream_options"] = opts
        return asked

    def calls(self, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        choices = response.get("choices") or ()
        if not choices:
            return []
        return list((choices[0].get("message") or {}).get("tool_calls") or ())

    def call_name(self, call: Mapping[str, Any]) -> str:
        return str((call.get("function") or {}).get("name") or "")

    def assistant_items(self, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        msg = dict((response.get("choices") or [{}])[0].get("message") or {})
        keep = {k: msg[k] for k in ("role", "content", "tool_calls") if k in msg}
        keep.setdefault("role", "assistant")
        return [keep]

    def continue_request(self, request: dict[str, Any], items: list[dict[str, Any]], results: list[dict[str, Any]]) -> dict[str, Any]:
        out = dict(request)
        out["messages"] = [*request["messages"], *items, *results]
        return out

    def strip_calls(self, response: dict[str, Any], names: frozenset[str]) -> dict[str, Any]:
        out = dict(response)
        choices = []
        for choice in response.get("choices") or ():
            msg = dict(choice.get("message") or {})
            msg["tool_calls"] = [c for c in msg.get("tool_calls") or () if self.call_name(c) not in names]
            choices.append({**choice, "message": msg})
        out["choices"] = choices
        return out

    def stream_turn(self, pager_tools: frozenset[str], round_no: int, offset: int, client_usage: bool) -> StreamTurn:
        return ChatTurn(pager_tools, round_no, offset, client_usage)


# -- Anthropic Messages --------------------------------------------------------------------


class AnthropicDialect(Dialect):
    format = "anthropic-messages"
    upstream = "anthropic"
    error_style = "anthropic"

    def session_seed(self, request: Mapping[str, Any]) -> tuple[Any, Any]:
        msgs = request.get("messages") or ()
        user = next((m.get("content") for m in msgs if isinstance(m, Mapping) and m.get("role") == "user"), None)
        return _root(_text(request.get("system")), user)

    def calls(self, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [b for b in response.get("content") or () if isinstance(b, Mapping) and b.get("type") == "tool_use"]

    def call_name(self, call: Mapping[str, Any]) -> str:
        return str(call.get("name") or "")

    def assistant_items(self, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [{"role": "assistant", "content": list(response.get("content") or ())}]

    def continue_request(self, request: dict[str, Any], items: list[dict[str, Any]], results: list[dict[str, Any]]) -> dict[str, Any]:
        out = dict(request)
        # call_tool answers in a tool_result block; the API wants them in one user turn
        blocks = [r for r in results if r.get("type") == "tool_result"]
        users = [r for r in results if r.get("role") == "user"]
        for u in users:
            blocks.extend(u.get("content") or ())
        out["messages"] = [*request["messages"], *items, {"role": "user", "content": blocks}]
        return out

    def strip_calls(self, response: dict[str, Any], names: frozenset[str]) -> dict[str, Any]:
        out = dict(response)
        out["content"] = [b for b in response.get("content") or () if not (b.get("type") == "tool_use" and b.get("name") in names)]
        return out

    def stream_turn(self, pager_tools: frozenset[str], round_no: int, offset: int, client_usage: bool) -> StreamTurn:
        return AnthropicTurn(pager_tools, round_no, offset, client_usage)


# -- OpenAI Responses ----------------------------------------------------------------------


class ResponsesDialect(Dialect):
    format = "openai-responses"
    upstream = "openai"
    error_style = "openai"
    history_key = "input"

    def session_seed(self, request: Mapping[str, Any]) -> tuple[Any, Any]:
        items = request.get("input")
        if isinstance(items, str):
            return request.get("instructions"), items
        user = next(
            (i.get("content") for i in items or () if isinstance(i, Mapping) and i.get("role") == "user"), None
        )
        return _root(request.get("instructions"), user)

    def calls(self, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [i for i in response.get("output") or () if isinstance(i, Mapping) and i.get("type") == "function_call"]

    def call_name(self, call: Mapping[str, Any]) -> str:
        return str(call.get("name") or "")

    def assistant_items(self, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        return list(response.get("output") or ())

    def continue_request(self, request: dict[str, Any], items: list[dict[str, Any]], results: list[dict[str, Any]]) -> dict[str, Any]:
        out = dict(request)
        prior = request.get("input")
        if isinstance(prior, str):
            prior = [{"role": "user", "content": prior}]
        out["input"] = [*(prior or ()), *items, *results]
        return out

    def strip_calls(self, response: dict[str, Any], names: frozenset[str]) -> dict[str, Any]:
        out = dict(response)
        out["output"] = [
            i for i in response.get("output") or () if not (i.get("type") == "function_call" and i.get("name") in names)
        ]
        return out

    def stream_turn(self, pager_tools: frozenset[str], round_no: int, offset: int, client_usage: bool) -> StreamTurn:
        return ResponsesTurn(pager_tools, round_no, offset, client_usage)


DIALECTS: dict[str, Dialect] = {}  # the proxy's model-call routes: path -> dialect


def register_dialect(path: str, dialect: Dialect) -> Dialect:
    """Serve ``dialect`` at ``path`` in proxies created from now on; its upstream must be registered."""
    if not path.startswith("/") or path in ("/v1/messages/count_tokens", "/"):
        raise ConfigError(f"a dialect's path must start with '/' and not be one the proxy serves itself: {path!r}")
    if dialect.upstream not in UPSTREAMS:
        raise ConfigError(f"dialect {type(dialect).__name__} names upstream {dialect.upstream!r}; "
                          f"register it first (known: {sorted(UPSTREAMS)})")
    DIALECTS[path] = dialect
    return dialect


register_upstream(Upstream("openai", "https://api.openai.com"))
register_upstream(Upstream("anthropic", "https://api.anthropic.com", auth_header="x-api-key", auth_scheme="",
                           client_headers=("anthropic-version", "x-api-key"), error_style="anthropic"))
register_dialect("/v1/chat/completions", OpenAIChatDialect())
register_dialect("/v1/messages", AnthropicDialect())
register_dialect("/v1/responses", ResponsesDialect())

"""The proxy's side of HTTP forwarding: the upstream client, which headers cross, SSE framing.

The upstream client's TLS context is built once per process
(``tls_context``): building one loads the CA bundle, 55-76 ms of CPU
(issue 23), and every app the process creates (each test's, each
``create_app``) would otherwise pay it again. It is the context httpx builds
by default (``verify=True``; ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` honoured
as read when it is first built), so what is verified does not change.
"""

from __future__ import annotations

import functools
import http.cookiejar
import re
import ssl
import threading
from typing import Any, Awaitable, Callable, Mapping

import httpx

__all__ = ["client_headers", "parsed_url", "split_events", "tls_context", "tracer", "upstream_client",
           "upstream_headers"]

# never forwarded upstream: hop-by-hop, recomputed, or pager's own
_DROP_REQUEST = frozenset(
    "host content-length connection keep-alive transfer-encoding te trailer upgrade "
    "proxy-authorization proxy-connection accept-encoding".split()
)
# never passed back: hop-by-hop, or no longer true of the body the client gets
_DROP_RESPONSE = frozenset(
    "content-length content-encoding transfer-encoding connection keep-alive date server".split()
)


@functools.lru_cache(maxsize=1)
def tls_context() -> ssl.SSLContext:
    """Return this process's TLS context for upstream calls (httpx's default one, built on first use)."""
    return httpx.create_ssl_context(verify=True, trust_env=True)


def upstream_client(timeout: float, connect_timeout: float) -> httpx.AsyncClient:
    """Return an upstream client: ``timeout`` between bytes, the process's TLS context, a pool of keep-alives."""
    limits = httpx.Limits(max_connections=512, max_keepalive_connections=64)
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=connect_timeout), limits=limits,
                             verify=tls_context(), cookies=_no_cookies())


def _no_cookies() -> http.cookiejar.CookieJar:
    """A cookie jar that keeps nothing.

    One client serves every agent of the proxy, and httpx keeps the cookies a
    response sets and sends them with every later request to that host: one
    client's session cookie would go upstream with everybody's requests. The
    ``Set-Cookie`` still reaches the client it was meant for (the response's
    headers are relayed), and a client's own ``Cookie`` header is forwarded.
    """
    return http.cookiejar.CookieJar(policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))


# query parameters known to carry no credential (Claude Code's ?beta=true, Azure's api-version)
_PLAIN_QUERY = re.compile(r"(?:(?:beta|api-version)=[\w.-]*(?:&|$))*")


def parsed_url(url: str) -> httpx.URL:
    """Return ``url`` parsed, once per distinct URL (an upstream, a route and its query: a handful per proxy).

    httpx parses a URL given as text on every request (~40 us, half of building one).
    A URL whose query could hold a key (``?key=...``) is parsed each time and
    not kept: credentials are forwarded, never stored.
    """
    _base, sep, query = url.partition("?")
    if sep and not _PLAIN_QUERY.fullmatch(query):
        return httpx.URL(url)
    return _parsed(url)


@functools.lru_cache(maxsize=256)
def _parsed(url: str) -> httpx.URL:
    return httpx.URL(url)


def upstream_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Return the client's headers as sent upstream (its API key among them), without hop-by-hop ones."""
    out = {k: v for k, v in headers.items() if k.lower() not in _DROP_REQUEST and not k.lower().startswith("x-pager-")}
    out["accept-encoding"] = "identity"  # events are read as they come; no gzip framing in the way
    return out


def client_headers(headers: httpx.Headers) -> dict[str, str]:
    """Return the upstream's response headers as passed back to the client."""
    return {k: v for k, v in headers.items() if k.lower() not in _DROP_RESPONSE}


def split_events(buf: bytes) -> tuple[list[bytes], bytes]:
    """Cut complete SSE events (each with its blank-line terminator) off ``buf``.

    Each byte is searched about once: the rest is not copied per event, and a
    terminator found past the current event is kept for the next one (a
    chunk of many small events cost a copy and two searches of the rest each).
    """
    events = []
    pos = 0
    lf, crlf = buf.find(b"\n\n"), buf.find(b"\r\n\r\n")
    while lf >= 0 or crlf >= 0:
        if lf >= 0 and (crlf < 0 or lf < crlf):
            end = lf + 2
        else:
            end = crlf + 4
        events.append(buf[pos:end])
        pos = end
        if 0 <= lf < pos:
            lf = buf.find(b"\n\n", pos)
        if 0 <= crlf < pos:
            crlf = buf.find(b"\r\n\r\n", pos)
    return events, (buf[pos:] if pos else buf)


def tracer(sent: threading.Event) -> Callable[[str, Any], Awaitable[None]]:
    """An httpcore ``trace`` callback that sets ``sent`` once the request body is written."""
    async def trace(event: str, _info: Any) -> None:
        if event == "http11.send_request_body.complete":
            sent.set()

    return trace

"""The proxy's forwarding costs what the request needs, not what the process already paid (issue 23).

Real uvicorn servers on loopback (the proxy and the scripted upstream). No test
reads a clock: each checks what the work *is*.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("uvicorn")

from pager.proxy import ProxyConfig, ServerThread, create_app  # noqa: E402


def _context(app: object) -> object:
    # httpx keeps the verifying context on its connection pool; the proxy builds no other
    return app.state.proxy.client._transport._pool._ssl_context  # type: ignore[attr-defined]


def test_every_app_of_a_process_verifies_upstreams_with_one_tls_context(tmp_path: Path) -> None:
    # building a context loads the CA bundle (55-76 ms of CPU): each app used to build its own
    first, second = (create_app(ProxyConfig(store=str(tmp_path / name))) for name in ("a", "b"))
    with ServerThread(first), ServerThread(second):
        ctx = _context(first)
        assert ctx is _context(second)
        assert ctx.verify_mode.name == "CERT_REQUIRED" and ctx.check_hostname  # what httpx verifies by default


def test_an_upstream_url_is_parsed_once_unless_its_query_could_hold_a_key() -> None:
    from pager.proxy.forwarding import parsed_url

    for url in ("http://127.0.0.1:9/v1/chat/completions", "http://127.0.0.1:9/v1/messages?beta=true"):
        assert parsed_url(url) is parsed_url(url) and str(parsed_url(url)) == url
    keyed = "http://127.0.0.1:9/v1/chat/completions?key=sk-secret"
    assert parsed_url(keyed) is not parsed_url(keyed) and str(parsed_url(keyed)) == keyed  # never kept

"""The proxy keeps no upstream cookie: one client's ``Set-Cookie`` never reaches another's request.

The proxy shares one upstream HTTP client among every client it serves. httpx keeps
the cookies a response sets and sends them on every later request to that host, so a
session cookie (a load balancer's affinity, a gateway's login) one client was given
went upstream with everybody's requests. Real uvicorn servers on loopback: the proxy,
and an upstream that sets a cookie and records what each request carried.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("uvicorn")

from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

from pager.proxy import ProxyConfig, ServerThread, create_app  # noqa: E402

ANSWER = {"id": "c1", "object": "chat.completion", "created": 0, "model": "m",
          "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
          "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}


def cookie_upstream() -> tuple[Starlette, list[str | None]]:
    seen: list[str | None] = []

    async def chat(request: Request) -> JSONResponse:
        seen.append(request.headers.get("cookie"))
        body = await request.json()
        owner = body["messages"][-1]["content"]
        reply = JSONResponse(ANSWER)
        reply.set_cookie("affinity", f"for-{owner}")
        return reply

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]), seen


def ask(url: str, key: str, text: str, cookie: str | None = None) -> httpx.Response:
    headers: dict[str, Any] = {"authorization": f"Bearer {key}", "x-pager-session": f"s-{key}"}
    if cookie:
        headers["cookie"] = cookie
    return httpx.post(f"{url}/v1/chat/completions", headers=headers, timeout=60,
                      json={"model": "m", "messages": [{"role": "user", "content": text}]})


def test_a_cookie_set_for_one_client_never_goes_upstream_with_another(tmp_path: Path) -> None:
    upstream, seen = cookie_upstream()
    with ServerThread(upstream) as up:
        app = create_app(ProxyConfig(store=str(tmp_path / "ctx"), upstream_openai=f"{up}/v1"))
        with ServerThread(app) as proxy:
            first = ask(proxy, "sk-alice", "alice")
            assert first.status_code == 200
            # the client that was given the cookie still gets it back from the proxy
            assert "affinity=for-alice" in first.headers.get("set-cookie", "")
            assert ask(proxy, "sk-bob", "bob").status_code == 200
            # a client that sends its own cookie has exactly that one forwarded
            assert ask(proxy, "sk-alice", "alice again", cookie="affinity=for-alice").status_code == 200
    assert seen == [None, None, "affinity=for-alice"]

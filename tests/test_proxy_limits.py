"""What the proxy refuses before paging (issue 20): a body over ``--max-body``, a call without a session header.

A real uvicorn proxy on loopback. The body cap is checked against a
``Content-Length`` before any of the body is read (the raw-socket client below
sends 1 KB of a declared 50 MB and gets its 413 at once), and while a chunked
body streams in. Errors come in the provider's own shape, read by the real SDKs.
"""

from __future__ import annotations

import socket
from typing import Any, Iterator

import orjson
import pytest

pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")
from lazy import lazy_module  # noqa: E402

anthropic = lazy_module("anthropic")  # at first use: tests/lazy.py

import pager  # noqa: E402
from pager.cli import build_parser  # noqa: E402
from pager.proxy import ProxyConfig, ServerThread, create_app  # noqa: E402
from pager.proxy.limits import DEFAULT_MAX_BODY  # noqa: E402
from proxy_upstream import make_upstream  # noqa: E402

LIMIT = 64 * 1024


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with ServerThread(make_upstream(), graceful=1.0) as url:
        yield url


@pytest.fixture
def proxy(upstream: str, tmp_path) -> Iterator[Any]:
    servers: list[ServerThread] = []

    def start(**kw: Any) -> str:
        cfg = ProxyConfig(store=str(tmp_path / "ctx"), upstream_openai=upstream, upstream_anthropic=upstream,
                          options={"context_window": 32_000}, **kw)
        servers.append(ServerThread(create_app(cfg)))
        return servers[-1].start()

    yield start
    for s in servers:
        s.stop()


def _raw(url: str, head: str, body_parts: list[bytes]) -> tuple[int, dict[str, Any]]:
    """Send a request head and some body bytes on a raw socket; return the response's status and JSON body."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(head.encode() + b"\r\n")
        for part in body_parts:
            sock.sendall(part)
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, orjson.loads(data.split(b"\r\n\r\n", 1)[1])


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 1 << 30


def _head(path: str, **headers: str) -> str:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return "\r\n".join(lines) + "\r\n"


def test_a_declared_50_mb_body_is_refused_before_it_is_read(proxy):
    url = proxy()  # the default cap, 32 MiB
    fifty = 50 * 1024 * 1024
    status, body = _raw(url, _head("/v1/chat/completions", content_length=str(fifty)), [b'{"messages": [' + b" " * 1024])
    assert status == 413  # answered with 1 KB of the 50 MB sent: nothing waited for the rest
    assert body["error"]["type"] == "invalid_request_error" and body["error"]["code"] == "pager_413"
    assert f"{fifty} bytes" in body["error"]["message"] and "--max-body" in body["error"]["message"]
    status, body = _raw(url, _head("/v1/messages", content_length=str(fifty)), [b"{"])
    assert status == 413 and body == {"type": "error", "error": {"type": "request_too_large",
                                                                  "message": body["error"]["message"]}}


def test_a_chunked_body_is_refused_once_it_passes_the_cap_while_it_streams(proxy):
    url = proxy(max_body=LIMIT)
    chunk = b" " * 16_384
    parts = [b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(LIMIT // len(chunk) + 1)]  # never the last chunk
    status, body = _raw(url, _head("/v1/chat/completions", transfer_encoding="chunked"), parts)
    assert status == 413 and f"at most {LIMIT}" in body["error"]["message"]


def test_the_sdks_read_the_413_in_their_provider_s_shape(proxy, tmp_path):
    url = proxy(max_body=LIMIT)
    big = [{"role": "user", "content": "x " * LIMIT}]
    with pytest.raises(openai.APIStatusError) as exc:
        openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0).chat.completions.create(
            model="m", messages=big)
    assert exc.value.status_code == 413 and "--max-body" in exc.value.message
    with pytest.raises(anthropic.APIStatusError) as aexc:
        anthropic.Anthropic(base_url=url, api_key="k", max_retries=0).messages.create(
            model="claude", max_tokens=10, messages=big)
    assert aexc.value.status_code == 413 and aexc.value.body["error"]["type"] == "request_too_large"
    # a body under the cap is paged and forwarded as ever; the refused ones recorded nothing
    small = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hello"}], extra_headers={"x-pager-session": "ok"})
    assert small.choices[0].message.content == "echo: hello"
    assert pager.store_sessions(tmp_path / "ctx") == ["ok"]


def test_session_header_required_refuses_a_call_without_it(proxy, tmp_path):
    url = proxy(session_header_required=True)
    msgs = [{"role": "user", "content": "hello"}]
    client = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="m", messages=msgs)
    assert exc.value.status_code == 400 and "x-pager-session" in exc.value.message
    with pytest.raises(anthropic.BadRequestError) as aexc:
        anthropic.Anthropic(base_url=url, api_key="k", max_retries=0).messages.create(
            model="claude", max_tokens=10, messages=msgs)
    assert aexc.value.body["error"]["type"] == "invalid_request_error"
    assert client.chat.completions.create(model="m", messages=msgs, extra_headers={"x-pager-session": "named"})
    assert pager.store_sessions(tmp_path / "ctx") == ["named"]  # the refused calls opened no session


def test_without_the_flag_a_call_without_the_header_is_named_from_its_messages(proxy, tmp_path):
    url = proxy()
    openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"},
                             {"role": "user", "content": "again"}])  # a one-off first call is a side request
    assert pager.store_sessions(tmp_path / "ctx")[0].startswith("proxy-")


def test_the_cli_flags_reach_the_config():
    args = build_parser().parse_args(["proxy", "--store", "x", "--max-body", "8M", "--session-header-required"])
    assert args.max_body == 8 * 1024 * 1024 and args.session_header_required
    assert build_parser().parse_args(["proxy", "--store", "x"]).max_body is None  # the config's default
    assert ProxyConfig(store="x").max_body == DEFAULT_MAX_BODY == 32 * 1024 * 1024
    with pytest.raises(SystemExit):
        build_parser().parse_args(["proxy", "--store", "x", "--max-body", "lots"])

"""Upstreams as data: a new route is a dialect plus an ``Upstream`` value, base URLs are overridable."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from pager.cli.proxy import upstream_pair  # noqa: E402
from pager.errors import ConfigError  # noqa: E402
from pager.proxy import ProxyConfig, ServerThread, create_app  # noqa: E402
from pager.proxy import dialects  # noqa: E402
from pager.proxy.dialects import OpenAIChatDialect, Upstream, register_dialect, register_upstream  # noqa: E402
from proxy_upstream import make_upstream  # noqa: E402

DEAD = "http://127.0.0.1:9"  # nothing listens: a call routed there is a 502


@pytest.fixture(scope="module")
def upstream() -> Iterator[Any]:
    app = make_upstream()
    with ServerThread(app, graceful=1.0) as url:
        yield app, url


@pytest.fixture
def registry() -> Iterator[None]:
    saved = dict(dialects.DIALECTS), dict(dialects.UPSTREAMS)
    yield
    dialects.DIALECTS.clear()
    dialects.DIALECTS.update(saved[0])
    dialects.UPSTREAMS.clear()
    dialects.UPSTREAMS.update(saved[1])


class GatewayChat(OpenAIChatDialect):
    upstream = "gateway"
    upstream_path = "/v1/chat/completions"  # the gateway serves chat where OpenAI does


def test_a_new_upstream_is_a_dialect_and_an_upstream_value(upstream, registry, tmp_path: Path):
    app_up, url = upstream
    register_upstream(Upstream("gateway", "http://127.0.0.1:1", client_headers=("x-gateway-version",)))
    register_dialect("/gateway/v1/chat/completions", GatewayChat())
    # the built-in upstreams point nowhere: only the gateway's route can answer
    cfg = ProxyConfig(store=str(tmp_path / "ctx"), upstream_openai=DEAD, upstream_anthropic=DEAD,
                      upstreams={"gateway": url + "/v1"}, options={"context_window": 32_000})
    app_up.state.seen.clear()
    with ServerThread(create_app(cfg)) as proxy:
        client = openai.OpenAI(base_url=proxy + "/gateway/v1", api_key="sk-gw", max_retries=0, timeout=20)
        resp = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hello there"}])
        assert resp.choices[0].message.content == "echo: hello there"
        path, headers, _body = app_up.state.seen[-1]
        assert path == "/v1/chat/completions" and headers["authorization"] == "Bearer sk-gw"
        # the built-in route still goes to the openai upstream (dead here)
        assert httpx.post(proxy + "/v1/chat/completions", json={"model": "m", "messages": [
            {"role": "user", "content": "hi"}]}, timeout=20).status_code == 502
        # an unrouted call goes where its client's own headers say: the gateway's has no /v1/models (404)
        assert httpx.get(proxy + "/v1/models", headers={"x-gateway-version": "1"}, timeout=20).status_code == 404
        assert httpx.get(proxy + "/v1/models", timeout=20).status_code == 502  # openai's, dead


def test_upstream_names_and_urls_are_checked():
    with pytest.raises(ConfigError, match="unknown upstream 'nowhere'"):
        ProxyConfig(store="x", upstreams={"nowhere": "http://127.0.0.1:1"})
    with pytest.raises(ConfigError, match="http"):
        ProxyConfig(store="x", upstreams={"openai": "ftp://example"})
    with pytest.raises(ConfigError, match="register it first"):
        register_dialect("/other/v1/chat/completions", GatewayChat())
    with pytest.raises(ConfigError):
        Upstream("x", "api.example.com")
    assert ProxyConfig(store="x", upstreams={"openai": "http://127.0.0.1:4000/v1/"}).upstream("openai") == (
        "http://127.0.0.1:4000")
    assert ProxyConfig(store="x").upstream("anthropic") == "https://api.anthropic.com"
    # the table wins over nothing, an override over the table
    assert ProxyConfig(store="x", upstream_openai="http://a:1", upstreams={"openai": "http://b:2"}).upstream(
        "openai") == "http://b:2"


def test_the_cli_reads_name_equals_url():
    assert upstream_pair("openai=http://127.0.0.1:4000") == ("openai", "http://127.0.0.1:4000")
    for bad in ("openai", "=http://x", "openai=x"):
        with pytest.raises(argparse.ArgumentTypeError):
            upstream_pair(bad)


def test_the_cli_loads_modules_and_refuses_unknown_upstreams_before_serving(tmp_path: Path, capsys, registry):
    from pager.cli import main

    store = str(tmp_path / "ctx")
    assert main(["proxy", "--store", store, "--load", "no_such_module_here"]) == 2
    assert "--load no_such_module_here" in capsys.readouterr().err
    assert main(["proxy", "--store", store, "--upstream", "nowhere=http://127.0.0.1:1"]) == 2
    assert "unknown upstream 'nowhere'" in capsys.readouterr().err

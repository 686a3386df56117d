"""Usage is recorded after the answer is relayed, always before the session's next ``assemble``; streams unchanged.

Real SDK clients -> a real uvicorn proxy -> the scripted upstream on loopback;
the order is read back from the store's report log.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")
from lazy import lazy_module  # noqa: E402

anthropic = lazy_module("anthropic")  # at first use: tests/lazy.py

import pager  # noqa: E402
from pager.aio import AsyncPager  # noqa: E402
from pager.proxy import ProxyConfig, ServerThread, create_app  # noqa: E402
from pager.proxy.dialects import DIALECTS  # noqa: E402
from pager.report import ReportLog  # noqa: E402
from proxy_upstream import make_upstream  # noqa: E402

KEY = "sk-test-observe"
BASH = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}}


@pytest.fixture(scope="module")
def upstream_url() -> Iterator[str]:
    with ServerThread(make_upstream(), graceful=1.0) as url:
        yield url


def _records(store: Path, kind: str) -> list[dict[str, Any]]:
    return [r for r in ReportLog(store).read() if r.get("type") == kind]


def test_usage_of_every_turn_precedes_the_next_assemble(upstream_url: str, tmp_path: Path) -> None:
    store = tmp_path / "ctx"
    cfg = ProxyConfig(store=str(store), upstream_openai=upstream_url, upstream_anthropic=upstream_url,
                      options={"context_window": 32_000})
    server = ServerThread(create_app(cfg))
    url = server.start()
    try:
        oa = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=20)
        an = anthropic.Anthropic(base_url=url, api_key=KEY, max_retries=0, timeout=20)
        chat = [{"role": "system", "content": "You are a build agent."}, {"role": "user", "content": "Build it."}]
        msgs = [{"role": "user", "content": "Deploy it."}]
        for turn in range(4):  # plain and streamed turns, back to back: each next call right after an answer
            stream = turn % 2 == 1
            head = {"x-pager-session": "chat"}
            if stream:
                text = "".join(c.choices[0].delta.content or "" for c in oa.chat.completions.create(
                    model="m", messages=chat, tools=[BASH], stream=True, extra_headers=head) if c.choices)
            else:
                text = oa.chat.completions.create(model="m", messages=chat, tools=[BASH],
                                                  extra_headers=head).choices[0].message.content
            chat += [{"role": "assistant", "content": text}, {"role": "user", "content": f"step {turn}"}]
            kw: dict[str, Any] = {"model": "m", "max_tokens": 64, "messages": msgs,
                                  "extra_headers": {"x-pager-session": "messages"}}
            if stream:
                with an.messages.stream(**kw) as s:
                    reply = s.get_final_message()
            else:
                reply = an.messages.create(**kw)
            msgs += [{"role": "assistant", "content": reply.content[0].text}, {"role": "user", "content": f"more {turn}"}]
    finally:
        server.stop()  # graceful: shutdown waits for what is still being recorded
    for session in ("chat", "messages"):
        calls = [r["call"] for r in _records(store, "assemble") if r["session"] == session]
        usage = [r["call"] for r in _records(store, "usage") if r["session"] == session]
        # a usage recorded after the next assemble would carry that call's number
        assert calls == [1, 2, 3, 4] and usage == calls, (session, calls, usage)


def test_observe_later_is_deferred_and_settle_waits_for_it(tmp_path: Path) -> None:
    cfg = ProxyConfig(store=str(tmp_path / "ctx"))
    proxy = create_app(cfg).state.proxy
    dialect = DIALECTS["/v1/chat/completions"]

    async def run() -> tuple[int, int]:
        p = AsyncPager(pager.open(tmp_path / "ctx", "s", context_window=32_000))
        try:
            await p.aassemble({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, format="openai-chat")
            proxy._observe_later(p, "s", dialect, {"usage": {"prompt_tokens": 7, "completion_tokens": 1}})
            before = len(_records(tmp_path / "ctx", "usage"))  # nothing awaited yet: not recorded on the way out
            await proxy._settle("s")
            return before, len(_records(tmp_path / "ctx", "usage"))
        finally:
            await p.aclose()
            proxy.viewer.close()

    assert asyncio.run(run()) == (0, 1)


def test_a_stream_is_relayed_byte_for_byte(upstream_url: str, tmp_path: Path) -> None:
    import httpx

    cfg = ProxyConfig(store=str(tmp_path / "ctx"), upstream_openai=upstream_url, upstream_anthropic=upstream_url,
                      options={"context_window": 32_000})
    chat = {"model": "m", "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "a longer answer, in many small events, please"}]}
    msgs = {"model": "m", "max_tokens": 64, "stream": True,
            "messages": [{"role": "user", "content": "a longer answer, in many small events, please"}]}
    head = {"authorization": f"Bearer {KEY}", "x-api-key": KEY, "anthropic-version": "2023-06-01"}
    with ServerThread(create_app(cfg)) as url:
        for path, req in (("/v1/chat/completions", chat), ("/v1/messages", msgs)):
            got = []
            for base, extra in ((upstream_url, {}), (url, {"x-pager-session": "s" + path})):
                with httpx.stream("POST", base + path, json=req, headers={**head, **extra}, timeout=20) as r:
                    got.append(b"".join(r.iter_raw()))
            assert got[0] == got[1] and got[0].count(b"\n\n") > 5, path

"""``pager proxy`` end to end: real SDK clients -> a real uvicorn proxy -> a canned upstream on loopback."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")
from lazy import lazy_module  # noqa: E402

anthropic = lazy_module("anthropic")  # at first use: tests/lazy.py

import pager  # noqa: E402
from pager.errors import ConfigError  # noqa: E402
from pager.proxy import ProxyConfig, ServerThread, check_bind, create_app  # noqa: E402
from proxy_upstream import make_upstream  # noqa: E402

KEY = "sk-test-PAGER-SECRET-7f3a9c"
BIG = "\n".join(f"line {i}: build output ZEBRA-{i} compiled module_{i}.o" for i in range(900))


@pytest.fixture(scope="module")
def upstream() -> Iterator[Any]:
    app = make_upstream()
    with ServerThread(app, graceful=1.0) as url:  # its "hang" answers never: do not wait for them
        yield app, url


@pytest.fixture
def proxy(upstream: Any, tmp_path: Path):
    app_up, url = upstream
    started: list[ServerThread] = []

    def start(**kw: Any) -> str:
        kw.setdefault("options", {"context_window": 32_000})
        cfg = ProxyConfig(store=str(tmp_path / "ctx"), upstream_openai=url, upstream_anthropic=url, **kw)
        server = ServerThread(create_app(cfg))
        started.append(server)
        return server.start()

    def stop() -> None:  # graceful: what the proxy still had to record (usage) is recorded
        for s in started:
            s.stop()

    start.stop = stop  # type: ignore[attr-defined]
    app_up.state.seen.clear()
    yield start
    stop()


def oa(url: str, **kw: Any) -> Any:
    return openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=20, **kw)


def history(turn: str = "what is in the build log?") -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are a build agent."},
        {"role": "user", "content": "Fix the build. The release code is ZEBRA-42."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\": \"make\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": BIG},
        {"role": "user", "content": turn},
    ]


BASH = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}}


def test_chat_is_paged_forwarded_and_observed(proxy, upstream, tmp_path):
    url = proxy()
    # a client with tools of its own gets pager's too (the default): the stub's handle can be opened
    resp = oa(url).chat.completions.create(model="m", messages=history(), tools=[BASH])
    assert resp.choices[0].message.content == "echo: what is in the build log?"
    assert resp.usage.prompt_tokens_details.cached_tokens == 32
    path, headers, body = upstream[0].state.seen[-1]
    assert headers["authorization"] == f"Bearer {KEY}"  # forwarded
    assert "x-pager-session" not in headers
    tool_msg = next(m for m in body["messages"] if m["role"] == "tool")
    assert len(tool_msg["content"]) < len(BIG) and "pg:" in tool_msg["content"]  # stubbed, with a handle
    assert {"bash", "expand", "recall", "note"} <= {t["function"]["name"] for t in body["tools"]}
    sessions = pager.store_sessions(tmp_path / "ctx")
    assert len(sessions) == 1 and sessions[0].startswith("proxy-")
    proxy.stop()  # usage is recorded after the answer is relayed; shutdown waits for it
    usage = [line for line in (tmp_path / "ctx").rglob("*.jsonl") for line in line.read_text().splitlines()
             if '"usage"' in line]
    assert usage and '"cached_tokens":32' in usage[-1].replace(" ", "")


def test_session_from_header_or_conversation(proxy, tmp_path):
    url = proxy()
    c = oa(url)
    c.chat.completions.create(model="m", messages=history())
    c.chat.completions.create(model="m", messages=history() + [
        {"role": "assistant", "content": "ok"}, {"role": "user", "content": "and now?"}])
    other = [{"role": "system", "content": "You are a build agent."}, {"role": "user", "content": "Another task."}]
    c.chat.completions.create(model="m", messages=other, tools=[BASH])
    c.chat.completions.create(model="m", messages=other, extra_headers={"x-pager-session": "named"})
    c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Title this chat."}])  # a side request
    sessions = pager.store_sessions(tmp_path / "ctx")
    assert "named" in sessions and len(sessions) == 3  # one per conversation, continuing turns share one


def test_streaming_passes_events_and_reads_usage(proxy, tmp_path):
    url = proxy()
    stream = oa(url).chat.completions.create(model="m", messages=history("stream it"), stream=True)
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "echo: stream it"
    assert all(c.usage is None for c in chunks)  # the usage chunk pager asked for is not shown to this client
    with_usage = list(oa(url).chat.completions.create(
        model="m", messages=history("stream it"), stream=True, stream_options={"include_usage": True}))
    assert with_usage[-1].usage.prompt_tokens == 40
    proxy.stop()  # usage is recorded after the answer is relayed; shutdown waits for it
    log = "".join(p.read_text() for p in (tmp_path / "ctx").rglob("*.jsonl"))
    assert log.count('"type":"usage"') + log.count('"type": "usage"') == 2


def test_upstream_errors_reach_the_client(proxy):
    url = proxy(timeout=1.0)
    c = oa(url)
    with pytest.raises(openai.RateLimitError) as e429:
        c.chat.completions.create(model="fault-429", messages=history())
    assert e429.value.status_code == 429 and "Rate limit reached" in e429.value.message
    assert e429.value.response.headers["retry-after"] == "7"
    with pytest.raises(openai.InternalServerError) as e500:
        c.chat.completions.create(model="fault-500", messages=history())
    assert e500.value.status_code == 500 and "server had an error" in e500.value.message
    with pytest.raises(openai.APIStatusError) as hang:
        c.chat.completions.create(model="hang", messages=history())
    assert hang.value.status_code == 504 and "timed out" in hang.value.message
    with pytest.raises(openai.RateLimitError):  # streaming: the status comes before any event
        list(c.chat.completions.create(model="fault-429", messages=history(), stream=True))
    with pytest.raises(openai.APIStatusError) as hang_stream:
        list(c.chat.completions.create(model="hang", messages=history(), stream=True))
    assert hang_stream.value.status_code == 504
    stream = c.chat.completions.create(model="hang-mid", messages=history(), stream=True)
    with pytest.raises(openai.APIError, match="timed out"):  # status already sent: an error event ends it
        list(stream)


def test_a_request_pager_cannot_page_gets_a_provider_400(proxy):
    url = proxy()
    bad = [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "nope", "content": "x"}]
    with pytest.raises(openai.BadRequestError) as exc:
        oa(url).chat.completions.create(model="m", messages=bad)
    assert exc.value.status_code == 400
    assert "pager cannot page this request" in exc.value.message and "tool_call_id" in exc.value.message


def test_tools_answered_by_the_proxy(proxy, upstream):
    url = proxy(tools=True)
    resp = oa(url).chat.completions.create(model="use-recall", messages=history("which code?"), tools=[BASH])
    msg = resp.choices[0].message
    assert msg.tool_calls is None and msg.content.startswith("tool said: ")  # only the final turn
    calls = [b for p, _h, b in upstream[0].state.seen if p == "/v1/chat/completions"]
    assert len(calls) == 2
    assert "recall" in {t["function"]["name"] for t in calls[0]["tools"]}
    answer = calls[1]["messages"][-1]
    assert answer["role"] == "tool" and "ZEBRA-42" in answer["content"]


def test_tools_answered_in_a_stream(proxy, upstream):
    url = proxy(tools=True)
    chunks = list(oa(url).chat.completions.create(model="use-recall", messages=history("which code?"), stream=True,
                                                  tools=[BASH]))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("tool said: ")
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]


def test_tool_rounds_are_bounded_and_every_round_can_open_handles(proxy, upstream):
    """A model that keeps calling recall is answered ``max_tool_rounds`` times, each request offering recall."""
    url = proxy(tools=True, max_tool_rounds=2)
    msg = oa(url).chat.completions.create(model="recall-forever", messages=history("which code?"), tools=[BASH])
    assert not msg.choices[0].message.tool_calls  # pager's calls taken out of the turn the client gets
    calls = [b for p, _h, b in upstream[0].state.seen if p == "/v1/chat/completions"]
    assert len(calls) == 3  # the client's request and two rounds answered by the proxy, then the turn goes back
    assert all("recall" in {t["function"]["name"] for t in c["tools"]} for c in calls)


def test_a_turn_mixing_pager_and_client_tools(proxy):
    url = proxy(tools=True)
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}
    resp = oa(url).chat.completions.create(model="use-both", messages=history(), tools=[weather])
    assert [c.function.name for c in resp.choices[0].message.tool_calls] == ["get_weather"]


def test_many_concurrent_sessions(proxy, tmp_path):
    url = proxy()

    async def one(client: Any, i: int) -> str:
        msgs = [{"role": "system", "content": "agent"}, {"role": "user", "content": f"task {i}"}]
        first = await client.chat.completions.create(model="m", messages=msgs, tools=[BASH])
        msgs += [{"role": "assistant", "content": first.choices[0].message.content}, {"role": "user", "content": f"more {i}"}]
        stream = await client.chat.completions.create(model="m", messages=msgs, stream=True, tools=[BASH])
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    async def main() -> list[str]:
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=60) as client:
            return await asyncio.gather(*(one(client, i) for i in range(50)))

    answers = asyncio.run(main())
    assert answers == [f"echo: more {i}" for i in range(50)]
    assert len(pager.store_sessions(tmp_path / "ctx")) == 50


def test_count_tokens_is_answered_locally(proxy, upstream):
    url = proxy()
    client = anthropic.Anthropic(base_url=url, api_key=KEY, max_retries=0)
    small = client.messages.count_tokens(model="claude-x", messages=[{"role": "user", "content": "hi"}])
    big = client.messages.count_tokens(model="claude-x", system="You are terse.",
                                       messages=[{"role": "user", "content": BIG}])
    assert 0 < small.input_tokens < 20 < 1000 < big.input_tokens
    assert not upstream[0].state.seen  # never reached the upstream


def test_anthropic_sdk_through_the_proxy(proxy, upstream):
    url = proxy(tools=True)
    client = anthropic.Anthropic(base_url=url, api_key=KEY, max_retries=0)
    msgs = [{"role": "user", "content": "The release code is ZEBRA-42."},
            {"role": "assistant", "content": "Noted."}, {"role": "user", "content": "which code?"}]
    resp = client.messages.create(model="m", max_tokens=100, system="You are terse.", messages=msgs)
    assert resp.content[0].text == "echo: which code?"
    sent = upstream[0].state.seen[-1][1]
    assert KEY in (sent.get("x-api-key"), sent.get("authorization", "").removeprefix("Bearer "))  # forwarded
    read = {"name": "Read", "input_schema": {"type": "object", "properties": {}}}
    tooled = client.messages.create(model="use-recall", max_tokens=100, system="You are terse.", messages=msgs,
                                    tools=[read])
    assert [b.type for b in tooled.content] == ["text"] and tooled.content[0].text.startswith("tool said: ")
    with client.messages.stream(model="use-recall", max_tokens=100, system="You are terse.", messages=msgs,
                                tools=[read]) as s:
        final = s.get_final_message()
    assert [b.type for b in final.content] == ["text", "text"]  # "Let me look." then the answer
    assert final.content[1].text.startswith("tool said: ")
    orphan = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope", "content": "x"}]}]
    with pytest.raises(anthropic.BadRequestError) as bad:  # Anthropic's error shape, naming the problem
        client.messages.create(model="m", max_tokens=10, system="You are terse.", messages=orphan)
    assert bad.value.body["error"]["type"] == "invalid_request_error"
    assert "pager cannot page this request" in bad.value.body["error"]["message"]
    with pytest.raises(anthropic.RateLimitError) as exc:
        client.messages.create(model="fault-429", max_tokens=10, system="You are terse.", messages=msgs)
    assert exc.value.status_code == 429 and "Number of requests exceeded" in str(exc.value)


def test_responses_through_the_proxy(proxy):
    url = proxy(tools=True)
    c = oa(url)
    items = [{"role": "user", "content": "The code is ZEBRA-42. Which code?"}]
    resp = c.responses.create(model="m", instructions="Be terse.", input=items)
    assert resp.output_text == "echo: The code is ZEBRA-42. Which code?"
    shell = {"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {}}}
    tooled = c.responses.create(model="use-recall", instructions="Be terse.", tools=[shell],
                                input=[{"role": "user", "content": "The code is ZEBRA-42. Which code?"}])
    assert tooled.output_text.startswith("tool said: ")
    events = list(c.responses.create(model="use-recall", instructions="Be terse.", stream=True, tools=[shell],
                                     input=[{"role": "user", "content": "The code is ZEBRA-42. Which code?"}]))
    done = [e for e in events if e.type == "response.completed"]
    assert len(done) == 1 and done[0].response.output_text.startswith("tool said: ")


def test_credentials_never_stored_or_logged(proxy, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    url = proxy(tools=True, timeout=1.0)
    c = oa(url)
    c.chat.completions.create(model="use-recall", messages=history())
    list(c.chat.completions.create(model="m", messages=history(), stream=True))
    for model in ("fault-429", "hang"):
        with pytest.raises(openai.APIStatusError):
            c.chat.completions.create(model=model, messages=history())
    files = [p for p in (tmp_path / "ctx").rglob("*") if p.is_file()]
    assert files
    for p in files:
        assert KEY.encode() not in p.read_bytes(), p
    assert KEY not in caplog.text
    assert "session=proxy-" in caplog.text  # the proxy did log its requests


def test_graceful_shutdown_finishes_in_flight_requests(upstream, tmp_path):
    _app, up = upstream
    _app.state.seen.clear()
    server = ServerThread(create_app(ProxyConfig(store=str(tmp_path / "ctx"), upstream_openai=up)))
    url = server.start()
    out: dict[str, Any] = {}

    def call() -> None:
        try:
            out["resp"] = oa(url).chat.completions.create(model="slow", messages=history())
        except Exception as exc:  # noqa: BLE001 - reported below
            out["error"] = exc

    t = threading.Thread(target=call)
    t.start()
    while not _app.state.seen:  # the request reached the upstream: it is in flight
        threading.Event().wait(0.01)
    server.stop()
    t.join(30)
    assert "error" not in out, out.get("error")
    assert out["resp"].choices[0].message.content.startswith("echo:")
    assert pager.store_sessions(tmp_path / "ctx")  # shutdown closed the sessions cleanly


def test_binding_beyond_loopback_needs_a_flag(caplog):
    check_bind("127.0.0.1", False)
    check_bind("::1", False)
    with pytest.raises(ConfigError, match="--allow-remote"):
        check_bind("0.0.0.0", False)
    with caplog.at_level(logging.WARNING, logger="pager.proxy"):
        check_bind("0.0.0.0", True)
    assert "any host that reaches it" in caplog.text

"""The leak suite's proxy leg: what an agent behind ``pager proxy`` sees of other sessions' pages.

A real uvicorn proxy per reader identity (``owner`` in its options, as
``pager proxy --owner`` sets it) in front of a canned upstream on loopback, the
real ``openai`` SDK as the client, on a SQLite store and on a real PostgreSQL
server. The model calls pager's ``recall`` tool with each secret word; the
tool result the proxy sends back upstream must name the page's handle exactly
when the reader may read it. Automatic recall: the prompt the proxy forwards
for a question naming every secret carries exactly the readable pages.
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest

pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from proxy_upstream import make_upstream  # noqa: E402
from test_pools import COMBOS, cases, populate, secret  # noqa: E402

from pager.proxy import ProxyConfig, ServerThread, create_app  # noqa: E402

PROXY_READERS = [("s2", "alice"), ("s3", "bob"), ("s4", None)]


@pytest.fixture(scope="module")
def upstream() -> Iterator[Any]:
    app = make_upstream()
    with ServerThread(app, graceful=1.0) as url:
        yield app, url


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def shared_store(request, tmp_path_factory) -> Iterator[str]:
    """The store every proxy and writer shares, populated by the writers: its folder or URL.

    One per backend for the module (populating is ~0.5 s of CPU): each test's readers
    use session names of their own, and what they record has the default scope (``session``:
    seen by that session alone), so no test reads another's pages; the handles checked are
    the writers'.
    """
    if request.param == "sqlite":
        where = str(tmp_path_factory.mktemp("pools-proxy") / "ctx")
    else:
        where = request.getfixturevalue("pg_module_schema")
    from pager.session import open_store

    store = open_store(where)
    try:
        yield where, populate(store)
    finally:
        store.close()


def _proxy(where: str, upstream_url: str, owner: str | None) -> ServerThread:
    options: dict[str, Any] = {"context_window": 32_000, "recall_min_strength": 0,
                               "recall_pages": 2 * len(COMBOS), "recall_tokens": 20_000}
    if owner:
        options["owner"] = owner
    cfg = ProxyConfig(store=where, upstream_openai=upstream_url, upstream_anthropic=upstream_url, tools=True,
                      options=options)
    return ServerThread(create_app(cfg))


SEARCH = {"type": "function", "function": {"name": "grep", "parameters": {"type": "object", "properties": {}}}}


def test_through_the_proxy_the_visible_set_is_exactly_the_specified_one(upstream, shared_store):
    app_up, url = upstream
    where, handles = shared_store
    words = " ".join(secret(n, what) for n in range(len(COMBOS)) for what in ("page", "note"))
    checked = 0
    for reader in PROXY_READERS:
        server = _proxy(where, url, reader[1])
        base = server.start()
        try:
            client = openai.OpenAI(base_url=base + "/v1", api_key="sk-test", max_retries=0, timeout=30)
            # automatic recall: one question naming every secret
            app_up.state.seen.clear()
            client.chat.completions.create(
                model="echo", messages=[{"role": "system", "content": "agent"},
                                        {"role": "user", "content": f"what do we know about {words}?"}],
                tools=[SEARCH],  # with pager's tools, recalled pages show their handles
                extra_headers={"x-pager-session": f"{reader[0]}-auto"})
            (forwarded,) = [b for p, _h, b in app_up.state.seen if p == "/v1/chat/completions"]
            prompt = "\n".join(str(m.get("content")) for m in forwarded["messages"])
            # the recall tool, one secret at a time
            for n, _reader, want in cases([reader]):
                for what, handle in zip(("page", "note"), handles[n]):
                    case = (*COMBOS[n], reader, what)
                    assert (f'handle="{handle}"' in prompt) == want, (*case, "automatic recall via the proxy")
                    app_up.state.seen.clear()
                    resp = client.chat.completions.create(
                        model="recall-user", messages=[{"role": "system", "content": "agent"},
                                                       {"role": "user", "content": secret(n, what)}],
                        tools=[SEARCH],  # pager's tools go to requests that have tools of their own
                        extra_headers={"x-pager-session": f"{reader[0]}-{n}-{what}"})
                    assert resp.choices[0].message.content.startswith("tool said: ")
                    sent = [b for p, _h, b in app_up.state.seen if p == "/v1/chat/completions"]
                    answer = sent[-1]["messages"][-1]
                    assert answer["role"] == "tool", case
                    assert (handle in answer["content"]) == want, (*case, "recall tool via the proxy")
                    checked += 1
        finally:
            server.stop()
    assert checked == len(PROXY_READERS) * len(COMBOS) * 2


@pytest.mark.parametrize("session", ["pool:repo6", "pool:repo8", "alice"])
def test_a_session_named_like_a_pool_or_an_owner_reads_neither_through_the_proxy(upstream, shared_store, session):
    """Issue 20: on a proxy run as ``--owner mallory``, ``x-pager-session: pool:repo8`` is only a session name."""
    app_up, url = upstream
    where, handles = shared_store
    server = _proxy(where, url, "mallory")
    base = server.start()
    try:
        client = openai.OpenAI(base_url=base + "/v1", api_key="sk-test", max_retries=0, timeout=30)
        for n, _reader, want in cases([(session, "mallory")]):
            for what, handle in zip(("page", "note"), handles[n]):
                app_up.state.seen.clear()
                client.chat.completions.create(
                    model="recall-user", messages=[{"role": "system", "content": "agent"},
                                                   {"role": "user", "content": secret(n, what)}],
                    tools=[SEARCH], extra_headers={"x-pager-session": session})
                sent = [b for p, _h, b in app_up.state.seen if p == "/v1/chat/completions"]
                answer = sent[-1]["messages"][-1]
                assert answer["role"] == "tool"
                assert (handle in answer["content"]) == want, (*COMBOS[n], session, what)
    finally:
        server.stop()

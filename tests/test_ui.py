"""``pager ui``: every page and JSON endpoint over a real store, read-only, escaped, live; and under the proxy.

The store is made by running the real facade (``assemble`` and ``observe``)
over a synthetic coding-agent session, on SQLite and on a real PostgreSQL
server; the app is the real ASGI app, driven by Starlette's TestClient (and
the proxy's by a real uvicorn). Browser checks are bench/check_ui.py.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient  # noqa: E402

import pager  # noqa: E402
from pager.core.messages import message_text  # noqa: E402
from pager.errors import StoreError  # noqa: E402
from pager.lab.synth import generate_session  # noqa: E402
from pager.ui import open_view, standalone  # noqa: E402

HOSTILE = '<script>window.pwned=1</script><img src=x onerror="alert(1)">'


def _run(where: str, session: str = "agent", steps: int = 30) -> list[list[tuple[Any, str]]]:
    """Run pager over a synthetic session with usage; return every call's emitted prompt (role, text)."""
    _head, msgs = generate_session(5, steps)
    prompts = []
    with pager.open(where, session, 40_000, high_watermark=9_000, low_watermark=3_000) as p:
        prev = 0
        for i, m in enumerate(msgs):
            if m["role"] != "assistant" or i < 2:
                continue
            out = p.assemble({"model": "m", "messages": msgs[:i]})
            prompts.append([(x.get("role"), message_text(x)) for x in out["messages"]])
            r = p.last_report
            cached = min(prev if r.prefix_kept else r.layers["l1"], r.tokens)
            p.observe({"input_tokens": 0, "cache_read_input_tokens": cached,
                       "cache_creation_input_tokens": r.tokens - cached, "output_tokens": 50},
                      format="anthropic-messages")
            prev = r.tokens
    with pager.open(where, HOSTILE, 40_000) as q:
        q.assemble({"model": "m", "messages": [{"role": "system", "content": "s"},
                                               {"role": "user", "content": "look at " + HOSTILE}]})
    return prompts


@pytest.fixture(params=["sqlite", "postgres"])
def where(request, tmp_path) -> str:
    return str(tmp_path / "ctx") if request.param == "sqlite" else request.getfixturevalue("pg_dsn")


@pytest.fixture
def made(where) -> Iterator[tuple[str, list, TestClient]]:
    prompts = _run(where)
    view = open_view(where)
    try:
        with TestClient(standalone(view, store_name="test store")) as client:
            yield where, prompts, client
    finally:
        view.close()


def _snapshot(where: str) -> dict[str, Any]:
    from pager.session import open_store

    store = open_store(where, must_exist=True)
    try:
        out: dict[str, Any] = {"max": store.max_page_id(), "count": store.count_pages(), "sessions": store.sessions()}
        for s in store.sessions():
            with store.transaction():
                out[f"version:{s}"] = store.lock_session(s)
            out[f"state:{s}"] = store.load_state(s)
            out[f"options:{s}"] = store.setting(f"options:{s}")
            recs = store.load_pages(store.branch_page_ids(store.ensure_session(s)))
            out[f"stats:{s}"] = [(r.id, r.ref_count, r.last_ref, r.stale, r.scope) for r in recs]
        return out
    finally:
        store.close()


def test_every_page_and_endpoint_on_a_real_store(made):
    where, prompts, client = made
    sqlite = "://" not in where
    before = _snapshot(where)
    r = client.get("/pager/")
    assert r.status_code == 200 and "script-src 'self'" in r.headers["content-security-policy"]
    assert len(re.findall(r'<tr tabindex="0" data-href="session\?s=', r.text)) == 2
    api = client.get("/pager/api/sessions")
    d = api.json()
    agent = next(s for s in d["sessions"] if s["session"] == "agent")
    assert agent["calls"] == len(prompts) and agent["pages"] > 30 and agent["history_tokens"] > 0
    assert agent["faults"] is not None and agent["last_activity"] and agent["budget"]
    if sqlite:  # the report log: usage and the full-resend estimate beside it
        cost = agent["cost"]
        assert cost["calls_with_usage"] == len(prompts) and 0 < cost["cost"] < cost["full"]
        assert cost["pricing"] == "anthropic" and 0 < cost["saving"] < 1
        assert agent["prompt_tokens"] > 0
    # polling is cheap: the same tag answers 304 with no body
    etag = api.headers["etag"]
    again = client.get("/pager/api/sessions", headers={"If-None-Match": etag})
    assert again.status_code == 304 and not again.content
    page = client.get("/pager/session?s=agent")
    assert page.status_code == 200
    assert 'tabindex="0"' in page.text and 'id="live-part"' in page.text and 'class="pagemap"' in page.text
    s = client.get("/pager/api/session?s=agent").json()
    assert len([p for p in s["pages"] if p["row"] is not None]) == agent["pages"]
    frag = client.get("/pager/api/session?s=agent&live=1").json()  # what the page's script polls
    assert frag["target"] == "live-part" and 'class="pagemap"' in frag["html"] and frag["tag"] == s["tag"]
    rows = client.get("/pager/api/sessions?live=1").json()
    assert rows["target"] == "rows" and rows["html"].count("<tr tabindex") == 2 and "all sessions" in rows["html"]
    states = {p["state"] for p in s["pages"]}
    assert "full" in states and states <= {"full", "stubbed", "recalled", "indexed", "dropped", "card"}
    hostile = client.get("/pager/api/session", params={"s": HOSTILE}).json()
    assert {p["state"] for p in hostile["pages"]} <= {"full", "dropped", "card"}
    assert all(p["heat"] is not None for p in s["pages"] if p["row"] is not None)
    assert page.text.count('class="blk') == len(s["pages"])
    if sqlite:
        assert len(s["calls"]) == len(prompts) and any(c["round"] for c in s["calls"])
        assert page.text.count('class="bar"') == len(prompts)
        c0 = s["calls"][-1]
        assert set(c0["layers"]) >= {"l1", "l2", "stubs", "l3", "tools"} and c0["high"] >= c0["low"]
        assert c0["usage"]["prompt_tokens"] == c0["tokens"] and c0["layout"]
        call = client.get(f"/pager/call?s=agent&n={len(prompts)}")
        assert call.status_code == 200 and "The prompt the model got" in call.text
        assert 'rel="prev"' in call.text
        cj = client.get(f"/pager/api/call?s=agent&n={len(prompts)}").json()
        assert cj["prompt"] and {m["state"] for m in cj["request"]} <= {"l1", "full", "stubbed", "dropped", "recalled",
                                                                         "indexed"}
    else:  # no report log on a database server: calls are counted, and the last prompt is rebuilt from the state
        assert s["calls"] == [] and s["latest"] == len(prompts) and "the last prompt (call" in page.text
        last = client.get(f"/pager/api/call?s=agent&n={len(prompts)}").json()
        assert last["from_state"] and [(m["role"], m["text"]) for m in last["prompt"]] == prompts[-1]
        assert client.get(f"/pager/call?s=agent&n={len(prompts)}").status_code == 200
        assert client.get("/pager/api/call?s=agent&n=1").status_code == 404  # earlier calls: not kept
    pid = s["pages"][1]["page"]
    pj = client.get(f"/pager/api/page?s=agent&id={pid}").json()
    assert pj["page"] == pid and pj["text"] and pj["kind"]
    assert client.get(f"/pager/page?s=agent&id={pid}").status_code == 200
    word = re.findall(r"[a-z_]{6,}", pj["text"])[0]
    hits = client.get(f"/pager/api/search?q={word}").json()["hits"]
    assert hits and all(h["session"] in ("agent", HOSTILE) for h in hits)
    assert 'data-href="page?s=' in client.get(f"/pager/search?q={word}").text
    # unknown things are 404, bad parameters 400, and nothing answers a write
    assert client.get("/pager/api/session?s=nobody").status_code == 404
    assert client.get("/pager/api/page?s=agent&id=99999999").status_code == 404
    assert client.get("/pager/api/call?s=agent&n=x").status_code == 400
    assert client.post("/pager/api/sessions").status_code == 405
    assert client.get("/pager/static/ui.js").status_code == 200
    assert _snapshot(where) == before  # browsing wrote nothing: versions, states, statistics all unchanged


def test_every_calls_prompt_is_rebuilt_as_the_model_got_it(tmp_path):
    where = str(tmp_path / "ctx")
    prompts = _run(where, steps=40)
    view = open_view(where)
    try:
        calls = view.session("agent")["calls"]
        assert sum(c["round"] for c in calls) >= 2  # rounds rewrite the layout: the replay crosses them
        for n, want in enumerate(prompts, start=1):
            got = view.call("agent", n)["prompt"]
            assert [(m["role"], m["text"]) for m in got] == want, f"call {n}"
    finally:
        view.close()


def test_hostile_page_text_is_escaped_everywhere(made):
    where, _prompts, client = made
    listing = client.get("/pager/").text
    assert HOSTILE not in listing and "&lt;script&gt;window.pwned=1&lt;/script&gt;" in listing
    s = client.get("/pager/api/session", params={"s": HOSTILE}).json()
    page = next(p for p in s["pages"] if p["kind"] == "user")
    for url in (f"/pager/page?id={page['page']}", "/pager/session", "/pager/call?n=1"):
        r = client.get(url, params={"s": HOSTILE})
        assert r.status_code in (200, 404)
        assert "<script>window.pwned" not in r.text and "onerror=\"alert" not in r.text
    text = client.get("/pager/page", params={"s": HOSTILE, "id": page["page"]}).text
    assert "look at &lt;script&gt;" in text
    # the JSON carries the text as data, for the panel's textContent
    assert client.get("/pager/api/page", params={"s": HOSTILE, "id": page["page"]}).json()["text"].endswith(HOSTILE)
    # the only script a page runs is the app's own file
    assert re.findall(r"<script[^>]*>", listing) == ['<script src="static/ui.js" defer>']


def test_the_store_is_opened_read_only(tmp_path):
    where = str(tmp_path / "ctx")
    _run(where, steps=6)
    view = open_view(where)
    try:
        with pytest.raises(StoreError):
            view.store.save_state("agent", {})
        with pytest.raises(StoreError):
            view.store.set_setting("x", "y")
        with pytest.raises(Exception, match="readonly|read-only|query_only"):
            view.store._store._db.execute("DELETE FROM settings")  # PRAGMA query_only on the connection
    finally:
        view.close()


def test_new_calls_appear_without_a_reload(tmp_path):
    where = str(tmp_path / "ctx")
    _run(where, steps=6)
    view = open_view(where, min_interval=0)  # every poll sees the store as it is
    try:
        with TestClient(standalone(view, store_name="t")) as client:
            first = client.get("/pager/api/session?s=agent&live=1")
            n = len(client.get("/pager/api/session?s=agent").json()["calls"])
            tag = first.headers["etag"]
            assert client.get("/pager/api/session?s=agent&live=1", headers={"If-None-Match": tag}).status_code == 304
            with pager.open(where, "agent") as p:
                _h, msgs = generate_session(5, 6)
                p.assemble({"model": "m", "messages": msgs + [{"role": "user", "content": "one more thing"}]})
            later = client.get("/pager/api/session?s=agent&live=1", headers={"If-None-Match": tag})
            assert later.status_code == 200 and f'data-call="{n + 1}"' in later.json()["html"]
            assert len(client.get("/pager/api/session?s=agent").json()["calls"]) == n + 1
    finally:
        view.close()


def test_a_changed_store_is_queried_again_only_after_the_interval(tmp_path):
    where = str(tmp_path / "ctx")
    _run(where, steps=6)
    view = open_view(where, min_interval=3600)
    try:
        before = view.session("agent")
        with pager.open(where, "agent") as p:
            _h, msgs = generate_session(5, 6)
            p.assemble({"model": "m", "messages": msgs + [{"role": "user", "content": "one more thing"}]})
        assert view.session("agent") is before and view.sessions()[0] == before["tag"]  # within the interval
        view.min_interval = 0
        after = view.session("agent")
        assert after["tag"] != before["tag"] and len(after["calls"]) == len(before["calls"]) + 1
    finally:
        view.close()


def test_the_report_tail_follows_a_rotated_log(tmp_path):
    from pager.report import ReportLog
    from pager.ui.source import ReportTail

    log = ReportLog(tmp_path, max_bytes=300, keep=2)
    tail = ReportTail(tmp_path)
    seen = []
    for i in range(40):
        log.append({"type": "assemble", "session": "s", "call": i, "pad": "x" * 40})
        if i % 3 == 0:
            seen += tail.poll()
    seen += tail.poll()
    calls = [r["call"] for r in seen]
    assert calls == sorted(set(calls)) and calls[-1] == 39 and len(calls) >= 38  # at most what rotated away unread


def test_the_acl_view_shows_what_recall_may(tmp_path):
    from test_pools import COMBOS, READERS, cases, populate, secret

    where = str(tmp_path / "ctx")
    from pager.session import open_store

    store = open_store(where)
    populate(store)
    store.close()
    for reader in READERS:
        view = open_view(where, reader=reader[0], owner=reader[1])
        try:
            _tag, sessions = view.sessions()
            names = {s["session"] for s in sessions}
            for n, who, want in cases([reader]):
                hits = view.search(secret(n), shared=True)
                assert bool(hits) == want, (reader, COMBOS[n])
                assert (f"w{n}" in names) == (want or f"w{n}" == reader[0]), (reader, COMBOS[n])
                if f"w{n}" in names:
                    d = view.session(f"w{n}")
                    texts = [view.page(f"w{n}", p["page"])["text"] for p in d["pages"]]
                    assert any(secret(n) in t for t in texts) == want
                    assert (d["calls"] == []) or f"w{n}" == reader[0]
            # over HTTP too: a page the reader may not read is not found, whoever asks for it by id
            hidden = [(f"w{n}", r.id) for n, _who, want in cases([reader]) if not want
                      for r in view.store.load_pages(view.store.branch_page_ids(view.store.head(f"w{n}")))]
            with TestClient(standalone(view, store_name="t")) as client:
                for session, pid in hidden:
                    assert client.get("/pager/api/page", params={"s": session, "id": pid}).status_code == 404
                    assert client.get("/pager/page", params={"s": session, "id": pid}).status_code == 404
                if hidden:
                    assert client.get("/pager/api/call", params={"s": hidden[0][0], "n": 1}).status_code == 404
        finally:
            view.close()


def test_the_proxy_serves_the_pages_under_pager(tmp_path):
    from pager.proxy import ProxyConfig, create_app

    where = str(tmp_path / "ctx")
    app = create_app(ProxyConfig(store=where))
    with TestClient(app) as client:
        _run(where, steps=4)
        r = client.get("/pager/")
        assert r.status_code == 200 and "agent" in r.text
        assert client.get("/pager/api/session?s=agent").json()["summary"]["calls"] >= 1
        assert client.post("/pager/api/sessions").status_code == 405


def test_cli_registers_ui():
    from pager.cli import build_parser

    args = build_parser().parse_args(["ui", "somewhere", "--port", "9999", "--as", "s", "--owner", "o"])
    assert (args.store, args.port, args.reader, args.owner, args.host) == ("somewhere", 9999, "s", "o", "127.0.0.1")


def test_under_uvicorn_many_viewers_read_while_an_agent_writes(tmp_path):
    import concurrent.futures

    import httpx

    from pager.proxy import ServerThread

    where = str(tmp_path / "ctx")
    _run(where, steps=8)
    view = open_view(where)
    _h, msgs = generate_session(5, 8)
    urls = ["/pager/", "/pager/api/sessions?live=1", "/pager/session?s=agent", "/pager/api/session?s=agent&live=1",
            "/pager/api/call?s=agent&n=2", "/pager/api/page?s=agent&id=2", "/pager/api/search?q=pytest"]
    try:
        with ServerThread(standalone(view, store_name="t")) as base:
            def browse(k: int) -> list[int]:
                with httpx.Client(base_url=base, timeout=30) as c:
                    return [c.get(urls[(k + i) % len(urls)]).status_code for i in range(3 * len(urls))]

            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                viewers = [pool.submit(browse, k) for k in range(4)]
                with pager.open(where, "agent") as p:  # the agent goes on meanwhile
                    for i in range(3):
                        p.assemble({"model": "m", "messages": msgs + [{"role": "user", "content": f"more {i}"}]})
                codes = [c for f in viewers for c in f.result()]
            assert codes and set(codes) == {200}
    finally:
        view.close()


def test_a_rollover_session_is_drawn_with_its_own_layers(tmp_path):
    where = str(tmp_path / "ctx")
    _h, msgs = generate_session(4, 30)
    with pager.open(where, "roll", 30_000, mode="rollover") as p:
        for i, m in enumerate(msgs):
            if m["role"] == "assistant" and i > 1:
                p.assemble({"model": "m", "messages": msgs[:i]})
    view = open_view(where)
    try:
        with TestClient(standalone(view, store_name="t")) as client:
            page = client.get("/pager/session?s=roll").text
            d = client.get("/pager/api/session?s=roll").json()
            assert any(c["layers"].get("notices") for c in d["calls"]) and ">notices</span>" in page
            assert {p["state"] for p in d["pages"]} == {"unknown"}  # rollover keeps no paging layout
            call = client.get("/pager/call?s=roll&n=3")
            assert call.status_code == 200 and "not in the report log" in call.text
    finally:
        view.close()

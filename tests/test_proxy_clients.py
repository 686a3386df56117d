"""Real clients' request sequences replayed through a real uvicorn proxy to a canned upstream.

Each capture is a client's requests in the order it sent them: the ones
``bench/clients`` recorded from the real Claude Code, Codex and opencode
(``tests/data/clients/*.jsonl.gz``), and hand-made ones in each client's shape
(``client_shapes``). Replayed through ``pager proxy`` with a small window (so
pages are stubbed), the upstream must see:

- one session per conversation: requests grouped by the proxy's session are
  exactly the conversations, found independently as chains of requests whose
  history extends an earlier one's (marks and item ids aside);
- no fork and no "history diverged": a request that extends the recorded
  history extends it (a moved cache mark is not an edit), and the prompt
  prefix stays kept between rounds;
- no handle without a tool to open it: a prompt showing a ``pg:`` handle
  offers ``expand``; with ``--no-tools`` no handle at all;
- no refused re-read left: a tool result saying "file unchanged since your
  last Read" reaches the model with the file;
- compaction and side requests forwarded byte for byte, recorded nowhere;
- each recalled page once per prompt.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

import orjson  # noqa: E402

import pager  # noqa: E402
from pager.proxy import ProxyConfig, ServerThread, create_app  # noqa: E402
from client_shapes import HAND_MADE  # noqa: E402
from proxy_upstream import make_upstream  # noqa: E402

KEY = "sk-test-CLIENTS-0d9e"
DATA = Path(__file__).parent / "data" / "clients"
HANDLE = re.compile(r"\bpg:\d+-[0-9a-f]{6}\b")
RECALLED = re.compile(r'<page handle="(pg:\d+-[0-9a-f]{6})"')
# the clients' "you already have this file" replies (Claude Code's read cache, and its kin)
REFUSED = re.compile(r"unchanged since (your )?last read|has not changed since last read", re.IGNORECASE)


def is_refusal(content: Any) -> bool:
    text = content if isinstance(content, str) else "\n".join(_texts(content))
    return len(text) < 600 and not text.startswith("[pager:") and REFUSED.search(text) is not None


MODEL_ROUTES = ("/v1/messages", "/v1/responses", "/v1/chat/completions")
# what a replay must not resend as captured: recomputed for the body sent now
HOP = frozenset({"host", "content-length", "transfer-encoding", "connection", "accept-encoding"})
COMPACTION = ("create a detailed summary of the conversation so far", "detailed summary of the recent portion",
              "context checkpoint compaction", "provide a detailed prompt for continuing our conversation")


def load_capture(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    lines = [orjson.loads(x) for x in (gzip.decompress(raw) if path.suffix == ".gz" else raw).splitlines() if x.strip()]
    records = [r for r in lines[1:] if r.get("method", "POST") == "POST" and r.get("path") in MODEL_ROUTES
               and isinstance(r.get("body"), dict)]
    return {"header": lines[0], "records": records}


def kind_of(record: dict[str, Any]) -> str:
    """Return ``conversation``, ``compaction`` or ``side`` (the capture's own label, the bed's ``main`` too)."""
    body = record["body"]
    items = body.get("input") if "input" in body else body.get("messages")
    last = next((i for i in reversed(items) if isinstance(i, dict) and i.get("role") == "user"), None) \
        if isinstance(items, list) else None
    if last is not None and any(m in "\n".join(_texts(last.get("content"))).lower() for m in COMPACTION):
        return "compaction"
    return "conversation" if record.get("kind", "conversation") in ("conversation", "main") else "side"


def captures() -> list[Any]:
    out = [pytest.param(make, id=f"hand-made-{name}") for name, make in HAND_MADE.items()]
    for path in sorted(DATA.glob("*.jsonl*")):  # what the clients sent (the bed's "direct" mode)
        out.append(pytest.param(lambda p=path: load_capture(p), id=path.name.split(".")[0]))
    return out


# -- an oracle for conversations, apart from the proxy's own identity code ---------------------------


def _plain(value: Any, top: bool = True) -> Any:
    if isinstance(value, dict):
        skip = {"cache_control"} | ({"id", "status"} if top and "type" in value and "call_id" in value
                                    or top and value.get("type") in ("reasoning", "message") else set())
        return {k: _plain(v, False) for k, v in value.items() if k not in skip}
    if isinstance(value, list):
        return [_plain(v, False) for v in value]
    return value


def _history(body: dict[str, Any]) -> tuple[Any, list[Any]]:
    items = body.get("input") if "input" in body else body.get("messages")
    items = [{"role": "user", "content": items}] if isinstance(items, str) else list(items or ())
    system = _plain(body.get("system") if "system" in body else body.get("instructions"))
    return system, [_plain(i) for i in items]


def conversations(records: list[dict[str, Any]]) -> list[int]:
    """Number each conversation request by its conversation: a request extending an earlier one's history joins it."""
    seen: list[tuple[Any, list[Any], int]] = []
    out = []
    for r in records:
        system, items = _history(r["body"])
        best = None
        for s, prev, conv in seen:
            if s == system and len(prev) <= len(items) and items[: len(prev)] == prev:
                if best is None or len(prev) > best[0]:
                    best = (len(prev), conv)
        conv = best[1] if best else len({c for *_x, c in seen})
        seen.append((system, items, conv))
        out.append(conv)
    return out


# -- what the upstream was sent --------------------------------------------------------------------


def _texts(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _texts(v)
    elif isinstance(value, list):
        for v in value:
            yield from _texts(v)


def tool_results(body: dict[str, Any]) -> Iterator[Any]:
    for m in body.get("messages") or ():
        if m.get("role") == "tool":
            yield m.get("content")
        elif isinstance(m.get("content"), list):
            for b in m["content"]:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    yield b.get("content")
    for it in body.get("input") or () if isinstance(body.get("input"), list) else ():
        if isinstance(it, dict) and str(it.get("type", "")).endswith("_output"):
            yield it.get("output")


def tool_names(body: dict[str, Any]) -> set[str]:
    return {(t.get("function") or t).get("name") for t in body.get("tools") or () if isinstance(t, dict)}


@pytest.fixture(scope="module")
def upstream() -> Iterator[Any]:
    app = make_upstream()
    with ServerThread(app, graceful=1.0) as url:
        yield app, url


def reports(store: Path) -> list[dict[str, Any]]:
    path = store / "reports.jsonl"
    data = path.read_bytes() if path.exists() else b""
    # complete lines only: the previous answer's usage line may be being appended right now (it is
    # recorded after that answer is relayed); the call's own report line was written before its answer
    lines = data[: data.rfind(b"\n") + 1].splitlines()
    return [r for r in map(orjson.loads, lines) if r.get("type") == "assemble"]


def replay(capture: dict[str, Any], upstream: Any, store: Path, tools: bool = True) -> tuple[list[Any], list[Any]]:
    """Send the capture's requests through a fresh proxy in order.

    Returns the bodies the upstream got (one per request) and, per request, the
    session pager recorded it in (None: recorded nowhere).
    """
    app_up, url = upstream
    app_up.state.seen.clear()
    window = 16_000 if capture["header"].get("source") == "hand-made" else 96_000  # real tools lists are big
    cfg = ProxyConfig(store=str(store), upstream_openai=url, upstream_anthropic=url, tools=tools,
                      options={"context_window": window})
    sessions: list[str | None] = []
    with ServerThread(create_app(cfg)) as base, httpx.Client(base_url=base, timeout=60) as client:
        assert client.head("/").status_code == 200  # clients probe it first
        for r in capture["records"]:
            auth = {"x-api-key": KEY} if r["path"] == "/v1/messages" else {"authorization": f"Bearer {KEY}"}
            headers = {k: v for k, v in r["headers"].items() if k.lower() not in HOP}
            before = len(reports(store))
            resp = client.post(r["path"], content=orjson.dumps(r["body"]), headers={**headers, **auth})
            assert resp.status_code == 200, (r["path"], resp.text[:500])
            new = reports(store)[before:]
            sessions.append(new[-1]["session"] if new else None)
    seen = [b for p, _h, b in app_up.state.seen]
    assert len(seen) == len(capture["records"])  # one upstream call each: no tool rounds here
    return seen, sessions


@pytest.mark.parametrize("make", captures())
def test_a_client_through_the_proxy(make, upstream, tmp_path):
    capture = make()
    records = capture["records"]
    store = tmp_path / "ctx"
    seen, recorded = replay(capture, upstream, store)
    kinds = [kind_of(r) for r in records]
    talk = [i for i, k in enumerate(kinds) if k == "conversation"]
    # compaction and tool-less side requests: forwarded as sent; no side request joins a conversation
    for i, k in enumerate(kinds):
        if k == "compaction" or (k == "side" and not records[i]["body"].get("tools")):
            assert seen[i] == records[i]["body"] and recorded[i] is None, (i, k)
    # one session per conversation, found apart from the proxy's identity code
    truth = conversations([records[i] for i in talk])
    expected = capture["header"].get("conversations")
    if expected is not None:  # a count (hand-made) or the bed's list of conversation tags
        assert len(set(truth)) == (len(expected) if isinstance(expected, list) else expected)
    by_session: dict[Any, set[int]] = {}
    for i, conv in zip(talk, truth):
        by_session.setdefault(recorded[i], set()).add(conv)
    assert None not in by_session  # every conversation request was paged
    assert all(len(c) == 1 for c in by_session.values()), by_session  # no session holds two conversations
    assert len(by_session) == len(set(truth))  # no conversation is split
    assert not {recorded[i] for i, k in enumerate(kinds) if k != "conversation"} & set(by_session)
    # no fork, no diverged history, the prefix kept between rounds
    reps = reports(store)
    with pager.open(store, next(iter(by_session))) as p:
        for name in by_session:
            assert len(p.store.branches(name)) == 1, name
    assert not [r for r in reps if r["reason"] == "history diverged"]
    last: dict[str, dict[str, Any]] = {}
    for r in reps:  # between rounds only the tail of the last prompt may change (its big output, now a stub)
        prev = last.get(r["session"])
        if prev is not None and not r["reason"] and r["changed_from"] is not None:
            assert r["changed_from"] >= prev["messages_out"] - 2, (r["session"], r["call"], r["changed_from"])
        last[r["session"]] = r
    stubbed = 0
    for i in talk:
        body = seen[i]
        handles = {h for t in _texts(body.get("messages") or body.get("input")) for h in HANDLE.findall(t)}
        if handles:  # a handle the model sees, and the tool that opens it
            stubbed += 1
            assert "expand" in tool_names(body), (i, sorted(handles)[:3])
        recalled = [h for t in _texts(body.get("messages") or body.get("input")) for h in RECALLED.findall(t)]
        assert len(recalled) == len(set(recalled)), recalled
        # a refused re-read reaches the model with the file
        assert not [c for c in tool_results(body) if is_refusal(c)], i
    if capture["header"].get("source") == "hand-made":
        assert stubbed, "the window was too large to page anything: the checks above saw no stub"
    for i in talk:  # where a refusal is the newest result, the model reads the file there
        results = list(tool_results(records[i]["body"]))
        if not results or not is_refusal(results[-1]):
            continue
        served = list(tool_results(seen[i]))[-1]
        assert "answered this read from its cache" in str(served), i
        assert len(str(served)) > 1000, i  # the file, not the refusal


@pytest.mark.parametrize("make", captures())
def test_without_pager_tools_no_stub_points_at_a_missing_tool(make, upstream, tmp_path):
    capture = make()
    seen, _recorded = replay(capture, upstream, tmp_path / "ctx", tools=False)
    rereads = 0
    for body, r in zip(seen, capture["records"]):
        text = "\n".join(_texts(body.get("messages") or body.get("input")))
        assert not HANDLE.search(text) or HANDLE.search("\n".join(_texts(r["body"]))), "a handle with no expand"
        assert "expand(" not in text
        assert tool_names(body) == tool_names(r["body"])  # nothing added
        rereads += text.count("re-read it with")
    assert rereads, "no file read was stubbed for re-reading"


def test_two_codex_conversations_at_once_stay_apart(upstream, tmp_path):
    """Two Codex conversations in one directory, sent at the same time: two sessions, nothing shared."""
    import threading

    from client_shapes import codex

    records = codex()["records"]
    app_up, url = upstream
    app_up.state.seen.clear()
    store = tmp_path / "ctx"
    cfg = ProxyConfig(store=str(store), upstream_openai=url, upstream_anthropic=url,
                      options={"context_window": 16_000})
    errors: list[Any] = []
    with ServerThread(create_app(cfg)) as base:
        def drive(key: str) -> None:
            with httpx.Client(base_url=base, timeout=60) as client:
                for r in records:
                    if r["body"]["prompt_cache_key"] == key:
                        resp = client.post(r["path"], content=orjson.dumps(r["body"]),
                                           headers={**r["headers"], "authorization": f"Bearer {KEY}"})
                        if resp.status_code != 200:
                            errors.append(resp.text)

        keys = sorted({r["body"]["prompt_cache_key"] for r in records})
        threads = [threading.Thread(target=drive, args=(k,)) for k in keys]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    assert not errors
    sessions = pager.store_sessions(store)
    assert len(sessions) == 2
    for name in sessions:
        with pager.open(store, name) as p:
            assert len(p.store.branches(name)) == 1
            text = "\n".join(orjson.dumps(p.store.message(pid)[1]).decode() for pid in p.history.page)
        # each session holds one conversation's pages only: recall in one cannot reach the other's reads
        assert ("parser" in text) != ("lexer" in text), name
    for _p, _h, body in app_up.state.seen:
        text = orjson.dumps(body).decode()
        assert ("PARSE-5" in text) != ("LEX-9" in text)  # no prompt mixes the two

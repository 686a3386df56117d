"""The proxy's ASGI application (Starlette), forwarding with httpx.

Theory of operation
-------------------
A model call arrives on a route that names its wire format
(``/v1/chat/completions``, ``/v1/messages``, ``/v1/responses``). Its body is
parsed in proportion to what is new since the conversation's previous request
(``bodies``: the resent history's objects are the previous ones). A client's
compaction request and its short tool-less side requests (titles, topic
detection) are forwarded untouched and not recorded (``clients``). Otherwise
the proxy names the session (``sessions.session_for``: ``x-pager-session``, the
client's own conversation key, else the conversation's root), serves refused
re-reads (``clients.serve_refusals``), runs ``assemble`` on it in a worker
thread, and sends the rewritten request upstream with the client's own headers
(its API key among them: forwarded, never kept). The response's usage goes to
``observe``.

Non-streaming responses come back whole. Streams pass through event by event
as they arrive (``dialects.StreamTurn``); usage is read from the final events.
With ``tools`` on (the default), pager's recall / expand / note are added to
every request that has tools of its own, so every stub can be opened; a turn
that calls only those is answered by the proxy and continued upstream, so the
client sees one turn. A request without them (``--no-tools``, or a client
with no tools) is paged so that only file reads the client's own tools can
redo are stubbed, and the stub says which tool to use. Errors: the upstream's status and body go back
unchanged; what the proxy cannot do itself (a request pager cannot page, an
upstream that timed out or cannot be reached) gets the provider's error shape
(``replies``). Every upstream call has a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from typing import Any, AsyncIterator, Mapping

import attrs
import httpx
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route

from pager.errors import BudgetError, InputError, PagerError
from pager.formats.base import formats, get_format
from pager.proxy.forwarding import client_headers, parsed_url, tracer, upstream_client, upstream_headers
from pager.proxy.forwarding import split_events as _split_events  # tests/test_proxy_streams imports it from here
from pager.proxy.gcpolicy import after_startup, defer_sweeps, sweep_if_due
from pager.proxy.bodies import BodyCache
from pager.proxy.clients import passthrough_kind, serve_refusals
from pager.proxy.dialects import (DIALECTS, UPSTREAMS, Dialect, base_url, check_upstreams,
                                  upstream_for)
from pager.proxy.limits import DEFAULT_MAX_BODY, Refused, read_body, session_refusal
from pager.proxy.replies import error_body, stream_error_event
from pager.proxy.sessions import SESSION_HEADER, SessionPool, session_for
from pager.proxy.timings import Phases, TimingLog, timed_early

__all__ = ["ProxyConfig", "create_app"]

log = logging.getLogger("pager.proxy")

DEFAULT_OPENAI = UPSTREAMS["openai"].base_url
DEFAULT_ANTHROPIC = UPSTREAMS["anthropic"].base_url


@attrs.frozen(slots=True)
class ProxyConfig:
    """How the proxy runs. ``options`` go to ``pager.open`` for every session."""

    store: str
    upstream_openai: str | None = None  # None: UPSTREAMS["openai"] (DEFAULT_OPENAI)
    upstream_anthropic: str | None = None  # None: UPSTREAMS["anthropic"] (DEFAULT_ANTHROPIC)
    tools: bool = True
    timeout: float = 600.0  # seconds between bytes of an upstream response (models can think a while)
    connect_timeout: float = 10.0
    max_tool_rounds: int = 8  # a model opening lost pages one per turn (bench/clients' serial) needs 6
    max_open_sessions: int = 256
    options: Mapping[str, Any] = attrs.field(factory=dict)
    max_body: int = DEFAULT_MAX_BODY  # bytes; a bigger body gets a 413 before it is read (pager.proxy.limits)
    session_header_required: bool = False  # a request without x-pager-session gets a 400
    upstreams: Mapping[str, str] = attrs.field(factory=dict, validator=check_upstreams)  # name -> base URL
    timings: str | None = None  # a file: one JSON line per model call with its phases (pager.proxy.timings)

    def upstream(self, which: str) -> str:
        """Return the base URL of upstream ``which`` (``upstreams`` first, then the two named fields)."""
        named = {k: v for k, v in (("openai", self.upstream_openai), ("anthropic", self.upstream_anthropic)) if v}
        return base_url(which, {**named, **self.upstreams})


async def _joined(done: "asyncio.Future[Any]") -> None:
    """Wait for an ``aassemble_early`` call's rest to run; its failure is ``_finish_later``'s to log."""
    if not done.done():
        await asyncio.wait([done])


class _Proxy:
    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self.client: httpx.AsyncClient | None = None
        self.pool = SessionPool(config.store, config.options, config.max_open_sessions)
        self.bodies = BodyCache()  # a resent history is not parsed again (pager.proxy.bodies)
        self.refusals: dict[Any, Any] = {}  # nor searched for refused re-reads again
        from pager.proxy.counting import CountMemo

        self.counts = CountMemo()  # nor counted again by count_tokens
        self._counting = asyncio.Lock()
        self.viewer: Any = None
        self._observing: dict[str, asyncio.Task[None]] = {}  # each session's usage still being recorded
        self._scanning: asyncio.Task[None] | None = None  # item boundaries of a body parsed whole (bodies)
        self.timings = TimingLog(config.timings) if config.timings else None

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.client = upstream_client(self.config.timeout, self.config.connect_timeout)
        await self.pool.warm()  # imports, tokenizer, store and index: not on the first request
        after_startup()  # in `pager proxy`'s own process: what it holds now is never walked again
        defer_sweeps()  # and a collection that walks everything waits until no model call is in flight
        if self.timings is not None:
            self.timings.open()
        try:
            yield
        finally:
            # uvicorn calls this after in-flight requests finished (graceful shutdown)
            await asyncio.gather(*self._observing.values(), *([self._scanning] if self._scanning else []),
                                 return_exceptions=True)
            await self.client.aclose()
            await self.pool.aclose()
            self.viewer.close()
            if self.timings is not None:
                self.timings.close()

    # -- model calls ----------------------------------------------------------------------

    async def model_call(self, request: Request) -> Response:
        t0 = time.perf_counter()
        ph = self.timings.begin() if self.timings is not None else None
        dialect = DIALECTS[request.url.path]
        refused = session_refusal(request.headers, SESSION_HEADER, self.config.session_header_required)
        body = refused or await read_body(request, self.config.max_body)
        if isinstance(body, Refused):
            return self._error(dialect, body.status, body.message)
        if ph is not None:
            ph.mark("read")
        try:
            req = self.bodies.parse(body, dialect.history_key, request.url.path)
        except orjson.JSONDecodeError as exc:
            return self._error(dialect, 400, f"request body is not valid JSON: {exc}")
        if ph is not None:
            ph.mark("parse")
        if not isinstance(req, dict):
            return self._error(dialect, 400, "request body must be a JSON object")
        if dialect.format not in formats():
            return self._error(dialect, 400, f"pager cannot page this request: this build has no {dialect.format!r} "
                                             f"wire format (it has {sorted(formats())})")
        stream = bool(req.get("stream"))
        kind = passthrough_kind(dialect.format, req, len(body), named=SESSION_HEADER in request.headers,
                                helper=request.headers.get("x-stainless-helper", ""))
        if kind is not None:
            try:  # untouched, but still a request pager could read: a malformed one is the client's 400
                get_format(dialect.format).to_messages(req)
            except InputError as exc:
                return self._error(dialect, 400, f"pager cannot page this request: {exc}")
            return await self._forward(request, body, dialect, stream, kind, t0)
        name = session_for(dialect.session_seed(req), req, request.headers)
        try:
            p = await self.pool.acquire(name)
        except PagerError as exc:
            log.error("cannot open session %s: %s", name, exc)
            return self._error(dialect, 500, f"pager cannot open session {name!r}: {exc}")
        released = False
        sent = threading.Event()  # the request is written upstream: the call's rest may run (aassemble_early)
        try:
            await self._settle(name)
            served = serve_refusals(dialect.format, req, self.refusals, conversation=name)
            expose = self.config.tools and bool(req.get("tools"))
            try:
                # the request comes back as soon as it is rendered; the COMMIT, checkpoint files and report
                # line follow in the same worker once it is written upstream (AsyncPager.aassemble_early)
                if ph is None:
                    out, done = await p.aassemble_early(req, format=dialect.format, expose_tools=expose,
                                                        reread_only=not expose, hold=sent)
                else:
                    ph.mark("session")
                    out, done = await p.aassemble_early(req, format=dialect.format, expose_tools=expose,
                                                        reread_only=not expose, hold=sent,
                                                        wrap=functools.partial(timed_early, ph))
                    ph.mark("assembled")
                    ph.info.update(format=dialect.format, session=name, stream=stream, bytes_in=len(body))
            except (InputError, BudgetError) as exc:
                return self._error(dialect, 400, f"pager cannot page this request: {exc}")
            except PagerError as exc:  # the store or the index failed: not the client's fault
                log.error("assemble failed in session %s: %s", name, exc)
                return self._error(dialect, 500, f"pager failed to page this request: {exc}")
            self._finish_later(p, name, done, ph)
            if served:
                log.info("session=%s served %d refused re-read(s)", name, served)
            added = self._added_tools(p, dialect, req) if expose else frozenset()
            client_usage = dialect.prepare(out, stream)
            url = self._url(dialect, request)
            headers = upstream_headers(request.headers)
            if stream:
                resp = await self._send(url, out, headers, stream=True, style=dialect.error_style, ph=ph, sent=sent)
                if isinstance(resp, Response):
                    return resp
                if resp.status_code >= 400:
                    return await self._passthrough_error(resp)
                released = True  # the stream releases the session when it ends
                gen = self._stream(p, name, dialect, url, headers, out, resp, added, client_usage, t0, ph, done)
                return StreamingResponse(gen, status_code=resp.status_code, headers=client_headers(resp.headers))
            answer = await self._complete(p, name, dialect, url, headers, out, added, t0, ph, sent)
            await _joined(done)  # the answer goes back once the call is recorded: usually long since
            if ph is not None:
                ph.info["status"] = answer.status_code
                self.timings.end(ph, done)  # type: ignore[union-attr]
            return answer
        finally:
            sent.set()  # whatever happened to the request, the call's rest goes on
            if not released:
                self._release(name)

    def _release(self, name: str) -> None:
        """Release session ``name``; once no model call is in flight, run a due full sweep of the heap (gcpolicy).

        Scheduled, not run here: the answer's last bytes are written in this
        task step, and the sweep runs after it, unless a call came in since.
        """
        self.pool.release(name)
        if self.pool.idle():
            asyncio.get_running_loop().call_soon(lambda: self.pool.idle() and sweep_if_due())

    def _url(self, dialect: Dialect, request: Request) -> str:
        # the query too: Claude Code posts to /v1/messages?beta=true
        query = "?" + request.url.query if request.url.query else ""
        return self.config.upstream(dialect.upstream) + (dialect.upstream_path or request.url.path) + query

    def _added_tools(self, p: Any, dialect: Dialect, req: Mapping[str, Any]) -> frozenset[str]:
        if not self.config.tools:
            return frozenset()
        fmt = get_format(dialect.format)
        client = {fmt.tool_name(t) for t in req.get("tools") or ()}
        return frozenset(t["function"]["name"] for t in p.pager.tools(format="openai-chat")) - client

    async def _forward(self, request: Request, body: bytes, dialect: Dialect, stream: bool, kind: str,
                       t0: float) -> Response:
        """Send a compaction or side request upstream as the client wrote it, and its answer back as is."""
        url = self._url(dialect, request)
        resp = await self._send(url, body, upstream_headers(request.headers), stream=True, style=dialect.error_style)
        if isinstance(resp, Response):
            return resp

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for chunk in resp.aiter_bytes():
                    yield chunk
            finally:
                await resp.aclose()
                log.info("%s %s request forwarded untouched status=%d stream=%s ms=%.1f", dialect.format, kind,
                         resp.status_code, stream, (time.perf_counter() - t0) * 1000.0)

        return StreamingResponse(relay(), status_code=resp.status_code, headers=client_headers(resp.headers))

    async def _send(self, url: str, payload: Mapping[str, Any] | bytes, headers: Mapping[str, str], *, stream: bool,
                    style: str = "openai", ph: Phases | None = None,
                    sent: threading.Event | None = None) -> httpx.Response | Response:
        """POST ``payload`` upstream; ``sent`` is set once its body is written (httpcore's ``trace`` extension)."""
        assert self.client is not None
        content = payload if isinstance(payload, bytes) else orjson.dumps(payload)
        extensions = {"trace": tracer(sent)} if sent is not None else None
        req = self.client.build_request("POST", parsed_url(url), content=content, extensions=extensions,
                                        headers={**headers, "content-type": "application/json"})
        if ph is not None and "serialised" not in ph.marks:  # the first round's
            ph.mark("serialised")
            ph.info["bytes_out"] = len(content)
        try:
            resp = await self.client.send(req, stream=stream)
            if ph is not None and "headers" not in ph.marks:
                ph.mark("headers")
            return resp
        except httpx.TimeoutException:
            return self._error_style(style, 504, f"upstream {url} timed out after {self.config.timeout:g}s")
        except httpx.TransportError as exc:
            return self._error_style(style, 502, f"upstream {url} unreachable: {type(exc).__name__}")
        finally:
            if sent is not None:
                sent.set()

    async def _complete(self, p: Any, name: str, dialect: Dialect, url: str, headers: Mapping[str, str],
                        out: dict[str, Any], added: frozenset[str], t0: float, ph: Phases | None = None,
                        sent: threading.Event | None = None) -> Response:
        rounds = 0
        while True:
            resp = await self._send(url, out, headers, stream=False, style=dialect.error_style, ph=ph,
                                    sent=sent if not rounds else None)
            if isinstance(resp, Response):
                return resp
            if resp.status_code >= 400:
                return await self._passthrough_error(resp)
            try:
                data = orjson.loads(resp.content)
            except orjson.JSONDecodeError:
                return Response(resp.content, status_code=resp.status_code, headers=client_headers(resp.headers))
            calls = dialect.calls(data) if added else []
            ours = [c for c in calls if dialect.call_name(c) in added]
            if ours and len(ours) == len(calls) and rounds < self.config.max_tool_rounds:
                await self._observe(p, dialect, data)  # this round's usage, before pager's tools run
                results = [await p.acall_tool(c, format=dialect.format) for c in ours]
                out = dialect.continue_request(out, dialect.assistant_items(data), results)
                rounds += 1
                continue
            self._observe_later(p, name, dialect, data)
            if ours:  # a turn mixing pager's calls with the client's: the client sees its own only
                data = dialect.strip_calls(data, added)
            self._log(dialect, name, resp.status_code, t0, False, rounds)
            if rounds or ours:
                return Response(orjson.dumps(data), status_code=resp.status_code, headers=client_headers(resp.headers),
                                media_type="application/json")
            return Response(resp.content, status_code=resp.status_code, headers=client_headers(resp.headers))

    async def _stream(self, p: Any, name: str, dialect: Dialect, url: str, headers: Mapping[str, str],
                      out: dict[str, Any], resp: httpx.Response, added: frozenset[str], client_usage: bool,
                      t0: float, ph: Phases | None = None, done: Any = None) -> AsyncIterator[bytes]:
        round_no = offset = 0
        if ph is not None:
            ph.mark("streaming")
        try:
            while True:
                turn = dialect.stream_turn(added, round_no, offset, client_usage)
                buf = b""
                async for chunk in resp.aiter_bytes():
                    if ph is not None and "upstream_first" not in ph.marks:
                        ph.mark("upstream_first")
                    events, buf = _split_events(buf + chunk)
                    # one write for what one read completed: the same bytes, fewer sends through the ASGI stack
                    relay = b"".join([piece for event in events for piece in turn.feed(event)])
                    if relay:
                        if ph is not None and "first" not in ph.marks:
                            ph.mark("first")
                        if turn.ended and done is not None:
                            # the terminal event goes out once the call is recorded: an SSE client stops
                            # reading there, before the connection closes (its first byte did not wait)
                            await _joined(done)
                        yield relay
                if buf.strip():
                    tail = turn.feed(buf)
                    if turn.ended and done is not None:
                        await _joined(done)
                    for piece in tail:
                        yield piece
                await resp.aclose()
                calls = turn.calls() if added else []
                ours = [c for c in calls if dialect.call_name(c) in added]
                if ours and len(ours) == len(calls) and round_no < self.config.max_tool_rounds:
                    if turn.usage is not None:  # this round's usage, before pager's tools run
                        await self._observe(p, dialect, turn.usage)
                    results = [await p.acall_tool(c, format=dialect.format) for c in ours]
                    out = dialect.continue_request(out, turn.assistant_items(), results)
                    offset += turn.forwarded
                    round_no += 1
                    nxt = await self._send(url, out, headers, stream=True, style=dialect.error_style)
                    if isinstance(nxt, Response):
                        yield stream_error_event(dialect.error_style, nxt.status_code, bytes(nxt.body).decode())
                        return
                    resp = nxt
                    if resp.status_code >= 400:
                        body = (await resp.aread()).decode("utf-8", "replace")
                        yield stream_error_event(dialect.error_style, resp.status_code, body)
                        return
                    continue
                held = b"".join(turn.flush())
                if turn.usage is not None:
                    # queued before the stream's end goes out: the client's next call finds it recorded
                    self._observe_later(p, name, dialect, turn.usage)
                if done is not None:
                    await _joined(done)  # the response ends once the call is recorded (its first byte did not wait)
                if held:
                    yield held
                self._log(dialect, name, 200, t0, True, round_no)
                return
        except httpx.TimeoutException:
            yield stream_error_event(dialect.error_style, 504, f"upstream {url} timed out after {self.config.timeout:g}s")
        except httpx.TransportError as exc:
            yield stream_error_event(dialect.error_style, 502, f"upstream {url} failed mid-stream: {type(exc).__name__}")
        finally:
            await resp.aclose()
            self._release(name)
            if ph is not None and self.timings is not None:
                ph.info["status"] = resp.status_code
                self.timings.end(ph, done)

    def _finish_later(self, p: Any, name: str, done: "asyncio.Future[Any]", ph: Phases | None) -> None:
        """Watch the rest of an ``assemble`` whose request is on its way upstream (``aassemble_early``).

        The session's next call runs after it (the session's lock). A failure
        is logged here: the client already has its answer coming, and its next
        request, which resends the whole history, records the messages again.
        """
        def finished(f: "asyncio.Future[Any]") -> None:
            exc = None if f.cancelled() else f.exception()
            if ph is not None and exc is None:  # a failed call has no report: the last one is another call's
                report = p.pager.last_report
                ph.info.update(assemble_ms=getattr(report, "elapsed_ms", None), round=getattr(report, "round", None))
            if exc is not None:
                log.error("session %s: the request went upstream but recording it failed (%s: %s); nothing of "
                          "this call was kept, the next request records its messages again", name,
                          type(exc).__name__, exc)

        done.add_done_callback(finished)

    def _observe_later(self, p: Any, name: str, dialect: Dialect, response: Any) -> None:
        """Record a turn's usage after its answer is relayed: off the client's path.

        The task takes the session's lock at its first step, before the client
        can have read the answer, and the session's next call awaits it
        (``_settle``): usage is always recorded before the next ``assemble``.
        Shutdown awaits what is still pending.
        """
        task = asyncio.get_running_loop().create_task(self._observe(p, dialect, response))
        self._observing[name] = task
        jobs = self.bodies.take_pending()
        if jobs:  # a body parsed whole: its item boundaries, found off the next request's path
            self._scanning = asyncio.get_running_loop().create_task(self._find_bounds(jobs))

        def done(t: asyncio.Task[None]) -> None:
            if self._observing.get(name) is t:
                del self._observing[name]
            if not t.cancelled() and t.exception() is not None:
                log.error("usage not recorded in session %s: %r", name, t.exception())

        task.add_done_callback(done)

    async def _find_bounds(self, jobs: list[Any]) -> None:
        self.bodies.set_bounds(await asyncio.to_thread(self.bodies.find_bounds, jobs))

    async def _settle(self, name: str) -> None:
        """Wait until session ``name``'s last usage is recorded (``_observe_later``)."""
        task = self._observing.get(name)
        if task is not None:
            await asyncio.wait([task])

    async def _observe(self, p: Any, dialect: Dialect, response: Any) -> None:
        try:
            await p.aobserve(response, format=dialect.format)
        except PagerError as exc:
            # a usage shape pager does not know must not cost the client its answer
            log.warning("usage not recorded for %s: %s", dialect.format, exc)

    async def _passthrough_error(self, resp: httpx.Response) -> Response:
        body = await resp.aread()
        await resp.aclose()
        return Response(body, status_code=resp.status_code, headers=client_headers(resp.headers))

    def _error(self, dialect: Dialect, status: int, message: str) -> Response:
        return self._error_style(dialect.error_style, status, message)

    @staticmethod
    def _error_style(style: str, status: int, message: str) -> Response:
        return JSONResponse(error_body(style, status, message), status_code=status)

    @staticmethod
    def _log(dialect: Dialect, name: str, status: int, t0: float, stream: bool, rounds: int) -> None:
        # never headers or bodies: the client's key and content stay out of logs
        log.info(
            "%s session=%s status=%d stream=%s tool_rounds=%d ms=%.1f",
            dialect.format, name, status, stream, rounds, (time.perf_counter() - t0) * 1000.0,
        )

    # -- other routes ---------------------------------------------------------------------

    async def count_tokens(self, request: Request) -> Response:
        """Answer Anthropic's ``count_tokens`` locally, with pager's own counter."""
        body = await read_body(request, self.config.max_body)
        if isinstance(body, Refused):
            return self._error_style("anthropic", body.status, body.message)
        try:
            req = self.bodies.parse(body, "messages", request.url.path)
        except orjson.JSONDecodeError as exc:
            return self._error_style("anthropic", 400, f"request body is not valid JSON: {exc}")
        if not isinstance(req, dict) or not isinstance(req.get("messages"), list):
            return self._error_style("anthropic", 400, "count_tokens needs a 'messages' list")
        from pager.proxy.counting import count_request

        # the memo is only touched here, in one worker at a time
        async with self._counting:
            n = await asyncio.to_thread(count_request, req, self.counts)
        return JSONResponse({"input_tokens": n})

    async def passthrough(self, request: Request) -> Response:
        """Forward any other ``/v1`` call (model lists and the like) untouched."""
        assert self.client is not None
        up = upstream_for(request.headers)
        style = up.error_style
        url = self.config.upstream(up.name) + request.url.path
        if request.url.query:
            url += "?" + request.url.query
        body = await read_body(request, self.config.max_body)
        if isinstance(body, Refused):
            return self._error_style(style, body.status, body.message)
        req = self.client.build_request(request.method, url, content=body, headers=upstream_headers(request.headers))
        try:
            resp = await self.client.send(req)
        except httpx.TimeoutException:
            return self._error_style(style, 504, f"upstream {url} timed out")
        except httpx.TransportError as exc:
            return self._error_style(style, 502, f"upstream {url} unreachable: {type(exc).__name__}")
        return Response(resp.content, status_code=resp.status_code, headers=client_headers(resp.headers))


async def _root(request: Request) -> Response:
    return Response("pager proxy\n", media_type="text/plain")


def create_app(config: ProxyConfig) -> Starlette:
    """Return the proxy as an ASGI application (serve it with uvicorn; see ``pager.proxy.serve``)."""
    proxy = _Proxy(config)
    routes = [Route(path, proxy.model_call, methods=["POST"]) for path in DIALECTS]
    routes.insert(0, Route("/v1/messages/count_tokens", proxy.count_tokens, methods=["POST"]))
    routes.append(Route("/v1/{rest:path}", proxy.passthrough, methods=["GET", "POST", "DELETE"]))
    routes.append(Route("/", _root, methods=["GET", "HEAD"]))  # clients probe it before their first call
    from pager.ui.app import Mounted

    proxy.viewer = Mounted(config.store)  # `pager ui`'s read-only pages at /pager/, for loopback clients
    routes.append(Mount("/pager", app=proxy.viewer))
    app = Starlette(routes=routes, lifespan=proxy.lifespan)
    app.state.proxy = proxy
    return app

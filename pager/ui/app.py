"""The viewer's ASGI application (Starlette, the proxy's own stack): HTML pages and their JSON.

Routes, relative to where the app is mounted (``/pager/`` under ``pager ui``
and under ``pager proxy``)::

    /                    sessions            /api/sessions
    /session?s=NAME      one session         /api/session?s=NAME
    /call?s=NAME&n=N     one call's prompt   /api/call?s=NAME&n=N
    /page?s=NAME&id=ID   one page's text     /api/page?s=NAME&id=ID
    /search?q=WORDS      search              /api/search?q=WORDS
    /static/ui.css, /static/ui.js

GET (and HEAD) only: nothing here writes. The live endpoints answer with an
``ETag`` that changes with the store; a poll sending it back in
``If-None-Match`` gets ``304`` and costs no query beyond that tag. Every
response carries a Content-Security-Policy that runs no script but
``static/ui.js`` and loads nothing from elsewhere.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route

import pager.ui.pages as pages
from pager.ui.assets import CSS, JS
from pager.ui.data import View, open_view
from pager.ui.source import store_label

__all__ = ["CSP", "create_app", "standalone"]

CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'self'")
_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
            "Cache-Control": "no-cache"}


class _BadRequest(Exception):
    pass


def _json(data: Any, status: int = 200, etag: str | None = None) -> Response:
    headers = dict(_HEADERS)
    if etag:
        headers["ETag"] = f'"{etag}"'
    return Response(orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS), status_code=status,
                    media_type="application/json", headers=headers)


def _int(request: Request, name: str) -> int:
    try:
        return int(request.query_params[name])
    except (KeyError, ValueError):
        raise _BadRequest(f"{name} must be a whole number") from None


def _session(request: Request) -> str:
    s = request.query_params.get("s")
    if not s:
        raise _BadRequest("s (the session) is missing")
    return s


def _not_modified(request: Request, tag: str) -> bool:
    return request.headers.get("if-none-match", "").strip() in (f'"{tag}"', f'W/"{tag}"')


class _Viewer:
    """The viewer's endpoints over one ``View``: pages, their JSON, and the live fragments they poll."""

    def __init__(self, view: View, store_name: str) -> None:
        self.view, self.store_name = view, store_name
        if view.reader is None:
            self.viewer = "everything in the store"
        else:
            self.viewer = f"as session {view.reader.session}" + (
                f" (owner {view.reader.owner})" if view.reader.owner else "")
        self.rendered: dict[tuple[str, str], bytes] = {}  # (what, tag) -> the live fragment, shared by every viewer

    def html(self, title: str, body: str, page: str, live: str = "", tag: str = "") -> HTMLResponse:
        out = pages.shell(title, self.store_name, self.viewer, body, page=page, live=live)
        if tag:
            out = out.replace('data-live="', f'data-tag="&quot;{tag}&quot;" data-live="', 1)
        return HTMLResponse(out, headers=_HEADERS)

    def guarded(self, fn: Callable[[Request], Response], api: bool) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:
            try:
                return fn(request)
            except _BadRequest as exc:
                return _json({"error": str(exc)}, 400) if api else self.html("bad request", f"<h1>{exc}</h1>", "error")
            except KeyError:
                what = "not found (or not this viewer's to read)"
                return _json({"error": what}, 404) if api else HTMLResponse(
                    pages.shell("not found", self.store_name, self.viewer, f'<h1>Not found</h1><p class="note">{what}. '
                                '<a href="./">All sessions</a></p>', page="error"), 404, headers=_HEADERS)
        return endpoint

    def live(self, request: Request, key: str, tag: str, data: Callable[[], dict[str, Any]],
             fragment: Callable[[], tuple[str, str]]) -> Response:
        if _not_modified(request, tag):
            return Response(status_code=304, headers={**_HEADERS, "ETag": f'"{tag}"'})
        if request.query_params.get("live") != "1":
            return _json(data(), etag=tag)
        body = self.rendered.get((key, tag))
        if body is None:
            target, html_ = fragment()
            body = orjson.dumps({"tag": tag, "target": target, "html": html_})
            if len(self.rendered) > 64:
                self.rendered.clear()
            self.rendered[(key, tag)] = body
        return Response(body, media_type="application/json", headers={**_HEADERS, "ETag": f'"{tag}"'})

    def sessions_html(self, request: Request) -> Response:
        tag, sessions = self.view.sessions()
        return self.html("sessions", pages.sessions_page(sessions, time.time()), "sessions", "api/sessions?live=1", tag)

    def sessions_api(self, request: Request) -> Response:
        tag, sessions = self.view.sessions()
        return self.live(request, "", tag, lambda: {"tag": tag, "sessions": sessions},
                         lambda: ("rows", pages.sessions_rows(sessions, time.time())))

    def session_html(self, request: Request) -> Response:
        name = _session(request)
        d = self.view.session(name)
        return self.html(name, pages.session_page(d, name), "session", f"api/session?{pages.sq(name)}&live=1", d["tag"])

    def session_api(self, request: Request) -> Response:
        name = _session(request)
        d = self.view.session(name)
        data = lambda: {**d, "calls": [{k: v for k, v in c.items() if k != "tip"} for c in d["calls"]]}  # noqa: E731
        return self.live(request, "s:" + name, d["tag"], data, lambda: ("live-part", pages.session_live(d, name)))

    def call_html(self, request: Request) -> Response:
        name, n = _session(request), _int(request, "n")
        d = self.view.call(name, n)
        last = max(self.view.calls.get(name, {}) or [n])
        return self.html(f"call {n} · {name}", pages.call_page(d, name, last), "call")

    def call_api(self, request: Request) -> Response:
        return _json(self.view.call(_session(request), _int(request, "n")))

    def page_html(self, request: Request) -> Response:
        name, pid = _session(request), _int(request, "id")
        return self.html(f"page {pid} · {name}", pages.page_page(self.view.page(name, pid), name), "page")

    def page_api(self, request: Request) -> Response:
        return _json(self.view.page(_session(request), _int(request, "id")))

    def _search(self, request: Request) -> tuple[str, list[dict[str, Any]]]:
        q = request.query_params.get("q", "").strip()
        k = min(100, max(1, int(request.query_params.get("k", "20") or 20))) if request.query_params.get(
            "k", "20").isdigit() else 20
        return q, (self.view.search(q, k, shared=request.query_params.get("shared") == "1") if q else [])

    def search_html(self, request: Request) -> Response:
        q, hits = self._search(request)
        view = self.view
        note = (f"{len(hits)} page(s), best first, from the recall index as last committed; "
                + ("every session's pages." if view.reader is None else
                   f"what session {view.reader.session} may recall (its pages, its owner's, its pools')."))
        return self.html(f"search {q}" if q else "search", pages.search_page(q, hits, note if q else ""), "search")

    def search_api(self, request: Request) -> Response:
        q, hits = self._search(request)
        return _json({"query": q, "hits": hits})


def _static(body: str, media: str) -> Callable[[Request], Response]:
    data = body.encode()
    return lambda request: Response(data, media_type=media, headers={**_HEADERS, "Cache-Control": "max-age=300"})


def create_app(view: View, *, store_name: str) -> Starlette:
    """Return the viewer over ``view`` as an ASGI app (mount it, e.g. at ``/pager``)."""
    v = _Viewer(view, store_name)
    guarded = v.guarded
    routes = [
        Route("/", guarded(v.sessions_html, False)), Route("/api/sessions", guarded(v.sessions_api, True)),
        Route("/session", guarded(v.session_html, False)), Route("/api/session", guarded(v.session_api, True)),
        Route("/call", guarded(v.call_html, False)), Route("/api/call", guarded(v.call_api, True)),
        Route("/page", guarded(v.page_html, False)), Route("/api/page", guarded(v.page_api, True)),
        Route("/search", guarded(v.search_html, False)), Route("/api/search", guarded(v.search_api, True)),
        Route("/static/ui.css", _static(CSS, "text/css")),
        Route("/static/ui.js", _static(JS, "text/javascript")),
    ]
    app = Starlette(routes=routes)
    app.state.view = view
    return app


def standalone(view: View, *, store_name: str) -> Starlette:
    """Return the app ``pager ui`` serves: the viewer under ``/pager/``, as under the proxy."""
    ui = create_app(view, store_name=store_name)
    home = lambda request: RedirectResponse("/pager/")  # noqa: E731
    app = Starlette(routes=[Route("/", home), Route("/pager", home), Mount("/pager", app=ui)])
    app.state.view = view
    return app


class Mounted:
    """The viewer as ``pager proxy`` mounts it at ``/pager``: opened on first use, for loopback clients only.

    The store may not exist yet when the proxy starts (its first session
    creates it), so the view opens on the first request. A proxy allowed to
    listen beyond loopback still shows its pages to loopback clients only:
    they hold every session's text.
    """

    def __init__(self, store: str, **view_options: Any) -> None:
        import threading

        self.store, self.view_options = store, view_options
        self._app: Any = None
        self._lock = threading.Lock()

    def _open(self) -> Any:
        with self._lock:
            if self._app is None:
                self._app = create_app(open_view(self.store, **self.view_options), store_name=store_label(self.store))
            return self._app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        import asyncio
        import ipaddress

        client = (scope.get("client") or ("",))[0]
        try:
            loopback = client == "testclient" or ipaddress.ip_address(client).is_loopback
        except ValueError:
            loopback = False
        if scope["type"] == "http" and not loopback:
            return await Response("pager ui is served to loopback clients only\n", 403)(scope, receive, send)
        try:
            app = self._app or await asyncio.to_thread(self._open)
        except Exception as exc:  # no store yet (no session served), or it cannot be opened
            return await Response(f"pager ui: {exc}\n", 503, headers=_HEADERS)(scope, receive, send)
        await app(scope, receive, send)

    def close(self) -> None:
        if self._app is not None:
            self._app.state.view.close()

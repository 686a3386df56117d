"""``pager mcp STORE --session S``: pager's agent tools as an MCP server (official ``mcp`` SDK).

Tools: ``recall(query, k)``, ``expand(handle, start_line, end_line)``,
``note(text)`` and ``search(query, k)`` (structured hits). They answer as
pager's own tools do (``pager.tools``): one text result, errors the model
can read instead of exceptions.

The server runs beside a harness that has the same session open in a
``Pager``, on any store ``pager.open`` takes: a folder (SQLite, WAL: many
readers beside one writer) or a ``postgresql://`` URL, reached through the
Store protocol (``pager.session.open_store``) and the recall index the store
provides (``Store.open_index``). ``expand`` is the facade's own check
(``pager.sharing.read_handle``). Notes go straight to the store, where the
harness's next ``assemble`` reads them; a note is also a page (see
``pager.core.aside``), indexed here at once (a Tantivy index's writer is
taken only for the commit). With a Tantivy index, pages the harness recorded
since its last index commit are not searchable here yet; they are the
newest, still in the prompt.

Transports: stdio (the default; what Claude Code, Codex and Cursor launch) and
streamable HTTP (``--http``, on 127.0.0.1).
"""

from __future__ import annotations

import os
import threading
from typing import Any

import orjson

try:
    from mcp.server.mcpserver import MCPServer
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(f"pager's MCP server needs the mcp SDK (2.x): pip install 'llm-context-pager[mcp]' ({exc})") from exc

from pager import tools as agent_tools
from pager.core.tokens import default_counter
from pager.options import Options
from pager.recording import record_aside
from pager.sharing import read_handle
from pager.storage.base import Store, is_store

__all__ = ["SessionTools", "build_server"]


class SessionTools:
    """One session of a store, seen the way ``pager.tools.call`` sees a ``Pager``.

    Any store ``pager.open`` takes (a folder, a ``postgresql://`` URL, a
    ``Store``), reached through the Store protocol and the recall index the
    store provides. Read-mostly: see the module docstring. Thread-safe (one
    lock; the SDK may run tool calls concurrently).
    """

    def __init__(self, store: "str | os.PathLike[str] | Store", session: str) -> None:
        from pager.session import open_store

        self.session = session
        self._lock = threading.Lock()
        self._owns_store = not is_store(store)
        self.store = open_store(store, must_exist=True)  # serving a store that is not there is a mistake
        try:
            self.store.ensure_session(session)
            saved = self.store.setting(f"options:{session}")
            # what the harness saved, as it saved it (a wrong-mode option there is the harness's business)
            self.options = Options.restore(orjson.loads(saved)) if saved else Options()
            self.index = self.store.open_index()
        except BaseException:
            if self._owns_store:
                self.store.close()
            raise

    def tools(self) -> list[dict[str, Any]]:
        return agent_tools.tool_specs(self.options)

    def _reader(self) -> Any:
        from pager.core.pools import Reader

        return Reader(self.session, self.options.owner)

    def search(self, query: str, k: int = 5, *, cross_session: bool = False) -> list[Any]:
        """Search what this session may read (its pages, readable pools), as ``Pager.search`` does."""
        from pager.core.pools import audiences

        with self._lock:
            refresh = getattr(self.index, "refresh", None)
            if refresh is not None:
                refresh()  # a Tantivy index: see the harness's latest commit (a database index is always current)
            return self.index.search(query, session=self.session, k=k, cross_session=cross_session,
                                     audiences=audiences(self._reader(), self.store.pool_acls()))

    def expand(self, handle: str, start_line: int | None = None, end_line: int | None = None) -> str:
        """Return what ``Pager.expand`` returns: the same checks, the same errors (``pager.sharing.read_handle``)."""
        with self._lock:
            _pid, text = read_handle(self.store, self._reader(), handle, start_line, end_line,
                                     self.store.pins(self.session), self.store.notes(self.session))
        return text

    def note(self, text: str) -> int:
        text = text.strip()[: agent_tools.NOTE_MAX_CHARS]
        with self._lock:
            branch = self.store.ensure_session(self.session)
            seq = len(self.store.branch_page_ids(branch))
            doc = record_aside(self.store, self.session, "note", text, seq=seq, step=seq, count=default_counter().count,
                               scope=self.options.scope, owner=self.options.owner, pool=self.options.pool)
            self.index.add([doc])
            self.index.commit()  # searchable from the harness's process now; notes are rare
            n = len(self.store.notes(self.session))
        return min(n, self.options.max_notes)

    def call(self, name: str, args: dict[str, Any]) -> str:
        """Run one tool like the harness's ``Pager.call_tool``; return the result text."""
        from pager.formats.base import get_format

        call = {"id": "mcp", "type": "function", "function": {"name": name, "arguments": orjson.dumps(args).decode()}}
        return str(agent_tools.call(self, get_format("openai-chat"), call)["content"])

    def declare_rollover(self, args: Any, cid: str) -> str:
        from pager.errors import ToolError

        # a rollover switches the harness's window: only its own pager can take it
        raise ToolError("new_context is served by the harness, not over MCP")

    def close(self) -> None:
        with self._lock:
            try:
                self.index.close()
            finally:
                if self._owns_store:
                    self.store.close()


def build_server(store: "str | os.PathLike[str] | Store", session: str) -> tuple[MCPServer, SessionTools]:
    """Return the MCP server for ``session`` of ``store`` and the tools behind it."""
    st = SessionTools(store, session)
    spec = {s["function"]["name"]: s["function"]["description"] for s in agent_tools.tool_specs(st.options)}
    server = MCPServer(
        "pager",
        instructions=(
            f"pager's memory of session {session!r}: recall searches what left the prompt, expand opens a "
            "handle (pg:...), note keeps a line in the task-state card."
        ),
    )

    @server.tool(description=spec["recall"])
    def recall(query: str, k: int = 3) -> str:
        return st.call("recall", {"query": query, "k": k})

    @server.tool(description=spec["expand"])
    def expand(handle: str, start_line: int | None = None, end_line: int | None = None) -> str:
        args: dict[str, Any] = {"handle": handle}
        if start_line is not None:
            args["start_line"] = start_line
        if end_line is not None:
            args["end_line"] = end_line
        return st.call("expand", args)

    @server.tool(description=spec["note"])
    def note(text: str) -> str:
        return st.call("note", {"text": text})

    @server.tool(description="Search this session's history; return the hits (handle, step, kind, path, score, snippet), best first.")
    def search(query: str, k: int = 5) -> list[dict[str, Any]]:
        k = max(1, min(agent_tools.RECALL_MAX_K, int(k)))
        return [
            {"handle": h.handle, "step": h.step, "kind": h.kind, "path": h.path, "score": round(h.score, 4),
             "snippet": h.snippet}
            for h in st.search(query, k)
        ]

    return server, st

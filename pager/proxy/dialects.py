"""What the proxy must know of each wire format beyond ``WireFormat``.

The facade's formats turn requests into pages and back. A proxy also reads
*responses* and *streams*: the usage in the final event, the tool calls a turn
makes (to answer pager's own), and how to continue a conversation upstream
with their results while the client sees one turn. A ``Dialect`` holds that,
one per route; everything here is pure dict work on parsed JSON.

Streams are read event by event by the format's ``StreamTurn``
(``pager.proxy.streams``).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from pager.core.canonical import canonical
from pager.proxy.streams import AnthropicTurn, ChatTurn, ResponsesTurn, StreamTurn

__all__ = ["DIALECTS", "Dialect", "reuse_items"]


def reuse_items(previous: Sequence[Any] | None, items: Any) -> Any:
    """Return ``items`` with each leading item equal to the previous request's replaced by that object.

    A client resends its whole history as new JSON each call. Handing pager
    the very objects it saw last time lets its same-object fast path skip
    re-validating and re-hashing them (assemble drops from ~16 to ~8 ms on a
    400-message, 1 MB history); comparing equal dicts costs ~0.3 ms.
    """
    if not previous or not isinstance(items, list):
        return items
    out = list(items)
    for i in range(min(len(previous), len(items))):
        if items[i] != previous[i]:
            break
        out[i] = previous[i]
    return out


def _root(system: Any, user: Any) -> tuple[Any, Any]:
    # canonical: the first request marks the first user message, later ones do not
    return canonical({"content": system})["content"], canonical({"content": user})["content"]


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Sequence):
        return "\n".join(
            str(b.get("text", "")) for b in value if isinstance(b, Mapping) and isinstance(b.get("text"), str)
        )
    return ""


class Dialect:
    """Per-format proxy knowledge; see the module docstring."""

    format: str
    upstream: str  # "openai" or "anthropic"
    error_style: str  # "openai" or "anthropic"
    history_key: str = "messages"  # the request's list of history items

    def session_seed(self, request: Mapping[str, Any]) -> tuple[Any, Any]:
        """Return (system prompt, first user message) to name a session by."""
        raise NotImplementedError

    def prepare(self, request: dict[str, Any], stream: bool) -> bool:
        """Adjust the upstream request in place; return whether the client asked for usage in the stream."""
        return True

    def calls(self, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def call_name(self, call: Mapping[str, Any]) -> str:
        raise NotImplementedError

    def continue_request(
        self, request: dict[str, Any], items: list[dict[str, Any]], results: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """Return ``request`` with the assistant turn ``items`` and the tool ``results`` appended."""
        raise NotImplementedError

    def assistant_items(self, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def strip_calls(self, response: dict[str, Any], names: frozenset[str]) -> dict[str, Any]:
        """Return ``response`` without its calls to the tools ``names`` (a turn mixing pager's and the client's)."""
        raise NotImplementedError

    def stream_turn(self, pager_tools: frozenset[str], round_no: int, offset: int, client_usage: bool) -> StreamTurn:
        raise NotImplementedError


# -- OpenAI chat completions ---------------------------------------------------------------


class OpenAIChatDialect(Dialect):
    format = "openai-chat"
    upstream = "openai"
    error_style = "openai"

    def session_seed(self, request: Mapping[str, Any]) -> tuple[Any, Any]:
        msgs = request.get("messages") or ()
        sys = next((m.get("content") for m in msgs if isinstance(m, Mapping) and m.get("role") in ("system", "developer")), None)
        user = next((m.get("content") for m in msgs if isinstance(m, Mapping) and m.get("role") == "user"), None)
        return _root(sys, user)

    def prepare(self, request: dict[str, Any], stream: bool) -> bool:
        if not stream:
            return True
        opts = dict(request.get("stream_options") or {})
        asked = bool(opts.get("include_usage"))
        if not asked:
            # usage arrives only in a final chunk the client must ask for; ask for
            # it and keep that chunk from a client that did not
            opts["include_usage"] = True
            request["stream_options"] = opts
        return asked

    def calls(self, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        choices = response.get("choices") or ()
        if not choices:
            return []
        return list((choices[0].get("message") or {}).get("tool_calls") or ())

    def call_name(self, call: Mapping[str, Any]) -> str:
        return str((call.get("function") or {}).get("name") or "")

    def assistant_items(self, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        msg = dict((response.get("choices") or [{}])[0].get("message") or {})
        keep = {k: msg[k] for k in ("role", "content", "tool_calls") if k in msg}
        keep.setdefault("role", "assistant")
        return [keep]

    def continue_request(self, request: dict[str, Any], items: list[dict[str, Any]], results: list[dict[str, Any]]) -> dict[str, Any]:
        out = dict(request)
        out["messages"] = [*request["messages"], *items, *results]
        return out

    def strip_calls(self, response: dict[str, Any], names: frozenset[str]) -> dict[str, Any]:
        out = dict(response)
        choices = []
        for choice in response.get("choices") or ():
            msg = dict(choice.get("message") or {})
            msg["tool_calls"] = [c for c in msg.get("tool_calls") or () if self.call_name(c) not in names]
            choices.append({**choice, "message": msg})
        out["choices"] = choices
        return out

    def stream_turn(self, pager_tools: frozenset[str], round_no: int, offset: int, client_usage: bool) -> StreamTurn:
        return ChatTurn(pager_tools, round_no, offset, client_usage)


# -- Anthropic Messages --------------------------------------------------------------------


class AnthropicDialect(Dialect):
    format = "anthropic-messages"
    upstream = "anthropic"
    error_style = "anthropic"

    def session_seed(self, request: Mapping[str, Any]) -> tuple[Any, Any]:
        msgs = request.get("messages") or ()
        user = next((m.get("content") for m in msgs if isinstance(m, Mapping) and m.get("role") == "user"), None)
        return _root(_text(request.get("system")), user)

    def calls(self, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [b for b in response.get("content") or () if isinstance(b, Mapping) and b.get("type") == "tool_use"]

    def call_name(self, call: Mapping[str, Any]) -> str:
        return str(call.get("name") or "")

    def assistant_items(self, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [{"role": "assistant", "content": list(response.get("content") or ())}]

    def continue_request(self, request: dict[str, Any], items: list[dict[str, Any]], results: list[dict[str, Any]]) -> dict[str, Any]:
        out = dict(request)
        # call_tool answers in a tool_result block; the API wants them in one user turn
        blocks = [r for r in results if r.get("type") == "tool_result"]
        users = [r for r in results if r.get("role") == "user"]
        for u in users:
            blocks.extend(u.get("content") or ())
        out["messages"] = [*request["messages"], *items, {"role": "user", "content": blocks}]
        return out

    def strip_calls(self, response: dict[str, Any], names: frozenset[str]) -> dict[str, Any]:
        out = dict(response)
        out["content"] = [b for b in response.get("content") or () if not (b.get("type") == "tool_use" and b.get("name") in names)]
        return out

    def stream_turn(self, pager_tools: frozenset[str], round_no: int, offset: int, client_usage: bool) -> StreamTurn:
        return AnthropicTurn(pager_tools, round_no, offset, client_usage)


# -- OpenAI Responses ----------------------------------------------------------------------


class ResponsesDialect(Dialect):
    format = "openai-responses"
    upstream = "openai"
    error_style = "openai"
    history_key = "input"

    def session_seed(self, request: Mapping[str, Any]) -> tuple[Any, Any]:
        items = request.get("input")
        if isinstance(items, str):
            return request.get("instructions"), items
        user = next(
            (i.get("content") for i in items or () if isinstance(i, Mapping) and i.get("role") == "user"), None
        )
        return _root(request.get("instructions"), user)

    def calls(self, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [i for i in response.get("output") or () if isinstance(i, Mapping) and i.get("type") == "function_call"]

    def call_name(self, call: Mapping[str, Any]) -> str:
        return str(call.get("name") or "")

    def assistant_items(self, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        return list(response.get("output") or ())

    def continue_request(self, request: dict[str, Any], items: list[dict[str, Any]], results: list[dict[str, Any]]) -> dict[str, Any]:
        out = dict(request)
        prior = request.get("input")
        if isinstance(prior, str):
            prior = [{"role": "user", "content": prior}]
        out["input"] = [*(prior or ()), *items, *results]
        return out

    def strip_calls(self, response: dict[str, Any], names: frozenset[str]) -> dict[str, Any]:
        out = dict(response)
        out["output"] = [
            i for i in response.get("output") or () if not (i.get("type") == "function_call" and i.get("name") in names)
        ]
        return out

    def stream_turn(self, pager_tools: frozenset[str], round_no: int, offset: int, client_usage: bool) -> StreamTurn:
        return ResponsesTurn(pager_tools, round_no, offset, client_usage)


DIALECTS: dict[str, Dialect] = {
    "/v1/chat/completions": OpenAIChatDialect(),
    "/v1/messages": AnthropicDialect(),
    "/v1/responses": ResponsesDialect(),
}

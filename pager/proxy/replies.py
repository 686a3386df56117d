"""Errors the proxy itself answers, shaped as the provider of the route shapes them.

A client's SDK parses error bodies by its provider's schema, so an error pager
raises (a request it cannot page, an upstream that timed out) reaches it as
the same kind of error the provider would send, with pager's message.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["error_body", "stream_error_event"]

# (anthropic error type, openai error type) per HTTP status the proxy answers itself
_TYPES = {
    400: ("invalid_request_error", "invalid_request_error"),
    404: ("not_found_error", "invalid_request_error"),
    413: ("request_too_large", "invalid_request_error"),
    500: ("api_error", "server_error"),
    502: ("api_error", "upstream_error"),
    504: ("timeout_error", "timeout"),
}


def error_body(style: str, status: int, message: str) -> dict[str, Any]:
    """Return the error JSON a provider (``style``: "openai" or "anthropic") sends with ``status``."""
    anthropic_type, openai_type = _TYPES.get(status, ("api_error", "server_error"))
    if style == "anthropic":
        return {"type": "error", "error": {"type": anthropic_type, "message": message}}
    return {"error": {"message": message, "type": openai_type, "param": None, "code": f"pager_{status}"}}


def stream_error_event(style: str, status: int, message: str) -> bytes:
    """Return an SSE error event for a stream that already started (its status is sent)."""
    body = orjson.dumps(error_body(style, status, message))
    if style == "anthropic":
        return b"event: error\ndata: " + body + b"\n\n"
    return b"data: " + body + b"\n\n"

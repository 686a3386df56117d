"""What the proxy refuses before any paging: a body over ``max_body``, a request without a session header.

A body is refused as soon as it is known to be too big: by its declared
``Content-Length`` before a byte of it is read, else (a chunked upload) the
moment the bytes read pass the limit. Either way the client gets a 413 in its
provider's error shape and no worker spends time on the rest. Before issue 20
one 50 MB body held a worker for 96 s of term scanning and was then refused as
over budget.
"""

from __future__ import annotations

from typing import Mapping

import attrs
from starlette.requests import Request

__all__ = ["DEFAULT_MAX_BODY", "Refused", "read_body", "session_refusal"]

# Real Claude Code requests reach a few MB (long sessions, images); 32 MiB leaves room for them.
DEFAULT_MAX_BODY = 32 * 1024 * 1024


@attrs.frozen(slots=True)
class Refused:
    """An answer the proxy gives instead of paging: an HTTP status and the message."""

    status: int
    message: str


def _too_big(size: str, limit: int) -> Refused:
    return Refused(413, f"request body is {size} bytes; this proxy takes at most {limit} (pager proxy --max-body)")


async def read_body(request: Request, limit: int) -> bytes | Refused:
    """Return the request's body, or a ``Refused`` 413 once it is known to pass ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.strip().isdigit():
            return Refused(400, f"Content-Length {declared[:40]!r} is not a byte count")
        if int(declared) > limit:
            return _too_big(declared.strip(), limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return _too_big(f"over {limit}", limit)
        chunks.append(chunk)
    return b"".join(chunks)


def session_refusal(headers: Mapping[str, str], header: str, required: bool) -> Refused | None:
    """Return a 400 when the session header is ``required`` and missing (or empty), else None."""
    if required and not headers.get(header, "").strip():
        return Refused(400, f"this proxy needs a {header} header naming the session "
                            "(pager proxy --session-header-required)")
    return None

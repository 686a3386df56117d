"""How an error message shows a caller's value: bounded, and never failing itself. Pure.

An error message quotes what the caller sent. ``repr`` of a value nested
50,000 levels deep raises ``RecursionError`` and ``repr`` of a 50 MB string
is 50 MB; ``brief`` is bounded in depth, width and length whatever it is
given. ``encode_problem`` says in words why orjson refused a value (its own
messages name neither the cause a caller can act on nor the place).
"""

from __future__ import annotations

import reprlib
from typing import Any

__all__ = ["ENVELOPE_LEVELS", "brief", "encode_problem", "envelope"]

# the levels a request wraps one message in ({"messages": [...]}, the provider's own), with room
ENVELOPE_LEVELS = 8


def envelope(value: Any) -> list[Any]:
    """Return ``value`` inside ``ENVELOPE_LEVELS`` lists: encoded, it fails where its request would."""
    for _ in range(ENVELOPE_LEVELS):
        value = [value]
    return value

_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = 60
_REPR.maxother = 60
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 6
_REPR.maxlong = 40


def brief(value: Any, limit: int = 80) -> str:
    """Return a short ``repr`` of ``value`` for an error message (at most about ``limit`` characters)."""
    try:
        text = _REPR.repr(value)
    except Exception:  # noqa: BLE001 - a hostile __repr__: describe it by its type
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def encode_problem(exc: BaseException) -> str:
    """Return why orjson could not encode a value, in a caller's words."""
    text = str(exc)
    if "surrogate" in text or "not valid UTF-8" in text:
        return "a string holds a lone surrogate (not valid Unicode)"
    if "Dict key must be" in text:
        return "an object has a key that is not a string"
    if "Recursion limit" in text:
        return "a value is nested too deeply (a request holds at most 254 levels, its envelope included)"
    if "Integer exceeds" in text:
        return "an integer does not fit in 64 bits"
    if "not JSON serializable" in text:
        kind = text.rsplit(":", 1)[-1].strip()
        return f"a value of type {kind} is not JSON"
    return f"it is not JSON ({text})"

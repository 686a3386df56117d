"""Provider usage figures, read from an OpenAI or Anthropic response. Pure."""

from __future__ import annotations

from typing import Any, Mapping

from pager.errors import InputError
from pager.formats.base import Usage

__all__ = ["parse_usage"]


def parse_usage(response: Any) -> Usage:
    """Return ``{"prompt_tokens", "completion_tokens", "cached_tokens"}`` of a response.

    Accepts an SDK object (anything with ``model_dump()``), a response dict or a
    bare usage mapping. Anthropic counts cache reads and writes beside
    ``input_tokens``; their sum is the prompt, the reads its cached part.
    """
    data = response
    if hasattr(data, "model_dump"):
        data = data.model_dump()
    if not isinstance(data, Mapping):
        raise InputError(f"cannot read usage from a {type(response).__name__}")
    usage = data.get("usage", data)
    if hasattr(usage, "model_dump"):
        usage = usage.model_dump()
    if not isinstance(usage, Mapping):
        raise InputError("response has no usage mapping")
    details = usage.get("prompt_tokens_details") or {}
    prompt = _count(usage, "prompt_tokens")
    cached = _count(details, "cached_tokens") if isinstance(details, Mapping) else 0
    if usage.get("prompt_tokens") is None and "input_tokens" in usage:
        cached = _count(usage, "cache_read_input_tokens")
        prompt = _count(usage, "input_tokens") + cached + _count(usage, "cache_creation_input_tokens")
    key = "completion_tokens" if "completion_tokens" in usage else "output_tokens"
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=_count(usage, key),
        cached_tokens=cached,
        cache_write_tokens=_count(usage, "cache_creation_input_tokens"),
    )


def _count(usage: Mapping[str, Any], key: str) -> int:
    """Return a token figure (missing or null: 0); ``InputError`` for anything but a whole number."""
    value = usage.get(key)
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63:
        raise InputError(f"usage {key} must be a token count, got {value!r}")
    return value

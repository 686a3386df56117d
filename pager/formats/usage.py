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
    prompt = usage.get("prompt_tokens")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    if prompt is None and "input_tokens" in usage:
        cached = int(usage.get("cache_read_input_tokens") or 0)
        prompt = int(usage.get("input_tokens") or 0) + cached + int(usage.get("cache_creation_input_tokens") or 0)
    completion = usage.get("completion_tokens", usage.get("output_tokens", 0))
    return Usage(
        prompt_tokens=int(prompt or 0),
        completion_tokens=int(completion or 0),
        cached_tokens=int(cached or 0),
        cache_write_tokens=int(usage.get("cache_creation_input_tokens") or 0),
    )

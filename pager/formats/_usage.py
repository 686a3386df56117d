"""What every format's usage reader shares: the envelope and the numbers. Pure.

Each wire format reads its own provider's usage object (``WireFormat.parse_usage``,
next to the format's requests and replies); ``pager.formats.base.read_usage``
picks the format whose usage a response carries. This module holds only what
is not any one provider's:

- ``find_usage``: the usage mapping of a response object or dict (its
  ``usage``), or a bare usage mapping; SDK objects through ``model_dump()``.
- ``count`` / ``optional_count``: a field the provider sent as null (an SDK's
  optional field) counts as 0; a field that is missing is an error; a value
  that is no count is an error. A usage pager cannot read is never zeros.
- ``Usage``, the normalised figures (``pager.formats.base`` exports it).
- LangChain's ``usage_metadata``: LangChain's own normalisation of every
  provider's usage (``input_tokens`` the whole prompt, ``input_token_details``
  ``cache_read`` / ``cache_creation``), so it belongs to no wire format.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from pager.core.describe import brief
from pager.errors import InputError

__all__ = [
    "Usage", "count", "find_usage", "is_langchain", "keys", "langchain_usage", "optional_count", "own_usage", "plain",
]


@attrs.frozen(slots=True)
class Usage:
    """A provider response's token figures, normalised.

    ``prompt_tokens`` is the whole prompt (cached, cache-written and uncached
    parts together); ``cached_tokens`` the part read from the cache;
    ``cache_write_tokens`` the part written to it (Anthropic bills it at a
    premium; zero elsewhere).
    """

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    cache_write_tokens: int = 0

    def to_dict(self) -> dict[str, int]:
        return attrs.asdict(self)


def plain(obj: Any) -> Any:
    """Return ``obj`` as plain data (an SDK object through ``model_dump()``)."""
    dump = getattr(obj, "model_dump", None)
    if dump is not None and not isinstance(obj, Mapping):
        return dump()
    return obj


def count(usage: Mapping[str, Any], key: str, shape: str) -> int:
    """Return the required count ``usage[key]`` (null is 0); ``InputError`` when missing or no count."""
    if key not in usage:
        raise InputError(f"{shape} usage without {key!r}: got keys {keys(usage)}")
    value = usage[key]
    if value is None:
        return 0
    if not _count_like(value):
        raise InputError(f"{shape} usage {key!r} must be a non-negative number, got {brief(value)}")
    return int(value)


def optional_count(mapping: Any, key: str) -> int:
    """Return the optional count ``mapping[key]`` (0 when absent, null or no count)."""
    if not isinstance(mapping, Mapping):
        return 0
    value = mapping.get(key)
    return int(value) if _count_like(value) else 0


def keys(mapping: Mapping[Any, Any]) -> list[str]:
    """Return the first keys of ``mapping`` for a message (sorted: keys of mixed types do not sort)."""
    return sorted(k if isinstance(k, str) else brief(k) for k in list(mapping)[:50])[:12]


def _count_like(value: Any) -> bool:
    # NaN, infinities and >64-bit counts would fail int() or the report log's JSON
    return (not isinstance(value, bool) and isinstance(value, (int, float)) and 0 <= value < 2**63
            and value == value)


def find_usage(response: Any, is_usage: Callable[[Mapping[str, Any]], bool]) -> Mapping[str, Any]:
    """Return the usage mapping of ``response``; ``is_usage`` says whether a bare mapping is one."""
    data = plain(response)
    if not isinstance(data, Mapping):
        raise InputError(f"cannot read usage from a {type(response).__name__}")
    for key in ("usage_metadata", "usage"):
        if key in data:
            usage = plain(data[key])
            if usage is None:
                continue
            if not isinstance(usage, Mapping):
                raise InputError(f"response {key!r} must be a mapping, got {type(usage).__name__}")
            return usage
    if is_usage(data):
        return data
    if "usage" in data or "usage_metadata" in data:
        raise InputError("the response carries no usage (null): streaming responses need usage enabled")
    raise InputError(f"no usage in this response: got keys {keys(data)}")


def is_langchain(usage: Mapping[str, Any]) -> bool:
    """Whether ``usage`` is LangChain's ``usage_metadata`` (its detail keys; no provider sends them)."""
    return "input_tokens" in usage and ("input_token_details" in usage or "output_token_details" in usage)


def langchain_usage(usage: Mapping[str, Any]) -> Usage:
    """Return the ``Usage`` of a LangChain ``usage_metadata`` (see the module docstring)."""
    details = usage.get("input_token_details")
    return Usage(
        prompt_tokens=count(usage, "input_tokens", "LangChain"),
        completion_tokens=count(usage, "output_tokens", "LangChain"),
        cached_tokens=optional_count(details, "cache_read"),
        cache_write_tokens=optional_count(details, "cache_creation"),
    )


def own_usage(response: Any, claim: Callable[[Mapping[str, Any]], int], shape: str) -> Mapping[str, Any]:
    """Return the usage mapping of ``response`` if ``claim`` owns it; ``InputError`` otherwise."""
    usage = find_usage(response, lambda u: claim(u) > 0)
    if claim(usage) <= 0:
        raise InputError(f"not {shape} usage: got keys {keys(usage)}")
    return usage

"""Provider usage figures, read exactly from each provider's response shape. Pure.

Shapes known (a response object or dict, its ``usage``, or a bare usage
mapping; SDK objects through ``model_dump()``):

=====================  ==================================================================
OpenAI chat            ``prompt_tokens`` (all of the prompt), ``completion_tokens``,
                       ``prompt_tokens_details.cached_tokens`` (and ``cache_write_tokens``
                       where the model reports writes)
OpenAI Responses       ``input_tokens`` (all of the prompt), ``output_tokens``,
                       ``input_tokens_details.cached_tokens`` (and ``cache_write_tokens``)
Anthropic Messages     ``input_tokens`` (only the uncached part after the last
                       breakpoint), ``cache_read_input_tokens``,
                       ``cache_creation_input_tokens``, ``output_tokens``: the prompt
                       is their sum
LangChain              an ``AIMessage``'s ``usage_metadata``: ``input_tokens`` (all of
                       the prompt), ``output_tokens``, ``input_token_details``
                       ``cache_read`` / ``cache_creation``
=====================  ==================================================================

Anything else raises ``InputError`` naming the keys it saw: a usage pager
cannot read is never reported as zeros. A field the provider sent as null (an
SDK's optional field) counts as 0; a field that is missing is an error.
"""

from __future__ import annotations

from typing import Any, Mapping

from pager.core.describe import brief
from pager.errors import InputError
from pager.formats.base import Usage

__all__ = ["parse_usage", "usage_shape"]


def _plain(obj: Any) -> Any:
    dump = getattr(obj, "model_dump", None)
    if dump is not None and not isinstance(obj, Mapping):
        return dump()
    return obj


def _int(usage: Mapping[str, Any], key: str, shape: str) -> int:
    if key not in usage:
        raise InputError(f"{shape} usage without {key!r}: got keys {_keys(usage)}")
    value = usage[key]
    if value is None:
        return 0
    if not _count_like(value):
        raise InputError(f"{shape} usage {key!r} must be a non-negative number, got {brief(value)}")
    return int(value)


def _keys(mapping: Mapping[Any, Any]) -> list[str]:
    """Return the first keys of ``mapping`` for a message (sorted: keys of mixed types do not sort)."""
    return sorted(k if isinstance(k, str) else brief(k) for k in list(mapping)[:50])[:12]


def _opt(mapping: Any, key: str) -> int:
    if not isinstance(mapping, Mapping):
        return 0
    value = mapping.get(key)
    return int(value) if _count_like(value) else 0


def _count_like(value: Any) -> bool:
    # NaN, infinities and >64-bit counts would fail int() or the report log's JSON
    return (not isinstance(value, bool) and isinstance(value, (int, float)) and 0 <= value < 2**63
            and value == value)


def usage_shape(usage: Mapping[str, Any]) -> str | None:
    """Return which provider's usage ``usage`` is (``chat``, ``responses``, ``anthropic``, ``langchain``)."""
    if "prompt_tokens" in usage:
        return "chat"
    if "input_tokens" in usage:
        if "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage:
            return "anthropic"
        if "input_tokens_details" in usage:
            return "responses"
        if "input_token_details" in usage or "output_token_details" in usage:
            return "langchain"
        if "total_tokens" in usage:
            # Responses and LangChain both send a total; Anthropic never does
            return "responses"
        return "anthropic"
    return None


def _find_usage(response: Any) -> Mapping[str, Any]:
    data = _plain(response)
    if not isinstance(data, Mapping):
        raise InputError(f"cannot read usage from a {type(response).__name__}")
    for key in ("usage_metadata", "usage"):
        if key in data:
            usage = _plain(data[key])
            if usage is None:
                continue
            if not isinstance(usage, Mapping):
                raise InputError(f"response {key!r} must be a mapping, got {type(usage).__name__}")
            return usage
    if usage_shape(data) is not None:
        return data
    if "usage" in data or "usage_metadata" in data:
        raise InputError("the response carries no usage (null): streaming responses need usage enabled")
    raise InputError(f"no usage in this response: got keys {_keys(data)}")


def parse_usage(response: Any) -> Usage:
    """Return the normalised ``Usage`` of a provider response (see the module docstring)."""
    usage = _find_usage(response)
    shape = usage_shape(usage)
    if shape == "chat":
        return Usage(
            prompt_tokens=_int(usage, "prompt_tokens", "chat"),
            completion_tokens=_int(usage, "completion_tokens", "chat"),
            cached_tokens=_opt(usage.get("prompt_tokens_details"), "cached_tokens"),
            cache_write_tokens=_opt(usage.get("prompt_tokens_details"), "cache_write_tokens"),
        )
    if shape == "responses":
        return Usage(
            prompt_tokens=_int(usage, "input_tokens", "Responses"),
            completion_tokens=_int(usage, "output_tokens", "Responses"),
            cached_tokens=_opt(usage.get("input_tokens_details"), "cached_tokens"),
            cache_write_tokens=_opt(usage.get("input_tokens_details"), "cache_write_tokens"),
        )
    if shape == "langchain":
        details = usage.get("input_token_details")
        return Usage(
            prompt_tokens=_int(usage, "input_tokens", "LangChain"),
            completion_tokens=_int(usage, "output_tokens", "LangChain"),
            cached_tokens=_opt(details, "cache_read"),
            cache_write_tokens=_opt(details, "cache_creation"),
        )
    if shape == "anthropic":
        uncached = _int(usage, "input_tokens", "Anthropic")
        read = _int(usage, "cache_read_input_tokens", "Anthropic") if "cache_read_input_tokens" in usage else 0
        write = (
            _int(usage, "cache_creation_input_tokens", "Anthropic")
            if "cache_creation_input_tokens" in usage else 0
        )
        return Usage(
            prompt_tokens=uncached + read + write,
            completion_tokens=_int(usage, "output_tokens", "Anthropic"),
            cached_tokens=read,
            cache_write_tokens=write,
        )
    raise InputError(f"unknown usage shape: got keys {_keys(usage)}")

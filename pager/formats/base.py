"""The wire-format protocol: how a provider's request becomes neutral messages and back.

The scheduler never sees a provider's shapes. A wire format does six things
for the facade, each a method of ``WireFormat``:

``validate(request)``
    Raise ``InputError`` (``MessageError`` naming the message, and the block
    where there are blocks) for a request pager cannot schedule. Nothing is
    recorded for a request that fails it.
``to_messages(request)``
    Return the request's history as neutral messages (``pager.core.messages``),
    L1 pieces such as a top-level system prompt first, and its tools as the
    JSON that is counted against the budget.
``render(request, messages, *, tools, hints)``
    Return the provider request carrying the scheduled neutral ``messages``
    (other keys of ``request`` pass through). ``hints`` say where pager's
    stable prefix ends, for formats with explicit cache breakpoints.
``tool_result(call_id, text, is_error)``
    Return the message or item answering one tool call, in the format's shape.
``usage_claim(usage)`` and ``parse_usage(response)``
    Each format reads its own provider's usage object. ``usage_claim`` says
    how surely a usage mapping is this format's, by its keys: 0 not at all,
    1 it could be (keys other providers send too), 2 keys only this provider
    sends. ``parse_usage`` returns the ``Usage`` of a response (SDK object or
    dict), its ``usage``, or a bare usage mapping; ``InputError`` on a usage
    this format does not claim or a missing field (never zeros).

A new format is a new module that registers a ``WireFormat`` instance with
``register_format`` (the built-in ones are imported by ``pager/formats/__init__.py``);
``detect`` picks the format of a request by its keys, and ``read_usage`` the
format that reads a response's usage by the formats' claims.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from pager.core.describe import brief
from pager.core.digest import WireRun
from pager.errors import ConfigError, InputError
from pager.formats._usage import Usage, find_usage, is_langchain, keys, langchain_usage

__all__ = [
    "Converted",
    "RenderHints",
    "ToolCallRequest",
    "Usage",
    "WireFormat",
    "detect",
    "formats",
    "get_format",
    "read_usage",
    "register_format",
]


@attrs.frozen(slots=True)
class Converted:
    """A request as the scheduler sees it.

    ``messages`` are neutral messages, the format's L1 pieces (a top-level
    system prompt, instructions) first as system messages. ``tools`` are the
    request's tool definitions as they will be sent (counted against the
    budget).

    A format that keeps a wire digest (``pager.core.digest``, for a caller
    that owns its head memo) returns it as ``wire`` (a ``WireRun``: the
    digest of the first items and the rows they made); ``vouched`` is how
    many leading ``messages`` a stored wire digest vouched for unconverted
    (``pager.formats.lazy``: they convert when read).
    """

    messages: Sequence[Mapping[str, Any]]
    tools: Sequence[Any] = ()
    wire: WireRun | None = None
    vouched: int = 0


@attrs.frozen(slots=True)
class RenderHints:
    """Where pager's stable prefix ends in the messages to render (message counts).

    ``l1``: the pinned layer (system messages, the first user message, the
    card). ``stable``: L1 and the old generation, which minor rounds keep
    byte-stable. ``previous``: the prefix shared with the previous prompt
    (None when the prompt changed from the start). A format with explicit
    cache breakpoints marks these and the end of the prompt.
    """

    l1: int = 0
    stable: int = 0
    previous: int | None = None
    cache_marks: str | None = None  # the session's breakpoint mode (Options.cache_marks)


@attrs.frozen(slots=True)
class ToolCallRequest:
    """One tool call the model made, read from a provider's message, call object or item."""

    id: str
    name: str
    arguments: str | Mapping[str, Any]


@runtime_checkable
class WireFormat(Protocol):
    """One provider wire format. See the module docstring.

    A format may also name the request key of the caller's history list in a
    ``history_key`` attribute (``"input"`` for Responses); without one it is
    ``"messages"``. Optional, so that a format written before it still passes
    ``isinstance(fmt, WireFormat)``.
    """

    name: str

    def detect(self, request: Mapping[str, Any]) -> bool:
        """Whether ``request`` is in this format (by its keys; cheap)."""
        ...

    def validate(self, request: Mapping[str, Any]) -> None: ...

    def to_messages(self, request: Mapping[str, Any]) -> Converted: ...

    def render(
        self,
        request: Mapping[str, Any],
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Any] | None,
        hints: RenderHints,
    ) -> dict[str, Any]: ...

    def tool_specs(self, specs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Return pager's tools (OpenAI function-tool JSON) in this format's tool shape."""
        ...

    def tool_name(self, tool: Any) -> str | None:
        """Return the name of one tool definition of a request (None when it has none)."""
        ...

    def parse_tool_call(self, call: Any) -> ToolCallRequest:
        """Read one tool call (a dict or an SDK object) in this format; ``ToolError`` when malformed."""
        ...

    def tool_result(self, call_id: str, text: str, is_error: bool = False) -> dict[str, Any]: ...

    def usage_claim(self, usage: Mapping[str, Any]) -> int:
        """How surely the usage mapping ``usage`` is this format's: 0, 1 or 2 (see the module docstring)."""
        ...

    def parse_usage(self, response: Any) -> Usage:
        """Return the ``Usage`` of a response in this format (or its usage); ``InputError`` otherwise."""
        ...


_FORMATS: dict[str, WireFormat] = {}


def register_format(fmt: WireFormat) -> WireFormat:
    """Register a wire format under ``fmt.name`` (detection tries formats newest first)."""
    if not isinstance(getattr(fmt, "name", None), str) or not fmt.name:
        raise ConfigError("a wire format needs a non-empty string 'name'")
    _FORMATS.pop(fmt.name, None)
    _FORMATS[fmt.name] = fmt
    return fmt


def formats() -> dict[str, WireFormat]:
    """Return the registered formats by name."""
    return dict(_FORMATS)


def get_format(name: str) -> WireFormat:
    """Return the format registered as ``name``; ``ConfigError`` naming the known ones otherwise."""
    try:
        return _FORMATS[name]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown wire format {brief(name)}; known: {sorted(_FORMATS)}") from None


def detect(request: Any) -> WireFormat:
    """Return the format of ``request``; ``InputError`` when no registered format claims it."""
    if not isinstance(request, Mapping):
        raise InputError(f"request must be a mapping, got {type(request).__name__}")
    for fmt in reversed(list(_FORMATS.values())):
        if fmt.detect(request):
            return fmt
    raise InputError(
        "request is in no known format: expected 'messages' (OpenAI chat or Anthropic Messages) "
        "or 'input' (OpenAI Responses)"
    )


def read_usage(response: Any) -> Usage:
    """Return the ``Usage`` of ``response``, read by the format whose usage it carries.

    The format claiming the usage most surely reads it (``usage_claim``); a
    tie goes to the older registration (chat, then Anthropic, then
    Responses), whatever the caller's format: the usage's keys say whose it
    is. LangChain's ``usage_metadata`` is LangChain's own normalisation of
    every provider's usage, so no format's: it is read below the formats'
    sure claims (2) and above their guesses (1). ``InputError`` when nothing
    claims the usage.
    """
    usage = find_usage(response, lambda u: _usage_reader(u) is not None)
    reader = _usage_reader(usage)
    if reader is None:
        raise InputError(f"unknown usage shape: got keys {keys(usage)}")
    return reader(usage)


def _usage_reader(usage: Mapping[str, Any]) -> Callable[[Any], Usage] | None:
    best: WireFormat | None = None
    sure = 0
    for fmt in _FORMATS.values():
        claim = fmt.usage_claim(usage)
        if claim > sure:
            best, sure = fmt, claim
    if best is not None and (sure >= 2 or not is_langchain(usage)):
        return best.parse_usage
    return langchain_usage if is_langchain(usage) else None

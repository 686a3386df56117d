"""OpenAI chat-completions messages: validation and classification into pages.

``validate(messages)`` raises ``MessageError`` naming the first offending
message; nothing is recorded for a request that fails it. Classification
decides each message's page kind and the facts the scheduler keys on (tool
call ids, the tool's name, the path of a file read).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


from pager.errors import InputError, ToolError
from pager.formats._convert import id_text, tool_arguments
from pager.formats.base import Converted, RenderHints, ToolCallRequest, Usage, register_format
from pager.formats._usage import count, optional_count, own_usage
from pager.core.messages import check_message as neutral_check
from pager.core.messages import validate as neutral_validate

__all__ = ["FORMAT", "OpenAIChat", "check_message", "validate"]

PART_TYPES = frozenset({"text", "image_url", "input_audio", "file", "refusal"})


def validate(messages: Any, **kwargs: Any) -> None:
    """Check that ``messages`` is a valid chat history; raise ``MessageError`` at the first fault.

    ``pager.core.messages.validate`` with chat's content part types; see there.
    """
    neutral_validate(messages, part_types=PART_TYPES, **kwargs)


def check_message(i: int, msg: Any) -> None:
    """Check one chat message's shape (role, content type, tool calls); raise ``MessageError``."""
    neutral_check(i, msg, PART_TYPES)

class OpenAIChat:
    """OpenAI chat completions: ``messages`` in, ``messages`` out.

    Neutral messages are chat-shaped, so conversion is the identity: the
    caller's own message objects flow through, which keeps the facade's
    same-object fast path (see ``Pager._same_prefix``).
    """

    name = "openai-chat"
    history_key = "messages"  # the request's list of history items
    part_types = PART_TYPES

    def detect(self, request: Mapping[str, Any]) -> bool:
        # Anthropic requests also carry 'messages'; that format claims them first
        return "messages" in request

    def validate(self, request: Mapping[str, Any]) -> None:
        validate(request.get("messages"))

    def to_messages(self, request: Mapping[str, Any]) -> Converted:
        messages = request.get("messages")
        if not isinstance(messages, (list, tuple)):
            raise InputError(f"request['messages'] must be a list, got {type(messages).__name__}")
        tools = request.get("tools") or ()
        if not isinstance(tools, (list, tuple)):
            raise InputError(f"request['tools'] must be a list, got {type(tools).__name__}")
        return Converted(messages=messages, tools=tools)

    def render(
        self,
        request: Mapping[str, Any],
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Any] | None,
        hints: RenderHints,
    ) -> dict[str, Any]:
        out = dict(request)
        out["messages"] = list(messages)
        if tools is not None:
            out["tools"] = list(tools)
        return out

    def tool_specs(self, specs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return [dict(s) for s in specs]

    def tool_name(self, tool: Any) -> str | None:
        if isinstance(tool, Mapping):
            fn = tool.get("function")
            if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
                return fn["name"]
        return None

    def parse_tool_call(self, call: Any) -> ToolCallRequest:
        if hasattr(call, "model_dump"):
            call = call.model_dump()
        if not isinstance(call, Mapping):
            raise ToolError(f"a tool call must be a mapping, got {type(call).__name__}")
        fn = call.get("function")
        if not isinstance(fn, Mapping):
            raise ToolError("a chat tool call needs a 'function' object")
        raw = tool_arguments(fn.get("arguments"), "function.arguments")
        return ToolCallRequest(id=id_text(call.get("id"), "id"), name=id_text(fn.get("name"), "function.name"),
                               arguments=raw)

    def tool_result(self, call_id: str, text: str, is_error: bool = False) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": call_id, "content": text}

    def usage_claim(self, usage: Mapping[str, Any]) -> int:
        # prompt_tokens is chat's alone (Responses and Anthropic say input_tokens)
        return 2 if "prompt_tokens" in usage else 0

    def parse_usage(self, response: Any) -> Usage:
        """Read chat usage: ``prompt_tokens`` (all of the prompt), ``completion_tokens``,
        ``prompt_tokens_details.cached_tokens`` (and ``cache_write_tokens`` where the model reports writes)."""
        usage = own_usage(response, self.usage_claim, "OpenAI chat")
        details = usage.get("prompt_tokens_details")
        return Usage(
            prompt_tokens=count(usage, "prompt_tokens", "chat"),
            completion_tokens=count(usage, "completion_tokens", "chat"),
            cached_tokens=optional_count(details, "cached_tokens"),
            cache_write_tokens=optional_count(details, "cache_write_tokens"),
        )


FORMAT = register_format(OpenAIChat())

"""OpenAI Agents SDK: a ``call_model_input_filter`` that pages each model call, and usage hooks.

::

    paging = AgentsPaging(p)                      # p: pager.open(...) or pager.aopen(...)
    result = await Runner.run(agent, task, run_config=paging.run_config(), hooks=paging.hooks)

Before each model call the filter hands pager the call's Responses input
items, the agent's instructions and its tool schemas (counted against the
budget) in the ``openai-responses`` wire format, and returns the assembled
input. ``paging.hooks`` (``RunHooks``) observes each call's usage, cached
tokens included. The filter is async: pager's work runs off the event loop.
"""

from __future__ import annotations

from typing import Any

try:
    from agents import RunConfig, RunHooks
    from agents.run_config import CallModelData, ModelInputData
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(f"pager's Agents SDK adapter needs openai-agents: pip install 'llm-context-pager[openai-agents]' ({exc})") from exc

from pager.aio import AsyncPager

__all__ = ["AgentsPaging", "tool_schemas"]

FORMAT = "openai-responses"


def tool_schemas(tools: Any) -> list[dict[str, Any]]:
    """Return an agent's tools as Responses tool JSON (what the model is sent, so what is counted)."""
    out = []
    for tool in tools or ():
        params = getattr(tool, "params_json_schema", None)
        if params is not None:
            out.append({"type": "function", "name": tool.name, "description": getattr(tool, "description", "") or "",
                        "parameters": params, "strict": bool(getattr(tool, "strict_json_schema", False))})
        else:  # hosted tools (web search, file search ...): their type is what is sent
            out.append({"type": str(getattr(tool, "type", None) or getattr(tool, "name", type(tool).__name__))})
    return out


def _usage(usage: Any) -> dict[str, Any]:
    details = getattr(usage, "input_tokens_details", None)
    return {
        "prompt_tokens": int(getattr(usage, "input_tokens", 0) or 0),
        "completion_tokens": int(getattr(usage, "output_tokens", 0) or 0),
        "prompt_tokens_details": {"cached_tokens": int(getattr(details, "cached_tokens", 0) or 0),
                                  "cache_write_tokens": int(getattr(details, "cache_write_tokens", 0) or 0)},
    }


class _UsageHooks(RunHooks):
    def __init__(self, apager: AsyncPager) -> None:
        self.apager = apager

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        if getattr(response, "usage", None) is not None and response.usage.requests:
            await self.apager.aobserve(_usage(response.usage))


class AgentsPaging:
    """The filter (call it, or pass ``run_config()``) and ``hooks`` for one pager session."""

    def __init__(self, pager: Any) -> None:
        self.apager = pager if isinstance(pager, AsyncPager) else AsyncPager(pager)
        self.hooks = _UsageHooks(self.apager)

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        agent = data.agent
        request: dict[str, Any] = {
            "model": str(getattr(agent, "model", None) or "agents"),
            "input": list(data.model_data.input),
            "tools": tool_schemas(getattr(agent, "tools", ())),
        }
        if data.model_data.instructions is not None:
            request["instructions"] = data.model_data.instructions
        out = await self.apager.aassemble(request, format=FORMAT)
        return ModelInputData(input=list(out["input"]), instructions=out.get("instructions", data.model_data.instructions))

    def run_config(self, **kwargs: Any) -> RunConfig:
        """Return a ``RunConfig`` with this filter (other ``RunConfig`` fields as keywords)."""
        return RunConfig(call_model_input_filter=self, **kwargs)

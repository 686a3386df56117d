"""The Agents SDK filter, run by the real ``Runner`` with an SDK ``Model`` subclass that answers offline."""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import os
import types
from typing import Any

import pytest

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
# the Agents SDK (~1 s of CPU over openai) is imported by the first test, not at collection:
# tests/lazy.py (this module's tests run on one worker, GROUPS in conftest.py)
if importlib.util.find_spec("agents") is None:
    pytest.importorskip("agents")

import pager  # noqa: E402

BIG = "\n".join(f"line {i}: build output compiled module_{i}.o" for i in range(900))



@functools.cache
def _sdk() -> Any:
    """Return the SDK's names used here, with ``RecordingModel`` and the ``bash`` tool built on them."""
    from agents import Agent, Runner, function_tool

    from pager.adapters.openai_agents import AgentsPaging, tool_schemas  # imports the SDK
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText
    from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

    class RecordingModel(Model):
        """An Agents SDK model that answers with text and keeps what it was sent."""

        def __init__(self) -> None:
            self.seen: list[Any] = []

        async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs,
                               tracing, *, previous_response_id=None, conversation_id=None, prompt=None):
            self.seen.append((system_instructions, input))
            msg = ResponseOutputMessage(id="msg_1", type="message", role="assistant", status="completed",
                                        content=[ResponseOutputText(type="output_text", text="done", annotations=[])])
            usage = Usage(requests=1, input_tokens=1200, output_tokens=7, total_tokens=1207,
                          input_tokens_details=InputTokensDetails(cached_tokens=1000, cache_write_tokens=0),
                          output_tokens_details=OutputTokensDetails(reasoning_tokens=0))
            return ModelResponse(output=[msg], usage=usage, response_id=None)

        def stream_response(self, *a, **kw):  # pragma: no cover - not used
            raise NotImplementedError

    @function_tool
    def bash(cmd: str) -> str:
        """Run a shell command."""
        return "ok"

    return types.SimpleNamespace(Agent=Agent, Runner=Runner, RecordingModel=RecordingModel, bash=bash,
                                 AgentsPaging=AgentsPaging, tool_schemas=tool_schemas)


def test_filter_pages_the_input_and_counts_tools(tmp_path):
    sdk = _sdk()
    model = sdk.RecordingModel()
    agent = sdk.Agent(name="builder", instructions="You are a build agent.", model=model, tools=[sdk.bash])
    items = [
        {"role": "user", "content": "Fix the build."},
        {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": "{\"cmd\": \"make\"}"},
        {"type": "function_call_output", "call_id": "c1", "output": BIG},
        {"role": "user", "content": "What failed?"},
    ]
    with pager.open(tmp_path / "ctx", session="s1", context_window=32_000) as p:
        paging = sdk.AgentsPaging(p)
        result = asyncio.run(sdk.Runner.run(agent, items, run_config=paging.run_config(), hooks=paging.hooks))
        assert result.final_output == "done"
        instructions, sent = model.seen[0]
        assert instructions == "You are a build agent."
        out = next(i for i in sent if i.get("type") == "function_call_output")
        assert "pg:" in str(out["output"]) and len(str(out["output"])) < len(BIG)
        assert p.last_report.layers["tools"] > 0  # the tool schema was counted
        usage = [r for r in p.reports.read() if r["type"] == "usage"]
    assert [(u["prompt_tokens"], u["cached_tokens"]) for u in usage] == [(1200, 1000)]


def test_tool_schemas():
    sdk = _sdk()
    bash, tool_schemas = sdk.bash, sdk.tool_schemas
    assert tool_schemas([bash])[0]["name"] == "bash"
    assert tool_schemas([bash])[0]["parameters"]["properties"]["cmd"]["type"] == "string"

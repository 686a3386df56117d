"""LangChain v1 middleware and LangGraph hooks, with LangChain's own fake chat model, offline."""

from __future__ import annotations

import asyncio
import functools
import importlib.util
from typing import Any

import pytest

# whether they are installed, not importing them: tests/lazy.py
for _name in ("langchain", "langgraph"):
    if importlib.util.find_spec(_name) is None:
        pytest.importorskip(_name)

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage  # noqa: E402

import pager  # noqa: E402

BIG = "\n".join(f"line {i}: build output compiled module_{i}.o" for i in range(900))


@functools.cache
def _recording_model() -> type:
    """Return LangChain's fake chat model, keeping what it was sent (built at first use: tests/lazy.py)."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    class RecordingModel(GenericFakeChatModel):
        seen: list[Any] = []

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):  # type: ignore[override]
            self.seen.append(list(messages))
            return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)

    return RecordingModel


def _answer(text: str) -> AIMessage:
    return AIMessage(content=text, usage_metadata={
        "input_tokens": 1200, "output_tokens": 7, "total_tokens": 1207,
        "input_token_details": {"cache_read": 1000, "cache_creation": 150}})


def _history() -> list[Any]:
    return [
        HumanMessage("Fix the build."),
        AIMessage("", tool_calls=[{"name": "bash", "args": {"cmd": "make"}, "id": "c1"}]),
        ToolMessage(BIG, tool_call_id="c1"),
        HumanMessage("What failed?"),
    ]


def _usage(store) -> list[dict[str, Any]]:
    with pager.open(store, session="s1") as p:
        return [r for r in p.reports.read() if r["type"] == "usage"]


def _check_paged(sent: list[Any]) -> None:
    tool = next(m for m in sent if isinstance(m, ToolMessage))
    assert "pg:" in tool.content and len(tool.content) < len(BIG)  # stubbed, with a handle
    assert isinstance(sent[0], SystemMessage) and sent[0].content == "You are a build agent."


def test_middleware_sync_and_async(tmp_path):
    # imported here: langchain.agents takes ~1.7 s of CPU, which the worker that does not
    # run this module would pay at collection (tests/lazy.py)
    from langchain.agents import create_agent

    from pager.adapters.langchain import PagerMiddleware  # imports langchain.agents

    store = tmp_path / "ctx"
    model = _recording_model()(messages=iter([_answer("sync answer"), _answer("async answer")]))
    model.seen = []
    with pager.open(store, session="s1", context_window=32_000) as p:
        agent = create_agent(model, tools=[], system_prompt="You are a build agent.", middleware=[PagerMiddleware(p)])
        out = agent.invoke({"messages": _history()})
        assert out["messages"][-1].content == "sync answer"
        assert len(out["messages"]) == 5  # the agent's own state keeps the full history
        assert out["messages"][2].content == BIG
        _check_paged(model.seen[0])

        async def run() -> Any:
            return await agent.ainvoke({"messages": _history() + [AIMessage("sync answer"), HumanMessage("And now?")]})

        assert asyncio.run(run())["messages"][-1].content == "async answer"
        _check_paged(model.seen[1])
    usage = _usage(store)
    assert [(u["prompt_tokens"], u["cached_tokens"], u["cache_write_tokens"]) for u in usage] == [(1200, 1000, 150)] * 2


@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
def test_langgraph_pre_model_hook(tmp_path):
    from langgraph.prebuilt import create_react_agent

    from pager.adapters.langchain import langgraph_hooks  # imports langchain.agents

    store = tmp_path / "ctx"
    model = _recording_model()(messages=iter([_answer("graph answer")]))
    model.seen = []
    with pager.open(store, session="s1", context_window=32_000) as p:
        agent = create_react_agent(model, tools=[], **langgraph_hooks(p))
        out = agent.invoke({"messages": [SystemMessage("You are a build agent."), *_history()]})
    assert out["messages"][-1].content == "graph answer"
    assert out["messages"][3].content == BIG  # state untouched; only the model's input is paged
    _check_paged(model.seen[0])
    assert [u["cached_tokens"] for u in _usage(store)] == [1000]

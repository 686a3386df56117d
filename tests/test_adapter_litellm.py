"""The LiteLLM callback, with the real litellm SDK calling a canned model server on loopback."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest

# litellm fetches a model price list from the internet at import unless told not to
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pager  # noqa: E402
from pager.proxy import ServerThread  # noqa: E402
from proxy_upstream import make_upstream  # noqa: E402

BIG = "\n".join(f"line {i}: build output compiled module_{i}.o" for i in range(900))


def _history(last: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are a build agent."},
        {"role": "user", "content": "Fix the build."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\": \"make\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": BIG},
        {"role": "user", "content": last},
    ]


def _usage(p: Any) -> list[dict[str, Any]]:
    return [r for r in p.reports.read() if r["type"] == "usage"]


async def _wait_usage(p: Any, n: int) -> list[dict[str, Any]]:
    # litellm logs success in a task (async) or a worker thread (sync) after it returns
    deadline = time.monotonic() + 20
    while len(_usage(p)) < n and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return _usage(p)


def test_callback_pages_and_observes(tmp_path):
    # imported here, not at module level: litellm takes seconds to import, and every
    # pytest-xdist worker imports every test module before the first test runs
    litellm = pytest.importorskip("litellm")
    from pager.adapters.litellm import PagerCallback

    up = make_upstream()
    store = tmp_path / "ctx"
    saved = list(litellm.callbacks)
    with ServerThread(up) as url, pager.open(store, session="s1", context_window=32_000) as p:
        litellm.callbacks = [PagerCallback(p)]
        try:
            kw = {"model": "openai/m", "api_base": url + "/v1", "api_key": "sk-test", "prompt_id": "pager"}
            resp = litellm.completion(messages=_history("what failed?"), **kw)
            assert resp.choices[0].message.content == "echo: what failed?"

            async def run() -> Any:
                resp = await litellm.acompletion(messages=_history("and now?"), **kw)
                return resp, await _wait_usage(p, 2)

            resp, usage = asyncio.run(run())
            assert resp.choices[0].message.content == "echo: and now?"
            sent = [b for path, _h, b in up.state.seen]
            for body in sent:
                tool = next(m for m in body["messages"] if m["role"] == "tool")
                assert "pg:" in tool["content"] and len(tool["content"]) < len(BIG)
        finally:
            litellm.callbacks = saved
    assert [(u["prompt_tokens"], u["cached_tokens"]) for u in usage] == [(40, 32), (40, 32)]

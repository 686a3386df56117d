"""A LiteLLM callback: page each completion's messages, observe its usage.

::

    litellm.callbacks = [PagerCallback(p)]
    litellm.completion(model=..., messages=history, prompt_id="pager")   # SDK: prompt_id routes it here

In the LiteLLM SDK, a callback rewrites messages through LiteLLM's prompt
management hook, which LiteLLM runs for calls that carry a ``prompt_id``;
``PagerCallback`` answers every id (any value works). In the LiteLLM proxy
server the same object is a pre-call hook (``async_pre_call_hook``) and needs
nothing per call. Usage (``prompt_tokens_details.cached_tokens``, Anthropic's
cache reads and writes) is observed from every successful response, sync or
async, either way.
"""

from __future__ import annotations

from typing import Any

try:
    from litellm.integrations.custom_prompt_management import CustomPromptManagement
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(f"pager's LiteLLM adapter needs litellm: pip install 'llm-context-pager[litellm]' ({exc})") from exc

from pager.aio import AsyncPager

__all__ = ["PagerCallback"]


class PagerCallback(CustomPromptManagement):
    """LiteLLM callback for one pager session (a ``Pager`` or an ``AsyncPager``)."""

    def __init__(self, pager: Any) -> None:
        super().__init__()
        if isinstance(pager, AsyncPager):
            self.apager, self.pager = pager, pager.pager
        else:
            self.pager, self.apager = pager, AsyncPager(pager)

    @property
    def integration_name(self) -> str:
        return "pager"

    def should_run_prompt_management(self, prompt_id: Any, prompt_spec: Any, dynamic_callback_params: Any) -> bool:
        return True

    @staticmethod
    def _request(model: str, messages: list[Any], params: dict[str, Any]) -> dict[str, Any]:
        req: dict[str, Any] = {"model": model, "messages": list(messages)}
        if params.get("tools"):
            req["tools"] = params["tools"]  # counted against the budget
        return req

    # -- before the call ------------------------------------------------------------------

    def get_chat_completion_prompt(self, model: str, messages: list[Any], non_default_params: dict[str, Any],
                                   *args: Any, **kwargs: Any) -> tuple[str, list[Any], dict[str, Any]]:
        out = self.pager.assemble(self._request(model, messages, non_default_params))
        return model, out["messages"], non_default_params

    async def async_get_chat_completion_prompt(self, model: str, messages: list[Any], non_default_params: dict[str, Any],
                                               *args: Any, **kwargs: Any) -> tuple[str, list[Any], dict[str, Any]]:
        out = await self.apager.aassemble(self._request(model, messages, non_default_params))
        return model, out["messages"], non_default_params

    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: Any) -> dict[str, Any]:
        """LiteLLM proxy server: rewrite ``data['messages']`` before the call."""
        if isinstance(data.get("messages"), list):
            out = await self.apager.aassemble(self._request(str(data.get("model", "")), data["messages"], data))
            data["messages"] = out["messages"]
        return data

    # -- after the call -------------------------------------------------------------------

    def log_success_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
        if getattr(response_obj, "usage", None) is not None:
            self.pager.observe(response_obj)

    async def async_log_success_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
        if getattr(response_obj, "usage", None) is not None:
            await self.apager.aobserve(response_obj)

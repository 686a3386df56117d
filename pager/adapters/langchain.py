"""LangChain v1 middleware and LangGraph model hooks.

::

    agent = create_agent(model, tools, middleware=[PagerMiddleware(p)])          # langchain>=1
    agent = create_react_agent(model, tools, **langgraph_hooks(p))               # langgraph.prebuilt

``p`` is a ``Pager`` (``pager.open``) or an ``AsyncPager`` (``pager.aopen``).
Before each model call the agent's messages (LangChain message objects) are
assembled; after it, the ``AIMessage``'s ``usage_metadata`` (cache reads and
writes included) goes to ``observe``. Messages pager keeps in full are passed
to the model as the very objects the agent holds; stubs, the task-state card
and recalled pages are new messages.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Mapping, Sequence

try:
    from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, convert_to_messages, convert_to_openai_messages
    from langchain_core.utils.function_calling import convert_to_openai_tool
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(f"pager's LangChain adapter needs langchain: pip install 'llm-context-pager[langchain]' ({exc})") from exc

from pager.aio import AsyncPager

__all__ = ["LangChainPaging", "PagerMiddleware", "langgraph_hooks", "usage_from_message"]


def usage_from_message(message: Any) -> dict[str, Any] | None:
    """Return an ``AIMessage``'s ``usage_metadata`` as ``observe`` takes it (None without one).

    LangChain's ``input_tokens`` is the whole prompt; ``input_token_details``
    splits off ``cache_read`` and ``cache_creation`` (pager's usage parser
    reads this shape itself).
    """
    meta = getattr(message, "usage_metadata", None)
    if not meta:
        return None
    return {"usage_metadata": dict(meta)}


def _tool_schema(tool: Any) -> Any:
    try:
        return convert_to_openai_tool(tool)
    except Exception:  # noqa: BLE001 - an odd tool is still counted by its repr, never fatal
        return {"type": "function", "function": {"name": str(getattr(tool, "name", tool))}}


class LangChainPaging:
    """The conversion both hooks share: LangChain messages <-> chat dicts, usage.

    Conversions are cached per message object, so on each call the messages the
    agent already had are the same dicts as last time and pager's same-prefix
    fast path applies.
    """

    def __init__(self, pager: Any, model: str = "langchain") -> None:
        if isinstance(pager, AsyncPager):
            self.apager, self.pager = pager, pager.pager
        else:
            self.pager, self.apager = pager, AsyncPager(pager)
        self.model = model
        self._dicts: dict[int, tuple[BaseMessage, dict[str, Any]]] = {}

    def request(self, messages: Sequence[Any], tools: Sequence[Any] = ()) -> tuple[dict[str, Any], dict[int, BaseMessage]]:
        """Return the chat request for ``messages`` and, by dict id, the object each dict came from."""
        known = self._dicts
        fresh: dict[int, tuple[BaseMessage, dict[str, Any]]] = {}
        out = []
        for m in convert_to_messages(list(messages)):
            hit = known.get(id(m))
            d = hit[1] if hit is not None and hit[0] is m else convert_to_openai_messages(m)
            fresh[id(m)] = (m, d)
            out.append(d)
        self._dicts = fresh
        back = {id(d): m for m, d in fresh.values()}
        req: dict[str, Any] = {"model": self.model, "messages": out}
        if tools:
            req["tools"] = [_tool_schema(t) for t in tools]
        return req, back

    @staticmethod
    def messages(assembled: Mapping[str, Any], back: Mapping[int, BaseMessage]) -> list[BaseMessage]:
        """Return the assembled messages as LangChain objects (the originals where kept in full)."""
        return [back.get(id(d)) or convert_to_messages([d])[0] for d in assembled["messages"]]

    def page(self, messages: Sequence[Any], tools: Sequence[Any] = ()) -> list[BaseMessage]:
        req, back = self.request(messages, tools)
        return self.messages(self.pager.assemble(req), back)

    async def apage(self, messages: Sequence[Any], tools: Sequence[Any] = ()) -> list[BaseMessage]:
        req, back = self.request(messages, tools)
        return self.messages(await self.apager.aassemble(req), back)

    def observe(self, message: Any) -> None:
        usage = usage_from_message(message)
        if usage is not None:
            self.pager.observe(usage)

    async def aobserve(self, message: Any) -> None:
        usage = usage_from_message(message)
        if usage is not None:
            await self.apager.aobserve(usage)


def _ai_message(result: Any) -> Any:
    if isinstance(result, AIMessage):
        return result
    for m in reversed(getattr(result, "result", None) or getattr(getattr(result, "model_response", None), "result", None) or ()):
        if isinstance(m, AIMessage):
            return m
    return None


def _split(paged: list[BaseMessage]) -> tuple[SystemMessage | None, list[BaseMessage]]:
    system = [m for m in paged if isinstance(m, SystemMessage)]
    rest = [m for m in paged if not isinstance(m, SystemMessage)]
    if len(system) > 1:
        system = [SystemMessage(content="\n\n".join(str(s.content) for s in system))]
    return (system[0] if system else None), rest


try:
    from langchain.agents.middleware import AgentMiddleware
except ImportError:  # pragma: no cover - langchain-core alone: LangGraph hooks only
    AgentMiddleware = object  # type: ignore[assignment,misc]


class PagerMiddleware(AgentMiddleware):  # type: ignore[misc,valid-type]
    """LangChain v1 agent middleware: page every model call (sync and async)."""

    def __init__(self, pager: Any, model: str = "langchain") -> None:
        super().__init__()
        self.paging = LangChainPaging(pager, model)

    def _history(self, request: Any) -> list[Any]:
        system = getattr(request, "system_message", None)
        return ([system] if system is not None else []) + list(request.messages)

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        system, messages = _split(self.paging.page(self._history(request), request.tools or ()))
        result = handler(request.override(system_message=system, messages=messages))
        self.paging.observe(_ai_message(result))
        return result

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        system, messages = _split(await self.paging.apage(self._history(request), request.tools or ()))
        result = await handler(request.override(system_message=system, messages=messages))
        await self.paging.aobserve(_ai_message(result))
        return result


def langgraph_hooks(pager: Any, model: str = "langchain") -> dict[str, Callable[..., Any]]:
    """Return ``pre_model_hook`` and ``post_model_hook`` for ``langgraph.prebuilt.create_react_agent``.

    The pre-hook hands the model the paged messages as ``llm_input_messages``
    (the graph's state keeps the full history); the post-hook observes usage.
    """
    paging = LangChainPaging(pager, model)

    def pre_model_hook(state: Mapping[str, Any]) -> dict[str, Any]:
        return {"llm_input_messages": paging.page(state["messages"])}

    def post_model_hook(state: Mapping[str, Any]) -> dict[str, Any]:
        paging.observe(_ai_message(state["messages"][-1]))
        return {}

    return {"pre_model_hook": pre_model_hook, "post_model_hook": post_model_hook}

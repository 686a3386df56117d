"""Thin adapters for agent frameworks, each an optional extra.

- ``pager.adapters.langchain``: LangChain v1 middleware, LangGraph model hooks.
- ``pager.adapters.openai_agents``: an OpenAI Agents SDK ``call_model_input_filter``.
- ``pager.adapters.litellm``: a LiteLLM callback.

Each module imports its framework on import and fails with the install line
when it is missing; this package imports none of them.
"""

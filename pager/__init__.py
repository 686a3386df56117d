"""pager: schedule an LLM agent's context window like virtual memory.

::

    import pager
    p = pager.open("ctx/", session="s1", context_window=200_000)
    request = p.assemble({"model": "...", "messages": history, "tools": tools})
    response = client.chat.completions.create(**request)
    p.observe(response)
"""

from .errors import (
    BudgetError,
    ConfigError,
    HandleError,
    InputError,
    MessageError,
    PagerError,
    RecallIndexError,
    SchemaError,
    StoreError,
    ToolError,
)
from .heat import HeatPolicy, PageTable, get_policy, register_policy
from .options import Options
from .pager import Pager, open, store_sessions
from .report import Report

__all__ = [
    "BudgetError",
    "ConfigError",
    "HandleError",
    "HeatPolicy",
    "InputError",
    "MessageError",
    "Options",
    "PageTable",
    "Pager",
    "PagerError",
    "RecallIndexError",
    "Report",
    "SchemaError",
    "StoreError",
    "ToolError",
    "get_policy",
    "open",
    "register_policy",
    "store_sessions",
]

__version__ = "0.1.0"

"""pager: schedule an LLM agent's context window like virtual memory.

::

    import pager
    p = pager.open("ctx/", session="s1", context_window=200_000)
    request = p.assemble({"model": "...", "messages": history, "tools": tools})
    response = client.chat.completions.create(**request)
    p.observe(response)
"""

from pager.errors import (
    BudgetError,
    ConfigError,
    HandleError,
    HistoryConflictError,
    InputError,
    InvariantRewriteError,
    LostWritesWarning,
    MessageError,
    PagerError,
    PromotionGateError,
    RecallIndexError,
    SchemaError,
    StateFileError,
    StoreError,
    ToolError,
)
from pager.core.heat import HeatPolicy, PageTable, get_policy, register_policy
from typing import TYPE_CHECKING

from pager.options import Options
from pager.report import Report

if TYPE_CHECKING:  # pragma: no cover
    from pager.aio import AsyncPager, aopen
    from pager.pager import Pager, open, store_sessions

# The facade (and with it sqlite3 and tantivy) loads on first use, so that
# importing the pure core (pager.core.plan, pager.core.heat, pager.core.pairing) stays free
# of I/O modules.
_LAZY = {"Pager", "open", "store_sessions"}
_LAZY_AIO = {"AsyncPager", "aopen"}


def __getattr__(name: str):  # PEP 562
    if name in _LAZY:
        from pager import pager as _facade

        return getattr(_facade, name)
    if name in _LAZY_AIO:
        from pager import aio as _aio

        return getattr(_aio, name)
    raise AttributeError(f"module 'pager' has no attribute {name!r}")


__all__ = [
    "AsyncPager",
    "BudgetError",
    "ConfigError",
    "HandleError",
    "HeatPolicy",
    "HistoryConflictError",
    "InputError",
    "InvariantRewriteError",
    "LostWritesWarning",
    "MessageError",
    "Options",
    "PageTable",
    "Pager",
    "PagerError",
    "PromotionGateError",
    "RecallIndexError",
    "Report",
    "SchemaError",
    "StateFileError",
    "StoreError",
    "ToolError",
    "aopen",
    "get_policy",
    "open",
    "register_policy",
    "store_sessions",
]

__version__ = "0.2.0"

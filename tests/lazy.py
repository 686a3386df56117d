"""Third-party SDKs imported at their first use, not when pytest collects the module.

Every pytest-xdist worker collects (imports) every test module, but the tests that use
anthropic, the Agents SDK, LangChain and mcp run on one worker (GROUPS in conftest.py):
imported at collection, they cost the other worker ~6 s of CPU for nothing
(``anthropic.types`` alone ~3.5 s). ``lazy_module`` keeps ``importorskip``'s behaviour: a
module whose SDK is not installed is still skipped as a whole, at collection.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

import pytest


class _LazyModule:
    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):  # pytest probes a module's globals for its own markers while it collects
            raise AttributeError(attr)
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


def lazy_module(name: str, *, skip: bool = True) -> Any:
    """Return ``name`` as a module imported at its first attribute access.

    ``skip``: the test module is skipped when the package is absent (``importorskip``);
    otherwise its first use raises ImportError, as a plain ``import`` would have.
    """
    top = name.partition(".")[0]
    if skip and importlib.util.find_spec(top) is None:  # find_spec of "a.b" would import "a"
        pytest.importorskip(top)
    return _LazyModule(name)

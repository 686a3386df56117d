"""``pager proxy``: an OpenAI- and Anthropic-compatible HTTP proxy that pages every request.

Point an agent's base URL at it and change nothing else::

    pager proxy --store ctx/ --port 8787
    ANTHROPIC_BASE_URL=http://127.0.0.1:8787 claude

Needs the ``proxy`` extra (``pip install 'llm-context-pager[proxy]'``): uvicorn and
Starlette serve it, httpx forwards.
"""

from __future__ import annotations

try:
    import httpx  # noqa: F401
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        f"pager's proxy needs {exc.name}: pip install 'llm-context-pager[proxy]'"
    ) from exc

from pager.proxy.app import ProxyConfig, create_app
from pager.proxy.server import ServerThread, check_bind, serve

__all__ = ["ProxyConfig", "ServerThread", "check_bind", "create_app", "serve"]

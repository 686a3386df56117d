"""``pager ui``: a live, read-only view of what the agent sees, in a browser.

Sessions with their calls, cost and savings; per session a strip of its calls
by layer and a map of its pages; each call's prompt beside the client's
request; search over what the viewer may read. Served by the proxy's stack
(Starlette and uvicorn: the ``proxy`` extra), on 127.0.0.1 by default, from a
store opened read-only. Modules:

- ``source``: the read-only store and the report log, followed as it grows;
- ``data``: the queries (``View``), pure of HTTP;
- ``costs``: a session's calls priced in base input tokens, beside full resend;
- ``prompt``: each call's layout rebuilt from the report log, rendered by the scheduler;
- ``charts`` and ``pages``: the HTML, every data string escaped;
- ``assets``: the stylesheet and the small script;
- ``app``: the routes (``create_app``, ``standalone``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app", "open_view", "standalone"]


def __getattr__(name: str) -> Any:
    if name in ("create_app", "standalone"):
        from pager.ui import app

        return getattr(app, name)
    if name == "open_view":
        from pager.ui.data import open_view

        return open_view
    raise AttributeError(name)

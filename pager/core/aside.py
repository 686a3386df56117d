"""Aside pages: pins, notes and handoffs kept as pages beside a session's history. Pure.

What an agent learns and writes down (a decision in a note, a goal it was
pinned, a handoff to its next window) is exactly what the next agent on the
same repository should find. So each is also stored as a page: with a handle,
an owner, a scope and a pool like any message page, in the same recall index,
so search, the ``recall`` tool, automatic recall, ``expand``, ``promote`` and
the pools' ACLs treat them the same way (one recall surface). They belong to no
branch: a history never loads them, and the L1 card still shows pins and notes
from their own lists.
"""

from __future__ import annotations

from typing import Callable

import orjson

from pager.core.pages import NewPage, handle_for, hash_bytes
from pager.core.terms import extract_terms
from pager.core.tokens import MESSAGE_OVERHEAD

__all__ = ["ASIDE_KINDS", "aside_page"]

ASIDE_KINDS = ("pin", "note", "handoff")
# A pin is the user's goal; notes and handoffs are the agent's own words.
_ROLE = {"pin": "user", "note": "assistant", "handoff": "assistant"}


def aside_page(
    kind: str, text: str, *, session: str, seq: int, step: int, count: Callable[[str], int],
    scope: str = "session", owner: str | None = None, pool: str | None = None,
) -> NewPage:
    """Return the page that keeps a pin, note or handoff written at history position ``seq``."""
    if kind not in ASIDE_KINDS:
        raise ValueError(f"aside kind must be one of {ASIDE_KINDS}, got {kind!r}")
    message = {"role": _ROLE[kind], "content": text}
    raw = orjson.dumps(message, option=orjson.OPT_SORT_KEYS)
    digest = hash_bytes(raw)
    tokens = MESSAGE_OVERHEAD + count(text)
    return NewPage(
        hash=digest, kind=kind, role=_ROLE[kind], step=step, tokens=tokens, stub_tokens=tokens, chars=len(text),
        handle=handle_for(session, seq, digest), message=raw, labels=(kind,), scope=scope, owner=owner, pool=pool,
        terms=tuple(sorted(extract_terms(text))),
    )

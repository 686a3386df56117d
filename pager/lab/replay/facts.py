"""Per-message facts, computed once per distinct message and shared by every strategy.

A replay builds one prompt per assistant message per strategy, and most
prompts repeat most of the previous one: counting tokens afresh for every
call would make the benchmark quadratic in tokenizer work. ``Facts`` memoises,
by the message's canonical bytes, its token count and its need-matching
terms; and memoises the canonical bytes themselves by object identity, since
baselines hand the same history dicts back.

Canonical bytes are the sorted-key orjson of the message's *wire fields*
(``role``, ``content``, ``tool_calls``, ``tool_call_id``, ``name``; ``None``
and empty values dropped). Bookkeeping fields a recorder added (``usage``,
``reasoning_content``) are not sent to a provider, so they neither break a
cache prefix nor make two otherwise identical messages differ.

Messages must not be mutated once seen: the identity memo would go stale.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import orjson

from pager.core.tokens import TokenCounter, default_counter, message_tokens
from pager.lab.replay.needs import message_text, terms

__all__ = ["Facts", "WIRE_FIELDS", "canonical"]

WIRE_FIELDS = ("role", "content", "tool_calls", "tool_call_id", "name")


def canonical(message: Mapping[str, Any]) -> bytes:
    """Return a message's canonical bytes: sorted-key orjson of its wire fields."""
    wire = {k: message[k] for k in WIRE_FIELDS if message.get(k) not in (None, "", [])}
    return orjson.dumps(wire, option=orjson.OPT_SORT_KEYS)


class Facts:
    """Memoise canonical bytes, token counts and terms of messages."""

    def __init__(self, counter: TokenCounter | None = None) -> None:
        self.counter = counter if counter is not None else default_counter()
        # id(message) -> (message, key); holding the message keeps its id unique
        self._ident: dict[int, tuple[Mapping[str, Any], bytes]] = {}
        self._tokens: dict[bytes, int] = {}
        self._terms: dict[bytes, frozenset[str]] = {}

    def key(self, message: Mapping[str, Any]) -> bytes:
        """Return the message's canonical bytes (memoised by identity)."""
        hit = self._ident.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        k = canonical(message)
        self._ident[id(message)] = (message, k)
        return k

    def keys(self, messages: Sequence[Mapping[str, Any]]) -> list[bytes]:
        """Return the canonical bytes of each message."""
        return [self.key(m) for m in messages]

    def tokens(self, message: Mapping[str, Any], key: bytes | None = None) -> int:
        """Return the message's prompt tokens (``pager.core.tokens.message_tokens``), memoised.

        ``key``: the message's ``key``, when the caller has it already.
        """
        k = self.key(message) if key is None else key
        n = self._tokens.get(k)
        if n is None:
            n = self._tokens[k] = message_tokens(message, self.counter)
        return n

    def terms(self, message: Mapping[str, Any], key: bytes | None = None) -> frozenset[str]:
        """Return the message's need-matching terms (``needs.terms`` of ``message_text``).

        ``key``: the message's ``key``, when the caller has it already.
        """
        k = self.key(message) if key is None else key
        t = self._terms.get(k)
        if t is None:
            t = self._terms[k] = terms(message_text(message))
        return t

    def clear(self) -> None:
        """Drop every memo."""
        self._ident.clear()
        self._tokens.clear()
        self._terms.clear()

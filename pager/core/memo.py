"""A bounded memo of a pure function: a hit is one C-level lookup, and what stays is what is in use. Pure.

The term scan (``pager.core.termscan``) and the token count
(``pager.core.tokens``) look up every piece of every new text in memos
shared by all the sessions of a process. A ``dict`` subclass: a hit is the
dict's own lookup (``map(memo.__getitem__, keys)`` runs in C); only a miss
runs Python (``__missing__``).

Theory of operation
-------------------
When the memo is full its entries become the **old generation** and it
starts again empty. A key asked for again is moved back from the old
generation (a Python call, not the function); what the old generation
still holds at the next turn is dropped. A key in steady use therefore
survives every turn, and one used once is gone after at most two.

Dropping the older half instead (what this replaced) dropped, in a process
that has run a while, the pieces that had been there longest: the most
common ones. Measured in one process replaying the six conversations of
``bench/proxy_overhead.py`` (issue 23): the term memos were full and halved
7-8 times during the warm-up, and a request after a halving computed again
pieces every session uses (138 and 176 misses in two requests, 13 and 11
with memos that never fill). Over the 360 measured requests, with as many
entries at most as the halved memo held (two generations of 8,192), the
chunk memo missed 9,702 times against 10,761, the match memo 6,991 against
7,168.

The memo holds at most twice its bound (the two generations); no result
depends on what it holds.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["Memo"]

_NOTHING = object()


class Memo(dict):  # type: ignore[type-arg]
    """``fn``'s results by key, at most ``entries`` a generation; keys over ``key_chars`` long are not kept.

    A key is a string, or a tuple whose first item is the string measured.
    """

    def __init__(self, fn: Callable[[Any], Any], entries: int, key_chars: int) -> None:
        super().__init__()
        self.fn = fn
        self.entries = max(1, entries)
        self.key_chars = key_chars
        self.old: dict[Any, Any] = {}

    def __missing__(self, key: Any) -> Any:
        value = self.old.pop(key, _NOTHING)  # pop: atomic, so two threads never both move a key back
        if value is _NOTHING:
            value = self.fn(key)
            # inline, not a function: a new tool output misses once a chunk (800 misses in 49 KB of test names)
            if len(key[0] if type(key) is tuple else key) > self.key_chars:
                return value
        if len(self) >= self.entries:  # a turn: this generation becomes the old one
            self.old = dict(self)
            self.clear()  # a key another thread added in between is only computed again: a cache
        self[key] = value
        return value

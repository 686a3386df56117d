"""What a ``Pager`` keeps of the requests it converts, so that a call converts what is new (issue 23).

Two things, both used under the ``Pager``'s lock:

- the last call's history items, in a list of its own extended in place, for
  ``pager.core.canonical.resent`` (a history rebuilt for a call, equal values
  in new objects, taken as the very objects of the last call's). Keeping the
  caller's own list instead freed the last call's list inside ``assemble``
  whenever the caller sends a new list each call (a proxy, a harness that
  rebuilds it): a reference dropped per message, 0.6 ms a call at 50k;
- per wire format that converts (``pager.formats._heads.OwnHeads``), a head
  memo of its own, whose list is the call's neutral history, extended in place
  by the next call: the history is not copied a call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pager.core.canonical import resent
from pager.formats.base import Converted, WireFormat

__all__ = ["Intake"]


class Intake:
    """The last call's history items and the head memos of one ``Pager``'s conversions."""

    def __init__(self) -> None:
        self.last: list[Any] | None = None  # the last call's history items (``resent``)
        self.heads: dict[str, Any] = {}  # wire format name -> the head memo of its conversions

    def convert(self, fmt: WireFormat, request: Mapping[str, Any], vouch: Any = None
                ) -> tuple[Mapping[str, Any], Any, Converted]:
        """Return ``(request, items, converted)``: the request with its history's head as the last call's objects.

        ``vouch``: the recorded branch's stored digest (``pager.core.digest.StoredDigest``), for a format
        that can leave a head it vouches for unconverted.
        """
        key = getattr(fmt, "history_key", "messages")
        items = request.get(key)
        if self.last is not None and isinstance(items, list):
            # a history rebuilt for this call (new objects, equal values) as the very objects of the last
            # call's: every same-object path after this one then does work for what is new only
            same = resent(self.last, items)
            if same is not items:
                request = {**request, key: same}
                items = same
        make_heads = getattr(fmt, "new_heads", None)
        if make_heads is None:
            return request, items, fmt.to_messages(request)
        heads = self.heads.get(fmt.name)
        if heads is None:
            heads = self.heads[fmt.name] = make_heads()
        if vouch is not None and getattr(fmt, "vouches", False):
            return request, items, fmt.to_messages(request, heads=heads, vouch=vouch)  # type: ignore[call-arg]
        return request, items, fmt.to_messages(request, heads=heads)  # type: ignore[call-arg]

    def keep(self, items: Any) -> None:
        """Keep a recorded call's history items, extending the list kept while the history grows.

        What ``resent`` assumes: the items up to the last one kept are those objects when that one is.
        """
        own = self.last
        if not isinstance(items, list):
            self.last = None
        elif own is not None and len(own) <= len(items) and (not own or items[len(own) - 1] is own[-1]):
            own.extend(items[len(own):])
        else:
            self.last = list(items)

    def clear(self) -> None:
        """Let go of what was kept (a closed ``Pager``)."""
        self.last = None
        self.heads.clear()

"""The head memo of the formats that convert (Anthropic Messages, Responses): a call converts what is new.

A harness resends its whole history every call; the conversion of all but
the newest messages is the last call's. ``HeadMemo`` keeps that conversion
per conversation and hands it to the next call (see the class). Shared by
``pager.formats.anthropic_messages`` and ``pager.formats.openai_responses``;
no I/O.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from pager.core.canonical import same_run

__all__ = ["HeadMemo", "OwnHeads", "with_lead"]


class HeadMemo:
    """Remember a conversation's last conversion as a whole, to convert only what follows its head (issue 23).

    ``ConversionMemo`` still walks every message of every call; a harness that
    resends its list passes the same objects up to a few new ones, so the
    neutral messages of that head are the last call's. The head is the run of
    leading messages that are the ones converted, as objects: the very same
    object, or one equal to it (``==``, as the recorder's ``same_prefix``
    has it). A message edited in place (its ``content`` replaced in the same
    dict) is the same message: to edit one, replace the dict (``Pager.assemble``;
    checking every message's ``content`` object cost a memory access a
    message a call, 15 ms at 78k Responses items). The common case, the
    remembered list whole and new messages after it, is one list comparison
    in C that reads pointers only; otherwise the run of the very same objects
    is found in C. Conversations are told apart by their first message object;
    the least recently used go past ``capacity``. Thread-safe.

    When the head is all of what was remembered (a list that only grew), or
    all but its last message with new ones after it (a moved cache mark: the
    lists are cut there first), the remembered lists themselves are handed to
    the caller, who extends them
    and gives them back with ``put`` (or ``abandon``): a call copies nothing
    of the history (a copy takes a reference to every message, a memory
    access each). Meanwhile the conversation is not in the memo; a call from
    another thread in between converts it whole, as after any miss.
    """

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self._d: OrderedDict[int, tuple[list[Any], list[Any], list[int], Any]] = OrderedDict()
        # the wire digest (``pager.core.digest.RunningDigest``) kept with a conversation: id(first) -> run
        self._wire: dict[int, Any] = {}
        self._lock = threading.Lock()
        # this thread's last head_state: (messages, k, the entry handed over or None); put takes it back
        self._seen = threading.local()

    def head(self, messages: Sequence[Any]) -> tuple[int, list[Any], list[Any], list[int]]:
        """Return ``(k, neutral, last, ends)`` of the first ``k`` messages (``put``'s lists cut there).

        ``last``: message ``k - 1``'s neutral messages. ``neutral`` and ``ends``
        are the caller's to extend and hand to ``put``.
        """
        k, neutral, last, ends, _state = self.head_state(messages, last=True)
        return k, neutral, last, ends

    def head_state(self, messages: Sequence[Any], *, last: bool = False
                   ) -> tuple[int, list[Any], list[Any], list[int], Any]:
        """Return ``head``'s answer and the ``state`` given to ``put`` (None unless the head is all it was).

        ``last``: whether to return message ``k - 1``'s neutral messages (else ``[]``).
        """
        none: tuple[int, list[Any], list[Any], list[int], Any] = (0, [], [], [0], None)
        self._seen.last = None
        self._seen.wire = None
        if not messages:
            return none
        key = id(messages[0])
        with self._lock:  # taken out: this thread owns the lists until it puts them back
            hit = self._d.pop(key, None)
        if hit is None:
            return none
        msgs, flat, ends, state = hit
        self._seen.wire = self._wire.get(key)
        if msgs[0] is not messages[0]:
            self._give_back(key, hit)
            return none
        k = _same_head(msgs, messages)
        if not k:
            self._give_back(key, hit)
            return none
        tail = flat[ends[k - 1]: ends[k]] if last else []
        if k == len(msgs) - 1 and len(messages) > k:
            # the last remembered message is resent as another value, and new ones follow it (a
            # client that moves its cache mark re-sends the one it marked before, every call): the
            # lists are cut there in place and handed over, not copied, so the call costs what is
            # new; the state after the old last message no longer applies. A request that stops
            # short of it (one overtaken by a newer), or differs earlier, leaves the memo as it was
            del msgs[k:], flat[ends[k]:], ends[k + 1:]
            hit = (msgs, flat, ends, None)
            state = None
        if k == len(msgs):  # handed over: the caller extends these lists, put keeps them again
            self._seen.last = (messages, k, hit)
            return k, flat, tail, ends, state
        self._give_back(key, hit)
        self._seen.last = (messages, k, None)
        return k, flat[: ends[k]], tail, ends[: k + 1], None

    def wire(self, k: int) -> Any:
        """Return the wire digest kept with this thread's last ``head_state``'s conversation, if it covers at most ``k`` items.

        The run covers the first ``run.rows`` items ``put`` was given; ``head_state`` found the first ``k``
        of them again, so a run of no more is the new list's too.
        """
        run = getattr(self._seen, "wire", None)
        return run if run is not None and run.rows <= k else None

    def _give_back(self, key: int, hit: tuple[list[Any], list[Any], list[int], Any]) -> None:
        with self._lock:
            self._d.setdefault(key, hit)  # another thread's put since is newer

    def abandon(self) -> None:
        """Take back what this thread's last ``head_state`` handed over, as it was: the caller failed before ``put``.

        A conversion that raises (a malformed new message) leaves the memo as it found it, so the
        caller's corrected request costs what is new, not a whole conversion.
        """
        seen = getattr(self._seen, "last", None)
        self._seen.last = None
        if seen is None or seen[2] is None:
            return
        msgs, flat, ends, _state = hit = seen[2]
        k = seen[1]
        del msgs[k:], flat[ends[k]:], ends[k + 1:]
        self._give_back(id(msgs[0]), hit)

    def put(self, messages: Sequence[Any], neutral: list[Any], ends: list[int], state: Any = None,
            head: int = 0, wire: Any = None) -> None:
        """Remember the conversion of ``messages``: ``neutral[ends[i]:ends[i + 1]]`` came from message ``i``.

        ``ends[0]`` is 0. The lists are kept as given: the caller hands them over. ``state``: what the
        caller needs to go on converting after the last message (``head_state`` returns it). ``head``:
        the ``k`` ``head_state`` just found for these very messages; what it handed over is extended
        with the rest (issue 23: O(new messages)). ``wire``: a running digest of the first ``wire.rows``
        of ``messages`` (``wire`` hands it back).
        """
        seen = getattr(self._seen, "last", None)  # this thread's last head_state
        self._seen.last = None
        if not messages:
            return
        if head and seen is not None and seen[0] is messages and seen[1] == head and seen[2] is not None:
            msgs = seen[2][0]
            msgs.extend(messages[head:])
        else:
            msgs = list(messages)
        key = id(messages[0])
        with self._lock:
            self._d[key] = (msgs, neutral, ends, state)
            self._d.move_to_end(key)
            if wire is not None:
                self._wire[key] = wire
            else:
                self._wire.pop(key, None)
            while len(self._d) > self.capacity:
                self._wire.pop(self._d.popitem(last=False)[0], None)


def _same_head(remembered: list[Any], messages: Sequence[Any]) -> int:
    """Return how many leading ``messages`` are the ``remembered`` ones (the same objects, or equal).

    ``remembered`` is the caller's own list (extended for the comparison, then cut back): two lists
    compare only at equal length, and an object compares equal to itself without being looked into,
    so the common case, every remembered message resent, reads pointers only. Otherwise the run of
    the very same objects, then of equal ones, each found in C. A value whose ``==`` raises ends the
    head at the first other object.
    """
    n = len(remembered)
    if len(messages) >= n and isinstance(messages, list):
        remembered.extend(messages[n:])
        last = remembered[n - 1] if n else None
        try:
            if remembered == messages:
                return n
            if n > 1:
                # a client that moves its cache mark to its newest message resends the one it marked
                # before as another value, every call: compared again with that one taken as the
                # caller's, the rest still reads pointers only (the scan below costs ~55 ns an item)
                remembered[n - 1] = messages[n - 1]
                if remembered == messages:
                    return n - 1
        except Exception:  # noqa: BLE001 - an SDK object's == may raise: the identity scan below decides
            pass
        finally:
            del remembered[n:]
            if n:
                remembered[n - 1] = last
    return same_run(messages, remembered)[1]  # the equal run, found in C


def with_lead(heads: HeadMemo, k: int, flat: list[Any], ends: list[int], lead: Any) -> tuple[int, list[Any], list[int]]:
    """Return ``(k, flat, ends)`` for a memo its caller owns, its lists led by ``lead`` (None: nothing).

    An owned memo (``Pager`` keeps one per format, used under its lock) keeps the caller's neutral
    messages whole, so that the list it hands over is the call's ``messages`` itself, with no copy:
    the message before the first item's (a system prompt, the instructions) is its first, and
    ``ends[0]`` says whether there is one. A different one is put in its place; a head whose lists
    began without one, or with one when there is none now, is taken back and converted whole.
    """
    want = 0 if lead is None else 1
    if k and ends[0] == want:
        if want and flat[0] is not lead:
            flat[0] = lead
        return k, flat, ends
    if k:
        heads.abandon()
    return 0, ([lead] if want else []), [want]


class OwnHeads:
    """A format whose ``to_messages(request, heads=...)`` takes a head memo its caller owns.

    The caller (``Pager`` keeps one per format) uses it from one thread at a time: the returned
    ``messages`` is then that memo's own list, extended in place by the caller's next call, so no
    call copies the history (``with_lead``). Without one, the format's shared memo is used and the
    call gets a list of its own.
    """

    def new_heads(self) -> HeadMemo:
        """Return a head memo for one caller's own use."""
        return HeadMemo(capacity=8)

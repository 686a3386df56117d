"""The L1 guard: keep the pinned layer under its cap by moving old pins and notes out. Pure.

L1 is the system messages, the original first user message (turn 1) and the
task-state card. The first two are never touched: the system prompt is the
harness's and turn 1 is pinned read-only so intent cannot drift. When L1
passes ``cap`` tokens, items leave the card oldest first — notes before pins,
since a note is the agent's scratch and a pin is the harness's goal — and
each leaves one line behind::

    - note:3 (212 tokens) "the flaky test is in test_io.py, seed 7 reproduces…" → expand("note:3")

The text stays in the store (and in the checkpoint files): ``expand`` with
the pointer's reference returns it whole.

A system prompt or turn 1 that is itself over the cap (``cap_pinned``) keeps
its head in place and its tail behind its page's handle: together the pinned
messages get ``PINNED_SHARE`` of the cap (a message under an equal share stays
whole; the bigger ones split the rest), and each cut message ends with one
line naming the handle and the line the tail starts at::

    [pager: the system prompt continues off-prompt: 31204 more tokens, from line 412 of 2890 …]

The cut is a function of the message's bytes and the cap alone, so every
call sends the same head (the provider's cache holds); the whole text is the
stored page: ``expand(handle)`` returns it, the recall tool searches it.

A state block (the checkpoint files read back, ``pager.statedir``) rides at
the end of the card and gets the room left under the cap, cut with a pointer
to the whole text when it does not fit.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable, Mapping, Sequence

import attrs

from pager.core.render import card_text
from pager.core.tokens import MESSAGE_OVERHEAD, content_text

__all__ = [
    "PINNED_SHARE", "GuardResult", "L1Hit", "L1Item", "PinnedCut", "cap_pinned", "cut_message", "cut_text",
    "guard_card", "item_text", "items", "l1_hits", "pinned_rooms", "pointer_line",
]

HEAD_CHARS = 80
_REF_RE = re.compile(r"^(pin|note):([1-9][0-9]{0,8})$")


@attrs.frozen(slots=True)
class L1Item:
    """A pin or a note of the card; ``ref`` (``pin:2``, ``note:7``) is 1-based, oldest first."""

    ref: str
    text: str


@attrs.frozen(slots=True)
class GuardResult:
    """The card to send, what stayed in it, and what moved out."""

    card: str
    pins: tuple[str, ...]
    notes: tuple[str, ...]
    moved: tuple[str, ...] = ()  # refs, in the order they left
    over: bool = False  # still over the cap with every item moved


def pointer_line(item: L1Item, tokens: int) -> str:
    """Return the one line a moved item leaves in the card."""
    head = " ".join(item.text.split())
    if len(head) > HEAD_CHARS:
        head = head[:HEAD_CHARS].rstrip() + "…"
    return f'- {item.ref} ({tokens} tokens) "{head}" → expand("{item.ref}")'


def _render(pins: Sequence[L1Item], notes: Sequence[L1Item], pointers: Sequence[str], state: str) -> str:
    extra = []
    if pointers:
        extra.append("Moved out of L1 to keep it small (expand the reference for the text):")
        extra.extend(pointers)
    if state:
        extra.append(state)
    return card_text([p.text for p in pins], [n.text for n in notes], "\n".join(extra))


def cut_text(state: str, room: int, count: Callable[[str], int], where: str) -> str:
    """Return ``state`` cut to about ``room`` tokens (its head kept), or '' when there is no room."""
    if room <= 0 or not state:
        return ""
    if count(state) <= room:
        return state
    tail = f"\n… (cut to fit the L1 cap; {where} prints it whole)"
    chars = max(0, room * 4 - len(tail))
    while chars > 0:
        text = state[:chars].rstrip() + tail
        if count(text) <= room:
            return text
        chars = int(chars * 0.8)
    return ""


def guard_card(
    fixed_tokens: int,
    pins: Sequence[L1Item],
    notes: Sequence[L1Item],
    cap: int,
    count: Callable[[str], int],
    *,
    overhead: int = 0,
    state: str = "",
    state_where: str = "pager state resume",
) -> GuardResult:
    """Return the task-state card for ``pins`` and ``notes`` (oldest first) under an L1 ``cap``.

    ``fixed_tokens`` is what L1 holds besides the card (system messages and
    turn 1); ``count`` counts a text's tokens and ``overhead`` is added per
    message. ``cap`` 0 disables the guard (the state block is then kept whole).
    """
    kept_pins, kept_notes = list(pins), list(notes)
    pointers: list[str] = []
    moved: list[str] = []

    def size(card: str) -> int:
        return fixed_tokens + (overhead + count(card) if card else 0)

    card = _render(kept_pins, kept_notes, pointers, "")
    if cap and size(card) > cap:
        for item in [*notes, *pins]:
            (kept_notes if item in kept_notes else kept_pins).remove(item)
            pointers.append(pointer_line(item, count(item.text)))
            moved.append(item.ref)
            card = _render(kept_pins, kept_notes, pointers, "")
            if size(card) <= cap:
                break
    over = bool(cap) and size(card) > cap
    if state:
        room = cap - size(card) - (0 if card else overhead) if cap else count(state)
        for _ in range(4):  # joining texts can count a few tokens more than the parts: shrink and retry
            block = cut_text(state, room, count, state_where)
            with_state = _render(kept_pins, kept_notes, pointers, block) if block else card
            excess = size(with_state) - cap if cap else 0
            if excess <= 0:
                card = with_state
                break
            room -= excess
    return GuardResult(card, tuple(p.text for p in kept_pins), tuple(n.text for n in kept_notes),
                       tuple(moved), over)


def items(kind: str, texts: Sequence[str], first: int = 1) -> list[L1Item]:
    """Return ``texts`` as L1 items ``kind:first``, ``kind:first+1``, ..."""
    return [L1Item(f"{kind}:{first + i}", t) for i, t in enumerate(texts)]


def item_text(ref: str, pins: Sequence[str], notes: Sequence[str]) -> str | None:
    """Return the text behind ``pin:N`` / ``note:N``, or None for an unknown or malformed reference."""
    m = _REF_RE.match(ref.strip()) if isinstance(ref, str) else None
    if not m:
        return None
    texts = pins if m.group(1) == "pin" else notes
    i = int(m.group(2))
    return texts[i - 1] if i <= len(texts) else None


@attrs.frozen(slots=True)
class L1Hit:
    """A pin or note outside L1 that matches a search, shaped like a recall index hit."""

    handle: str  # the reference expand() takes: pin:N / note:N
    kind: str
    snippet: str
    score: float
    session: str = ""
    page_id: int = 0  # not a page: never counted as a fault
    step: int = 0
    path: str | None = None


_WORDS_RE = re.compile(r"[\w./-]{3,}")


def l1_hits(
    query: str, pins: Sequence[str], notes: Sequence[str], outside: Sequence[str], k: int, session: str = ""
) -> list[L1Hit]:
    """Return up to ``k`` pins / notes named in ``outside`` (refs) that share words with ``query``, best first.

    The L1 guard's moved items, and notes older than the card shows, stay
    recallable this way: a search finds them beside the history's pages.
    """
    words = {w.lower() for w in _WORDS_RE.findall(query)}
    if k <= 0 or not words:
        return []
    found = []
    for ref in outside:
        text = item_text(ref, pins, notes)
        if text is None:
            continue
        shared = words & {w.lower() for w in _WORDS_RE.findall(text)}
        if shared:
            found.append(L1Hit(ref, ref.split(":")[0], " ".join(text.split())[:200], len(shared) / len(words), session))
    found.sort(key=lambda h: -h.score)
    return found[:k]


# -- a system prompt or turn 1 over the cap ---------------------------------------------

# The part of the cap the pinned messages share when they alone pass it; the
# card (its pins, notes and pointers) keeps the rest.
PINNED_SHARE = 0.75
_WHAT = {"system": "the system prompt", "developer": "the developer message", "user": "the first user message"}


@attrs.frozen(slots=True)
class PinnedCut:
    """The pinned messages to send and their tokens; ``cut`` the rows whose tail is behind a handle."""

    messages: tuple[Mapping[str, Any], ...]
    tokens: tuple[int, ...]
    cut: tuple[int, ...] = ()


def pinned_rooms(tokens: Sequence[int], cap: int) -> list[int | None]:
    """Return the tokens each pinned message may keep (None: whole) under an L1 ``cap``.

    Nothing is cut while they fit the cap together (``cap`` 0: never). Over
    it, they share ``PINNED_SHARE`` of the cap: a message under an equal share
    stays whole and gives the rest of its share to the bigger ones.
    """
    out: list[int | None] = [None] * len(tokens)
    if not cap or sum(tokens) <= cap:
        return out
    room = int(cap * PINNED_SHARE)
    rest = list(range(len(tokens)))
    while rest:
        share = room // len(rest)
        small = [i for i in rest if tokens[i] <= share]
        if not small:
            for i in rest:
                out[i] = share
            break
        for i in small:
            room -= tokens[i]
            rest.remove(i)
    return out


def _tail_line(what: str, handle: str, tail_tokens: int, start: int, lines: int) -> str:
    return (f"\n[pager: {what} continues off-prompt: {tail_tokens} more tokens, from line {start} of {lines}, "
            f"kept whole as {handle}; expand({handle!r}, start_line={start}) returns the rest, "
            f"recall(query) searches it]")


@functools.lru_cache(maxsize=64)  # the same message is cut on every call: count it once
def _cut(text: str, room: int, what: str, handle: str, count: Callable[[str], int]) -> tuple[str, int] | None:
    total = count(text)
    if total + MESSAGE_OVERHEAD <= room:
        return None
    lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    budget = max(0, room - MESSAGE_OVERHEAD)
    chars = budget * 4
    while True:
        head = text[:chars]
        nl = head.rfind("\n")
        if nl >= chars // 2:  # end on a line when one ends in the second half: the tail starts at a line
            head = head[: nl + 1]
        start = head.count("\n") + 1
        out = head + _tail_line(what, handle, max(0, total - count(head)), start, lines)
        got = count(out)
        if chars == 0 or got <= budget:
            return out, MESSAGE_OVERHEAD + got
        chars = min(chars - 1, int(chars * budget / got * 0.98))  # scale to the measured size, a little under


def cut_message(
    message: Mapping[str, Any], room: int | None, handle: str, count: Callable[[str], int]
) -> tuple[Mapping[str, Any], int | None]:
    """Return ``message`` with its head kept under ``room`` tokens and its tail behind ``handle``, and its tokens.

    The cut message is plain text (its ``native`` provider form dropped, so
    every format renders the head); one with tool calls is never cut. A
    message left whole comes back as is, with None for its tokens.
    """
    role = message.get("role")
    if room is None or role not in _WHAT or message.get("tool_calls"):
        return message, None
    done = _cut(content_text(message.get("content")), room, _WHAT[str(role)], handle, count)
    if done is None:
        return message, None
    out = {k: v for k, v in message.items() if k not in ("content", "native")}
    out["content"] = done[0]
    return out, done[1]


def cap_pinned(
    messages: Sequence[Mapping[str, Any]], tokens: Sequence[int], handles: Sequence[str], cap: int,
    count: Callable[[str], int],
) -> PinnedCut:
    """Return the pinned ``messages`` (system prompt, turn 1) cut to the L1 ``cap`` (``pinned_rooms``)."""
    rooms = pinned_rooms(tokens, cap)
    if all(r is None for r in rooms):
        return PinnedCut(tuple(messages), tuple(tokens))
    out, sizes, cut = [], [], []
    for i, (m, t, h, room) in enumerate(zip(messages, tokens, handles, rooms)):
        c, size = cut_message(m, room, h, count)
        out.append(c)
        sizes.append(t if size is None else size)
        if size is not None:
            cut.append(i)
    return PinnedCut(tuple(out), tuple(sizes), tuple(cut))

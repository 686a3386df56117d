"""The L1 guard: keep the pinned layer under its cap by moving old pins and notes out. Pure.

L1 is the system messages, the original first user message (turn 1) and the
task-state card. The first two are never touched: the system prompt is the
harness's and turn 1 is pinned read-only so intent cannot drift. When L1
passes ``cap`` tokens, items leave the card oldest first — notes before pins,
since a note is the agent's scratch and a pin is the harness's goal — and
each leaves one line behind::

    - note:3 (212 tokens) "the flaky test is in test_io.py, seed 7 reproduces…" → expand("note:3")

The text stays in the store (and in the checkpoint files): ``expand`` with
the pointer's reference returns it whole. If L1 is still over the cap with
every item moved (a huge system prompt or turn 1), the guard reports it and
stops; only the budget itself (``BudgetError``) refuses a prompt.

A state block (the checkpoint files read back, ``pager.statedir``) rides at
the end of the card and gets the room left under the cap, cut with a pointer
to the whole text when it does not fit.
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

import attrs

from pager.core.render import card_text

__all__ = ["GuardResult", "L1Hit", "L1Item", "cut_text", "guard_card", "item_text", "items", "l1_hits", "pointer_line"]

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

"""OpenAI Responses rendering in proportion to what is new: neutral messages back to ``input`` items.

Theory of operation
-------------------
Each neutral message renders to items of its own: an assistant message to its
native run (the caller's items, verbatim) or to a text item and ``function_call``
items; a tool result to its native output item or to an ``*_output`` item whose
type follows the call it answers; any other message to its native item or to a
``{"role", "content"}`` item (pager's inserted messages). A system or developer
message without a native item adds to ``instructions`` instead. The one thing a
message reads from the ones before it is the type of the call a tool result
answers (``call_types``, set by assistant messages).

So a render is a fold over the messages, and its state after message ``i`` is
the items, instructions and call types so far. ``ItemMemo`` keeps each
conversation's last fold with where each message ended in it (the call types as
the list of assignments made, in order), and a render whose messages begin with
the same objects as that fold's resumes after their common head: between rounds
a prompt is the previous one plus new messages, so a call walks only those
(issue 23: the whole prompt was walked every call, ~1 ms at 1,000 messages).

The items pager made are copied for each render (the request a caller gets is
its own to change: nothing it does reaches the next call's prompt); the caller's
own native items are passed as they are, as they always were. Conversations are
told apart by their first two message objects, and a fold is only resumed over a
head of the very same objects, so two conversations that collide cost each other
a full pass, never a wrong one. Neutral messages are never changed in place
(what every memo of the formats relies on). Thread-safe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pager.core.canonical import same_objects
from pager.formats._convert import ConversationCache

__all__ = ["CALL_TYPES", "ItemMemo", "message_text"]

# output items that expect an answering "*_output" item from the caller
CALL_TYPES = frozenset(
    {"function_call", "custom_tool_call", "computer_call", "local_shell_call", "shell_call", "apply_patch_call"}
)


def message_text(content: Any) -> str:
    """Return a neutral message's content as text (its parts' ``text`` joined by newlines)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping) and "text" in p)


class _Fold:
    """A render's state after each of its messages (see the module docstring)."""

    __slots__ = ("msgs", "items", "own", "item_ends", "instructions", "ins_ends", "types", "type_ends")

    def __init__(self, msgs: list[Any]) -> None:
        self.msgs = msgs
        self.items: list[Any] = []
        self.own: list[bool] = []  # made here (copied for each caller), not the caller's native item
        self.item_ends: list[int] = []
        self.instructions: list[str] = []
        self.ins_ends: list[int] = []
        self.types: list[tuple[str, str]] = []  # call-type assignments (call id, type), in order
        self.type_ends: list[int] = []

    def head(self, msgs: list[Any], k: int) -> _Fold:
        """Return a new fold of ``msgs`` holding this one's state after its first ``k`` messages."""
        fold = _Fold(msgs)
        if k:
            n, i, t = self.item_ends[k - 1], self.ins_ends[k - 1], self.type_ends[k - 1]
            fold.items, fold.own, fold.item_ends = self.items[:n], self.own[:n], self.item_ends[:k]
            fold.instructions, fold.ins_ends = self.instructions[:i], self.ins_ends[:k]
            fold.types, fold.type_ends = self.types[:t], self.type_ends[:k]
        return fold

    def add(self, m: Mapping[str, Any], call_types: dict[str, str]) -> None:
        """Render message ``m`` onto the fold (``call_types``: the fold's assignments as a dict)."""
        role = m.get("role")
        native = m.get("native")
        if role in ("system", "developer") and native is None:
            self.instructions.append(message_text(m.get("content")))
        elif role == "assistant":
            self._assistant(m, native, call_types)
        elif role == "tool":
            cid = m.get("tool_call_id")
            if native is not None and native.get("call_id") == cid:
                self._put(native, False)
            else:
                itype = call_types.get(str(cid), "function_call") + "_output"
                self._put({"type": itype, "call_id": cid, "output": message_text(m.get("content"))}, True)
        elif native is not None:
            self._put(native, False)
        else:
            self._put({"role": role, "content": m.get("content")}, True)
        self.item_ends.append(len(self.items))
        self.ins_ends.append(len(self.instructions))
        self.type_ends.append(len(self.types))

    def _put(self, item: Any, own: bool) -> None:
        self.items.append(item)
        self.own.append(own)

    def _typed(self, call_id: str, itype: str, call_types: dict[str, str]) -> None:
        self.types.append((call_id, itype))
        call_types[call_id] = itype

    def _assistant(self, m: Mapping[str, Any], native: Any, call_types: dict[str, str]) -> None:
        calls = m.get("tool_calls") or ()
        if native is not None:
            ids = [it.get("call_id") for it in native if isinstance(it, Mapping) and it.get("type") in CALL_TYPES]
            if ids == [c.get("id") for c in calls]:
                for it in native:
                    if isinstance(it, Mapping) and it.get("type") in CALL_TYPES:
                        self._typed(str(it.get("call_id")), str(it["type"]), call_types)
                for it in native:
                    self._put(it, False)
                return
        text = message_text(m.get("content"))
        if text:
            self._put({"role": "assistant", "content": text}, True)
        for c in calls:
            fn = c.get("function") or {}
            self._typed(str(c.get("id")), "function_call", call_types)
            self._put({"type": "function_call", "call_id": c.get("id"), "name": fn.get("name"),
                       "arguments": fn.get("arguments", "")}, True)


class ItemMemo:
    """Each recent conversation's last fold, to render only what follows its head. Thread-safe."""

    def __init__(self, capacity: int = 64) -> None:
        self._folds = ConversationCache(capacity)

    def render(self, messages: Sequence[Mapping[str, Any]]) -> tuple[list[Any], list[str]]:
        """Return ``messages`` as (``input`` items, instructions), the items pager made copied for the caller."""
        msgs = list(messages)
        last = self._folds.get(msgs)
        fold = last.head(msgs, same_objects(msgs, last.msgs)) if last is not None else _Fold(msgs)
        call_types = dict(fold.types)
        for m in msgs[len(fold.item_ends):]:
            fold.add(m, call_types)
        self._folds.put(msgs, fold)
        items = [dict(it) if own else it for it, own in zip(fold.items, fold.own)]
        return items, list(fold.instructions)

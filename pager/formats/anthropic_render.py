"""Anthropic Messages rendering: neutral messages merged into turns, then cache marks, in O(new) per call.

Theory of operation
-------------------
``merge`` turns neutral messages into Anthropic turns in one left-to-right
pass: leading system messages into ``system``; tool messages and any user
message pager inserted into the user turn after the assistant turn,
``tool_result`` blocks first and in the order of the calls. At an assistant
message the user turn before it closes, and what follows is ordered by its
own calls: the pass's state there is a function of the messages up to it
alone, so that point is a *checkpoint*.

Between rounds a call's prompt is the previous call's, the very same neutral
message objects, up to a few at the tail (``pager.schedulers.reuse``).
``TurnMemo`` keeps each conversation's last pass: its turns as built (never
marked: marks go on copies), their source indexes, the system blocks, the
checkpoints, and the cache-mark slots of the turns as columns (source,
markable, marked by the caller, the running maximum of the sources). A call
whose leading messages are the same objects (identity, checked in C) resumes
at the last checkpoint inside that head and merges only what follows it. The
marks are then placed on the columns (``breakpoints.place_columns``: each
boundary found by bisection, never a walk over the prompt), and the output
gets fresh turn dicts and content lists (a caller may change the request it
is given) with the marked blocks replaced. So the Python work per call is the
new messages, the tools and system blocks, and one shallow copy per turn.

A memo holds no state of the session: dropping it costs one full pass, never
a different prompt (tests/test_anthropic_render.py renders with and without).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import orjson

import pager.formats.breakpoints as bp
from pager.core.canonical import same_objects
from pager.formats._convert import ConversationCache, as_plain, strip_key, text_part
from pager.formats.anthropic_blocks import UNMARKABLE

__all__ = ["EPHEMERAL", "Pass", "TurnMemo", "assistant_blocks", "has_mark", "mark", "markable", "merge", "result_block",
           "ttl", "unmark"]

EPHEMERAL = {"type": "ephemeral"}


@attrs.define(slots=True)
class Pass:
    """One merge of ``msgs`` into turns. A stored pass is never changed: a resumed one starts from copies."""

    msgs: list[Any] = attrs.field(factory=list)  # the neutral messages merged (by identity)
    turns: list[dict[str, Any]] = attrs.field(factory=list)  # as built, without pager's marks
    turn_src: list[list[int]] = attrs.field(factory=list)  # per turn, each block's source message
    system_blocks: list[tuple[int, Any]] = attrs.field(factory=list)  # (source, block)
    system_str: list[str] = attrs.field(factory=list)
    n_sys: int = 0  # leading system messages
    # the turns' slots, as columns (pager.formats.breakpoints)
    src: list[int] = attrs.field(factory=list)
    markable: list[bool] = attrs.field(factory=list)
    caller: list[int] = attrs.field(factory=list)  # slots marked by the caller, ascending
    top: list[int] = attrs.field(factory=list)  # running maximum of ``src``
    turn_start: list[int] = attrs.field(factory=list)  # each turn's first slot
    # a checkpoint per assistant message: its index, and the lengths of the lists above just before it
    points: list[int] = attrs.field(factory=list)
    states: list[tuple[int, int, int, int, int, int]] = attrs.field(factory=list)

    def resume(self, messages: Sequence[Any], k: int) -> tuple["Pass", int]:
        """Return a pass of ``messages`` set at the last checkpoint before message ``k``, and its index.

        ``messages[:k]`` must be the very objects of ``self.msgs[:k]``. A
        checkpoint's state holds the user turn before it closed: that takes
        its assistant message, so the checkpoint must lie inside the head.
        """
        c = bisect.bisect_right(self.points, k - 1) - 1
        if c < 0:
            return Pass(msgs=list(messages)), 0
        t, sb, ss, n_sys, s, cl = self.states[c]
        return Pass(
            msgs=list(messages), turns=self.turns[:t], turn_src=self.turn_src[:t],
            system_blocks=self.system_blocks[:sb], system_str=self.system_str[:ss], n_sys=n_sys,
            src=self.src[:s], markable=self.markable[:s], caller=self.caller[:cl], top=self.top[:s],
            turn_start=self.turn_start[:t], points=self.points[:c], states=self.states[:c],
        ), self.points[c]

    def add_turn(self, turn: dict[str, Any], src: list[int]) -> None:
        self.turn_start.append(len(self.src))
        self.turns.append(turn)
        self.turn_src.append(src)
        content = turn["content"]
        if isinstance(content, str):
            self._slot(src[0], bool(content), False)
            return
        for j, b in enumerate(content):
            self._slot(src[j] if j < len(src) else src[-1], markable(b), has_mark(b))

    def _slot(self, source: int, can_mark: bool, caller: bool) -> None:
        if caller:
            self.caller.append(len(self.src))
        self.src.append(source)
        self.markable.append(can_mark)
        self.top.append(max(self.top[-1], source) if self.top else source)

    def checkpoint(self, k: int) -> None:
        self.points.append(k)
        self.states.append((len(self.turns), len(self.system_blocks), len(self.system_str), self.n_sys,
                            len(self.src), len(self.caller)))


class TurnMemo:
    """Each recent conversation's last ``Pass``, to merge only what follows its head. Thread-safe.

    Conversations are told apart by their first two messages (the system
    prompt alone is shared by every session that has the same one); a pass
    is only ever resumed over a head of the very same objects, so two
    conversations that collide cost each other a full pass, never a wrong one.
    """

    def __init__(self, capacity: int = 64) -> None:
        self._passes = ConversationCache(capacity)

    def start(self, messages: Sequence[Any]) -> tuple[Pass, int]:
        """Return a pass to go on from and the index of the first message it has not merged."""
        last = self._passes.get(messages)
        if last is None:
            return Pass(msgs=list(messages)), 0
        return last.resume(messages, same_objects(messages, last.msgs))

    def put(self, done: Pass) -> None:
        self._passes.put(done.msgs, done)


def merge(messages: Sequence[Mapping[str, Any]], memo: TurnMemo | None) -> Pass:
    """Merge neutral ``messages`` into turns (see the module docstring), going on from ``memo``'s last pass."""
    done, start = memo.start(messages) if memo is not None else (Pass(msgs=list(messages)), 0)
    system_blocks, system_str = done.system_blocks, done.system_str
    # per turn: [(source index, block)], tool results kept apart until the turn closes
    pending: list[tuple[int, Any]] = []
    pending_results: list[tuple[int, Any]] = []
    call_order: dict[str, int] = {}

    def close_user() -> None:
        if not pending and not pending_results:
            return
        results = sorted(pending_results, key=lambda r: call_order.get(r[1]["tool_use_id"], 1 << 30))
        items = results + pending
        if len(items) == 1 and isinstance(items[0][1], str):
            turn = {"role": "user", "content": items[0][1]}
        else:
            turn = {"role": "user", "content": [text_part(b) if isinstance(b, str) else b for _k, b in items]}
        done.add_turn(turn, [k for k, _b in items])
        pending.clear()
        pending_results.clear()

    for k in range(start, len(messages)):
        m = messages[k]
        role = m.get("role")
        if role in ("system", "developer"):
            done.n_sys = k + 1 if done.n_sys == k else done.n_sys
            native = m.get("native")
            content = native if native is not None else m.get("content")
            if isinstance(content, str):
                system_str.append(content)
                system_blocks.append((k, text_part(content)))
            else:
                system_blocks.extend((k, as_plain(b)) for b in content or ())
        elif role == "assistant":
            close_user()
            done.checkpoint(k)
            blocks = assistant_blocks(m)
            done.add_turn({"role": "assistant", "content": blocks}, [k] * (len(blocks) if isinstance(blocks, list) else 1))
            call_order = {c["id"]: n for n, c in enumerate(m.get("tool_calls") or ())}
        elif role == "tool":
            pending_results.append((k, result_block(m)))
        else:
            content = m.get("native")
            if content is None:
                content = m.get("content")
            if isinstance(content, str):
                pending.append((k, content))
            else:
                pending.extend((k, as_plain(b)) for b in content or ())
    close_user()
    if memo is not None:
        memo.put(done)
    return done


def mark(done: Pass, tools: list[Any], l1_hint: int, stable: int, previous: int | None, mode: str,
         out: dict[str, Any]) -> None:
    """Write ``done``'s turns to ``out['messages']`` and its system to ``out['system']``, with the cache marks.

    ``tools`` (a fresh list) gets its marks in place. See ``pager.formats.breakpoints`` for where marks go.
    """
    front_src: list[int] = []  # the slots before the turns: tools, then system blocks
    front_markable: list[bool] = []
    front_caller: list[int] = []
    for t, tool in enumerate(tools):
        tool = as_plain(tool)
        tools[t] = tool
        if has_mark(tool):
            front_caller.append(len(front_src))
        front_src.append(-1)
        front_markable.append(isinstance(tool, Mapping))
    n_tools = len(tools)
    system_out: Any = None
    sys_list: list[Any] | None = None
    if done.system_blocks:
        if len(done.system_str) == 1 and len(done.system_blocks) == 1:
            system_out = done.system_str[0]
        else:
            system_out = [b for _k, b in done.system_blocks]
        sys_list = [b for _k, b in done.system_blocks]
        for k, b in done.system_blocks:
            if has_mark(b):
                front_caller.append(len(front_src))
            front_src.append(k)
            front_markable.append(markable(b))
    n_front = len(front_src)
    front_top = max(front_src, default=-1)

    def first_at_least(count: int) -> int:
        if front_top >= count:
            return next(i for i, s in enumerate(front_src) if s >= count)
        return n_front + bisect.bisect_left(done.top, count)

    slots = bp.Columns(n=n_front + len(done.src), markable=_Joined(front_markable, done.markable),
                       caller=front_caller + [n_front + i for i in done.caller], first_at_least=first_at_least)
    l1 = done.n_sys if (done.n_sys or tools) else l1_hint
    chosen = bp.place_columns(slots, l1=l1, stable=stable, previous=previous, mode=mode)
    turns = [{**t, "content": list(t["content"])} if isinstance(t["content"], list) else dict(t) for t in done.turns]

    def at(idx: int) -> tuple[Any, Any]:  # (container, key) of slot ``idx``; key None: a string-content turn
        if idx < n_tools:
            return tools, idx
        if idx < n_front:
            return sys_list, idx - n_tools
        i = idx - n_front
        t = bisect.bisect_right(done.turn_start, i) - 1
        turn = turns[t]
        return (turn, None) if isinstance(turn["content"], str) else (turn["content"], i - done.turn_start[t])

    caller = set(slots.caller)
    # the API wants longer-lived marks before shorter ones: in merge mode a mark of
    # pager's before a kept 1-hour mark of the caller's lives an hour too
    long_until = -1
    if mode == "merge":
        for idx in chosen:
            container, key = at(idx)
            if idx in caller and ttl(container[key]) == "1h":
                long_until = idx
    touched_system = False
    for idx in sorted(caller.union(chosen)):
        container, key = at(idx)
        want = idx in chosen
        is_caller = idx in caller
        mark_ = EPHEMERAL if idx > long_until else {**EPHEMERAL, "ttl": "1h"}
        if key is None:
            if want:
                container["content"] = [{**text_part(container["content"]), "cache_control": mark_}]
            continue
        block = container[key]
        if want and (not is_caller or mode == "pager"):
            container[key] = {**unmark(block), "cache_control": mark_}
        elif is_caller and not want:
            container[key] = unmark(block)
        else:
            continue
        touched_system |= container is sys_list
    if system_out is not None:
        out["system"] = sys_list if touched_system or not isinstance(system_out, str) else system_out
    out["messages"] = turns


class _Joined(Sequence[bool]):
    """Two sequences read as one, without copying either (the turns' columns are long, the front short)."""

    __slots__ = ("a", "b", "n")

    def __init__(self, a: Sequence[bool], b: Sequence[bool]) -> None:
        self.a, self.b, self.n = a, b, len(a)

    def __len__(self) -> int:
        return self.n + len(self.b)

    def __getitem__(self, i: Any) -> Any:
        if i < 0:
            i += len(self)
        return self.a[i] if i < self.n else self.b[i - self.n]


# -- blocks ----------------------------------------------------------------------------------------


def assistant_blocks(m: Mapping[str, Any]) -> Any:
    """Return an assistant message's content: its native blocks, with ``tool_use`` blocks for its calls."""
    native = m.get("native")
    calls = m.get("tool_calls") or ()
    if native is not None:
        ids = [b.get("id") for b in native if isinstance(b, Mapping) and b.get("type") == "tool_use"]
        if ids == [c.get("id") for c in calls]:
            return list(native)
        keep = [b for b in native if not (isinstance(b, Mapping) and b.get("type") == "tool_use")]
    else:
        content = m.get("content")
        if isinstance(content, str) or content is None:
            if not calls:
                return content if content is not None else ""
            keep = [text_part(content)] if content else []
        else:
            keep = list(content)
    for c in calls:
        fn = c.get("function") or {}
        keep.append({"type": "tool_use", "id": c.get("id"), "name": fn.get("name"),
                     "input": _args(fn.get("arguments"))})
    return keep


def _args(raw: Any) -> Any:
    if isinstance(raw, Mapping):
        return raw
    try:
        value = orjson.loads(raw or "{}")
    except (TypeError, ValueError):
        return {"arguments": raw}
    return value if isinstance(value, Mapping) else {"arguments": value}


def result_block(m: Mapping[str, Any]) -> Mapping[str, Any]:
    """Return a tool message as a ``tool_result`` block (its native one when it still answers the same call)."""
    native = m.get("native")
    if native is not None and native.get("tool_use_id") == m.get("tool_call_id"):
        return native
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.get("tool_call_id"), "content": m.get("content")}
    if block["content"] is None:
        block["content"] = ""
    if m.get("is_error"):
        block["is_error"] = True
    return block


def markable(block: Any) -> bool:
    """Whether a block may carry ``cache_control`` (not thinking, not empty text)."""
    if not isinstance(block, Mapping):
        return False
    btype = block.get("type")
    if btype in UNMARKABLE:
        return False
    return not (btype == "text" and not block.get("text"))


def ttl(block: Any) -> str | None:
    """The ``ttl`` of a block's cache mark (None: none, or the default)."""
    mark_ = block.get("cache_control") if isinstance(block, Mapping) else None
    return mark_.get("ttl") if isinstance(mark_, Mapping) else None


def has_mark(block: Any) -> bool:
    """Whether the caller marked a block (or a block inside a tool result)."""
    if not isinstance(block, Mapping):
        return False
    if "cache_control" in block:
        return True
    inner = block.get("content")
    return isinstance(inner, list) and any(isinstance(b, Mapping) and "cache_control" in b for b in inner)


def unmark(block: Mapping[str, Any]) -> Mapping[str, Any]:
    """Return ``block`` without cache marks (its own and those of the blocks inside it)."""
    out = strip_key(block, "cache_control")
    inner = out.get("content")
    if isinstance(inner, list) and any(isinstance(b, Mapping) and "cache_control" in b for b in inner):
        out = {**out, "content": [strip_key(b, "cache_control") if isinstance(b, Mapping) else b for b in inner]}
    return out

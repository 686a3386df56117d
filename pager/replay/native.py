"""Replay sessions in their native wire format and bill them as each provider caches.

Theory of operation. A prompt is a sequence of blocks in the order the
provider reads them (tools, system, then each message's content blocks);
each block has a token count and a digest, and the prefix ending at block
``i`` is named by a chain of digests. Two cache models:

``anthropic`` (explicit breakpoints)
    Only a block marked ``cache_control`` writes a cache entry (its prefix), and
    only when that prefix is at least ``min_tokens`` long. Each mark reads the
    longest entry at a block boundary at most ``lookback`` (20) blocks before it.
    The call reads the longest such hit, writes from there to its last mark
    (billed ``write`` = 1.25x) and pays the rest after the last mark at 1x.
    A prompt with no marks caches nothing.
``openai`` (automatic prefix caching)
    The longest prefix equal to a prefix of any earlier prompt of the session
    is read, at least ``min_tokens`` (1,024) long and counted in steps of
    ``step`` (128) tokens, at ``1 - discount``; there is no write premium.

Caches never expire within a replay (Claude Code writes 1-hour entries).
``run_native`` replays Claude Code sessions as Anthropic requests through
pager (which places its own breakpoints) beside full resend with Claude
Code's own single tail mark, and the same sessions as OpenAI chat messages
under automatic caching. ``python -m pager.replay.native PATH...`` prints the
table.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import shutil
import sys
import tempfile
from typing import Any, Iterable, Mapping, Sequence

import attrs
import orjson

from pager.core.tokens import TokenCounter, default_counter
from pager.formats.anthropic_messages import EPHEMERAL, block_text
from pager.formats.base import RenderHints, get_format
from pager.formats.export import to_chat
from pager.replay.importers import NativeSession, load_native

__all__ = ["AnthropicPricing", "Bill", "OpenAIPricing", "Prompt", "anthropic_prompt", "bill", "chat_prompt", "run_native"]

MESSAGE_OVERHEAD = 4


@attrs.frozen
class AnthropicPricing:
    """Explicit breakpoints: reads 0.1x, writes 1.25x, ``min_tokens`` per entry, ``lookback`` blocks."""

    read: float = 0.1
    write: float = 1.25
    min_tokens: int = 1024
    lookback: int = 20
    name: str = "anthropic"


@attrs.frozen
class OpenAIPricing:
    """Automatic prefix caching: reads at ``1 - discount``, no write premium, 1,024 then 128-token steps."""

    discount: float = 0.5
    min_tokens: int = 1024
    step: int = 128
    name: str = "openai"


@attrs.frozen
class Prompt:
    """One built prompt as blocks: chained prefix digests, tokens per block, marked blocks."""

    chain: tuple[bytes, ...]
    tokens: tuple[int, ...]
    marks: tuple[int, ...] = ()

    @property
    def total(self) -> int:
        return sum(self.tokens)


@attrs.frozen
class Bill:
    """What one call was billed: tokens read from the cache, written to it, and uncached."""

    prompt: int
    read: int
    write: int
    cost: float


class _Digests:
    """Digest and token count per block object, remembered by identity (blocks repeat every call)."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self._memo: dict[int, tuple[Any, bytes, int]] = {}

    def of(self, block: Any, text: str | None = None) -> tuple[bytes, int]:
        hit = self._memo.get(id(block))
        if hit is not None and hit[0] is block:
            return hit[1], hit[2]
        plain = block
        if isinstance(block, Mapping) and "cache_control" in block:
            plain = {k: v for k, v in block.items() if k != "cache_control"}  # marks are not content
        raw = orjson.dumps(plain, option=orjson.OPT_SORT_KEYS)
        digest = hashlib.blake2b(raw, digest_size=16).digest()
        n = self.counter.count(text if text is not None else _text(block))
        if plain is block:
            self._memo[id(block)] = (block, digest, n)
        return digest, n


def _text(block: Any) -> str:
    if isinstance(block, str):
        return block
    btype = block.get("type")
    if btype == "tool_use":
        return f"{block.get('name', '')} {orjson.dumps(block.get('input', {})).decode()}"
    if btype == "tool_result":
        inner = block.get("content")
        if isinstance(inner, str) or inner is None:
            return inner or ""
        return "\n".join(_text(b) for b in inner if isinstance(b, Mapping))
    if btype == "image":
        return "[image]"
    return block_text(block)


def _chain(prev: bytes, digest: bytes, boundary: bytes) -> bytes:
    return hashlib.blake2b(prev + boundary + digest, digest_size=16).digest()


def anthropic_prompt(request: Mapping[str, Any], digests: _Digests) -> Prompt:
    """Return an Anthropic request as blocks (tools, system, message blocks), marks included."""
    chain: list[bytes] = []
    tokens: list[int] = []
    marks: list[int] = []
    h = b""

    def add(block: Any, boundary: bytes, extra: int = 0) -> None:
        nonlocal h
        d, n = digests.of(block)
        h = _chain(h, d, boundary)
        if isinstance(block, Mapping) and "cache_control" in block:
            marks.append(len(chain))
        chain.append(h)
        tokens.append(n + extra)

    for tool in request.get("tools") or ():
        add(tool, b"T")
    system = request.get("system")
    if isinstance(system, str):
        add(system, b"S")
    else:
        for b in system or ():
            add(b, b"S")
    for m in request.get("messages") or ():
        content = m["content"]
        role = m["role"].encode()
        if isinstance(content, str):
            add(content, b"M" + role, MESSAGE_OVERHEAD)
            continue
        for j, b in enumerate(content):
            add(b, (b"M" + role) if j == 0 else b"B", MESSAGE_OVERHEAD if j == 0 else 0)
    return Prompt(tuple(chain), tuple(tokens), tuple(marks))


def chat_prompt(messages: Sequence[Mapping[str, Any]], digests: _Digests) -> Prompt:
    """Return chat messages as blocks, one per message (automatic caching needs no marks)."""
    chain: list[bytes] = []
    tokens: list[int] = []
    h = b""
    for m in messages:
        d, n = digests.of(m, text=_chat_text(m))
        h = _chain(h, d, b"M")
        chain.append(h)
        tokens.append(n + MESSAGE_OVERHEAD)
    return Prompt(tuple(chain), tuple(tokens))


def _chat_text(m: Mapping[str, Any]) -> str:
    parts = []
    c = m.get("content")
    if isinstance(c, str):
        parts.append(c)
    elif isinstance(c, list):
        parts.extend(str(p.get("text", "")) for p in c if isinstance(p, Mapping))
    if m.get("reasoning_content"):
        parts.append(str(m["reasoning_content"]))
    for call in m.get("tool_calls") or ():
        fn = call.get("function") or {}
        parts.append(f"{fn.get('name', '')} {fn.get('arguments', '')}")
    return "\n".join(parts)


def bill(prompts: Iterable[Prompt], pricing: AnthropicPricing | OpenAIPricing) -> list[Bill]:
    """Bill a session's prompts in order under ``pricing`` (see the module docstring)."""
    out = []
    entries: set[bytes] = set()
    for p in prompts:
        cum = [0]
        for n in p.tokens:
            cum.append(cum[-1] + n)
        total = cum[-1]
        if isinstance(pricing, AnthropicPricing):
            read = 0
            for m in p.marks:
                for pos in range(m, max(-1, m - pricing.lookback - 1), -1):
                    if p.chain[pos] in entries:
                        read = max(read, cum[pos + 1])
                        break
            last = p.marks[-1] if p.marks else -1
            write = max(0, cum[last + 1] - read) if last >= 0 and cum[last + 1] >= pricing.min_tokens else 0
            for m in p.marks:
                if cum[m + 1] >= pricing.min_tokens:
                    entries.add(p.chain[m])
            cost = pricing.read * read + pricing.write * write + (total - read - write)
        else:
            lcp = 0
            for pos in range(len(p.chain) - 1, -1, -1):
                if p.chain[pos] in entries:
                    lcp = cum[pos + 1]
                    break
            read = 0 if lcp < pricing.min_tokens else pricing.min_tokens + (lcp - pricing.min_tokens) // pricing.step * pricing.step
            write = 0
            entries.update(p.chain)
            cost = (1.0 - pricing.discount) * read + (total - read)
        out.append(Bill(prompt=total, read=read, write=write, cost=cost))
    return out


def _tail_marked(request: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``request`` with one mark, on its last block (Claude Code's own placement, no system)."""
    msgs = [dict(m) for m in request["messages"]]
    last = msgs[-1]
    content = last["content"]
    if isinstance(content, str):
        last["content"] = [{"type": "text", "text": content, "cache_control": EPHEMERAL}]
    else:
        content = list(content)
        for j in range(len(content) - 1, -1, -1):
            if content[j].get("type") not in ("thinking", "redacted_thinking"):
                content[j] = {**content[j], "cache_control": EPHEMERAL}
                break
        last["content"] = content
    return {**request, "messages": msgs}


def _only_tail(request: Mapping[str, Any]) -> dict[str, Any]:
    from pager.formats._convert import strip_key

    msgs = [{**m, "content": [strip_key(b, "cache_control") for b in m["content"]]}
            if isinstance(m["content"], list) else m for m in request["messages"]]
    return _tail_marked({**request, "messages": msgs})


class NativePager:
    """Drive pager with native requests: the facade's format seam when it has one, else the same steps here."""

    def __init__(self, session: str, fmt_name: str, **options: Any) -> None:
        import pager

        self._dir = tempfile.mkdtemp(prefix="pager-native-")
        self.p = pager.open(self._dir, session=session, **{"context_window": 200_000, **options})
        self.fmt = get_format(fmt_name)
        self._seam = "format" in inspect.signature(self.p.assemble).parameters
        self._prev_len: int | None = None

    def assemble(self, request: Mapping[str, Any]) -> dict[str, Any]:
        if self._seam:
            return self.p.assemble(request, format=self.fmt.name)
        conv = self.fmt.to_messages(request)
        out = self.p.assemble({"messages": list(conv.messages)})["messages"]
        rep = self.p.last_report
        h = self.p.history
        l1 = h.pinned_count() + (1 if self.p._layout and self.p._layout.card else 0)
        stable = max(l1, self.p._layout.stable if self.p._layout else 0)
        previous = self._prev_len if rep.changed_from is None else rep.changed_from
        self._prev_len = len(out)
        hints = RenderHints(l1=l1, stable=min(stable, len(out)), previous=previous)
        return self.fmt.render(request, out, tools=conv.tools or None, hints=hints)

    def assemble_chat(self, messages: list[dict[str, Any]]) -> list[Any]:
        return list(self.p.assemble({"messages": messages})["messages"])

    def close(self) -> None:
        try:
            self.p.close()
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)


def replay_session(
    s: NativeSession, anthropic: AnthropicPricing, openai: OpenAIPricing, counter: TokenCounter, **options: Any
) -> dict[str, dict[str, Any]]:
    """Replay one Claude Code session every way; return figures per (format, strategy)."""
    fmt = get_format("anthropic-messages")
    digests = _Digests(counter)
    extra = {"model": "claude-replay", "max_tokens": 4096}
    turns = s.turns()
    prompts: dict[str, list[Prompt]] = {k: [] for k in (
        "anthropic/full+tail-mark", "anthropic/pager+tail-mark", "anthropic/pager", "chat/full", "chat/pager")}
    native = NativePager(s.id, "anthropic-messages", **options)
    chat_pager = NativePager(s.id, "openai-chat", **options)
    try:
        full_neutral = fmt.to_messages({**extra, "messages": list(s.history)}).messages
        chat_all = to_chat(full_neutral)
        chat_at = _chat_positions(s)
        for t in turns:
            req = s.request(t, **extra)
            prompts["anthropic/full+tail-mark"].append(anthropic_prompt(_tail_marked(req), digests))
            out = native.assemble(req)
            prompts["anthropic/pager"].append(anthropic_prompt(out, digests))
            prompts["anthropic/pager+tail-mark"].append(anthropic_prompt(_only_tail(out), digests))
            hist = chat_all[: chat_at[t]]
            prompts["chat/full"].append(chat_prompt(hist, digests))
            prompts["chat/pager"].append(chat_prompt(chat_pager.assemble_chat([dict(m) for m in hist]), digests))
    finally:
        native.close()
        chat_pager.close()
    figures = {}
    for name, ps in prompts.items():
        pricing = anthropic if name.startswith("anthropic/") else openai
        bills = bill(ps, pricing)
        figures[name] = {
            "calls": len(bills), "prompt": sum(b.prompt for b in bills), "read": sum(b.read for b in bills),
            "write": sum(b.write for b in bills), "cost": sum(b.cost for b in bills),
            "marks_max": max((len(p.marks) for p in ps), default=0),
        }
        if name.startswith("chat/"):
            # the same chat prompts under the prefix model the chat bench uses (every prompt cached whole)
            figures[name]["cost_anthropic_prefix"] = _prefix_cost(ps, anthropic)
    return figures


def _chat_positions(s: NativeSession) -> dict[int, int]:
    """Map each Anthropic message position to the number of neutral (chat) messages before it."""
    from pager.formats.anthropic_messages import convert_message

    out = {}
    n = 0
    for i, m in enumerate(s.history):
        out[i] = n
        n += len(convert_message(i, m))
    return out


def _prefix_cost(prompts: Sequence[Prompt], pricing: AnthropicPricing) -> float:
    cost = 0.0
    prev: tuple[bytes, ...] = ()
    for p in prompts:
        k = 0
        while k < min(len(prev), len(p.chain)) and prev[k] == p.chain[k]:
            k += 1
        read = sum(p.tokens[:k])
        cost += pricing.read * read + pricing.write * (p.total - read)
        prev = p.chain
    return cost


def run_native(
    paths: Sequence[str], *, anthropic: AnthropicPricing | None = None, openai: OpenAIPricing | None = None,
    min_turns: int = 10, **options: Any,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Replay every Claude Code log under ``paths``; return figures per session and (format, strategy)."""
    from pathlib import Path

    anthropic = anthropic or AnthropicPricing()
    openai = openai or OpenAIPricing()
    counter = default_counter()
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        files.extend(sorted(p.rglob("*.jsonl")) if p.is_dir() else [p])
    results = {}
    for f in files:
        s = load_native(f)
        if s.format != "anthropic-messages" or len(s.turns()) < min_turns:
            continue
        results[s.id] = replay_session(s, anthropic, openai, counter, **options)
    return results


def table(results: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    """Return a Markdown table of ``run_native``'s figures, costs relative to full resend."""
    rows = ["| session | calls | format / strategy | prompt tokens | read | written | cost | vs full |",
            "|---|---:|---|---:|---:|---:|---:|---:|"]
    totals: dict[str, dict[str, float]] = {}
    for sid, figs in results.items():
        for name, f in figs.items():
            full = figs["anthropic/full+tail-mark" if name.startswith("anthropic/") else "chat/full"]["cost"]
            rows.append(f"| {sid[:13]} | {f['calls']} | {name} | {f['prompt']:,} | {f['read']:,} | {f['write']:,} "
                        f"| {f['cost']:,.0f} | {f['cost'] / full:.3f} |")
            t = totals.setdefault(name, {"calls": 0, "prompt": 0, "read": 0, "write": 0, "cost": 0.0})
            for k in t:
                t[k] += f[k]
    for name, t in totals.items():
        full = totals["anthropic/full+tail-mark" if name.startswith("anthropic/") else "chat/full"]["cost"]
        rows.append(f"| **all** | {t['calls']:.0f} | {name} | {t['prompt']:,.0f} | {t['read']:,.0f} | "
                    f"{t['write']:,.0f} | {t['cost']:,.0f} | {t['cost'] / full:.3f} |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pager.replay.native", description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--min-turns", type=int, default=10)
    ap.add_argument("--cache-discount", type=float, default=0.5, help="openai: discount on cached reads")
    ap.add_argument("--min-cache-tokens", type=int, default=1024)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    res = run_native(args.paths, anthropic=AnthropicPricing(min_tokens=args.min_cache_tokens),
                     openai=OpenAIPricing(discount=args.cache_discount), min_turns=args.min_turns)
    print(table(res))
    if args.json:
        with open(args.json, "wb") as fh:
            fh.write(orjson.dumps(res, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

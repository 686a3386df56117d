"""Replay original agent logs in their native wire format and bill them as each provider caches.

``run_native`` replays Claude Code sessions (``pager.lab.replay.importers``) as
Anthropic requests through pager, which places its own cache breakpoints,
beside full resend with Claude Code's own single tail mark (and pager's
prompts with only a tail mark, to isolate what the placement buys), and the
same sessions as OpenAI chat messages under automatic prefix caching. The
billing models are ``pager.lab.replay.cache_model``'s. ``pager bench --native``
or ``python -m pager.lab.replay.native PATH...`` prints the table.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from typing import Any, Mapping, Sequence, TextIO

import orjson

from pager.core.tokens import TokenCounter, default_counter
from pager.errors import InputError
from pager.formats.anthropic_messages import EPHEMERAL
from pager.formats.base import get_format
from pager.formats.export import to_chat
from pager.lab.replay.cache_model import (
    AnthropicPricing,
    Digests,
    OpenAIPricing,
    Prompt,
    anthropic_prompt,
    bill,
    chat_prompt,
)
from pager.lab.replay.importers import NativeSession, load_native

__all__ = ["NativePager", "bench_main", "replay_session", "run_native", "table"]

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

    def assemble(self, request: Mapping[str, Any]) -> dict[str, Any]:
        return self.p.assemble(request, format=self.fmt.name)

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
    digests = Digests(counter)
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
        try:
            s = load_native(f)
        except InputError:
            continue  # a chat session file, or not a log: the chat bench reads those
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


def bench_main(args: Any, out: TextIO, err: TextIO, paths: Sequence[Any]) -> int:
    """Run ``pager bench --native`` over ``paths`` (``--min-assistant``, ``--cache-discount``, ``--json``)."""
    paths = [str(p) for p in paths]
    discount = args.cache_discount if args.cache_discount is not None else 0.5
    res = run_native(paths, openai=OpenAIPricing(discount=discount), min_turns=args.min_assistant,
                     context_window=args.context_window)
    if not res:
        print("pager bench: no Claude Code logs to replay natively", file=err)
        return 1
    print(table(res), file=out)
    if args.json:
        with open(args.json, "wb") as fh:
            fh.write(orjson.dumps(res, option=orjson.OPT_INDENT_2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pager.lab.replay.native", description=__doc__.splitlines()[0])
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

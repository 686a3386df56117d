"""Measure how often a call needs a page, by the page's kind, age and size: the table behind the
planner's objective (``pager.core.plan``, ``pager.schedulers.paging.NEED_TABLE``).

    python bench/need_rates.py ../shared/traces            # print the table
    python bench/need_rates.py PATHS --json rates.json

For every assistant message (a call) of every session, a need is what ``pager bench`` counts as
one (``pager.lab.replay.needs``, need gap 1); the page that last held it is the one a fault re-reads.
A page's rate in a bucket is the calls for which it held a need over the calls it was exposed to
(every earlier page is exposed to every call). Age counts assistant messages since the page was
written, or since it last offered one of the call's needs (a page reached for again is young again).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

import orjson

from pager.lab.replay.facts import Facts
from pager.lab.replay.needs import RARE_WORD, extract_needs, message_text
from pager.lab.replay.session import load_sessions

AGES = (1, 2, 4, 8, 16, 32, 64, 128, 10**9)
SIZES = (200, 1000, 3000, 10**9)


def kind_of(msg: dict) -> str:
    role = msg.get("role")
    if role == "assistant":
        return "call" if msg.get("tool_calls") else "text"
    return "tool" if role == "tool" else "user"


def bucket(value: int, edges: tuple[int, ...]) -> int:
    for k, edge in enumerate(edges):
        if value <= edge:
            return k
    return len(edges) - 1


def measure(paths: list[str]) -> dict:
    facts = Facts()
    hits: Counter = Counter()
    seen: Counter = Counter()
    for session in load_sessions(paths):
        msgs = session.messages
        last_seen: dict[str, int] = {}
        seen_in: Counter = Counter()
        meta: list[tuple[str, int, int]] = []  # kind, size bucket, step written
        touched: dict[int, int] = {}  # page -> step it last held a need
        step = 0
        first_user = next((i for i, m in enumerate(msgs) if m.get("role") == "user"), -1)
        for i, msg in enumerate(msgs):
            if msg.get("role") == "assistant" and i > 0:
                needs = extract_needs(message_text(msg), words=True)
                src = {last_seen[n] for n, kind in needs.items()
                       if n in last_seen and (kind != "word" or seen_in[n] <= RARE_WORD)}
                for j, (kind, size, written) in enumerate(meta):
                    if kind in ("system",) or j == first_user:
                        continue
                    age = bucket(step - max(written, touched.get(j, written)), AGES)
                    key = (kind, age, size)
                    seen[key] += 1
                    if j in src:
                        hits[key] += 1
                for j in src:
                    touched[j] = step
                step += 1
            role = msg.get("role")
            meta.append(("system" if role == "system" else kind_of(msg), bucket(facts.tokens(msg), SIZES), step))
            offered = facts.terms(msg)
            last_seen.update(dict.fromkeys(offered, i))
            seen_in.update(offered)
    return {"ages": AGES, "sizes": SIZES,
            "rates": {f"{k}|{a}|{s}": [hits[(k, a, s)], n] for (k, a, s), n in sorted(seen.items())}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", default=["../shared/traces"])
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    data = measure(args.paths)
    if args.json:
        with open(args.json, "wb") as fh:
            fh.write(orjson.dumps(data))
    kinds = sorted({k.split("|")[0] for k in data["rates"]})
    print("kind  size<=  " + "  ".join(f"age<={a if a < 10**9 else 'inf':>4}" for a in AGES))
    for kind in kinds:
        for s, edge in enumerate(SIZES):
            cells = []
            for a in range(len(AGES)):
                h, n = data["rates"].get(f"{kind}|{a}|{s}", [0, 0])
                cells.append(f"{h / n:9.3f}" if n >= 30 else "        -")
            print(f"{kind:5} {edge if edge < 10**9 else 'inf':>6}  " + " ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())

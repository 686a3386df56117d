"""How ``bench/bench_scale.py`` and ``bench/bench_instructions.py`` draw a session and its steady-state steps.

``PRELUDE`` is the head of the code their child processes run (``python -c``,
formatted with the checkout's root: braces doubled): the imports, synthetic
sessions stitched to any length, the conversation in a wire format's own
shape, and the steady-state steps, the same at every size and the same first
ones however many are drawn.
"""

from __future__ import annotations

__all__ = ["PRELUDE"]

PRELUDE = r"""
import gc, json, os, resource, sys, threading, time
sys.path.insert(0, {root!r})
import orjson
import pager
from pager.lab.synth import generate_session

# synthetic sessions of 400 steps stitched together (one long synth session costs quadratic time to
# draw), call ids kept unique, until there are ``until`` messages
def stitched(seed, until, tag):
    out = []
    while len(out) < until:
        _h, part = generate_session(seed, 400)
        if out:
            part = part[2:]  # one system prompt and first task; later parts continue the session
        for m in part:
            m = dict(m)
            if m.get("tool_calls"):
                m["tool_calls"] = [{{**c, "id": f"{{c['id']}}-{{tag}}{{seed}}"}} for c in m["tool_calls"]]
            if m.get("tool_call_id"):
                m["tool_call_id"] = f"{{m['tool_call_id']}}-{{tag}}{{seed}}"
            out.append(m)
        seed += 1
    return out

def native(ms, fmt):
    # the conversation in the format's own shape (an Anthropic history: tool results inside user messages)
    from pager.formats.base import get_format
    from pager.formats.export import export_request
    neutral = get_format("openai-chat").to_messages({{"model": "m", "messages": ms}}).messages
    body = export_request(neutral, fmt, request={{"model": "m"}})
    return body, body.get("messages", body.get("input"))

def steady_steps(total, fmt):
    # the steady-state calls' steps: the same at every size (drawn from a session of their own, its call ids
    # their own), so that the rows differ by the history only: each a step of exactly two messages (one
    # call, its result), in order; the first ``total`` are the same whatever ``total`` is
    rest = stitched(1000, 6 * total + 50, "steady")
    steps, i = [], 0
    while i < len(rest):
        j = i + 1
        while j < len(rest) and rest[j]["role"] != "assistant":
            j += 1
        if j - i == 2 and rest[i]["role"] == "assistant" and rest[i + 1]["role"] == "tool":
            steps.append(rest[i:j])
        i = j
    if len(steps) < total:
        raise SystemExit("not enough two-message steps")
    steps = steps[:total]
    # each step converted on its own, so every call appends its own objects
    return steps if fmt == "openai-chat" else [native(st, fmt)[1] for st in steps]

def history_key(fmt):
    return "input" if fmt == "openai-responses" else "messages"
"""

"""Price a session's calls in base input tokens: what the provider billed, and full resend's estimate beside it.

One uncached input token = 1. The provider's usage as ``observe`` recorded it
is priced with cached tokens at the pricing's read price, cache writes at its
write price, the rest at 1, output at ``OUTPUT_PRICE``; beside it, an estimate
of the same call under full resend (the client's whole request, its prefix up
to the previous call's request cached), scaled by the call's provider / pager
token ratio. Pure: ``pager.ui.data`` hands it the report log's calls.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from pager.pricing import PRICING
from pager.ui.source import polite

__all__ = ["OUTPUT_PRICE", "session_costs"]

OUTPUT_PRICE = 5.0  # an output token in base input tokens (pager.lab.replay.cost.FaultCost's default)


def session_costs(calls: Sequence[Mapping[str, Any]], recs: Sequence[Any], pricing: str,
                  usd_per_mtok: float) -> dict[str, Any]:
    """Return the session's cost so far from its recorded usage, and full resend's beside it.

    ``calls`` are the session's assemble records in order, ``recs`` its head
    branch's pages; ``pricing`` a ``PRICING`` name, or ``auto`` (Anthropic's
    when a call wrote the cache, else OpenAI's). Each call record gets its own
    figures under ``_cost`` and its request size under ``_request``, for the
    session page.
    """
    cum = [0]
    for r in recs:
        cum.append(cum[-1] + r.tokens)
    name = pricing
    if name == "auto":
        name = "anthropic" if any(c.get("usage", {}).get("cache_write_tokens") for c in calls) else "openai"
    p = PRICING[name]
    total = {"pricing": name, "calls_with_usage": 0, "cost": 0.0, "full": 0.0, "cached": 0, "uncached": 0,
             "cache_write": 0, "output": 0, "usd_per_mtok": usd_per_mtok}
    prev_request = 0
    for c in polite(calls):
        request = cum[min(int(c.get("messages_in", 0)), len(recs))] + int(c["layers"].get("tools", 0))
        u = c.get("usage")
        if u and u["prompt_tokens"]:
            ratio = u["prompt_tokens"] / max(1, int(c["tokens"]))  # the provider counts its own tokens
            full_cached = min(prev_request, request) * ratio
            full = (p.read * full_cached + p.write * (request * ratio - full_cached)
                    + OUTPUT_PRICE * u["completion_tokens"])
            uncached = max(0, u["prompt_tokens"] - u["cached_tokens"] - u["cache_write_tokens"])
            cost = (p.read * u["cached_tokens"] + p.write * u["cache_write_tokens"] + uncached
                    + OUTPUT_PRICE * u["completion_tokens"])
            c_out = {"cost": round(cost, 1), "full": round(full, 1)}
            total["calls_with_usage"] += 1
            total["cost"] += cost
            total["full"] += full
            total["cached"] += u["cached_tokens"]
            total["uncached"] += uncached
            total["cache_write"] += u["cache_write_tokens"]
            total["output"] += u["completion_tokens"]
            c["_cost"] = c_out  # type: ignore[index]  # per call, for the session page
        c["_request"] = request  # type: ignore[index]
        prev_request = request
    total["saving"] = (1 - total["cost"] / total["full"]) if total["full"] else None
    return total

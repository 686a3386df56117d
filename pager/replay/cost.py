"""Cache-adjusted input cost: how providers bill a prompt whose prefix they have seen.

Theory of operation. Calls of one strategy within one session are billed in
order. The *cached* part of call t is the tokens of the longest run of
leading messages of call t that are identical (canonical bytes, see
``facts.canonical``) to the leading messages of call t-1; everything after
the first difference is *written* (billed as new input, and cached for the
next call). The first call of a session is all written. Caches are assumed
never to expire between calls of a replay.

A pricing model turns (cached, written) into a cost, the base input price
being 1 per token:

- ``anthropic``: cached x 0.1 + written x 1.25 (cache reads are 10 % of
  base, writes carry a 25 % premium);
- ``openai``: cached x (1 - discount) + written x 1.0, discount 0.5 by
  default (OpenAI's discount is 50-90 % depending on the model);
- ``none``: no caching, cost = prompt tokens.

Costs are reported relative to full resend's cost on the same session.

*Effective cost* prices a miss. A call *faults* when at least one need of the
assistant message (see ``needs``) is missing from the prompt built for it. A
well-behaved agent then calls ``recall`` or ``expand``: one more model call on
the same prompt (read from the cache), plus a small tool call and result
written after it, plus the few output tokens of that call. ``FaultCost``
holds those constants; a fault costs, in base-input-token units,

    read x prompt + write x recall_tokens + output_price x output_tokens

with ``read`` and ``write`` the pricing model's (Anthropic: 0.1 and 1.25), by
default 340 recall tokens and 40 output tokens at 5x the base input price.
The effective cost of a call is its cost plus that, when it faults.
"""

from __future__ import annotations

from typing import Sequence

import attrs

from pager.errors import ConfigError

__all__ = ["FAULT_COST", "PRICING", "FaultCost", "Pricing", "cached_prefix_tokens", "pricing"]


@attrs.frozen(slots=True)
class Pricing:
    """A pricing model: multipliers of the base input price for cached and written tokens."""

    name: str
    read: float
    write: float

    def cost(self, prompt_tokens: int, cached_tokens: int) -> float:
        """Return the cost of one call of ``prompt_tokens`` of which ``cached_tokens`` were cached."""
        return self.read * cached_tokens + self.write * (prompt_tokens - cached_tokens)


PRICING = {
    "anthropic": Pricing("anthropic", read=0.1, write=1.25),
    "openai": Pricing("openai", read=0.5, write=1.0),
    "none": Pricing("none", read=1.0, write=1.0),
}


@attrs.frozen(slots=True)
class FaultCost:
    """What one fault costs beside the call that faulted: a recall round trip on the cached prompt.

    ``recall_tokens``: the recall (or expand) call and its result, written
    after the cached prompt; ``output_tokens``: the model's output for that
    extra call; ``output_price``: an output token's price in base input
    tokens (5 for Claude and most GPT models).
    """

    recall_tokens: float = 340
    output_tokens: float = 40
    output_price: float = 5.0

    def __attrs_post_init__(self) -> None:
        for name in ("recall_tokens", "output_tokens", "output_price"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ConfigError(f"fault cost: {name} must be a non-negative number, got {value!r}")

    def cost(self, prompt_tokens: int, pricing: Pricing) -> float:
        """Return the price of one fault on a prompt of ``prompt_tokens`` under ``pricing``."""
        return (pricing.read * prompt_tokens + pricing.write * self.recall_tokens
                + self.output_price * self.output_tokens)


FAULT_COST = FaultCost()


def pricing(name: str, *, discount: float | None = None) -> Pricing:
    """Return the pricing model ``name`` (anthropic, openai, none).

    ``discount`` (0..1) sets OpenAI's cached-read discount; 0.5 by default.
    """
    if name not in PRICING:
        raise ConfigError(f"unknown pricing model {name!r} (expected one of {sorted(PRICING)})")
    if discount is None:
        return PRICING[name]
    if name != "openai":
        raise ConfigError("--cache-discount applies to the openai pricing model only")
    if not 0.0 <= discount <= 1.0:
        raise ConfigError(f"cache discount must be between 0 and 1, got {discount}")
    return Pricing("openai", read=1.0 - discount, write=1.0)


def cached_prefix_tokens(
    previous: Sequence[bytes] | None, current: Sequence[bytes], tokens: Sequence[int]
) -> int:
    """Return the tokens of ``current``'s leading messages identical to ``previous``'s.

    ``previous`` and ``current`` are the canonical bytes of the two prompts'
    messages; ``tokens[i]`` is the token count of ``current[i]``.
    """
    if not previous:
        return 0
    cached = 0
    for a, b, n in zip(previous, current, tokens):
        if a is not b and a != b:
            break
        cached += n
    return cached

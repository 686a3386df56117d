"""Cache-adjusted input cost: how providers bill a prompt whose prefix they have seen.

Theory of operation. Calls of one strategy within one session are billed in
order. The *cached* part of call t is the tokens of the longest run of
leading messages of call t that are identical (canonical bytes, see
``facts.canonical``) to the leading messages of call t-1; everything after
the first difference is *written* (billed as new input, and cached for the
next call). The first call of a session is all written. Caches are assumed
never to expire between calls of a replay.

A pricing model (``pager.pricing``) turns (cached, written) into a cost, the
base input price being 1 per token:

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

*Re-read cost* is the honest price of a miss (issue 24). An agent that lost
something it needs does not get a 340-token excerpt back: it re-reads the
file, or expands the handle, and the whole page comes back. The *pages* of a
faulting call are the distinct history messages that last held one of its
missed needs (several needs in one page: one page; a page is counted once per
call). The fault then costs one more call on the cached prompt, each page
written at the write price (whole, or at most ``reread_cap`` tokens of it),
and the output of that call:

    read x prompt + write x sum(min(page, cap)) + output_price x output_tokens

The page is paid once: in an open-loop replay the next calls' prompts are the
strategy's, built without it, so it rides no later call (a closed-loop agent
would carry it a while; this model does not guess for how long).
"""

from __future__ import annotations

from typing import Sequence

import attrs

from pager.errors import ConfigError
from pager.pricing import PRICING, Pricing, pricing  # the models live in the library: the viewer prices with them

__all__ = ["FAULT_COST", "PRICING", "FaultCost", "Pricing", "cached_prefix_tokens", "pricing"]


@attrs.frozen(slots=True)
class FaultCost:
    """What one fault costs beside the call that faulted: an excerpt (``cost``) or a re-read (``reread``).

    ``recall_tokens``: the recall (or expand) call and its result, written
    after the cached prompt; ``output_tokens``: the model's output for that
    extra call; ``output_price``: an output token's price in base input
    tokens (5 for Claude and most GPT models); ``reread_cap``: the most
    tokens of one page a re-read writes (None: the whole page).
    """

    recall_tokens: float = 340
    output_tokens: float = 40
    output_price: float = 5.0
    reread_cap: float | None = None

    def __attrs_post_init__(self) -> None:
        names = ("recall_tokens", "output_tokens", "output_price")
        for name in names + (("reread_cap",) if self.reread_cap is not None else ()):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ConfigError(f"fault cost: {name} must be a non-negative number, got {value!r}")

    def cost(self, prompt_tokens: int, pricing: Pricing) -> float:
        """Return the price of one fault on a prompt of ``prompt_tokens`` under ``pricing``."""
        return (pricing.read * prompt_tokens + pricing.write * self.recall_tokens
                + self.output_price * self.output_tokens)

    def reread(self, prompt_tokens: int, pages: Sequence[int], pricing: Pricing) -> float:
        """Return the re-read price of one fault: the extra call and each page of ``pages``.

        ``pages`` are the token counts of the distinct pages that last held a
        missed need; each is written whole, or at most ``reread_cap`` tokens.
        """
        cap = self.reread_cap
        written = sum(pages) if cap is None else sum(min(p, cap) for p in pages)
        return (pricing.read * prompt_tokens + pricing.write * written
                + self.output_price * self.output_tokens)


FAULT_COST = FaultCost()


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

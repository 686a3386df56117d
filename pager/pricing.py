"""How providers bill a prompt whose prefix they have cached: the pricing models.

The base input price is 1 per token; a model multiplies it for the tokens read
from the provider's cache and for those written (billed as new input, and
cached for the next call):

- ``anthropic``: cached x 0.1 + written x 1.25 (cache reads are 10 % of base,
  writes carry a 25 % premium);
- ``openai``: cached x (1 - discount) + written x 1.0, discount 0.5 by default
  (OpenAI's discount is 50-90 % depending on the model);
- ``none``: no caching, cost = prompt tokens.

The viewer (``pager ui``) prices a session's recorded usage with them; the
bench (``pager.lab.replay.cost``) prices replayed prompts.
"""

from __future__ import annotations

import attrs

from pager.errors import ConfigError

__all__ = ["PRICING", "Pricing", "pricing"]


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

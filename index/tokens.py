"""One token estimate for the whole query package.

Budgets (retrieval budget, input target, hard limit) are compared against the same
cheap, provider-independent estimate everywhere, so a number computed by the
evidence builder means the same thing to the planner. Four characters per token,
rounded up, is the usual rule of thumb for English and code; it needs no tokenizer
download and costs nothing.
"""

from __future__ import annotations

#: Characters per token of the estimate.
CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """Estimate the tokens of ``text``: characters / 4, rounded up (0 for empty text)."""
    if not isinstance(text, str):
        raise TypeError(f"estimate_tokens expects str, got {type(text).__name__}")
    return -(-len(text) // CHARS_PER_TOKEN)

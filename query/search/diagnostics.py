"""What one retrieval reports about itself: counts, warnings and timings, never text.

One ``Diagnostics`` object travels through the pipeline's steps; each step sets the
fields it knows. ``as_dict`` is the response's ``diagnostics`` object: fields a step
never reached are left out (a ``not-indexed`` answer has no ``candidates``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


@dataclass
class Diagnostics:
    warnings: list[str] = field(default_factory=list)  # reasons, never request text
    index_watermark: int | None = None  # the index's applied event sequence
    candidates: int | None = None  # rows the literal and FTS searches returned, merged
    in_context_removed: int | None = None  # FTS hits (of the search as run) still in context
    alternate_branch_candidates: int | None = None  # defensive: SQL already filtered
    unverified_rejected: int | None = None  # candidates with no verified term match
    deduplicated: int | None = None  # candidates dropped as the same text as a better one
    tokens_used: int | None = None  # evidence tokens, within the budget
    semantic: dict[str, Any] | None = None  # the opt-in vector step's counts
    latency_ms: float | None = None

    def warn(self, reason: str) -> None:
        """Add a warning (a fixed reason or an error's class name, never user text)."""
        self.warnings.append(reason)

    def as_dict(self) -> dict[str, Any]:
        """The response's ``diagnostics``: every field that was set."""
        found: dict[str, Any] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if value is not None:
                found[item.name] = list(value) if item.name == "warnings" else value
        return found

"""Semantic: opt-in vectors fused into the lexical ranking (docs/semantic.md).

The public API is ``_EXPORTS`` below (the rule is in ``lookback.query``'s docstring).
"""

from __future__ import annotations

from lookback.query import lazy_exports

#: Public name -> the module of this package that defines it.
_EXPORTS = {
    "add_semantic": "hybrid",
    "warm_up": "hybrid",
    "fuse": "fusion",
    "Candidate": "fusion",
    "FusedCandidate": "fusion",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)

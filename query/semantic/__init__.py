"""Semantic: opt-in vectors fused into the lexical ranking (docs/semantic.md).

The public API is ``_EXPORTS`` below (the rule is in ``lookback.query``'s docstring).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lookback.query import lazy_exports

# What a type checker sees (``X as X``: re-exported); at run time each name loads on
# first use (``_EXPORTS``). tests/test_layers.py keeps the two the same.
if TYPE_CHECKING:
    from lookback.query.semantic.fusion import Candidate as Candidate
    from lookback.query.semantic.fusion import FusedCandidate as FusedCandidate
    from lookback.query.semantic.fusion import fuse as fuse
    from lookback.query.semantic.hybrid import add_semantic as add_semantic
    from lookback.query.semantic.hybrid import warm_up as warm_up

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

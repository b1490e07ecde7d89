"""Semantic: opt-in vectors fused into the lexical ranking (docs/semantic.md).

The public API is ``_EXPORTS`` below: what other packages may use (tests/test_layers.py
checks it); everything else is this package's own. Each name is imported on first
use, so importing one module of the package stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> the module of this package that defines it.
_EXPORTS = {
    "add_semantic": "hybrid",
    "warm_up": "hybrid",
    "fuse": "fusion",
    "Candidate": "fusion",
    "FusedCandidate": "fusion",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

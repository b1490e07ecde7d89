"""Lookback: give a coding agent back what context compaction took away.

The public Python API (the same contract as ``lookback retrieve`` and
``POST /v1/retrieve``)::

    import lookback
    response = lookback.retrieve({"session_file": "/abs/session.jsonl",
                                  "message": "why did `parse_config` fail?"})
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what a type checker sees; at run time they load on first use
    from lookback.api import RequestError, health, retrieve, search, source

__version__ = "0.1.0"
__all__ = ["RequestError", "health", "retrieve", "search", "source"]


def __getattr__(name: str) -> Any:
    # Imported on first use, so `lookback.settings` or the CLI stay light to import.
    if name in __all__:
        from lookback import api

        return getattr(api, name)
    raise AttributeError(f"module 'lookback' has no attribute {name!r}")

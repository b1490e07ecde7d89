"""Context: the agent's messages, evidence envelopes, the planner and the manifest.

The public API is ``_EXPORTS`` below (the rule is in ``lookback.query``'s docstring).
"""

from __future__ import annotations

from lookback.query import lazy_exports

#: Public name -> the module of this package that defines it.
_EXPORTS = {
    "envelope": "evidence",
    "evidence_message": "evidence",
    "excerpt": "evidence",
    "MAX_EXCERPT_CHARS": "evidence",
    "plan": "planner",
    "decide": "planner",
    "decide_for_answer": "planner",
    "decide_request": "planner",
    "describe": "planner",
    "apply_decision": "planner",
    "ManifestStore": "manifest",
    "retrieval_record": "manifest",
    "apply_plan": "manifest",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)

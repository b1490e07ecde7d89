"""Context: the agent's messages, evidence envelopes, the planner and the manifest.

The public API is ``_EXPORTS`` below (the rule is in ``lookback.query``'s docstring).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lookback.query import lazy_exports

# What a type checker sees (``X as X``: re-exported); at run time each name loads on
# first use (``_EXPORTS``). tests/test_layers.py keeps the two the same.
if TYPE_CHECKING:
    from lookback.query.context.evidence import MAX_EXCERPT_CHARS as MAX_EXCERPT_CHARS
    from lookback.query.context.evidence import envelope as envelope
    from lookback.query.context.evidence import evidence_message as evidence_message
    from lookback.query.context.evidence import excerpt as excerpt
    from lookback.query.context.manifest import ManifestStore as ManifestStore
    from lookback.query.context.manifest import apply_plan as apply_plan
    from lookback.query.context.manifest import retrieval_record as retrieval_record
    from lookback.query.context.planner import apply_decision as apply_decision
    from lookback.query.context.planner import decide as decide
    from lookback.query.context.planner import decide_for_answer as decide_for_answer
    from lookback.query.context.planner import decide_request as decide_request
    from lookback.query.context.planner import describe as describe
    from lookback.query.context.planner import plan as plan

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

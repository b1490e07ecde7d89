"""Contract: what Lookback and its clients agree on, in one place.

The wire contract's typed requests (``request``) and answers (``answers``), and the
rules both sides of it apply to an agent's messages (``messages``: their kinds, token
estimates, the evidence envelope's markers), which the TypeScript extension mirrors
(tests/fixtures/contract/). ``search`` answers in these types and ``context`` plans in
them; this package imports neither.

The public API is ``_EXPORTS`` below (the rule is in ``lookback.query``'s docstring).
"""

from __future__ import annotations

from lookback.query import lazy_exports

#: Public name -> the module of this package that defines it.
_EXPORTS = {
    "JsonObject": "messages",
    "RequestError": "request",
    "RetrievalRequest": "request",
    "parse_request": "request",
    "PlanRequest": "request",
    "parse_plan": "request",
    "check_depth": "request",
    "MAX_DEPTH": "request",
    "session_names": "request",
    "SessionNames": "request",
    "Named": "request",
    "SearchRequest": "request",
    "parse_search": "request",
    "SourceRequest": "request",
    "parse_source": "request",
    "DEFAULT_SEARCH_RESULTS": "request",
    "MAX_SEARCH_RESULTS": "request",
    "MAX_NEIGHBOURS": "request",
    "pin": "request",
    "encode_request": "request",
    "optional_text": "request",
    "Diagnostics": "answers",
    "RetrieveAnswer": "answers",
    "Evidence": "answers",
    "EvidenceMessage": "answers",
    "TextBlock": "answers",
    "Withheld": "answers",
    "FreshnessOutcome": "answers",
    "SearchAnswer": "answers",
    "SearchResult": "answers",
    "SourceAnswer": "answers",
    "SourceEntry": "answers",
    "PlanAnswer": "answers",
    "Decision": "answers",
    "Included": "answers",
    "PlanExcluded": "answers",
    "PlanTokens": "answers",
    "Answer": "answers",
    "encode_answer": "answers",
    "answer_dict": "answers",
    "message_text": "messages",
    "latest_real_user_message": "messages",
    "is_evidence_message": "messages",
    "is_summary_message": "messages",
    "estimate_message_tokens": "messages",
    "EVIDENCE_HEADER": "messages",
    "EVIDENCE_FOOTER": "messages",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)

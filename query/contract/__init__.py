"""Contract: what Lookback and its clients agree on, in one place.

The wire contract's typed requests (``request``) and answers (``answers``), and the
rules both sides of it apply to an agent's messages (``messages``: their kinds, token
estimates, the evidence envelope's markers), which the TypeScript extension mirrors
(tests/fixtures/contract/). ``search`` answers in these types and ``context`` plans in
them; this package imports neither.

The public API is ``_EXPORTS`` below (the rule is in ``lookback.query``'s docstring).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lookback.query import lazy_exports

# What a type checker sees (``X as X``: re-exported); at run time each name loads on
# first use (``_EXPORTS``). tests/test_layers.py keeps the two the same.
if TYPE_CHECKING:
    from lookback.query.contract.answers import Answer as Answer
    from lookback.query.contract.answers import Decision as Decision
    from lookback.query.contract.answers import Diagnostics as Diagnostics
    from lookback.query.contract.answers import Evidence as Evidence
    from lookback.query.contract.answers import EvidenceMessage as EvidenceMessage
    from lookback.query.contract.answers import FreshnessOutcome as FreshnessOutcome
    from lookback.query.contract.answers import Included as Included
    from lookback.query.contract.answers import PlanAnswer as PlanAnswer
    from lookback.query.contract.answers import PlanExcluded as PlanExcluded
    from lookback.query.contract.answers import PlanTokens as PlanTokens
    from lookback.query.contract.answers import RetrieveAnswer as RetrieveAnswer
    from lookback.query.contract.answers import SearchAnswer as SearchAnswer
    from lookback.query.contract.answers import SearchResult as SearchResult
    from lookback.query.contract.answers import SourceAnswer as SourceAnswer
    from lookback.query.contract.answers import SourceEntry as SourceEntry
    from lookback.query.contract.answers import TextBlock as TextBlock
    from lookback.query.contract.answers import Withheld as Withheld
    from lookback.query.contract.answers import answer_dict as answer_dict
    from lookback.query.contract.answers import encode_answer as encode_answer
    from lookback.query.contract.messages import EVIDENCE_FOOTER as EVIDENCE_FOOTER
    from lookback.query.contract.messages import EVIDENCE_HEADER as EVIDENCE_HEADER
    from lookback.query.contract.messages import JsonObject as JsonObject
    from lookback.query.contract.messages import estimate_message_tokens as estimate_message_tokens
    from lookback.query.contract.messages import is_evidence_message as is_evidence_message
    from lookback.query.contract.messages import is_summary_message as is_summary_message
    from lookback.query.contract.messages import (
        latest_real_user_message as latest_real_user_message,
    )
    from lookback.query.contract.messages import message_text as message_text
    from lookback.query.contract.request import DEFAULT_SEARCH_RESULTS as DEFAULT_SEARCH_RESULTS
    from lookback.query.contract.request import MAX_DEPTH as MAX_DEPTH
    from lookback.query.contract.request import MAX_NEIGHBOURS as MAX_NEIGHBOURS
    from lookback.query.contract.request import MAX_SEARCH_RESULTS as MAX_SEARCH_RESULTS
    from lookback.query.contract.request import Named as Named
    from lookback.query.contract.request import PlanRequest as PlanRequest
    from lookback.query.contract.request import RequestError as RequestError
    from lookback.query.contract.request import RetrievalRequest as RetrievalRequest
    from lookback.query.contract.request import SearchRequest as SearchRequest
    from lookback.query.contract.request import SessionNames as SessionNames
    from lookback.query.contract.request import SourceRequest as SourceRequest
    from lookback.query.contract.request import check_depth as check_depth
    from lookback.query.contract.request import encode_request as encode_request
    from lookback.query.contract.request import optional_text as optional_text
    from lookback.query.contract.request import parse_plan as parse_plan
    from lookback.query.contract.request import parse_request as parse_request
    from lookback.query.contract.request import parse_search as parse_search
    from lookback.query.contract.request import parse_source as parse_source
    from lookback.query.contract.request import pin as pin
    from lookback.query.contract.request import session_names as session_names

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

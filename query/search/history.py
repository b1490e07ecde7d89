"""Explicit history search: the opt-in tool for people and agents.

Same term extraction, searches, verification and ranking as automatic retrieval,
but the caller chooses the scope: ``branch`` (default: the current branch, live
context included), ``session`` (every branch of the session) or ``project`` (every
session of the project). Automatic retrieval never widens its scope; only this
explicit call does. Results still pass the provider's privacy policy, since a tool
result reaches the model too.
"""

from __future__ import annotations

from typing import Any

import apsw
from lookback.index.store import IndexUnavailable
from lookback.index.tree import leaf_of
from lookback.query.context.evidence import excerpt
from lookback.query.privacy.policy import PrivacyPolicy
from lookback.query.search.candidates import Scope, entries_for, load_texts, source_entry
from lookback.query.search.diagnostics import Diagnostics
from lookback.query.search.ranking import Ranked
from lookback.query.search.reader import IndexReader, NotIndexed, SessionView
from lookback.query.search.request import (
    RequestError,
    optional_ids,
    optional_text,
    query_text,
    session_names,
)
from lookback.query.search.retrieve import (
    INELIGIBLE_WITH_TEXT,
    Searched,
    deduplicate,
    find_candidates,
    first_position,
    verify_and_rank,
)
from lookback.query.text.terms import extract_terms

SCOPES = ("branch", "session", "project")
DEFAULT_RESULTS = 20


class HistorySearch:
    def __init__(self, reader: IndexReader, policy: PrivacyPolicy | None = None) -> None:
        self.reader = reader
        self.policy = policy or PrivacyPolicy()

    def search(self, request: Any) -> dict[str, Any]:
        text, scope_name, limit = _search_fields(request)
        names, leaf_id = session_names(request), optional_text(request, "leaf_id")
        branch_ids, provider = _branch_ids(request), optional_text(request, "provider")
        searched = Searched.of(extract_terms(text))
        terms = searched.terms
        if not terms.has_topic:
            return {"status": "no-query", "query": {}, "results": [], "excluded": []}
        try:
            with self.reader.session(**names.as_dict()) as view:
                chosen, on_branch = self._ranked(view, searched, scope_name, limit, leaf_id,
                                                 branch_ids)
        except (NotIndexed, OSError):
            return {"status": "not-indexed", "query": terms.by_kind(), "results": [],
                    "excluded": []}
        except IndexUnavailable as error:  # indexed, but not readable now
            return {"status": "disabled", "query": terms.by_kind(), "results": [],
                    "excluded": [], "warnings": [f"index unavailable: {error}"]}
        except apsw.Error as error:  # a corrupt index: say so, never raise
            return {"status": "disabled", "query": terms.by_kind(), "results": [],
                    "excluded": [], "warnings": [f"index unreadable: {type(error).__name__}"]}
        results = [_result(item, on_branch) for item in chosen]
        # The gate judges each row on its whole text, not the 1,200-character excerpt.
        shown, excluded = self.policy.apply(results, provider,
                                            [item.row.text for item in chosen])
        return {"status": "ok", "scope": scope_name, "query": terms.by_kind(),
                "results": shown, "excluded": excluded}

    def _ranked(self, view: SessionView, searched: Searched, scope_name: str, limit: int,
                leaf_id: str | None,
                branch_ids: list[str] | None) -> tuple[list[Ranked], set[str]]:
        """Search, verify, rank and deduplicate inside the open read transaction."""
        connection = view.connection
        if branch_ids is not None:  # the client's own branch (Pi's getBranch()) is authoritative
            scope, on_branch = _given_branch(connection, view.session_id, scope_name,
                                             branch_ids)
        else:
            scope, on_branch = self._scope(connection, view.path, view.session_id, scope_name,
                                           leaf_id)
        rows, fts_hits = find_candidates(connection, searched, scope, 4 * limit, 8 * limit)
        ranked = verify_and_rank(rows, searched, None, fts_hits, Diagnostics())
        chosen = deduplicate(ranked)[:limit]
        load_texts(connection, (item.row for item in chosen))
        return chosen, on_branch

    def _scope(self, connection: apsw.Connection, path: Any, session_id: str, scope: str,
               leaf_id: str | None) -> tuple[Scope, set[str]]:
        leaf = leaf_id or leaf_of(connection, session_id)
        if leaf is None:
            raise NotIndexed("session not indexed")
        branch = self.reader.branch(connection, path, session_id, leaf)
        on_branch = {entry.entry_id for entry in branch}
        if scope == "branch":
            rows = (e.rowid for e in branch if e.type not in INELIGIBLE_WITH_TEXT)
            return Scope.of_rows(rows), on_branch
        if scope == "session":
            return Scope(session_id=session_id), on_branch
        return Scope(), on_branch

    def source(self, request: Any) -> dict[str, Any]:
        names = session_names(request)
        entry_id, provider = optional_text(request, "entry_id"), optional_text(request, "provider")
        if entry_id is None:
            raise RequestError("give entry_id and the session (session_file, or project "
                               "and session_id)")
        try:
            with self.reader.session(**names.as_dict()) as view:
                row = source_entry(view.connection, view.session_id, entry_id)
        except (NotIndexed, OSError):
            return {"status": "not-indexed"}
        except IndexUnavailable as error:
            return {"status": "disabled", "warnings": [f"index unavailable: {error}"]}
        except apsw.Error as error:
            return {"status": "disabled", "warnings": [f"index unreadable: {type(error).__name__}"]}
        if row is None:
            return {"status": "not-found"}
        entry = {"entry_id": row.entry_id, "session_id": row.session_id, "type": row.type,
                 "role": row.role, "timestamp": row.timestamp,
                 "excerpt": excerpt(row.text, 0, 20_000)}
        shown, excluded = self.policy.apply([entry], provider, [row.text])
        return {"status": "ok" if shown else "withheld", "entry": shown[0] if shown else None,
                "excluded": excluded}


def _search_fields(request: Any) -> tuple[str, str, int]:
    if not isinstance(request, dict):
        raise RequestError("the request must be a JSON object")
    text = request.get("text")
    if not isinstance(text, str) or not text.strip():
        raise RequestError("text must be a non-empty string")
    scope = request.get("scope") or "branch"
    if scope not in SCOPES:
        raise RequestError(f"scope must be one of {', '.join(SCOPES)}")
    limit = request.get("max_results", DEFAULT_RESULTS)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100:
        raise RequestError("max_results must be an integer between 1 and 100")
    return query_text(text), scope, limit


def _branch_ids(request: dict[str, Any]) -> list[str] | None:
    ids = optional_ids(request, "branch_ids")
    return None if ids is None else list(ids)


def _given_branch(connection: apsw.Connection, session_id: str, scope_name: str,
                  branch_ids: list[str]) -> tuple[Scope, set[str]]:
    """Scopes for a caller-given branch: its indexed, evidence-eligible rows."""
    on_branch = set(branch_ids)
    if scope_name == "session":
        return Scope(session_id=session_id), on_branch
    if scope_name == "project":
        return Scope(), on_branch
    entries = entries_for(connection, session_id, branch_ids)
    return Scope.of_rows(e.rowid for e in entries if e.type not in INELIGIBLE_WITH_TEXT), on_branch


def _result(item: Any, on_branch: set[str]) -> dict[str, Any]:
    row = item.row
    first = first_position(row.text or "", item.matches)
    return {"entry_id": row.entry_id, "session_id": row.session_id, "role": row.role,
            "timestamp": row.timestamp, "tier": item.tier, "score": item.score,
            "reasons": item.reasons, "on_branch": row.entry_id in on_branch,
            "excerpt": excerpt(row.text or "", first, 1200)}

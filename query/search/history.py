"""Explicit history search: the opt-in tool for people and agents.

The same steps as automatic retrieval (``query.search.pipeline``: terms, searches,
verification, ranking, deduplication, excerpts) with the same failure handling (a
failed FTS step leaves the literal matches and a warning), but the caller chooses the
scope: ``branch`` (default: the current branch, live
context included), ``session`` (every branch of the session) or ``project`` (every
session of the project). Automatic retrieval never widens its scope; only this
explicit call does. A request naming only a project searches from its most recently
updated session that has entries; ``project`` scope searches the project even from a
session that has none yet (its file holds only its header). Results still pass the
provider's privacy policy, since a tool result reaches the model too.

``source`` reads one entry whole, and on request its neighbours on the branch: the
entries before it (its ancestors) and after it (on the session's current branch when
it lies there, else along its latest continuation), each through the same gate.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import apsw
import msgspec
from msgspec import UNSET

from lookback.index.store import IndexUnavailable
from lookback.index.tree import branch as leaf_branch
from lookback.index.tree import leaf_of
from lookback.query.contract.answers import (
    Diagnostics,
    SearchAnswer,
    SearchResult,
    SourceAnswer,
    SourceEntry,
    Withheld,
)
from lookback.query.contract.request import SearchRequest, SourceRequest
from lookback.query.privacy.policy import PrivacyPolicy
from lookback.query.search.pipeline import INELIGIBLE_WITH_TEXT, quote, rank, searched_of, times_of
from lookback.query.search.reader import IndexReader, NotIndexed, SessionView
from lookback.query.search.rows import Source, entries_for, load_texts, source_entry
from lookback.query.search.types import Ranked, Scope, Searched
from lookback.query.text.dates import TimeSpan

#: The characters quoted of a search result, of the entry ``source`` reads and of each
#: of its neighbours.
RESULT_CHARS, SOURCE_CHARS, NEIGHBOUR_CHARS = 1200, 20_000, 4_000


class HistorySearch:
    def __init__(self, reader: IndexReader, policy: PrivacyPolicy | None = None) -> None:
        self.reader = reader
        self.policy = policy or PrivacyPolicy()

    def search(self, request: SearchRequest) -> SearchAnswer:
        """History search for a decoded request (``request.parse_search``)."""
        when = times_of(request.text, request.message_time_ms)
        searched = searched_of(request.text)
        terms = searched.terms
        if not terms.has_topic:
            return SearchAnswer(status="no-query", query={}, results=[], excluded=[])
        branch_ids = None if request.branch_ids is None else list(request.branch_ids)
        diagnostics = Diagnostics()
        try:
            with self.reader.session(**request.names.as_dict()) as view:
                chosen = self._ranked(view, searched, request.scope, request.max_results,
                                      request.leaf_id, branch_ids, diagnostics, when)
        except (NotIndexed, OSError):
            return SearchAnswer(status="not-indexed", query=terms.by_kind(), results=[],
                                excluded=[])
        except IndexUnavailable as error:  # damaged, busy, unreadable: say why, never raise
            return SearchAnswer(status="disabled", query=terms.by_kind(), results=[],
                                excluded=[], warnings=[f"index unavailable: {error}"])
        results = [_result(item) for item in chosen]
        # The gate judges each row on its whole text, not the 1,200-character excerpt.
        shown, excluded = self.policy.apply(results, request.provider,
                                            [item.row.text for item in chosen])
        return SearchAnswer(status="ok",
                            scope=request.scope,  # type: ignore[arg-type]  # parse_search's
                            query=terms.by_kind(),
                            results=msgspec.convert(shown, list[SearchResult]),
                            excluded=msgspec.convert(excluded, list[Withheld]),
                            # a failed FTS step: the literal matches only, and why
                            warnings=list(diagnostics.warnings) or UNSET)

    def _ranked(self, view: SessionView, searched: Searched, scope_name: str, limit: int,
                leaf_id: str | None, branch_ids: list[str] | None,
                diagnostics: Diagnostics, when: tuple[TimeSpan, ...] = ()) -> list[Ranked]:
        """The pipeline's steps (``pipeline.rank``) inside the open read transaction, over
        the scope the caller chose.

        Each item knows whether its row is on the caller's branch (the session's
        own entries on it, by session and entry id: ids repeat across sessions); its
        "active branch" reason and the result's ``on_branch`` both come from that.
        """
        connection = view.connection
        if branch_ids is not None:  # the client's own branch (Pi's getBranch()) is authoritative
            scope, on_branch = _given_branch(connection, view.session_id, scope_name,
                                             branch_ids)
        else:
            scope, on_branch = self._scope(connection, view.path, view.session_id, scope_name,
                                           leaf_id)
        session_id = view.session_id
        chosen = rank(
            connection, searched, scope, diagnostics,
            on_branch=lambda row: row.session_id == session_id and row.entry_id in on_branch,
            when=when)[:limit]
        load_texts(connection, (item.row for item in chosen))
        return chosen

    def _scope(self, connection: apsw.Connection, path: Any, session_id: str, scope: str,
               leaf_id: str | None) -> tuple[Scope, set[str]]:
        leaf = leaf_id or leaf_of(connection, session_id)
        if leaf is None and scope == "project":  # a session with no entry yet: no branch,
            return Scope(), set()  # but the project's history is searchable all the same
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

    def source(self, request: SourceRequest) -> SourceAnswer:
        """One entry and its neighbours for a decoded request (``request.parse_source``)."""
        entry_id, before, after = request.entry_id, request.before, request.after
        try:
            with self.reader.session(**request.names.as_dict()) as view:
                row = source_entry(view.connection, view.session_id, entry_id)
                earlier, later = ([], []) if row is None or not (before or after) else \
                    self._neighbours(view, entry_id, before, after)
        except (NotIndexed, OSError):
            return SourceAnswer(status="not-indexed")
        except IndexUnavailable as error:
            return SourceAnswer(status="disabled", warnings=[f"index unavailable: {error}"])
        if row is None:
            return SourceAnswer(status="not-found")
        rows = [*earlier, row, *later]
        entries = [{"entry_id": r.entry_id, "session_id": r.session_id, "type": r.type,
                    "role": r.role, "timestamp": r.timestamp,
                    "excerpt": quote(r.text, (), SOURCE_CHARS if r is row else NEIGHBOUR_CHARS)}
                   for r in rows]
        # One gate call: each row judged on its whole text, withheld ones listed (no text).
        shown, excluded = self.policy.apply(entries, request.provider,
                                            [r.text for r in rows])
        # Shown items are the gate's copies (classification added); ids are unique in a session.
        kept = {item["entry_id"]: msgspec.convert(item, SourceEntry) for item in shown}
        own = kept.get(row.entry_id)
        withheld = msgspec.convert(excluded, list[Withheld])
        if not (before or after):
            return SourceAnswer(status="ok" if own else "withheld", entry=own,
                                excluded=withheld)
        return SourceAnswer(status="ok" if own else "withheld", entry=own, excluded=withheld,
                            before=[kept[r.entry_id] for r in earlier if r.entry_id in kept],
                            after=[kept[r.entry_id] for r in later if r.entry_id in kept])

    def _neighbours(self, view: SessionView, entry_id: str, before: int,
                    after: int) -> tuple[list[Source], list[Source]]:
        """Up to ``before`` entries with text ahead of ``entry_id`` on its branch and up
        to ``after`` following it, in session order; summaries are left out."""
        connection, session_id = view.connection, view.session_id
        path = [e.entry_id for e in leaf_branch(connection, session_id, entry_id)]
        ahead = _with_text(connection, session_id, reversed(path[:-1]), before)[::-1]
        leaf = leaf_of(connection, session_id)
        current = [e.entry_id for e in self.reader.branch(connection, view.path, session_id,
                                                          leaf)] if leaf else []
        if entry_id in current:
            following: Iterator[str] = iter(current[current.index(entry_id) + 1:])
        else:
            following = _latest_continuation(connection, session_id, entry_id)
        return ahead, _with_text(connection, session_id, following, after)


def _with_text(connection: apsw.Connection, session_id: str, ids: Iterable[str],
               limit: int) -> list[Source]:
    """The first ``limit`` of ``ids`` that have text and may be evidence."""
    found: list[Source] = []
    for entry_id in ids:
        if len(found) >= limit:
            break
        row = source_entry(connection, session_id, entry_id)
        if row is not None and row.text and row.type not in INELIGIBLE_WITH_TEXT:
            found.append(row)
    return found


def _latest_continuation(connection: apsw.Connection, session_id: str,
                         entry_id: str) -> Iterator[str]:
    """From ``entry_id`` down its most recently appended child, then that one's, ..."""
    seen = {entry_id}
    current = entry_id
    while True:
        row = connection.execute(
            "SELECT entry_id FROM entries WHERE session_id = ? AND parent_id = ?"
            " ORDER BY seq DESC LIMIT 1", (session_id, current)).fetchone()
        if row is None or row[0] in seen:  # a cycle in a damaged file ends the walk
            return
        current = row[0]
        seen.add(current)
        yield current


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


def _result(item: Ranked) -> dict[str, Any]:
    row = item.row
    return {"entry_id": row.entry_id, "session_id": row.session_id, "role": row.role,
            "timestamp": row.timestamp, "tier": item.tier, "score": item.score,
            "reasons": item.reasons, "on_branch": item.on_branch,
            "excerpt": quote(row.text, item.matches, RESULT_CHARS)}

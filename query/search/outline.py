"""A session as the page shows it (``lookback serve --page``): its sessions, and one
session's tree with each compaction and what it removed from the model's context.

What a compaction removed is read from the tree, the way ``index.tree.context_entries``
builds the model's context (Pi's ``buildContextEntries()``): on the compaction's own
branch, the entries in context just before it that are not in context once it is there.
Ids, types, roles, times and token counts need no gate; each entry's short excerpt is
shown only when the privacy gate (``PrivacyPolicy.gate``, on the whole indexed text) admits
it for the provider, as every other path that returns text.
"""

from __future__ import annotations

from typing import Any

from lookback.index.store import IndexUnavailable
from lookback.index.tree import branch, context_entries, leaf_of
from lookback.query.privacy.policy import PrivacyPolicy
from lookback.query.search.reader import IndexReader, NotIndexed

#: Most entries of one session the tree lists (the newest are dropped beyond it).
MAX_TREE_ENTRIES = 3000
#: Most sessions of one project listed, the most recently updated first.
MAX_SESSIONS = 200
#: The characters of an entry's text its tree node shows (``source`` reads it whole).
EXCERPT_CHARS = 160


def list_sessions(reader: IndexReader, project: str) -> list[dict[str, Any]]:
    """The project's sessions, the most recently updated first (ids and counts only)."""
    with reader.session(project=project) as view:
        rows = view.connection.execute(
            "SELECT s.session_id, s.entry_count, s.started_at, s.updated_at, s.file,"
            " (SELECT count(*) FROM entries AS e WHERE e.session_id = s.session_id"
            "   AND e.type = 'compaction')"
            " FROM sessions AS s ORDER BY s.updated_at DESC LIMIT ?", (MAX_SESSIONS,))
        return [{"session_id": session_id, "entries": entries, "started_at": started,
                 "updated_at": updated, "file": file, "compactions": compactions}
                for session_id, entries, started, updated, file, compactions in rows]


def session_tree(reader: IndexReader, policy: PrivacyPolicy, *, project: str,
                 session_id: str, provider: str | None = None) -> dict[str, Any]:
    """The session's entries in append order (each with its parent, so the page draws
    the branches), its current leaf's branch, and its compactions with what each removed.

    Raises ``NotIndexed`` when the project or session is not in the index."""
    with reader.session(project=project, session_id=session_id) as view:
        connection = view.connection
        rows = list(connection.execute(  # a row read by iterating: typed by the SQL
            "SELECT entry_id, parent_id, type, role, timestamp, tokens, text FROM entries"
            " WHERE session_id = ? ORDER BY seq LIMIT ?",
            (session_id, MAX_TREE_ENTRIES + 1)))
        if not rows:
            raise NotIndexed("session not indexed")
        leaf = leaf_of(connection, session_id)
        current = branch(connection, session_id, leaf) if leaf else []
        in_context = {e.entry_id for e in context_entries(current)}
        compactions = [_compaction(connection, session_id, entry_id)
                       for entry_id, _, kind, *_ in rows if kind == "compaction"]
    truncated = len(rows) > MAX_TREE_ENTRIES
    on_branch = {e.entry_id for e in current}
    removed_by = {removed: c["entry_id"] for c in compactions for removed in c["removed"]}
    tokens = {row[0]: row[5] for row in rows}
    for found in compactions:
        found["on_branch"] = found["entry_id"] in on_branch
        found["removed_tokens"] = sum(tokens.get(e, 0) for e in found["removed"])
    entries = []
    for entry_id, parent_id, kind, role, timestamp, count, text in rows[:MAX_TREE_ENTRIES]:
        entry: dict[str, Any] = {
            "entry_id": entry_id, "parent_id": parent_id, "type": kind, "role": role,
            "timestamp": timestamp, "tokens": count, "on_branch": entry_id in on_branch,
            "in_context": entry_id in in_context, "removed_by": removed_by.get(entry_id),
            "excerpt": None}
        if text:
            _gate_excerpt(entry, text, policy, provider, EXCERPT_CHARS)
        entries.append(entry)
    return {"status": "ok", "session_id": session_id, "leaf_id": leaf,
            "entries": entries, "compactions": compactions, "truncated": truncated}


def _compaction(connection: Any, session_id: str, entry_id: str) -> dict[str, Any]:
    """One compaction and the entries of its branch it took out of the model's context."""
    path = branch(connection, session_id, entry_id)
    before = context_entries(path[:-1])
    after = {e.entry_id for e in context_entries(path)}
    removed = [e.entry_id for e in before if e.entry_id not in after]
    return {"entry_id": entry_id, "removed": removed,
            "kept": [e.entry_id for e in before if e.entry_id in after]}


def _shorten(text: str, chars: int = EXCERPT_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= chars else flat[:chars - 1] + "…"


def with_excerpts(reader: IndexReader, policy: PrivacyPolicy, record: dict[str, Any],
                  provider: str | None, chars: int = EXCERPT_CHARS) -> dict[str, Any]:
    """A copy of the manifest ``record`` whose items carry their excerpt, re-read from the
    index (the manifest stores no text).

    A row the gate does not admit for ``provider`` keeps its excerpt ``None`` and says
    why: ``withheld`` (its classification) and ``withheld_reason`` (the gate's, as the
    retrieval response's ``excluded`` words it)."""
    record = {**record, "items": [dict(item) for item in record.get("items", [])]}
    texts = _entry_texts(reader, record.get("project"),
                         [(i.get("session_id"), i.get("entry_id")) for i in record["items"]])
    for item in record["items"]:
        text = texts.get((item.get("session_id"), item.get("entry_id")))
        item["excerpt"] = None
        if text is not None:
            _gate_excerpt(item, text, policy, provider, chars)
    return record


def _gate_excerpt(shown: dict[str, Any], text: str, policy: PrivacyPolicy,
                  provider: str | None, chars: int) -> None:
    """Give ``shown`` the excerpt of ``text`` the gate admits for ``provider``, or say
    why it withholds it (``withheld``, ``withheld_reason``)."""
    verdict = policy.gate(text, provider)
    if verdict.admitted:
        shown["excerpt"] = _shorten(text, chars)
    else:
        shown["withheld"] = verdict.classification.label
        shown["withheld_reason"] = verdict.reason


def _entry_texts(reader: IndexReader, project: str | None,
                 keys: list[tuple[Any, Any]]) -> dict[tuple[str, str], str]:
    if not project or not keys:
        return {}
    found = {}
    try:  # the reader's connection: driver errors arrive as the project's
        with reader.session(project=project) as view:
            for session_id, entry_id in keys:
                row = view.connection.execute(
                    "SELECT text FROM entries WHERE session_id = ? AND entry_id = ?",
                    (session_id, entry_id)).fetchone()
                if row is not None:
                    found[(session_id, entry_id)] = row[0]
    except (NotIndexed, IndexUnavailable, OSError):  # gone or unreadable: no excerpts
        return {}
    return found

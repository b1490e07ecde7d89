"""Search: the retrieval pipeline over one project's committed index.

Reading indexes (connections, memos), the steps' shared types (``types``), candidate
SQL, ranking, the steps themselves (``pipeline``), automatic retrieval (and its
point-of-action rule, ``action``), explicit history search, the page's outline of a
session (``outline``), and the wire contract's request and answer types.

The public API is ``_EXPORTS`` below (the rule is in ``lookback.query``'s docstring).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lookback.query import lazy_exports

# What a type checker sees (``X as X``: re-exported); at run time each name loads on
# first use (``_EXPORTS``). tests/test_layers.py keeps the two the same.
if TYPE_CHECKING:
    from lookback.query.search.action import MAX_ACTION_RESULTS as MAX_ACTION_RESULTS
    from lookback.query.search.action import informative as informative
    from lookback.query.search.history import HistorySearch as HistorySearch
    from lookback.query.search.outline import list_sessions as list_sessions
    from lookback.query.search.outline import session_tree as session_tree
    from lookback.query.search.outline import with_excerpts as with_excerpts
    from lookback.query.search.pipeline import times_of as times_of
    from lookback.query.search.ranking import row_parts as row_parts
    from lookback.query.search.reader import IndexReader as IndexReader
    from lookback.query.search.reader import NotIndexed as NotIndexed
    from lookback.query.search.reader import SessionRef as SessionRef
    from lookback.query.search.retrieve import Retriever as Retriever
    from lookback.query.search.rows import rows_by_rowid as rows_by_rowid
    from lookback.query.search.types import Ranked as Ranked
    from lookback.query.search.types import Row as Row
    from lookback.query.search.types import Scope as Scope
    from lookback.query.search.types import Searched as Searched

#: Public name -> the module of this package that defines it.
_EXPORTS = {
    "Retriever": "retrieve",
    "HistorySearch": "history",
    "IndexReader": "reader",
    "NotIndexed": "reader",
    "SessionRef": "reader",
    "times_of": "pipeline",
    "Row": "types",
    "Scope": "types",
    "Searched": "types",
    "Ranked": "types",
    "rows_by_rowid": "rows",
    "row_parts": "ranking",
    "informative": "action",
    "MAX_ACTION_RESULTS": "action",
    "list_sessions": "outline",
    "session_tree": "outline",
    "with_excerpts": "outline",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)

"""Search: the retrieval pipeline over one project's committed index.

Reading indexes (connections, memos), the steps' shared types (``types``), candidate
SQL, ranking, the steps themselves (``pipeline``), automatic retrieval (and its
point-of-action rule, ``action``), explicit history
search, and the wire contract's request and answer types.

The public API is ``_EXPORTS`` below (the rule is in ``lookback.query``'s docstring).
"""

from __future__ import annotations

from lookback.query import lazy_exports

#: Public name -> the module of this package that defines it.
_EXPORTS = {
    "Retriever": "retrieve",
    "HistorySearch": "history",
    "IndexReader": "reader",
    "NotIndexed": "reader",
    "times_of": "pipeline",
    "Row": "types",
    "Scope": "types",
    "Searched": "types",
    "Ranked": "types",
    "rows_by_rowid": "rows",
    "row_parts": "ranking",
    "informative": "action",
    "MAX_ACTION_RESULTS": "action",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)

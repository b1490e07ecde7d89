"""The do-not-index marker: ``<private>…</private>`` in a session's text is never indexed.

What a user (or an agent) wraps in ``<private>`` and ``</private>`` is taken out of the
entry's text before it becomes an event (``ingest.reader``), so it reaches no event log,
index, vector, cache or answer; the rest of the entry stays searchable. The tags are
case-insensitive; an opening tag never closed hides the rest of the entry (the safe
side); a tag written with a backslash before it (``\\<private>``) is literal text and
stays as written. docs/data-controls.md says the same for users.
"""

from __future__ import annotations

import regex

PRIVATE = regex.compile(r"(?<!\\)<private>.*?(?:(?<!\\)</private>|\Z)",
                        regex.IGNORECASE | regex.DOTALL)


def strip_private(text: str) -> str:
    """``text`` without its ``<private>`` spans (markers included)."""
    if "<" not in text:  # the common case, without a regular expression
        return text
    return PRIVATE.sub("", text)

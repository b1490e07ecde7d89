"""Point-of-action evidence: which ranked candidates say something about a tool call's
subjects (docs/specification.md, "Point-of-action evidence").

A tool call's query (``query.text.tool_calls``) holds only literal subjects, so the
pipeline already ranks its candidates as for any message, over the branch minus the
context (a file whose history the model still has gets nothing from there). On top of the
confidence floor a candidate is *informative* when

1. it matched a subject as written (tier ``identifier`` or ``phrase``): a shared word is
   no reason to interrupt a tool call;
2. it is not a listing — a directory listing, ``git status``, a search's file list —
   where the file is one name among many (``is_listing``);
3. it carries more than the mention: once paths, the subjects and a tool call's own
   scaffolding (``Read {"file_path": …}``) are set aside, ``MIN_CONTENT_WORDS`` words of
   its own remain (``content_words``): an earlier decision, an error, an edit's text.

At most ``MAX_ACTION_RESULTS`` come back: a tool call gets a few lines, not a history.
"""

from __future__ import annotations

import regex

from lookback.query.search.types import Ranked
from lookback.query.text import is_stopword

MAX_ACTION_RESULTS = 3
MIN_CONTENT_WORDS = 3
#: A text of at least ``LISTING_LINES`` non-empty lines, ``LISTING_SHARE`` of them one bare
#: path or file name each, is a listing.
LISTING_LINES, LISTING_SHARE = 5, 0.6
#: The words of a tool call's own scaffolding: the names and argument keys of the
#: read, search and shell tools of Claude Code, Codex and Pi.
SCAFFOLD_WORDS = frozenset({
    "read", "glob", "grep", "bash", "edit", "write", "multiedit", "notebookedit", "find",
    "file", "path", "notebook", "pattern", "offset", "limit", "command", "cmd",
    "description", "output", "mode", "head", "tail", "cat", "show", "list", "view",
    "contents", "content", "files", "exec", "shell", "workdir", "timeout", "type",
})
_PATHLIKE = regex.compile(r"/|^[A-Za-z]:\\|^[\w.-]+\.\w{1,8}[\"',:;)}\]]*$")
#: A tool call's arguments are indexed as JSON: its escapes separate words too.
_ESCAPE = regex.compile(r"\\[nrt\"]")
_WORD = regex.compile(r"[^\W\d_]{3,}")
_BARE_PATH = regex.compile(r"^[\s\"'-]*[\w./\\-]+\.?\w*[\"',]*\s*$")


def informative(ranked: list[Ranked], subjects: tuple[str, ...]) -> list[Ranked]:
    """The candidates worth showing at a tool call, in rank order, at most
    ``MAX_ACTION_RESULTS`` (their texts must be loaded)."""
    chosen = []
    for item in ranked:
        text = item.row.text or ""
        if item.tier == "other" or is_listing(text) or \
                content_words(text, subjects) < MIN_CONTENT_WORDS:
            continue
        chosen.append(item)
        if len(chosen) == MAX_ACTION_RESULTS:
            break
    return chosen


def is_listing(text: str) -> bool:
    """Whether ``text`` is mostly one path or file name a line (``ls``, ``git status``)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < LISTING_LINES:
        return False
    bare = sum(1 for line in lines if _BARE_PATH.match(line)
               or (len(line.split()) <= 3 and _PATHLIKE.search(line.split()[-1])))
    return bare >= LISTING_SHARE * len(lines)


def content_words(text: str, subjects: tuple[str, ...]) -> int:
    """How many words ``text`` says besides the subjects, paths and tool scaffolding."""
    for subject in subjects:
        text = text.replace(subject, " ")
    text = _ESCAPE.sub(" ", text)
    count = 0
    for token in text.split():
        if _PATHLIKE.search(token):
            continue
        for word in _WORD.findall(token):
            folded = word.casefold()
            if folded not in SCAFFOLD_WORDS and not is_stopword(folded):
                count += 1
    return count

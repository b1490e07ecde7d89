"""Match verification: which query terms a stored entry's text really contains.

FTS5 finds candidates; this module decides, on the candidate's own text, which terms
it matches and where (spec step 7: a lexical-only row needs a verified identifier,
phrase or FTS term match; step 8: match accounting uses word boundaries and Latin
accent folding, and a keyword that is only a prefix of a longer word does not count).

Two kinds of match:

* **literal** — the term's text, case-sensitive and as written, not glued inside a
  longer identifier (``parse_config`` is not in ``parse_config_v2``). Only literal
  terms (identifiers, paths, errors, flags, phrases) can match this way, and only a
  literal match puts a row in the "exact identifier" or "exact phrase" tier.
* **folded** — the term's words in order, ignoring case, accents and punctuation
  between them, on Unicode word boundaries: what FTS5 itself would match
  (``config`` matches ``Config.`` but not ``configuration``). Keywords and
  technologies match this way; a literal term not found literally may still match
  this way, which counts as an FTS term match.

Build one ``TermMatcher`` per query and apply it to every candidate text (up to 1 MB
each): patterns are prepared once, each text is folded once, and scanning uses
``str.find``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import regex

from query.normalize import WORD_CHARS, FoldedText, find_bounded, fold, is_word_char
from query.terms import QueryTerms, Term

#: A token as the index tokenizer sees it (``unicode61 tokenchars '_'``).
_TOKEN = regex.compile(r"[\p{L}\p{N}\p{Co}_]+")
_BETWEEN_TOKENS = rf"[^{WORD_CHARS}]+"


class Match(NamedTuple):
    """One verified term in a text: where it first occurs, and how it matched."""

    term: Term
    position: int
    literal: bool


def find_literal(text: str, literal: str) -> int | None:
    """Position of the first case-sensitive occurrence of ``literal`` not glued in a word.

    >>> find_literal("call parse_config_v2 then parse_config()", "parse_config")
    26
    """
    return find_bounded(text, literal)


class _FoldedPattern:
    """A term's folded tokens, found in order with only separators between them."""

    __slots__ = ("first", "rest")

    def __init__(self, tokens: list[str]) -> None:
        self.first = tokens[0]
        self.rest = None
        if len(tokens) > 1:
            tail = "".join(_BETWEEN_TOKENS + regex.escape(token) for token in tokens[1:])
            self.rest = regex.compile(tail + rf"(?![{WORD_CHARS}])")

    @classmethod
    def for_text(cls, text: str) -> _FoldedPattern | None:
        tokens = _TOKEN.findall(fold(text))
        return cls(tokens) if tokens else None

    def search(self, folded: str) -> int | None:
        if self.rest is None:
            return find_bounded(folded, self.first)
        start = 0
        while (position := _find_left_bounded(folded, self.first, start)) is not None:
            if self.rest.match(folded, position + len(self.first)):
                return position
            start = position + 1
        return None


def _find_left_bounded(haystack: str, needle: str, start: int) -> int | None:
    """Like ``find_bounded`` but only the left edge must be a word boundary."""
    position = haystack.find(needle, start)
    while position != -1:
        if position == 0 or not is_word_char(haystack[position - 1]):
            return position
        position = haystack.find(needle, position + 1)
    return None


def find_keyword(text: str, keyword: str) -> int | None:
    """Position of the first folded, whole-word occurrence of ``keyword`` in ``text``.

    >>> find_keyword("La Configurazione e la CONFIG", "config")
    23
    >>> find_keyword("Perché?", "perche")
    0
    """
    pattern = _FoldedPattern.for_text(keyword)
    if pattern is None:
        return None
    folded = FoldedText(text)
    position = pattern.search(folded.folded)
    return None if position is None else folded.original_position(position)


class TermMatcher:
    """Verifies the terms of one query against many candidate texts."""

    def __init__(self, terms: QueryTerms | Iterable[Term]) -> None:
        self.terms: tuple[Term, ...] = tuple(terms)
        self._folded = [_FoldedPattern.for_text(term.text) for term in self.terms]

    def match(self, text: str) -> list[Match]:
        """Every term found in ``text``, in query order, with its first position.

        A literal term found as written is a ``literal`` match; otherwise any term
        found folded (words in order, word boundaries) is a non-literal match.
        """
        folded: FoldedText | None = None
        matches: list[Match] = []
        for term, pattern in zip(self.terms, self._folded, strict=True):
            if term.is_literal:
                position = find_literal(text, term.text)
                if position is not None:
                    matches.append(Match(term, position, True))
                    continue
            if pattern is None:
                continue
            if folded is None:
                folded = FoldedText(text)
            position = pattern.search(folded.folded)
            if position is not None:
                matches.append(Match(term, folded.original_position(position), False))
        return matches

    def first_position(self, text: str) -> int | None:
        """Where the earliest matched term starts (to centre an excerpt), if any."""
        positions = [found.position for found in self.match(text)]
        return min(positions) if positions else None


def matched_terms(text: str, terms: QueryTerms | Iterable[Term]) -> list[tuple[Term, int]]:
    """``(term, position)`` for every term of ``terms`` found in ``text`` (see ``TermMatcher``).

    For many texts, build one ``TermMatcher`` instead.
    """
    return [(found.term, found.position) for found in TermMatcher(terms).match(text)]

"""Match verification: which query terms a stored entry's text really contains.

FTS5 finds candidates; this module decides, on the candidate's own text, which terms
it matches and where (docs/specification.md step 7: a lexical-only row needs a verified identifier,
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

from collections.abc import Callable, Iterable
from typing import NamedTuple

import regex
from lookback.query.text.normalize import WORD_CHARS, FoldedText, find_bounded, fold
from lookback.query.text.terms import QueryTerms, Term

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
    """A term's folded tokens, found in order with only separators between them,
    on word boundaries — one compiled regex, so the scan runs in C."""

    __slots__ = ("pattern",)

    def __init__(self, tokens: list[str]) -> None:
        body = _BETWEEN_TOKENS.join(regex.escape(token) for token in tokens)
        self.pattern = regex.compile(rf"(?<![{WORD_CHARS}]){body}(?![{WORD_CHARS}])")

    @classmethod
    def for_text(cls, text: str) -> _FoldedPattern | None:
        tokens = _TOKEN.findall(fold(text))
        return cls(tokens) if tokens else None

    def search(self, folded: str) -> int | None:
        found = self.pattern.search(folded)
        return None if found is None else found.start()


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

    def match(self, text: str,
              fold_text: Callable[[str], FoldedText] = FoldedText) -> list[Match]:
        """Every term found in ``text``, in query order, with its first position.

        A literal term found as written is a ``literal`` match; otherwise any term
        found folded (words in order, word boundaries) is a non-literal match.
        ``fold_text`` may hand back a memoized ``FoldedText`` of the same text.
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
                folded = fold_text(text)
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

"""Match verification: which query terms a stored entry's text really contains.

docs/specification.md step 7: a lexical-only row needs a verified identifier, phrase
or FTS term match; step 8: match accounting uses word boundaries and Latin accent
folding, and a keyword that is only a prefix of a longer word does not count.

Two kinds of match:

* **literal** — the term's text, case-sensitive and as written, not glued inside a
  longer identifier (``parse_config`` is not in ``parse_config_v2``). Only literal
  terms (identifiers, paths, errors, flags, phrases) can match this way, and only a
  literal match puts a row in the "exact identifier" or "exact phrase" tier.
* **folded** — the term's words in order, ignoring case, accents and punctuation
  between them, on word boundaries, each word or one of its forms (the same Porter
  stem): what FTS5 itself matches (``config`` matches ``Config.`` but not
  ``configuration``; ``reminder`` matches ``reminded``). A keyword with an Italian
  stem also matches a word whose Porter token starts with its form prefix
  (``fts_query.form_prefix``: ``schermate`` matches ``schermata``). Keywords and
  technologies match this way; a literal term not found literally may still match
  this way, which counts as an FTS term match.

Retrieval verifies inside SQL (``query.search.searches``): folded matches are the
phrases FTS5 itself matched, literal matches use ``find_literal`` on the rows that
made the ``LIMIT``. ``PhraseFinder`` then centres the excerpts of the items returned.
``TermMatcher`` is the same definition on a text in Python — the reference that
tests/test_sql_verification.py holds the SQL to, on the fixtures' real messages.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import regex

from lookback.query.text.fts_query import (
    form_prefix,
    stemmed_phrase,
    stemmed_spans,
    token_spans,
)
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


def _is_token_char(char: str) -> bool:
    # unicode61 with remove_diacritics: letters, numbers, ``_`` and (folded away) marks.
    if char.isalnum() or char == "_":
        return True
    category = unicodedata.category(char)
    return category[0] == "M" or category == "Co"


def _find_lowered(lowered: str, tokens: Sequence[str]) -> int | None:
    """Phrase search on lower-cased text with ``str.find`` (tokens of ASCII or kept case)."""
    first, size = tokens[0], len(lowered)
    position = lowered.find(first)
    while position != -1:
        end = position + len(first)
        if (position == 0 or not _is_token_char(lowered[position - 1])) and (
                end == size or not _is_token_char(lowered[end])):
            for token in tokens[1:]:
                while end < size and not _is_token_char(lowered[end]):
                    end += 1
                if not lowered.startswith(token, end):
                    break
                end += len(token)
                if end < size and _is_token_char(lowered[end]):
                    break
            else:
                return position
        position = lowered.find(first, position + 1)
    return None


def _find_in_spans(text: str, spans: list[tuple[int, int, str]],
                   tokens: Sequence[str], words: list[str] | None = None) -> int | None:
    """``words``: the spans' tokens alone, if the caller keeps them (several lookups)."""
    count = len(tokens)
    words = [token for _, _, token in spans] if words is None else words
    first, wanted = tokens[0], list(tokens)
    index = -1
    while True:
        try:  # list.index scans in C: texts hold thousands of tokens
            index = words.index(first, index + 1)
        except ValueError:
            return None
        if words[index:index + count] == wanted:
            data = text.encode("utf-8", "replace")
            return len(data[:spans[index][0]].decode("utf-8", "replace"))


def _find_form_lowered(lowered: str, stem: str) -> int | None:
    """A word of lower-cased ASCII text whose Porter stem is ``stem``: the words that
    start like the stem (``str.find``, in C) are stemmed, not the whole text."""
    prefix, size = stem[:-1] if len(stem) > 3 else stem, len(lowered)
    position = lowered.find(prefix)
    while position != -1:
        if position == 0 or not _is_token_char(lowered[position - 1]):
            end = position + len(prefix)
            while end < size and _is_token_char(lowered[end]):
                end += 1
            if stemmed_phrase(lowered[position:end]) == (stem,):
                return position
        position = lowered.find(prefix, position + 1)
    return None


#: Every ASCII character but these separates tokens for unicode61 (``tokenchars '_'``),
#: so a text cut next to one tokenizes as it does whole.
_ASCII_TOKEN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_NON_ASCII = regex.compile(r"[^\x00-\x7f]+")
#: Characters read on either side of a run of non-ASCII characters (see
#: ``_find_near_non_ascii``), widened while they hold too few tokens; past
#: ``MAX_NEAR_SHARE`` of the text, the whole text is tokenized instead.
NEAR_CHARS, MAX_NEAR_SHARE = 160, 0.5


def _find_near_non_ascii(text: str, tokens: Sequence[str]) -> tuple[bool, int | None]:
    """Where ``tokens`` first occur in ``text`` when ``_find_lowered`` found them nowhere,
    reading only the text around its non-ASCII characters: (True, position or None);
    (False, None) when those parts are most of the text (the caller tokenizes it whole).

    The same answer as the whole text's tokens (``_find_in_spans``): an occurrence whose
    tokens, the separators between them and the character on either side are all ASCII
    is one ``_find_lowered`` finds (for ASCII, its token characters and lower case are
    unicode61's), so any other holds or touches a non-ASCII character. Each run of those
    is read with enough text around it to hold ``len(tokens)`` whole tokens on either
    side (or up to the text's ends), cut next to ASCII separators, where unicode61's
    tokens are the whole text's; overlapping parts are read as one.
    """
    count, size = len(tokens), len(text)
    runs: list[list[int]] = []  # [first non-ASCII, last non-ASCII + 1], close ones joined
    for run in _NON_ASCII.finditer(text):
        start, end = run.span()
        if runs and start - runs[-1][1] <= NEAR_CHARS:
            runs[-1][1] = end
        else:
            runs.append([start, end])
    windows: list[tuple[int, int, list[tuple[int, int, str]] | None]] = []
    budget, read = int(size * MAX_NEAR_SHARE), 0
    for first, last in runs:
        start, end, near = _near_window(text, first, last, count)
        read += end - start
        if read > budget:
            return False, None
        if windows and start <= windows[-1][1]:  # overlapping: read as one part
            read -= min(end, windows[-1][1]) - start
            windows[-1] = (windows[-1][0], max(end, windows[-1][1]), None)
        else:
            windows.append((start, end, near))
    for start, end, spans in windows:
        part = text[start:end]
        found = _find_in_spans(part, token_spans(part) if spans is None else spans, tokens)
        if found is not None:
            return True, start + found
    return True, None


def _near_window(text: str, first: int, last: int, count: int
                 ) -> tuple[int, int, list[tuple[int, int, str]]]:
    """The part of ``text`` around ``text[first:last]`` with at least ``count`` whole
    tokens before ``first`` and after ``last`` (or reaching the text's ends), cut at
    ASCII separators, and its tokens."""
    size, width = len(text), NEAR_CHARS
    while True:
        start, end = max(0, first - width), min(size, last + width)
        while start > 0 and not _ascii_separator(text[start - 1]):
            start -= 1
        while end < size and not _ascii_separator(text[end]):
            end += 1
        before = len(text[start:first].encode("utf-8", "replace"))
        after = before + len(text[first:last].encode("utf-8", "replace"))
        spans = token_spans(text[start:end])
        if (start == 0 or sum(1 for _, stop, _ in spans if stop <= before) >= count) and (
                end == size or sum(1 for begin, _, _ in spans if begin >= after) >= count):
            return start, end, spans
        width *= 4


def _ascii_separator(char: str) -> bool:
    return char.isascii() and char not in _ASCII_TOKEN_CHARS


class PhraseFinder:
    """Finds where folded phrases occur in one text, as FTS5 matches a phrase.

    Used to centre an excerpt, only for the items returned: FTS5 itself already
    decided which rows match. Lower-cased text with ``str.find`` answers most
    lookups; a phrase not found so (its text has accents, say) is looked up in the
    text's tokens from SQLite's own tokenizer, computed at most once.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        lowered = text.lower()
        self._lowered = lowered if len(lowered) == len(text) else None
        self._spans: list[tuple[int, int, str]] | None = None
        self._stems: list[tuple[int, int, str]] | None = None
        self._words: list[str] = []
        self._stem_words: list[str] = []

    def find(self, tokens: Sequence[str]) -> int | None:
        """Position (in ``text``) of the first occurrence of ``tokens``, if any.

        >>> PhraseFinder("see SRC/main.ts, then src/main.ts").find(["src", "main", "ts"])
        4
        >>> PhraseFinder("un re\u0301sume\u0301 court").find(["resume"])
        3
        """
        if not tokens:
            return None
        found = None
        if self._lowered is not None:
            found = _find_lowered(self._lowered, tokens)
            if found is not None or self.text.isascii():
                return found
            if self._spans is None:  # the whole text's tokens: not read yet
                bounded, found = _find_near_non_ascii(self.text, tokens)
                if bounded:
                    return found
        if self._spans is None:
            self._spans = token_spans(self.text)
            self._words = [token for _, _, token in self._spans]
        return _find_in_spans(self.text, self._spans, tokens, self._words)

    def find_form(self, tokens: Sequence[str], prefix: str | None = None) -> int | None:
        """Where the same words occur in another form (their Porter stems), if anywhere;
        with ``prefix`` (an Italian keyword's ``form_prefix``), also a word whose
        Porter token starts with it.

        >>> PhraseFinder("she reminded me").find_form(["reminder"])
        4
        >>> PhraseFinder("tre schermata").find_form(["schermate"], "scherm")
        4
        """
        stems = stemmed_phrase(" ".join(tokens))
        if not stems:
            return None
        if prefix is None and len(stems) == 1 and self._lowered is not None \
                and self.text.isascii():
            return _find_form_lowered(self._lowered, stems[0])
        if self._stems is None:
            self._stems = stemmed_spans(self.text)
            self._stem_words = [token for _, _, token in self._stems]
        found = _find_in_spans(self.text, self._stems, stems, self._stem_words)
        if found is None and prefix is not None:
            for index, word in enumerate(self._stem_words):
                if word.startswith(prefix):
                    data = self.text.encode("utf-8", "replace")
                    return len(data[:self._stems[index][0]].decode("utf-8", "replace"))
        return found


def find_phrase(text: str, tokens: Sequence[str]) -> int | None:
    """Where ``tokens`` (folded, as the index stores them) first occur in ``text``.

    >>> find_phrase("un résumé court", ["resume"])
    3
    """
    return PhraseFinder(text).find(tokens)


class _FoldedPattern:
    """A term's folded tokens, found in order with only separators between them,
    on word boundaries — one compiled regex, so the scan runs in C."""

    __slots__ = ("pattern", "tokens")

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        body = _BETWEEN_TOKENS.join(regex.escape(token) for token in tokens)
        self.pattern = regex.compile(rf"(?<![{WORD_CHARS}]){body}(?![{WORD_CHARS}])")

    @classmethod
    def for_text(cls, text: str) -> _FoldedPattern | None:
        tokens = _TOKEN.findall(fold(text))
        return cls(tokens) if tokens else None

    def search(self, folded: str) -> int | None:
        found = self.pattern.search(folded)
        return None if found is None else found.start()


class TermMatcher:
    """Verifies the terms of one query against many candidate texts."""

    def __init__(self, terms: QueryTerms | Iterable[Term]) -> None:
        self.terms: tuple[Term, ...] = tuple(terms)
        self._folded = [_FoldedPattern.for_text(term.text) for term in self.terms]

    def match(self, text: str,
              fold_text: Callable[[str], FoldedText] = FoldedText) -> list[Match]:
        """Every term found in ``text``, in query order, with its first position.

        A literal term found as written is a ``literal`` match; otherwise any term
        found folded (words in order, word boundaries, or their forms) is a
        non-literal match.
        ``fold_text`` may hand back a memoized ``FoldedText`` of the same text.

        >>> [(m.term.text, m.position) for m in TermMatcher(
        ...     [Term("config", "keyword")]).match("La Configurazione e la CONFIG")]
        [('config', 23)]
        """
        folded: FoldedText | None = None
        forms: PhraseFinder | None = None
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
                continue
            forms = forms or PhraseFinder(text)
            position = forms.find_form(pattern.tokens, form_prefix(term))
            if position is not None:
                matches.append(Match(term, position, False))
        return matches

"""Folding text for lookups: case-, accent- and compatibility-insensitive, Latin only.

Stopword lookup and keyword matching compare *folded* text, so that ``Perché``,
``PERCHE`` and ``perche`` are one word and ``ｃｏｎｆｉｇ`` (full width) is ``config``.
Folding is only ever used to *compare*: the terms searched, the query text and the
stored text are never replaced by their folded form.

``fold`` works character by character (NFKC, then casefold, then Latin letters to
ASCII with ``unidecode``). Working per character keeps two promises:

* only Latin letters lose their accents; Greek, Cyrillic, CJK and emoji keep their
  characters (``unidecode`` would turn ``配置`` into ``Pei Zhi``);
* ``fold_with_offsets`` can map a position in the folded text back to the original
  text, which the excerpt builder needs to centre an excerpt on a keyword match.

Pure-ASCII text, the common case, takes a fast path (``str.lower``).
"""

from __future__ import annotations

import unicodedata
from bisect import bisect_right
from functools import lru_cache

import regex
from unidecode import unidecode

#: Characters that make up a word for boundary checks: letters, marks, numbers and
#: ``_`` (the index tokenizer keeps ``_`` inside tokens, so ``parse_config_v2`` is one
#: word and ``parse_config`` is not a word of it).
WORD_CHARS = r"\p{L}\p{M}\p{N}_"

_NON_ASCII_RUN = regex.compile(r"[^\x00-\x7f]+")
_COMBINING_DIACRITICS = range(0x0300, 0x0370)


@lru_cache(maxsize=8192)
def fold_char(char: str) -> str:
    """Fold one character; may return zero, one or several characters."""
    if char.isascii():
        return char.lower()
    out = []
    for piece in unicodedata.normalize("NFKC", char).casefold():
        if piece.isascii():
            out.append(piece)
        elif ord(piece) in _COMBINING_DIACRITICS:
            continue  # a detached accent (from decomposed text): drop it like FTS does
        elif _is_latin_letter(piece):
            out.append(unidecode(piece).lower() or piece)
        else:
            out.append(piece)
    return "".join(out)


def _is_latin_letter(char: str) -> bool:
    return char.isalpha() and unicodedata.name(char, "").startswith("LATIN ")


def fold(text: str) -> str:
    """Return ``text`` folded for comparison (NFKC, casefold, Latin accents removed).

    >>> fold("Perché NON funziona?")
    'perche non funziona?'
    """
    if text.isascii():
        return text.lower()
    return "".join(fold_char(char) for char in text)


class FoldedText:
    """A text folded once, with a map from folded positions back to the original.

    Build it once per candidate text and search it for many keywords. For ASCII text
    the map is the identity and costs nothing.
    """

    __slots__ = ("original", "folded", "_folded_starts", "_original_starts", "_linear")

    def __init__(self, original: str) -> None:
        self.original = original
        if original.isascii():
            self.folded = original.lower()
            self._folded_starts: list[int] | None = None
            return
        # Anchors map folded positions back. ASCII and every character that folds to
        # exactly one character keep positions aligned, so one linear anchor covers
        # them; only characters that fold to zero or several need anchors of their own.
        pieces: list[str] = []
        folded_starts: list[int] = [0]
        original_starts: list[int] = [0]
        linear: list[bool] = [True]
        folded_len = 0
        ascii_from = 0
        for run in _NON_ASCII_RUN.finditer(original):
            if run.start() > ascii_from:
                chunk = original[ascii_from : run.start()].lower()
                pieces.append(chunk)
                folded_len += len(chunk)
            for offset, char in enumerate(run.group()):
                folded_char = fold_char(char)
                pieces.append(folded_char)
                if len(folded_char) == 1:
                    folded_len += 1
                    continue
                position = run.start() + offset
                folded_starts += [folded_len, folded_len + len(folded_char)]
                original_starts += [position, position + 1]
                linear += [False, True]
                folded_len += len(folded_char)
            ascii_from = run.end()
        if ascii_from < len(original):
            pieces.append(original[ascii_from:].lower())
        self.folded = "".join(pieces)
        self._folded_starts = folded_starts
        self._original_starts = original_starts
        self._linear = linear

    def original_position(self, folded_position: int) -> int:
        """Map a position in ``folded`` to the position of the same text in ``original``."""
        if self._folded_starts is None:
            return folded_position
        index = bisect_right(self._folded_starts, folded_position) - 1
        if index < 0:
            return 0
        start = self._original_starts[index]
        if self._linear[index]:
            return start + (folded_position - self._folded_starts[index])
        return start


def is_word_char(char: str) -> bool:
    """True for characters that continue a word (letters, marks, numbers, ``_``)."""
    if char.isascii():  # the common case, without a category lookup
        return char == "_" or char.isalnum()
    return char.isalnum() or unicodedata.category(char).startswith("M")


def find_bounded(haystack: str, needle: str, start: int = 0) -> int | None:
    """First position of ``needle`` in ``haystack`` that is not glued inside a longer word.

    An end of ``needle`` that is a word character must not touch another word
    character in ``haystack``: ``parse_config`` is not found in ``parse_config_v2``
    and ``config`` is not found in ``configuration``. Plain ``str.find`` does the
    scanning, so this is fast on long texts.
    """
    if not needle:
        return None
    check_left = is_word_char(needle[0])
    check_right = is_word_char(needle[-1])
    position = haystack.find(needle, start)
    while position != -1:
        end = position + len(needle)
        glued_left = check_left and position > 0 and is_word_char(haystack[position - 1])
        glued_right = check_right and end < len(haystack) and is_word_char(haystack[end])
        if not glued_left and not glued_right:
            return position
        position = haystack.find(needle, position + 1)
    return None

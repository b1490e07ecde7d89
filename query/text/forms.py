"""Italian word forms: which words of a message are Italian, and their Snowball stems.

The index stems with SQLite's ``porter`` tokenizer, which knows English only: it gives
``schermata`` and ``schermate``, ``funziona`` and ``funzionava`` different tokens (or
none of the shared stem Italian needs). Rebuilding every index with another
tokenizer would cost each user a reindex and lose English's stems, so Italian forms
are found on the query side instead (docs/specification.md, step 8, "Word forms"):

* a message is Italian when more of its grammar words are Italian-only than
  English-only (``message_language``: the two stopword lists of
  ``query/text/data``, a word on both lists counts for neither);
* each keyword of an Italian message gets its Snowball Italian stem (PyStemmer,
  ``italian_stem``: ``schermate`` -> ``scherm``, ``sessioni`` -> ``session``), when
  the stemmer shortens the word and the stem keeps at least ``MIN_STEM_CHARS``
  characters (``file`` -> ``fil`` would find ``filter``);
* ``query.text.fts_query`` searches that stem as an FTS5 prefix of the Porter tokens
  the index holds (``form_prefix``), and ranking counts the terms of one stem as one
  topic, as it does for English forms.

Identifiers, paths, errors, flags, quoted phrases and technologies are never stemmed:
they stay literal and case-sensitive (step 3). English messages are untouched.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from functools import cache, lru_cache

import Stemmer

from lookback.query.text.normalize import fold
from lookback.query.text.stopwords import read_word_list

ITALIAN = "it"
ENGLISH = "en"
#: A shorter stem is too broad a prefix (``fil``, ``cas``, ``temp``): such a word
#: matches as written, with Porter's forms only.
MIN_STEM_CHARS = 5

_LOCK = threading.Lock()  # a PyStemmer stemmer is not thread-safe
_ITALIAN_STEMMER = Stemmer.Stemmer("italian")


@cache
def _grammar_words() -> dict[str, str]:
    """Folded stopword -> its language, for the words on one list only."""
    english = read_word_list("stopwords_en.txt")
    italian = read_word_list("stopwords_it.txt")
    return {**{word: ENGLISH for word in english - italian},
            **{word: ITALIAN for word in italian - english}}


def message_language(words: Iterable[str]) -> str | None:
    """``"it"`` or ``"en"``: the language more of ``words`` are grammar words of (None:
    a tie, or none).

    >>> message_language("che tipo di test avevo detto di accettare".split())
    'it'
    >>> message_language("did I want mock-based unit tests for the session".split())
    'en'
    """
    grammar = _grammar_words()
    votes = {ITALIAN: 0, ENGLISH: 0}
    for word in words:
        language = grammar.get(fold(word))
        if language is not None:
            votes[language] += 1
    if votes[ITALIAN] == votes[ENGLISH]:
        return None
    return ITALIAN if votes[ITALIAN] > votes[ENGLISH] else ENGLISH


@lru_cache(maxsize=4096)
def italian_stem(word: str) -> str | None:
    """The folded Snowball Italian stem of ``word``, when it is a shorter form of at least
    ``MIN_STEM_CHARS`` characters; None otherwise (the word matches as written).

    >>> italian_stem("schermate"), italian_stem("Sessioni"), italian_stem("file")
    ('scherm', 'session', None)
    """
    lowered = word.lower()
    with _LOCK:
        stem = _ITALIAN_STEMMER.stemWord(lowered)
    folded = fold(stem)
    if len(folded) < MIN_STEM_CHARS or folded == fold(lowered):
        return None
    return folded

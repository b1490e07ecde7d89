"""Which words are not topic evidence: Italian and English stopwords, plus technologies.

Two small, reviewed lists in ``query/text/data/`` (docs/specification.md, step 2):
``stopwords_en.txt`` and ``stopwords_it.txt`` hold each language's grammar (articles,
pronouns, auxiliaries, prepositions, conjunctions, question words) and what a person
types to a coding agent around a topic: workflow words, acknowledgements and generic
requests to finish or continue ("ok grazie, vai pure" has no topic). Content words
are never listed, however frequent ("room", "year", "working", "schermate"): how
much a common word counts is decided by its rarity in the index
(``query.search.ranking``), not by dropping it here. ``technologies.txt`` lists
technologies (python, sqlite, redis...), reported as their own term kind and never
treated as stopwords.

Every list is folded (see ``query.text.normalize.fold``) when loaded, and every lookup
folds the word, so lookup ignores case, accents and compatibility forms.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from lookback.query.text.normalize import fold

LANGUAGES = ("en", "it")


def read_word_list(name: str) -> frozenset[str]:
    """Read ``query/text/data/<name>``: one entry per line, ``#`` comments, folded."""
    text = files("lookback.query.text").joinpath("data", name).read_text(encoding="utf-8")
    words = set()
    for line in text.splitlines():
        entry = line.split("#", 1)[0].strip()
        if entry:
            words.add(fold(entry))
    return frozenset(words)


@cache
def stopword_set() -> frozenset[str]:
    """The folded stopwords of every language, minus the technologies."""
    words: set[str] = set()
    for language in LANGUAGES:
        words |= read_word_list(f"stopwords_{language}.txt")
    words -= technology_set()
    return frozenset(words)


@cache
def technology_set() -> frozenset[str]:
    """The folded names of the curated technologies."""
    return read_word_list("technologies.txt")


def is_stopword(word: str) -> bool:
    """True if ``word`` is not topic evidence (grammar, workflow, acknowledgement).

    >>> is_stopword("Perché"), is_stopword("GRAZIE"), is_stopword("schermate")
    (True, True, False)
    """
    return fold(word.strip()) in stopword_set()


def is_technology(word: str) -> bool:
    """True if ``word`` names a curated technology (``Python``, ``SQLite``, ``node.js``)."""
    return fold(word.strip()) in technology_set()

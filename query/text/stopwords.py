"""Which words are not topic evidence: Italian and English stopwords, plus technologies.

The base is the stopwords-iso collection (``stopwordsiso`` on PyPI, MIT) for English
and Italian grammar. Our own data files in ``query/text/data/`` adjust it for a coding
conversation:

* ``stopwords_en.txt`` / ``stopwords_it.txt`` add workflow words, acknowledgements and
  generic requests to finish or continue ("ok grazie, vai pure" has no topic);
* ``not_stopwords.txt`` removes words the prose-oriented base lists drop but that name
  the topic when talking to a coding agent ("index", "test", "value", "page");
* ``technologies.txt`` lists technologies (python, sqlite, redis...), reported as their
  own term kind and never treated as stopwords.

Every list is folded (see ``query.normalize.fold``) when loaded, and every lookup
folds the word, so lookup ignores case, accents and compatibility forms.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

import stopwordsiso
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
    """The folded stopwords: base lists + our additions - topic words - technologies."""
    words = {fold(word) for word in stopwordsiso.stopwords(list(LANGUAGES))}
    words |= read_word_list("stopwords_en.txt")
    words |= read_word_list("stopwords_it.txt")
    words -= read_word_list("not_stopwords.txt")
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

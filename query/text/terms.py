"""Term extraction: what the user's latest message is about (docs/specification.md, step 2).

``extract_terms(message)`` returns the message's search terms, most specific first:

==============  ==========================================================  ==========
kind            examples                                                    searched
==============  ==========================================================  ==========
``identifier``  `` `solo` ``, ``os.path.join``, ``A::B``, ``getBranch``,      literal
                ``SessionManager``, ``parse_config_v2``, URLs
``path``        ``src/main.ts``, ``C:\\Users\\me\\a.txt``, ``config.yaml``    literal
``error``       ``ENOENT``, ``SQLITE_BUSY``, ``TS2345``, ``E0502``,           literal
                ``HTTP 404``, ``TypeError``, ``SIGKILL``
``flag``        ``--dry-run``, ``-n``                                         literal
``phrase``      ``"connection refused"``, “…”, «…»                            literal
``technology``  python, sqlite, redis, docker (``query/text/data/technologies.txt``) folded
``keyword``     any other word that is not a stopword                         folded
==============  ==========================================================  ==========

"literal" terms are searched case-sensitively as written; "folded" terms ignore case
and accents, and match their word forms: Porter's English stems in the index, and
for a keyword of an Italian message (more Italian grammar words than English ones)
its Snowball Italian stem as well (``Term.stem``, ``query.text.forms``). The message
and the terms are never rewritten: folding is only used to decide whether a word is
a stopword.

Extraction runs in passes, most specific first; each pass blanks out what it took so
later passes do not take pieces of it again (``parse_config`` does not also yield the
keywords ``parse`` and ``config``). The work is bounded for hostile input: at most
``MAX_SCAN_CHARS`` of the message are read, a term longer than ``MAX_TERM_CHARS`` is
ignored, and at most ``MAX_TERMS`` terms are kept, the most specific kinds first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import regex

from lookback.query.text.dates import date_spans
from lookback.query.text.forms import ITALIAN, italian_stem, message_language
from lookback.query.text.normalize import fold
from lookback.query.text.stopwords import is_stopword, is_technology

#: Read at most this much of a message; later text cannot add terms.
MAX_SCAN_CHARS = 100_000
#: A longer backticked, quoted or path-like string is not one term (it is a paste).
MAX_TERM_CHARS = 200
#: Keep at most this many terms, most specific kinds first.
MAX_TERMS = 32
#: The message's language is told from its grammar words among this many characters.
LANGUAGE_SCAN_CHARS = 4_000

IDENTIFIER = "identifier"
PATH = "path"
ERROR = "error"
FLAG = "flag"
PHRASE = "phrase"
TECHNOLOGY = "technology"
KEYWORD = "keyword"

#: Kinds from most to least specific: the order of ``QueryTerms.terms`` and of the cap.
KIND_ORDER = (IDENTIFIER, PATH, ERROR, FLAG, PHRASE, TECHNOLOGY, KEYWORD)
#: Terms searched case-sensitively, as written (specification step 3 and the FTS literals).
LITERAL_KINDS = frozenset({IDENTIFIER, PATH, ERROR, FLAG, PHRASE})

#: For ranking (docs/specification.md's ranking table: same file 12,
#: same symbol 10, same error 12 each).
FILE_KINDS = frozenset({PATH})
SYMBOL_KINDS = frozenset({IDENTIFIER})
ERROR_KINDS = frozenset({ERROR})


@dataclass(frozen=True)
class Term:
    """One search term: its text exactly as the user wrote it, and its kind.

    ``stem``: a keyword of an Italian message, its Snowball Italian stem
    (``query.text.forms``): its forms are searched by that prefix, and the terms of
    one stem are one topic. None for every other term.
    """

    text: str
    kind: str
    stem: str | None = None

    @property
    def is_literal(self) -> bool:
        """True if the term is searched case-sensitively as written."""
        return self.kind in LITERAL_KINDS


@dataclass(frozen=True)
class QueryTerms:
    """The ordered, de-duplicated terms of one message (most specific kinds first)."""

    terms: tuple[Term, ...] = field(default_factory=tuple)

    def __iter__(self) -> Iterator[Term]:
        return iter(self.terms)

    def __len__(self) -> int:
        return len(self.terms)

    @property
    def has_topic(self) -> bool:
        """False when nothing is left to search for: the caller answers ``no-query``."""
        return bool(self.terms)

    @property
    def literals(self) -> tuple[Term, ...]:
        """Terms searched case-sensitively: identifiers, paths, errors, flags, phrases."""
        return tuple(term for term in self.terms if term.is_literal)

    def of_kind(self, *kinds: str) -> tuple[Term, ...]:
        """The terms of the given kinds, in order."""
        return tuple(term for term in self.terms if term.kind in kinds)

    @property
    def files(self) -> tuple[Term, ...]:
        """Terms that count as "same file" for ranking."""
        return self.of_kind(*FILE_KINDS)

    @property
    def symbols(self) -> tuple[Term, ...]:
        """Terms that count as "same symbol" for ranking."""
        return self.of_kind(*SYMBOL_KINDS)

    @property
    def errors(self) -> tuple[Term, ...]:
        """Terms that count as "same error" for ranking."""
        return self.of_kind(*ERROR_KINDS)

    def by_kind(self) -> dict[str, list[str]]:
        """Term texts grouped by kind (non-empty kinds only), e.g. for the response."""
        grouped: dict[str, list[str]] = {}
        for term in self.terms:
            grouped.setdefault(term.kind, []).append(term.text)
        return grouped


# --------------------------------------------------------------------------- patterns

_CONTROL_CHARS = regex.compile(r"[\p{Cc}\p{Cs}\p{Cn}\p{Co}\u200b-\u200f\u2028-\u202e\ufeff]")

# `code` (single backticks only; ``` fences are left alone, their content is scanned).
_BACKTICKED = regex.compile(r"(?<!`)`([^`\n]{1," + str(MAX_TERM_CHARS) + r"})`(?!`)")

# "…" “…” „…“ «…» ‹…› 「…」 『…』 ‘…’, and '…' when it opens after a space.
_QUOTED = regex.compile(
    r'"([^"\n]+)"|“([^”“\n]+)”|„([^“”„\n]+)[“”]|«([^»\n]+)»|‹([^›\n]+)›'
    r"|「([^」\n]+)」|『([^』\n]+)』|‘([^’\n]+)’"
    r"|(?<![\w'])'([^'\n]+)'(?![\w'])"
)

_QUOTED_PATH = regex.compile(r"(?:~|\.{1,2})?/[^\n]*/[^\n]*|[A-Za-z]:[\\/][^\n]*")
_URL = regex.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]{1,15}://[^\s<>\"'`]+")
_WINDOWS_PATH = regex.compile(r"(?<![\w\\])[A-Za-z]:[\\/][^\s\"'<>|*?`]*")
_WINDOWS_RELATIVE_PATH = regex.compile(r"(?<![\w\\])(?:\.{1,2}\\|[\w.-]+\\)(?:[\w.-]+\\)*[\w.-]+")
_UNIX_PATH = regex.compile(
    r"(?<![\w/.~@+-])@?(?:~|\.{1,2})?/?[\w@+.-]+(?:(?:/[\w@+.-]+)+/?|/(?![\w/]))"
)
_ROOTED_WORD = regex.compile(r"(?<![\w/.~:-])[~]?/[A-Za-z][\w.-]*")
_ROOT_DIRS = frozenset(
    (
        "tmp etc usr var opt home bin sbin lib dev proc sys mnt media root srv run Users "
        "Applications Library Volumes"
    ).split()
)
_DOTFILE = regex.compile(r"(?<![\w./\\-])\.[a-z][\w-]*(?:\.[\w-]+)*(?![\w/])")
_FILE_EXTENSIONS = (
    "py|pyi|pyx|ipynb|ts|tsx|mts|cts|js|jsx|mjs|cjs|json|jsonl|ndjson|md|mdx|rst|txt"
    "|toml|yaml|yml|ini|cfg|conf|env|lock|sh|bash|zsh|fish|ps1|bat|cmd|rs|go|java|kt"
    "|kts|scala|c|h|cc|cpp|cxx|hpp|hh|cs|fs|vb|rb|php|swift|m|mm|sql|db|sqlite|sqlite3"
    "|html|htm|css|scss|sass|less|vue|svelte|astro|xml|svg|png|jpg|jpeg|gif|webp|pdf"
    "|csv|tsv|parquet|log|diff|patch|proto|graphql|gql|lua|pl|pm|r|ex|exs|erl|hs|ml"
    "|clj|dart|zig|nim|jl|tf|tfvars|gradle|dockerfile|zip|gz|tgz|tar|whl|wasm|map|tex"
)
_BARE_FILE = regex.compile(r"(?<![\w./\\-])[\w-][\w.-]*\.(?i:" + _FILE_EXTENSIONS + r")(?![\w-])")
_KNOWN_FILE = regex.compile(
    r"\b(?:Dockerfile|Containerfile|Makefile|Justfile|Procfile|Gemfile|Rakefile"
    r"|Jenkinsfile|Vagrantfile|README|LICENSE|CHANGELOG|CONTRIBUTING|AGENTS|CLAUDE)\b"
)
_EXTENSION = regex.compile(r"\.[A-Za-z0-9]{1,10}$")
_LINE_SUFFIX = regex.compile(r"(?::\d+){1,2}$")
_TRAILING_PUNCT = ".,;:!?)]}>'\"’”»"

_LONG_FLAG = regex.compile(r"(?<![\w-])--[A-Za-z0-9][\w-]*(?![\w-])")
_SHORT_FLAG = regex.compile(r"(?<![\w-])-[A-Za-z][A-Za-z0-9]{0,3}(?![\w-])")

_HTTP_STATUS = regex.compile(
    r"\b(?:HTTP(?:/[0-9.]+)?|[Ss]tatus(?: [Cc]ode)?)[ :]{1,2}[1-5][0-9]{2}\b"
)
_ERRNO = regex.compile(
    r"\bE(?:2BIG|ACCES|ADDRINUSE|ADDRNOTAVAIL|AGAIN|ALREADY|BADF|BUSY|CANCELED|CHILD"
    r"|CONNABORTED|CONNREFUSED|CONNRESET|DEADLK|DESTADDRREQ|DOM|EXIST|FAULT|HOSTUNREACH"
    r"|ILSEQ|INPROGRESS|INTR|INVAL|IO|ISDIR|LOOP|MFILE|NAMETOOLONG|NETDOWN|NETUNREACH"
    r"|NFILE|NOBUFS|NODEV|NOENT|NOEXEC|NOMEM|NOSPC|NOSYS|NOTCONN|NOTDIR|NOTEMPTY"
    r"|NOTFOUND|NOTSUP|NOTTY|NXIO|OPNOTSUPP|OVERFLOW|PERM|PIPE|PROTO|RANGE|ROFS|SPIPE"
    r"|SRCH|TIMEDOUT|TXTBSY|WOULDBLOCK|XDEV)\b"
)
_SIGNAL = regex.compile(
    r"\bSIG(?:HUP|INT|QUIT|ILL|TRAP|ABRT|BUS|FPE|KILL|USR1|SEGV|USR2|PIPE|ALRM|TERM"
    r"|CHLD|CONT|STOP|TSTP|TTIN|TTOU|XCPU|XFSZ|WINCH)\b"
)
_CODE_WITH_NUMBER = regex.compile(r"\b([A-Z]{1,6})(-?)[0-9]{3,6}\b")
#: Prefixes of upper-case+number tokens that are names, not error codes.
_NOT_ERROR_PREFIXES = frozenset(
    ("SHA MD RFC PEP ISO UTF ES ECMA CVE A H V X RTX GTX UTC GMT PR Q T IPV HTTP P K M S").split()
)
_EXCEPTION_NAME = regex.compile(r"\b[A-Z][A-Za-z0-9]*(?:Error|Exception|Warning)\b")
_UPPER_SNAKE = regex.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")
_ERROR_PREFIXES = ("SQLITE_", "ERR_", "E_", "ERROR_", "EAI_", "WSAE", "NS_ERROR_")
_ERROR_PARTS = frozenset(
    (
        "ERR ERROR ERRORS FAIL FAILED FAILURE BUSY LOCKED DENIED TIMEOUT TIMEDOUT INVALID "
        "CORRUPT MISUSE FATAL PANIC ABORT REFUSED EXCEPTION NOTFOUND IOERR READONLY "
        "CANTOPEN MISMATCH INTERRUPT UNAUTHORIZED FORBIDDEN CONFLICT OVERFLOW UNAVAILABLE"
    ).split()
)

_QUALIFIED = regex.compile(
    r"(?<![\w.:$])[A-Za-z_][\w]*(?:(?:\.|::)[A-Za-z_][\w]*)+(?:\(\))?(?![\w(])"
)
_CALL = regex.compile(r"(?<![\w.])([A-Za-z_]\w*)\(\)")
_WORD = regex.compile(r"[\p{L}\p{N}\p{M}_]+")


# --------------------------------------------------------------------------- helpers


@dataclass
class _Found:
    text: str
    kind: str
    position: int


class _Spans(Protocol):
    """What a pass scans with: a compiled pattern, or anything whose ``finditer`` yields
    objects with ``start()`` and ``end()`` (the date words)."""

    def finditer(self, string: str, /) -> Iterator[Any]: ...


class _Scanner:
    """The message being scanned; passes take spans and blank them for later passes."""

    def __init__(self, message: str) -> None:
        text = message[:MAX_SCAN_CHARS]
        self.text = _CONTROL_CHARS.sub(" ", text)
        self.found: list[_Found] = []

    def take(
        self,
        pattern: _Spans,
        classify: Callable[[Any], list[tuple[str, str]] | None],
    ) -> None:
        """Run ``pattern``; each match that ``classify`` accepts is recorded and blanked.

        ``classify`` returns ``(text, kind)`` pairs to record (possibly none, to just
        blank the span), or ``None`` to leave the span for later passes.
        """
        pieces: list[str] = []
        last = 0
        for match in pattern.finditer(self.text):
            accepted = classify(match)
            if accepted is None:
                continue
            for text, kind in accepted:
                self.found.append(_Found(text, kind, match.start()))
            pieces.append(self.text[last : match.start()])
            pieces.append(" " * (match.end() - match.start()))
            last = match.end()
        if pieces:
            pieces.append(self.text[last:])
            self.text = "".join(pieces)


def _has_letter(text: str) -> bool:
    return any(char.isalpha() for char in text)


def _clean_path(raw: str) -> str:
    path = raw.rstrip(_TRAILING_PUNCT)
    path = _LINE_SUFFIX.sub("", path).rstrip(_TRAILING_PUNCT)
    return path[1:] if path.startswith("@") else path


def _looks_like_path(path: str) -> bool:
    """A slash path is kept when it cannot be prose like ``and/or`` or ``si/no``."""
    if not _has_letter(path) or len(path) > MAX_TERM_CHARS:
        return False
    if path.startswith(("/", "~", ".", "\\")) or (len(path) > 1 and path[1] == ":"):
        return True
    separators = path.count("/") + path.count("\\")
    return separators >= 2 or path.endswith(("/", "\\")) or bool(_EXTENSION.search(path))


def _is_error_constant(name: str) -> bool:
    if name.startswith(_ERROR_PREFIXES):
        return True
    return any(part in _ERROR_PARTS for part in name.split("_"))


def _is_error_code(match: regex.Match[str]) -> bool:
    return match.group(1) not in _NOT_ERROR_PREFIXES


def _is_mixed_case_symbol(word: str) -> bool:
    """camelCase or PascalCase (an upper-case letter after the first character)."""
    if not any(char.islower() for char in word):
        return False
    if word[:-1].isupper() and word.endswith("s"):
        return False  # plural acronym: APIs, URLs, PRs
    return any(char.isupper() for char in word[1:])


def _classify_code_token(token: str) -> str | None:
    """The kind of a single code-looking token (quoted or backticked), if it has one."""
    if _LONG_FLAG.fullmatch(token) or _SHORT_FLAG.fullmatch(token):
        return FLAG
    if _URL.fullmatch(token):
        return IDENTIFIER
    if (
        _ERRNO.fullmatch(token)
        or _SIGNAL.fullmatch(token)
        or _EXCEPTION_NAME.fullmatch(token)
        or (_UPPER_SNAKE.fullmatch(token) and _is_error_constant(token))
        or ((m := _CODE_WITH_NUMBER.fullmatch(token)) and _is_error_code(m))
    ):
        return ERROR
    if ("/" in token or "\\" in token) and _looks_like_path(token):
        return PATH
    if _BARE_FILE.fullmatch(token) or _DOTFILE.fullmatch(token):
        return PATH
    if "_" in token or "::" in token or _is_mixed_case_symbol(token):
        return IDENTIFIER
    if _QUALIFIED.fullmatch(token) and not is_technology(token):
        return IDENTIFIER
    return None


# --------------------------------------------------------------------------- passes


def _backticked(match: regex.Match[str]) -> list[tuple[str, str]]:
    content = match.group(1).strip()
    if not _WORD.search(content):
        return []
    if any(char.isspace() for char in content):
        return [(content, PHRASE)]
    return [(content, _classify_code_token(content) or IDENTIFIER)]


def _quoted(match: regex.Match[str]) -> list[tuple[str, str]] | None:
    content = next(group for group in match.groups() if group is not None).strip()
    if len(content) > MAX_TERM_CHARS:
        return None  # a quoted paste: scan its words instead
    if not _WORD.search(content):
        return []
    if not any(char.isspace() for char in content):
        kind = _classify_code_token(content)
        if kind:
            return [(content, kind)]
    elif _QUOTED_PATH.fullmatch(content) and _looks_like_path(content):
        return [(content, PATH)]  # '/var/folders/…/Screenshot 2025-11-21 at 01.27.21.png'
    return [(content, PHRASE)]


def _url(match: regex.Match[str]) -> list[tuple[str, str]] | None:
    url = match.group().rstrip(_TRAILING_PUNCT)
    if len(url) > MAX_TERM_CHARS:
        return []
    return [(url, IDENTIFIER)]


def _path(match: regex.Match[str]) -> list[tuple[str, str]] | None:
    path = _clean_path(match.group())
    if not _looks_like_path(path):
        return None
    if path.count("/") == 1 and path.endswith("/") and is_stopword(path[:-1]):
        return None  # "and/ or"
    return [(path, PATH)]


def _rooted_word(match: regex.Match[str]) -> list[tuple[str, str]] | None:
    """``/tmp`` is a path; ``/context`` is a Pi slash command: both literal, one word."""
    word = match.group().rstrip(_TRAILING_PUNCT)
    is_path = _EXTENSION.search(word) or word.startswith("~") or word[1:] in _ROOT_DIRS
    kind = PATH if is_path else IDENTIFIER
    return [(word, kind)]


def _file(match: regex.Match[str]) -> list[tuple[str, str]] | None:
    name = _clean_path(match.group())
    if len(name) > MAX_TERM_CHARS or not _has_letter(name):
        return None
    return [(name, TECHNOLOGY if is_technology(name) else PATH)]  # node.js is no file


def _flag(match: regex.Match[str]) -> list[tuple[str, str]] | None:
    return [(match.group(), FLAG)] if len(match.group()) <= MAX_TERM_CHARS else None


def _error(match: regex.Match[str]) -> list[tuple[str, str]] | None:
    return [(match.group(), ERROR)]


def _upper_snake(match: regex.Match[str]) -> list[tuple[str, str]] | None:
    name = match.group()
    return [(name, ERROR)] if _is_error_constant(name) else None


def _code_with_number(match: regex.Match[str]) -> list[tuple[str, str]] | None:
    return [(match.group(), ERROR)] if _is_error_code(match) else None


def _qualified(match: regex.Match[str]) -> list[tuple[str, str]] | None:
    name = match.group().removesuffix("()")
    parts = regex.split(r"\.|::", name)
    if len(name) > MAX_TERM_CHARS or sum(len(part) >= 2 for part in parts) < 2:
        return None
    if is_technology(name):
        return [(name, TECHNOLOGY)]
    found = [(name, IDENTIFIER)]
    if _EXCEPTION_NAME.fullmatch(parts[-1]):
        found.append((parts[-1], ERROR))  # apsw.BusyError is also "the same error"
    return found


def _call(match: regex.Match[str]) -> list[tuple[str, str]] | None:
    return [(match.group(1), IDENTIFIER)] if len(match.group(1)) <= MAX_TERM_CHARS else None


class _Span:
    def __init__(self, start: int, end: int) -> None:
        self._start, self._end = start, end

    def start(self) -> int:
        return self._start

    def end(self) -> int:
        return self._end


class _DateWords:
    """``dates.date_spans`` in the scanner's pattern interface (``finditer``)."""

    def finditer(self, text: str) -> Iterator[_Span]:
        return (_Span(start, end) for start, end in date_spans(text))


_DATES = _DateWords()


def _date(match: object) -> list[tuple[str, str]]:
    # Words that name a time ("last year", "a maggio") are the date signal of ranking
    # (query/text/dates.py), not topics: blank them, record nothing.
    return []


def _word(match: regex.Match[str]) -> list[tuple[str, str]]:
    word = match.group()
    if len(word) > MAX_TERM_CHARS or not _has_letter(word):
        return []
    if is_technology(word):
        return [(word, TECHNOLOGY)]
    if word.strip("_") and ("_" in word or _is_mixed_case_symbol(word)):
        return [(word, IDENTIFIER)]
    folded = fold(word)
    if is_stopword(word) or (len(folded) < 2 and folded.isascii()):
        return []
    return [(word, KEYWORD)]


#: Each pass: its pattern, what it records, and substrings of which the text must hold
#: at least one for the pattern to match at all (None: no such cheap test). The test
#: is ``in`` (C speed); blanking only removes characters, so a pass skipped because
#: its substrings are gone could not have matched.
_Recorder = Callable[[regex.Match[str]], list[tuple[str, str]] | None]
_PASSES: tuple[tuple[_Spans, _Recorder, tuple[str, ...] | None], ...] = (
    (_BACKTICKED, _backticked, ("`",)),
    (_QUOTED, _quoted, ('"', "“", "„", "«", "‹", "「", "『", "‘", "'")),
    (_URL, _url, ("://",)),
    (_WINDOWS_PATH, _path, (":",)),
    (_UNIX_PATH, _path, ("/",)),
    (_WINDOWS_RELATIVE_PATH, _path, ("\\",)),
    (_ROOTED_WORD, _rooted_word, ("/",)),
    (_BARE_FILE, _file, (".",)),
    (_DOTFILE, _file, (".",)),
    (_KNOWN_FILE, _file, None),
    (_LONG_FLAG, _flag, ("--",)),
    (_SHORT_FLAG, _flag, ("-",)),
    (_HTTP_STATUS, _error, ("HTTP", "tatus")),
    (_ERRNO, _error, ("E",)),
    (_SIGNAL, _error, ("SIG",)),
    (_UPPER_SNAKE, _upper_snake, ("_",)),
    (_CODE_WITH_NUMBER, _code_with_number, None),
    (_QUALIFIED, _qualified, (".", ":")),
    (_CALL, _call, ("()",)),
    (_EXCEPTION_NAME, _error, ("Error", "Exception", "Warning")),
    (_DATES, _date, None),
    (_WORD, _word, None),
)


def _dedup_key(found: _Found) -> tuple[str, str]:
    """Literals are distinct per exact text; folded kinds per folded text."""
    if found.kind in LITERAL_KINDS:
        return (found.kind, found.text)
    return ("folded", fold(found.text))


#: A word written with a capital that does not start a sentence (``names``).
_NAME = regex.compile(r"(?<![.!?:]\s*|^\W*)\b[\p{L}\p{N}_]*\p{Lu}[\p{L}\p{N}\p{M}_]*")


def names(message: str) -> frozenset[str]:
    """The words ``message`` writes with a capital inside a sentence (Redis, CORS,
    Cypress): names, not the capital a sentence starts with."""
    return frozenset(found.group() for found in _NAME.finditer(message))


def extract_terms(message: str) -> QueryTerms:
    """Extract the search terms of one user message; never raises on any string.

    >>> [t.text for t in extract_terms("perché `parse_config` fallisce con ENOENT?")]
    ['parse_config', 'ENOENT', 'fallisce']
    >>> extract_terms("ok grazie, vai pure").has_topic
    False
    """
    if not isinstance(message, str) or not message:
        return QueryTerms()
    scanner = _Scanner(message)
    for pattern, classify, needs in _PASSES:
        if needs is None or any(needed in scanner.text for needed in needs):
            scanner.take(pattern, classify)
    rank = {kind: index for index, kind in enumerate(KIND_ORDER)}
    ordered = sorted(scanner.found, key=lambda found: (rank[found.kind], found.position))
    italian = any(found.kind == KEYWORD for found in ordered) and message_language(
        _WORD.findall(message[:LANGUAGE_SCAN_CHARS])) == ITALIAN
    terms: list[Term] = []
    seen: set[tuple[str, str]] = set()
    for found in ordered:
        text = found.text.strip()
        key = _dedup_key(found)
        if not text or key in seen:
            continue
        seen.add(key)
        stem = italian_stem(text) if italian and found.kind == KEYWORD else None
        terms.append(Term(text, found.kind, stem))
        if len(terms) == MAX_TERMS:
            break
    return QueryTerms(tuple(terms))

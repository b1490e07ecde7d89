"""Finding credentials in text, fast enough to run on every evidence excerpt.

The patterns come from ``detect-secrets`` (Yelp), a well-kept detector library: each
of its regex plugins carries a ``denylist`` of compiled patterns. Its own scanner is
too slow for the query path (about 18 ms for a 2 KB excerpt, mostly entropy plugins
and per-line bookkeeping), so this module runs the plugins' regexes directly, behind
a two-level ``Gate`` per detector:

- ``anchors``: literals (lowercase) every match contains; when none occurs in the
  text the detector's regexes are not run at all. Most excerpts contain no anchor of
  most detectors. One Aho-Corasick pass (``pyahocorasick``, C) finds every anchor a
  text holds: a substring scan per anchor (about 70) was half the cost of a text;
- ``window``: for patterns that are costly per position (IBM/Cloudant/SoftLayer
  keyword forms, Telegram, Discord), a cheap regex for the part every match
  contains; the pattern is then searched only near its matches, in windows that keep
  a 1 MB text linear;
- ``window_starts``: the literals every ``window`` match starts with. The window
  pattern is then tried only where one of them occurs (the anchor automaton gives
  their offsets) instead of at every position: the same matches, found without a
  regex pass over the whole text;
- ``token_run`` / ``alnum_run``: the length of the run of token characters
  (``[A-Za-z0-9_-]``) or of letters and digits every match contains (IBM's 44-character
  key, Cloudant's 24 letters…). Their anchors (``key``, ``token``, ``ac``, ``:``) occur
  in most texts, but such runs are rare in prose and code, and finding whether one
  exists costs two C-speed byte passes (``bytes.translate``, then a substring test),
  against ~0.25 ms per 2 KB for these detectors' regexes and windows. Every non-ASCII
  character counts as a run character (Unicode digits, word characters and case-folded
  letters match beyond ASCII), so the test only ever lets more texts through, never
  fewer.

Patterns run over the whole text with ``re.MULTILINE`` (their ``^``/``$`` mean line
start/end, as in detect-secrets' line scanner). Not used: the entropy plugins and the
keyword plugin (they flag hashes, UUIDs and ordinary code), the public-IP plugin (not
a secret), Artifactory's pattern (it matches plain capitalised words such as
``APACHEKAFKA``) and the JWT pattern, replaced by a boundary-anchored one because it
backtracks quadratically on long base64 runs (minutes for 1 MB of ``eyJeyJ…``).

``EXTRA_PATTERNS`` covers what detect-secrets 1.5 misses: current OpenAI/Anthropic
``sk-…`` keys, GitHub fine-grained tokens, Google API keys, JWTs, PEM headers such as
``ENCRYPTED PRIVATE KEY``, unquoted AWS secret keys, quoted password assignments,
``*_PASSWORD``/``*_SECRET``/``*_TOKEN`` assignments (env, YAML, JSON forms) and
password-only URLs (``redis://:password@host``).

Findings carry the detector name and offsets only: the secret text is never copied out.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

import ahocorasick

#: Window searched on each side of a ``Gate.window`` match. A windowed pattern is found
#: when its match lies within one window of that match (the longest windowed match,
#: Cloudant's keyword form with a 64-character key, is under 100 characters).
TRIGGER_WINDOW = 256
#: Longest merged window (see ``_trigger_windows``).
MAX_WINDOW = 4096

#: Detector type of a private key; callers classify it above other secrets.
PRIVATE_KEY = "Private Key"


@dataclass(frozen=True)
class Gate:
    """When a detector's regexes are worth running (see the module docstring)."""

    anchors: tuple[str, ...]
    window: str | None = None
    token_run: int = 0
    alnum_run: int = 0
    window_starts: tuple[str, ...] = ()


_KEYWORDS = ("key", "pwd", "pw", "pass", "token")
_KEYWORD = r"(?:key|pwd|pw|pass|password|token)"

#: Gates of the detect-secrets plugins used, by their ``secret_type``.
GATES: dict[str, Gate] = {
    "AWS Access Key": Gate(("akia", "asia", "abia", "acca", "a3t", "aws")),
    "Azure Storage Account access key": Gate(("accountkey=",)),
    "Basic Auth Credentials": Gate(("://",)),
    "Cloudant Credentials": Gate(
        ("cloudant", *_KEYWORDS),
        rf"cl(?:ou(?:dant)?)?[_-]?(?:api)?{_KEYWORD}|cloudant\.com",
        alnum_run=24,  # [0-9a-f]{64} or [a-z]{24}, case-insensitive
    ),
    "Discord Bot Token": Gate((".",), r"\.[a-z0-9_-]{6}\.[a-z0-9_-]{27}", token_run=27),
    "GitHub Token": Gate(("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
    "GitLab Token": Gate(
        ("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "gr1348941", "glcbt-", "glimt-")
        + ("glptt-", "glagent-", "gloas-")
    ),
    "IBM Cloud IAM Key": Gate(
        _KEYWORDS,
        rf"{_KEYWORD}[\"'\]]* *(?:[=:]| )",
        token_run=44,
        window_starts=("key", "pw", "pass", "token"),
    ),
    "IBM COS HMAC Credentials": Gate(
        ("secret",), r"secret[-_]?(?:access)?[-_]?key", alnum_run=48
    ),
    "Mailchimp Access Key": Gate(("-us",), alnum_run=32),
    "NPM tokens": Gate(("_authtoken",), r"_authtoken="),
    "OpenAI Token": Gate(("t3blbkfj",), r"t3blbkfj"),
    "Private Key": Gate(("private key", "putty-user-key-file")),
    "PyPI Token": Gate(("pypi-ag",)),
    "SendGrid API Key": Gate(("sg.",)),
    "Slack Token": Gate(("xox", "hooks.slack.com")),
    "SoftLayer Credentials": Gate(
        ("softlayer", *_KEYWORDS),
        rf"s(?:l|oftlayer)[_-]?(?:api)?[_-]?{_KEYWORD}|api\.softlayer\.com",
        alnum_run=64,
    ),
    "Square OAuth Secret": Gate(("sq0csp-",)),
    "Stripe Access Key": Gate(("sk_live_", "rk_live_")),
    "Telegram Bot Token": Gate((":",), r"[0-9]:[a-z0-9_-]{35}", token_run=35),
    "Twilio API Key": Gate(("ac", "sk"), r"(?:ac|sk)[a-z0-9]{32}", alnum_run=34),
}

#: Where an assigned value ends: whitespace, a closing quote or bracket, a separator.
_VALUE_END = r"(?=[\s\"'`,;})\]]|$)"
#: An assigned literal of 6+ characters. Not one: references (``$X``, ``${X}``, ``<x>``),
#: calls, dotted names (``process.env.X``), type names (``string``, ``Optional[…]``),
#: numbers, and an unquoted snake_case name (``token = next_token``: a variable).
_ASSIGNED_LITERAL = (
    r"(?!(?:string|number|boolean|bool|str|bytes|none|null|undefined|optional|required"
    r"|true|false)(?![\w.-]))"
    r"(?![A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+" + _VALUE_END + ")"
    r"(?!\d+" + _VALUE_END + ")"
    r"(?:(?<=[\"'])|(?![a-z][a-z0-9]*(?:_[a-z0-9]+)+" + _VALUE_END + "))"
    r"[^\s\"'`$<>{}()\[\],;]{6,}" + _VALUE_END
)

#: Patterns detect-secrets 1.5 lacks: (detector name, pattern, gate).
EXTRA_PATTERNS: tuple[tuple[str, str, Gate], ...] = (
    # OpenAI (sk-, sk-proj-, sk-svcacct-) and Anthropic (sk-ant-) keys; needs a digit.
    ("OpenAI-style API Key", r"sk-(?<![\w-]sk-)(?=[\w-]{0,200}\d)[\w-]{20,}", Gate(("sk-",))),
    ("GitHub Token", r"github_pat_[A-Za-z0-9_]{60,}", Gate(("github_pat_",))),
    ("Google API Key", r"AIza[0-9A-Za-z_\-]{35}", Gate(("aiza",))),
    # Header and payload are JSON objects, so both start with ``eyJ``; the token starts
    # at a boundary. (detect-secrets' own JWT regex is quadratic on long base64 runs.)
    (
        "JSON Web Token",
        r"(?<![A-Za-z0-9_=-])eyJ[A-Za-z0-9_=-]{4,}+\.eyJ[A-Za-z0-9_=-]{4,}+\.",
        Gate(("eyj",)),
    ),
    (PRIVATE_KEY, r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY( BLOCK)?-----", Gate(("private key",))),
    (
        "AWS Secret Access Key",
        r"(?i)aws_?secret_?access_?key\s*[=:]\s*[\"']?[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+])",
        Gate(("secret",), r"aws_?secret_?access_?key"),
    ),
    # ``DB_PASSWORD="…"``, ``POSTGRES_PASSWORD=…``, ``client_secret: …`` (YAML),
    # ``"GITHUB_TOKEN": "…"`` (JSON): a name ending in password/secret/token, assigned a
    # literal of 6+ characters (see ``_ASSIGNED_LITERAL`` for what is not one).
    (
        "Secret Assignment",
        r"(?i)(?<![A-Za-z0-9_])(?:[A-Za-z0-9]+_)*(?:password|passwd|pwd|secret|token)"
        r"[\"']?[ \t]*[:=][ \t]*[\"']?" + _ASSIGNED_LITERAL,
        Gate(
            ("pass", "pwd", "secret", "token"),
            r"(?:password|passwd|pwd|secret|token)[\"']?[ \t]*[:=]",
            window_starts=("pass", "pwd", "secret", "token"),
        ),
    ),
    # ``redis://:password@host``: a URL with a password and no user name (detect-secrets'
    # basic-auth pattern needs a user before the colon).
    ("Password-only URL", r"(?i)\b[a-z][a-z0-9+.-]*://:[^\s/@:?#]{3,}@", Gate(("://:",))),
    (
        "Password Assignment",
        r"(?i)\b(?:password|passwd|client_?secret|api_?key|access_?token|auth_?token)"
        r"[\"']?\s*[:=]\s*[\"'][^\"'\s$<>{}]{8,}[\"']",
        Gate(
            ("pass", "secret", "key", "token"),
            r"(?:password|passwd|client_?secret|api_?key|access_?token|auth_?token)"
            r"[\"']?\s*[:=]",
            window_starts=("pass", "client", "api", "access", "auth"),
        ),
    ),
)


@dataclass(frozen=True)
class SecretFinding:
    """Where a detector matched: its name and character offsets, never the text."""

    detector: str
    start: int
    end: int


@dataclass(frozen=True)
class _Detector:
    name: str
    patterns: tuple[re.Pattern[str], ...]
    anchors: tuple[str, ...]
    window: re.Pattern[str] | None
    token_run: int = 0
    alnum_run: int = 0
    window_starts: tuple[str, ...] = ()


def _detect_secrets_plugins() -> list[type]:
    """The detect-secrets regex plugins Lookback uses (see the module docstring)."""
    from detect_secrets.plugins.aws import AWSKeyDetector
    from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
    from detect_secrets.plugins.basic_auth import BasicAuthDetector
    from detect_secrets.plugins.cloudant import CloudantDetector
    from detect_secrets.plugins.discord import DiscordBotTokenDetector
    from detect_secrets.plugins.github_token import GitHubTokenDetector
    from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
    from detect_secrets.plugins.ibm_cloud_iam import IbmCloudIamDetector
    from detect_secrets.plugins.ibm_cos_hmac import IbmCosHmacDetector
    from detect_secrets.plugins.mailchimp import MailchimpDetector
    from detect_secrets.plugins.npm import NpmDetector
    from detect_secrets.plugins.openai import OpenAIDetector
    from detect_secrets.plugins.private_key import PrivateKeyDetector
    from detect_secrets.plugins.pypi_token import PypiTokenDetector
    from detect_secrets.plugins.sendgrid import SendGridDetector
    from detect_secrets.plugins.slack import SlackDetector
    from detect_secrets.plugins.softlayer import SoftlayerDetector
    from detect_secrets.plugins.square_oauth import SquareOAuthDetector
    from detect_secrets.plugins.stripe import StripeDetector
    from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
    from detect_secrets.plugins.twilio import TwilioKeyDetector

    return [
        AWSKeyDetector, AzureStorageKeyDetector, BasicAuthDetector, CloudantDetector,
        DiscordBotTokenDetector, GitHubTokenDetector, GitLabTokenDetector,
        IbmCloudIamDetector, IbmCosHmacDetector, MailchimpDetector,
        NpmDetector, OpenAIDetector, PrivateKeyDetector, PypiTokenDetector,
        SendGridDetector, SlackDetector, SoftlayerDetector, SquareOAuthDetector,
        StripeDetector, TelegramBotTokenDetector, TwilioKeyDetector,
    ]  # fmt: skip


def _detector(name: str, patterns: list[re.Pattern[str]], gate: Gate) -> _Detector:
    window = re.compile(gate.window) if gate.window else None
    return _Detector(
        name, tuple(patterns), gate.anchors, window, gate.token_run, gate.alnum_run,
        gate.window_starts,
    )


@cache
def detectors() -> tuple[_Detector, ...]:
    """All detectors, compiled once (importing detect-secrets costs ~0.2 s, so lazily)."""
    found = []
    for plugin in _detect_secrets_plugins():
        name = plugin.secret_type
        patterns = [re.compile(p.pattern, p.flags | re.MULTILINE) for p in plugin.denylist]
        found.append(_detector(name, patterns, GATES[name]))
    for name, pattern, gate in EXTRA_PATTERNS:
        found.append(_detector(name, [re.compile(pattern, re.ASCII | re.MULTILINE)], gate))
    return tuple(found)


def _window_matches(
    lowered: str, window: re.Pattern[str], starts: list[int] | None
) -> Iterator[re.Match[str]]:
    """What ``window.finditer(lowered)`` yields, trying only the offsets in ``starts``
    when given (every match starts at one of them; ascending)."""
    if starts is None:
        yield from window.finditer(lowered)
        return
    searched_to = 0
    for start in starts:
        if start < searched_to:  # inside the previous match: finditer resumes after it
            continue
        match = window.match(lowered, start)
        if match:
            searched_to = match.end()
            yield match


def _trigger_windows(
    lowered: str, window: re.Pattern[str], starts: list[int] | None = None
) -> list[tuple[int, int]]:
    """Search windows around every ``window`` match, merged while they overlap.

    A merged window stops growing at ``MAX_WINDOW`` characters, so even a pattern that
    backtracks does bounded work per window, and a text dense with matches costs about
    one pass per pattern.
    """
    windows: list[tuple[int, int]] = []
    for match in _window_matches(lowered, window, starts):
        low = max(0, match.start() - TRIGGER_WINDOW)
        high = min(len(lowered), match.end() + TRIGGER_WINDOW)
        if windows and low <= windows[-1][1] and high - windows[-1][0] <= MAX_WINDOW:
            windows[-1] = (windows[-1][0], high)
        else:
            windows.append((low, high))
    return windows


def _run_table(members: bytes) -> bytes:
    """A ``bytes.translate`` table: ``members`` and every non-ASCII byte to ``x``, the rest
    to a space (a UTF-8 byte of 0x80 or above only ever belongs to a non-ASCII character)."""
    return bytes(
        ord("x") if byte >= 0x80 or byte in members else ord(" ") for byte in range(256)
    )


_ALNUM = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_TOKEN_TABLE = _run_table(_ALNUM + b"_-")
_ALNUM_TABLE = _run_table(_ALNUM)


class _Runs:
    """Whether ``text`` holds a run of N token (or alphanumeric) characters, computed on
    first use: a non-ASCII character counts as one or more run characters, never fewer."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._maps: dict[bytes, bytes] = {}

    def has(self, table: bytes, length: int) -> bool:
        mapped = self._maps.get(table)
        if mapped is None:
            encoded = self._text.encode("utf-8", "surrogatepass")
            mapped = self._maps[table] = encoded.translate(table)
        return b"x" * length in mapped


@cache
def _anchor_automaton() -> ahocorasick.Automaton:
    """Every anchor and window start of two or more characters, for one Aho-Corasick
    pass over a text."""
    automaton = ahocorasick.Automaton()
    for detector in detectors():
        for word in (*detector.anchors, *detector.window_starts):
            if len(word) > 1:
                automaton.add_word(word, word)
    automaton.make_automaton()
    return automaton


def _find_anchors(lowered: str) -> dict[str, list[int]]:
    """Where each anchor and window start occurs in ``lowered`` (ascending offsets): one
    automaton pass instead of one substring scan per anchor (about 70 scans, most of
    them of texts that hold no anchor). A one-character anchor gets a ``memchr`` test
    and no offsets (none is a window start)."""
    found: dict[str, list[int]] = {}
    for end, word in _anchor_automaton().iter(lowered):
        found.setdefault(word, []).append(end - len(word) + 1)
    for detector in detectors():
        for anchor in detector.anchors:
            if len(anchor) == 1 and anchor in lowered:
                found.setdefault(anchor, [])
    return found


def _starts(detector: _Detector, found: dict[str, list[int]]) -> list[int] | None:
    """The offsets where ``detector``'s window may match, or None to try them all."""
    if not detector.window_starts:
        return None
    return sorted({offset for word in detector.window_starts for offset in found.get(word, ())})


def _first_match(
    detector: _Detector, text: str, lowered: str, found: dict[str, list[int]], runs: _Runs
) -> SecretFinding | None:
    # The run tests first: they are cheaper than scanning the text for each anchor.
    if detector.token_run and not runs.has(_TOKEN_TABLE, detector.token_run):
        return None
    if detector.alnum_run and not runs.has(_ALNUM_TABLE, detector.alnum_run):
        return None
    if not any(anchor in found for anchor in detector.anchors):
        return None
    if detector.window is None:
        spans = [(0, len(text))]
    else:
        spans = _trigger_windows(lowered, detector.window, _starts(detector, found))
    for low, high in spans:
        for pattern in detector.patterns:
            match = pattern.search(text, low, high)
            if match:
                return SecretFinding(detector.name, *match.span())
    return None


def _lowered(text: str) -> str:
    """``text.lower()`` with offsets kept (a few characters change length when lowered)."""
    lowered = text.lower()
    if len(lowered) != len(text):
        lowered = "".join(char.lower()[:1] or char for char in text)
    return lowered


def find_secrets(text: str) -> list[SecretFinding]:
    """The first match of every detector that fires on ``text``, in text order.

    One finding per detector is enough to classify a text (the whole evidence message
    is withheld anyway) and keeps the cost bounded for texts full of matches.
    """
    lowered = _lowered(text)
    found = _find_anchors(lowered)
    runs = _Runs(text)
    findings = (
        _first_match(detector, text, lowered, found, runs) for detector in detectors()
    )
    return sorted((f for f in findings if f), key=lambda f: (f.start, f.detector))

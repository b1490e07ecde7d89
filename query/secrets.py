"""Finding credentials in text, fast enough to run on every evidence excerpt.

The patterns come from ``detect-secrets`` (Yelp), a well-kept detector library: each
of its regex plugins carries a ``denylist`` of compiled patterns. Its own scanner is
too slow for the query path (about 18 ms for a 2 KB excerpt, mostly entropy plugins
and per-line bookkeeping), so this module uses the plugins' regexes directly:

- patterns are run over the whole text (``re.MULTILINE`` keeps their ``^``/``$``
  meaning "line start/end");
- the few costly ones (keyword-anchored IBM/Cloudant/SoftLayer patterns, AWS's
  ``aws…key`` form, Slack) are gated by a cheap literal trigger and searched only in a
  window around each trigger occurrence, which keeps a 1 MB text linear;
- entropy plugins and the keyword plugin are not used (they flag hashes, UUIDs and
  ordinary code), the public-IP plugin is not a secret, and Artifactory's pattern
  matches plain capitalised words (``APACHEKAFKA``).

A short list of ``EXTRA_PATTERNS`` covers what detect-secrets 1.5 misses: current
OpenAI/Anthropic ``sk-…`` keys, GitHub fine-grained tokens, Google API keys, PEM
headers such as ``ENCRYPTED PRIVATE KEY``, unquoted AWS secret keys and quoted
password assignments.

Findings carry the detector name and offsets only: the secret text is never copied out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

#: Window searched on each side of a trigger occurrence. A gated pattern is found when
#: its match lies within one window of its trigger (the longest gated match, AWS's
#: ``aws…key…"<40 chars>"``, is under 100 characters).
TRIGGER_WINDOW = 256
#: Longest merged window (see ``_trigger_windows``).
MAX_WINDOW = 4096

#: Detector type of a private key; callers classify it above other secrets.
PRIVATE_KEY = "Private Key"

#: Trigger regexes (searched in the lowercased text) for the costly detect-secrets
#: plugins: the keyword or literal every match of the plugin contains. A plugin absent
#: from this map has cheap, literal-prefixed patterns and always runs.
_KEYWORD = r"(?:key|pwd|pw|pass|password|token)"
TRIGGERS: dict[str, str] = {
    "AWS Access Key": r"akia|asia|abia|acca|a3t|aws",
    "Cloudant Credentials": rf"cl(?:ou(?:dant)?)?[_-]?(?:api)?{_KEYWORD}|cloudant\.com",
    "IBM Cloud IAM Key": rf"{_KEYWORD}[\"'\]]* *(?:[=:]| )",
    "IBM COS HMAC Credentials": r"secret[-_]?(?:access)?[-_]?key",
    "Mailchimp Access Key": r"-us\d",
    "NPM tokens": r"_authtoken=",
    "Slack Token": r"xox|hooks\.slack\.com",
    "SoftLayer Credentials": rf"s(?:l|oftlayer)[_-]?(?:api)?[_-]?{_KEYWORD}|api\.softlayer\.com",
}

#: Patterns detect-secrets 1.5 lacks: (detector name, pattern, trigger or None).
#: Each starts with a literal where it can, which is what keeps ``re`` fast.
EXTRA_PATTERNS: tuple[tuple[str, str, str | None], ...] = (
    # OpenAI (sk-, sk-proj-, sk-svcacct-) and Anthropic (sk-ant-) keys; needs a digit.
    ("OpenAI-style API Key", r"sk-(?<![\w-]sk-)(?=[\w-]{0,200}\d)[\w-]{20,}", None),
    ("GitHub Token", r"github_pat_[A-Za-z0-9_]{60,}", None),
    ("Google API Key", r"AIza[0-9A-Za-z_\-]{35}", None),
    (PRIVATE_KEY, r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY( BLOCK)?-----", None),
    (
        "AWS Secret Access Key",
        r"(?i)aws_?secret_?access_?key\s*[=:]\s*[\"']?[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+])",
        r"aws_?secret_?access_?key",
    ),
    (
        "Password Assignment",
        r"(?i)\b(?:password|passwd|client_?secret|api_?key|access_?token|auth_?token)"
        r"[\"']?\s*[:=]\s*[\"'][^\"'\s$<>{}]{8,}[\"']",
        r"(?:password|passwd|client_?secret|api_?key|access_?token|auth_?token)[\"']?\s*[:=]",
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
    pattern: re.Pattern[str]
    trigger: re.Pattern[str] | None


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
    from detect_secrets.plugins.jwt import JwtTokenDetector
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
        IbmCloudIamDetector, IbmCosHmacDetector, JwtTokenDetector, MailchimpDetector,
        NpmDetector, OpenAIDetector, PrivateKeyDetector, PypiTokenDetector,
        SendGridDetector, SlackDetector, SoftlayerDetector, SquareOAuthDetector,
        StripeDetector, TelegramBotTokenDetector, TwilioKeyDetector,
    ]  # fmt: skip


@cache
def detectors() -> tuple[_Detector, ...]:
    """All detectors, compiled once (importing detect-secrets costs ~0.2 s, so lazily)."""
    found: list[_Detector] = []
    for plugin in _detect_secrets_plugins():
        name = plugin.secret_type
        trigger = _compile_trigger(TRIGGERS.get(name))
        for pattern in plugin.denylist:
            compiled = re.compile(pattern.pattern, pattern.flags | re.MULTILINE)
            found.append(_Detector(name, compiled, trigger))
    for name, pattern, trigger in EXTRA_PATTERNS:
        compiled = re.compile(pattern, re.ASCII | re.MULTILINE)
        found.append(_Detector(name, compiled, _compile_trigger(trigger)))
    return tuple(found)


def _compile_trigger(pattern: str | None) -> re.Pattern[str] | None:
    return re.compile(pattern) if pattern else None


def _trigger_windows(lowered: str, trigger: re.Pattern[str]) -> list[tuple[int, int]]:
    """Search windows around every trigger match, merged while they overlap.

    A merged window stops growing at ``MAX_WINDOW`` characters, so even a pattern that
    backtracks (NPM's ``//.+/:_authToken=``) does bounded work per window and a text
    dense with triggers costs about one pass per pattern.
    """
    windows: list[tuple[int, int]] = []
    for match in trigger.finditer(lowered):
        low = max(0, match.start() - TRIGGER_WINDOW)
        high = min(len(lowered), match.end() + TRIGGER_WINDOW)
        if windows and low <= windows[-1][1] and high - windows[-1][0] <= MAX_WINDOW:
            windows[-1] = (windows[-1][0], high)
        else:
            windows.append((low, high))
    return windows


def _first_match(detector: _Detector, text: str, lowered: str) -> SecretFinding | None:
    if detector.trigger is None:
        match = detector.pattern.search(text)
        return SecretFinding(detector.name, *match.span()) if match else None
    for low, high in _trigger_windows(lowered, detector.trigger):
        match = detector.pattern.search(text, low, high)
        if match:
            return SecretFinding(detector.name, *match.span())
    return None


def find_secrets(text: str) -> list[SecretFinding]:
    """The first match of every detector that fires on ``text``, in text order.

    One finding per detector is enough to classify a text (the whole evidence message
    is withheld anyway) and keeps the cost bounded for texts full of matches.
    """
    lowered = text.lower()
    if len(lowered) != len(text):  # a few characters change length when lowered
        lowered = "".join(char.lower()[:1] or char for char in text)
    findings = (_first_match(detector, text, lowered) for detector in detectors())
    return sorted((f for f in findings if f), key=lambda f: (f.start, f.detector))

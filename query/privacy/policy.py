"""Which evidence may be shown to which model provider.

Every evidence excerpt gets a ``Classification`` (``normal < internal < sensitive <
local-only``) from two sources:

- inline markers the user put in the session text:
  ``[lookback:internal]…[/lookback:internal]`` (likewise ``sensitive`` and
  ``local-only``). An unclosed marker classifies to the end of the text; a closing
  marker with no opening before it classifies from the start of the text (the excerpt
  was cut after the opening marker);
- detected secrets (``query.privacy.secrets``): ``sensitive``, private keys ``local-only``.

``PrivacyPolicy`` says how far each provider may see. ``local-only`` means "never leaves
THIS machine": a provider the user lists in ``local_providers`` runs on this machine
(ollama, llama.cpp, LM Studio…) and may see everything; every other provider, and a
call that names no provider, is remote and sees up to its configured level (default
``internal``), never ``local-only``.

**The one gate.** Every path that returns session text — retrieval, history search,
source, ``lookback context retrieved``, and what is built on them (the HTTP endpoints,
the CLI, the MCP tools, the Claude Code and Codex hooks, the Pi extension) — asks
``PrivacyPolicy.gate`` about each source under the policy built once from the typed
settings (``PrivacyPolicy.from_settings``). The gate classifies with ``classify_source``
(the WHOLE indexed text of the source row, never just the excerpt it shows: a PEM body
or a URL password outside the excerpt window still withholds it) and words every
refusal the same way (``Verdict.reason``).

``apply`` is the gate over a list of evidence items: each is treated atomically — when
any span is above the provider's level the whole source is withheld, and the excluded
record keeps only the source id, classification and reason — never text.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from lookback.errors import SettingsError
from lookback.query.contract.messages import JsonObject, message_text
from lookback.query.privacy.secrets import PRIVATE_KEY, find_secrets
from lookback.settings import Privacy, Settings


class Classification(enum.IntEnum):
    """How private a text is; a larger value may be shown to fewer providers."""

    NORMAL = 0
    INTERNAL = 1
    SENSITIVE = 2
    LOCAL_ONLY = 3

    @property
    def label(self) -> str:
        """The settings/JSON spelling: ``normal``, ``internal``, ``sensitive``, ``local-only``."""
        return self.name.lower().replace("_", "-")

    @classmethod
    def parse(cls, value: str | Classification) -> Classification:
        """The classification spelled ``value`` (case-insensitive, ``_`` or ``-``)."""
        if isinstance(value, Classification):
            return value
        if isinstance(value, str):
            key = value.strip().upper().replace("-", "_")
            if key in cls.__members__:
                return cls[key]
        labels = ", ".join(member.label for member in cls)
        raise PrivacySettingsError(f"unknown privacy classification {value!r}; use one of {labels}")

    def __str__(self) -> str:
        return self.label


class PrivacySettingsError(SettingsError, ValueError):
    """The ``privacy`` settings are malformed; the message says which key and why."""


@dataclass(frozen=True)
class ClassifiedSpan:
    """A classified stretch of text: offsets, level and why — never the text itself."""

    start: int
    end: int
    classification: Classification
    reason: str


@dataclass(frozen=True)
class ClassificationResult:
    """The classification of a text (the highest of its spans) and the spans behind it."""

    classification: Classification
    spans: tuple[ClassifiedSpan, ...] = ()

    @property
    def reasons(self) -> list[str]:
        """Distinct reasons of the spans at the text's classification, in text order."""
        top = [s.reason for s in self.spans if s.classification == self.classification]
        return list(dict.fromkeys(top))


#: A marker, after the backslashes before it: an odd number escapes it (``\\[lookback:…]``
#: is literal text, ``\\\\[lookback:…]`` an escaped backslash and then a marker).
_MARKER = re.compile(r"(\\*)\[(/?)lookback:(internal|sensitive|local-only)\]", re.IGNORECASE)


def _markers(text: str) -> Iterator[re.Match[str]]:
    """The markers of ``text`` that are not escaped."""
    return (match for match in _MARKER.finditer(text) if len(match.group(1)) % 2 == 0)


def without_markers(text: str) -> str:
    """``text`` as it is shown: its markers say how private a span is and are not its
    content, so they are left out (an escaped one is text and stays)."""
    if "lookback:" not in text.lower():
        return text
    parts, kept_to = [], 0
    for match in _markers(text):
        parts += [text[kept_to:match.start()], match.group(1)]
        kept_to = match.end()
    return "".join(parts) + text[kept_to:]


def marker_spans(text: str) -> list[ClassifiedSpan]:
    """Spans the user marked with ``[lookback:<level>]…[/lookback:<level>]``."""
    spans: list[ClassifiedSpan] = []
    open_at: dict[Classification, int] = {}
    for match in _markers(text):
        level = Classification.parse(match.group(3))
        reason = f"marker:{level.label}"
        if not match.group(2):
            open_at.setdefault(level, match.start(2) - 1)
        elif level in open_at:
            spans.append(ClassifiedSpan(open_at.pop(level), match.end(), level, reason))
        else:  # closing marker whose opening was cut off before the excerpt began
            spans.append(ClassifiedSpan(0, match.end(), level, reason))
    for level, start in open_at.items():  # unclosed: to the end of the text
        spans.append(ClassifiedSpan(start, len(text), level, f"marker:{level.label}"))
    return spans


def secret_spans(text: str) -> list[ClassifiedSpan]:
    """Spans where a credential detector fired (``sensitive``; private keys ``local-only``)."""
    return [
        ClassifiedSpan(
            finding.start,
            finding.end,
            Classification.LOCAL_ONLY
            if finding.detector == PRIVATE_KEY
            else Classification.SENSITIVE,
            f"secret:{finding.detector}",
        )
        for finding in find_secrets(text)
    ]


def classify_spans(text: str) -> ClassificationResult:
    """Classify ``text`` and say which spans (offsets and reasons) decided it."""
    if not isinstance(text, str):
        raise TypeError(f"classify expects str, got {type(text).__name__}")
    spans = sorted(marker_spans(text) + secret_spans(text), key=lambda s: (s.start, s.end))
    level = max((span.classification for span in spans), default=Classification.NORMAL)
    return ClassificationResult(level, tuple(spans))


def classify(text: str) -> Classification:
    """The classification of ``text``: the highest of its markers and detected secrets."""
    return classify_spans(text).classification


def classify_source(text: str | None) -> ClassificationResult:
    """The privacy gate's classifier: one source row, judged on its whole indexed text."""
    return classify_spans(text if isinstance(text, str) else "")


def _provider_key(provider: str) -> str:
    return provider.strip().lower()


@dataclass(frozen=True)
class Verdict:
    """What the gate decided about one source: its classification and, when it is
    withheld, why (the one wording every path reports; never any text of the source)."""

    classification: Classification
    reason: str | None = None

    @property
    def admitted(self) -> bool:
        return self.reason is None


@dataclass(frozen=True)
class PrivacyPolicy:
    """The highest classification each provider may see.

    ``local_providers`` run on this machine and may see everything (``local-only``
    included); an entry in ``providers`` sets a provider's level explicitly; every
    other provider gets ``default_max``. Only a local provider may be given
    ``local-only``: that level means the text never leaves this machine.
    """

    default_max: Classification = Classification.INTERNAL
    local_providers: frozenset[str] = frozenset()
    providers: Mapping[str, Classification] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.default_max == Classification.LOCAL_ONLY:
            raise PrivacySettingsError(
                "privacy.default_max cannot be local-only: unknown providers may be remote; "
                "list providers running on this machine in privacy.local_providers"
            )
        for name, level in self.providers.items():
            if level == Classification.LOCAL_ONLY and name not in self.local_providers:
                raise PrivacySettingsError(
                    f"privacy.providers.{name} cannot be local-only unless {name!r} is in "
                    "privacy.local_providers (local-only text never leaves this machine)"
                )

    @classmethod
    def from_settings(cls, settings: Settings | Privacy | None) -> PrivacyPolicy:
        """The policy of the typed settings (``lookback.settings``: their shape is checked
        where they are loaded; the levels and the local-only rule here). Build it once and
        keep it (``lookback.api.privacy_policy``); ``None`` is the built-in default."""
        if settings is None:
            return cls()
        section = settings if isinstance(settings, Privacy) else settings.privacy
        return cls(
            default_max=Classification.parse(section.default_max),
            local_providers=frozenset(_provider_key(name) for name in section.local_providers
                                      if name.strip()),
            providers={_provider_key(name): Classification.parse(level)
                       for name, level in section.providers.items()},
        )

    def max_for(self, provider: str | None) -> Classification:
        """The highest classification ``provider`` may see (None: an unnamed remote one)."""
        if provider is None or not provider.strip():
            return self.default_max
        key = _provider_key(provider)
        if key in self.providers:
            return self.providers[key]
        if key in self.local_providers:
            return Classification.LOCAL_ONLY
        return self.default_max

    def admits(self, level: Classification, provider: str | None) -> bool:
        """Whether ``provider`` may see text classified ``level``."""
        return level <= self.max_for(provider)

    def gate(self, source: str | ClassificationResult | None,
             provider: str | None) -> Verdict:
        """The one privacy gate: may ``provider`` see the source whose whole indexed text
        is ``source`` (or its ``classify_source`` result, memoized by the caller)?"""
        result = source if isinstance(source, ClassificationResult) else \
            classify_source(source)
        allowed_max = self.max_for(provider)
        if result.classification <= allowed_max:
            return Verdict(result.classification)
        return Verdict(result.classification,
                       f"privacy: {result.classification.label} exceeds {allowed_max.label} "
                       f"allowed for provider {provider or '(unnamed)'} "
                       f"({', '.join(result.reasons)})")

    def apply(self, evidence: list[JsonObject], provider: str | None,
              sources: list[str | None] | None = None) -> tuple[list[JsonObject], list[JsonObject]]:
        """``gate`` over a list: split ``evidence`` into what ``provider`` may see and what
        it may not.

        Each item is classified from its ``excerpt``, the text of its ``message``, the
        whole text of its source row when ``sources`` gives it (one per item; callers
        that read rows from the index always do) and never below a ``classification``
        it already carries. Returned items are copies with ``classification`` filled in
        (its label). Excluded records are ``{"source", "entry_id", "session_id",
        "classification", "reason"}``.
        """
        allowed: list[JsonObject] = []
        excluded: list[JsonObject] = []
        for position, item in enumerate(evidence):
            problem = _malformed(item)
            if problem:
                excluded.append(excluded_record(item, "unclassified",
                                                f"malformed evidence: {problem}"))
                continue
            result = classify_evidence(item)
            if sources is not None:
                result = _highest(result, classify_source(sources[position]))
            verdict = self.gate(result, provider)
            if verdict.reason is not None:
                excluded.append(excluded_record(item, verdict.classification.label,
                                                verdict.reason))
            else:
                allowed.append({**item, "classification": verdict.classification.label})
        return allowed, excluded


def granted(section: Privacy, ceiling: Classification) -> Privacy:
    """The privacy settings of a client granted ``ceiling`` (a reader token's ``privacy``):
    whatever provider its request names, it sees at most what ``section`` gives that
    provider and never above ``ceiling``. The provider is the client's claim, so it may
    narrow what the grant allows, never widen it."""
    if ceiling == Classification.LOCAL_ONLY:
        return section  # nothing is above it: the configured policy as it is
    policy = PrivacyPolicy.from_settings(section)
    names = set(policy.providers) | policy.local_providers
    return msgspec.structs.replace(
        section, default_max=min(policy.default_max, ceiling).label, local_providers=(),
        providers={name: min(policy.max_for(name), ceiling).label for name in names})


def classify_evidence(item: Mapping[str, Any]) -> ClassificationResult:
    """Classify one evidence item: its excerpt, its message text and any prior label."""
    excerpt = classify_spans(item.get("excerpt") or "")
    message = item.get("message")
    envelope = classify_spans(message_text(message)) if isinstance(message, dict) else None
    prior = item.get("classification")
    results = [excerpt] + ([envelope] if envelope else [])
    if prior:
        level = Classification.parse(prior)
        results.append(
            ClassificationResult(level, (ClassifiedSpan(0, 0, level, "prior-classification"),))
        )
    top = max(result.classification for result in results)
    spans = tuple(span for result in results for span in result.spans)
    return ClassificationResult(top, spans)


def _highest(*results: ClassificationResult) -> ClassificationResult:
    top = max(result.classification for result in results)
    return ClassificationResult(top, tuple(span for r in results for span in r.spans))


def _malformed(item: Any) -> str | None:
    """Why ``item`` cannot be classified safely, or None."""
    if not isinstance(item, dict):
        return "not an object"
    for key in ("entry_id", "session_id"):
        if not isinstance(item.get(key), str) or not item[key]:
            return f"missing {key}"
    if not isinstance(item.get("excerpt"), str):
        return "excerpt is not text"
    prior = item.get("classification")
    if prior is not None:
        try:
            Classification.parse(prior)
        except PrivacySettingsError:
            return "unknown classification"
    return None


def excluded_record(item: Any, classification: str, reason: str) -> JsonObject:
    """What ``excluded`` lists of a withheld source: its ids, classification and the
    reason — never its text."""
    entry_id = item.get("entry_id") if isinstance(item, dict) else None
    session_id = item.get("session_id") if isinstance(item, dict) else None
    return {
        "source": f"{session_id}:{entry_id}",
        "entry_id": entry_id,
        "session_id": session_id,
        "classification": classification,
        "reason": reason,
    }

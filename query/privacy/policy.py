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

**The one gate.** Every path that returns session text — retrieval, ``/v1/search``,
``/v1/source``, ``/v1/plan``, ``lookback.api``, the CLI and the Pi tool built on them —
classifies with ``classify_source`` (the WHOLE indexed text of the source row, never
just the excerpt it shows: a PEM body or a URL password outside the excerpt window still
withholds it) and decides with ``PrivacyPolicy.admits`` / ``PrivacyPolicy.apply`` under
the policy built from the settings (``PrivacyPolicy.from_settings``).

``apply`` treats each evidence message atomically: when any span is above the
provider's level the whole source is withheld, and the excluded record keeps only the
source id, classification and reason — never text.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lookback.errors import SettingsError
from lookback.query.context.messages import message_text
from lookback.query.privacy.secrets import PRIVATE_KEY, find_secrets


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


_MARKER = re.compile(r"\[(/?)lookback:(internal|sensitive|local-only)\]", re.IGNORECASE)


def marker_spans(text: str) -> list[ClassifiedSpan]:
    """Spans the user marked with ``[lookback:<level>]…[/lookback:<level>]``."""
    spans: list[ClassifiedSpan] = []
    open_at: dict[Classification, int] = {}
    for match in _MARKER.finditer(text):
        level = Classification.parse(match.group(2))
        reason = f"marker:{level.label}"
        if not match.group(1):
            open_at.setdefault(level, match.start())
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


#: Settings keys of the ``privacy`` section.
_SETTINGS_KEYS = frozenset({"default_max", "local_providers", "providers"})


def _provider_key(provider: str) -> str:
    return provider.strip().lower()


def _provider_names(value: Any) -> frozenset[str]:
    """``local_providers`` as a list from TOML or a comma-separated string from env."""
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, Iterable) or isinstance(value, Mapping):
        raise PrivacySettingsError("privacy.local_providers must be a list of provider names")
    names = []
    for name in value:
        if not isinstance(name, str):
            raise PrivacySettingsError(
                f"privacy.local_providers holds {name!r}; provider names are strings"
            )
        if name.strip():
            names.append(_provider_key(name))
    return frozenset(names)


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
    def from_settings(cls, settings: Mapping[str, Any] | None) -> PrivacyPolicy:
        """Build the policy from settings (TOML/env dict) holding a ``privacy`` section.

        Example: ``{"privacy": {"default_max": "internal", "local_providers": ["ollama"],
        "providers": {"anthropic": "internal"}}}``. Missing keys take the defaults;
        malformed ones raise ``PrivacySettingsError`` naming the key.
        """
        if settings is None:
            return cls()
        if not isinstance(settings, Mapping):
            raise PrivacySettingsError("settings must be a mapping")
        section = settings.get("privacy") or {}
        if not isinstance(section, Mapping):
            raise PrivacySettingsError("the privacy settings must be a table/mapping")
        unknown = sorted(set(section) - _SETTINGS_KEYS)
        if unknown:
            raise PrivacySettingsError(
                f"unknown privacy setting(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(_SETTINGS_KEYS))}"
            )
        providers = section.get("providers") or {}
        if not isinstance(providers, Mapping):
            raise PrivacySettingsError("privacy.providers must map provider names to levels")
        return cls(
            default_max=Classification.parse(section.get("default_max", "internal")),
            local_providers=_provider_names(section.get("local_providers", ())),
            providers={
                _provider_key(str(name)): Classification.parse(level)
                for name, level in providers.items()
            },
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

    def apply(self, evidence: list[dict], provider: str | None,
              sources: list[str | None] | None = None) -> tuple[list[dict], list[dict]]:
        """Split ``evidence`` into what ``provider`` may see and what it may not.

        Each item is classified from its ``excerpt``, the text of its ``message``, the
        whole text of its source row when ``sources`` gives it (one per item; callers
        that read rows from the index always do) and never below a ``classification``
        it already carries. Returned items are copies with ``classification`` filled in
        (its label). Excluded records are ``{"source", "entry_id", "session_id",
        "classification", "reason"}``.
        """
        allowed_max = self.max_for(provider)
        allowed: list[dict] = []
        excluded: list[dict] = []
        for position, item in enumerate(evidence):
            problem = _malformed(item)
            if problem:
                excluded.append(excluded_record(item, "unclassified",
                                                f"malformed evidence: {problem}"))
                continue
            result = classify_evidence(item)
            if sources is not None:
                result = _highest(result, classify_source(sources[position]))
            if result.classification > allowed_max:
                reason = (
                    f"privacy: {result.classification.label} exceeds {allowed_max.label} "
                    f"allowed for provider {provider or '(unnamed)'}"
                    f" ({', '.join(result.reasons)})"
                )
                excluded.append(excluded_record(item, result.classification.label, reason))
            else:
                allowed.append({**item, "classification": result.classification.label})
        return allowed, excluded


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


def excluded_record(item: Any, classification: str, reason: str) -> dict:
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

"""query.privacy.secrets: the run gates, the anchor automaton, the per-anchor choice of
detectors and anchored matching (``Gate.anchored``) change cost, never results.

The reference below is the detector search as it was before them: a substring test
per anchor, then the windows, then the patterns, with no ``token_run``/``alnum_run``
gate. Every text of every fixture, the secret corpora of the privacy tests, each
secret inside real session text and near-miss variants must give the same findings,
offsets included.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lookback.query.privacy.secrets import (
    MAX_WINDOW,
    TRIGGER_WINDOW,
    SecretFinding,
    detectors,
    find_secrets,
)
from tests import test_privacy
from tests.server import test_privacy_gate

FIXTURES = Path(__file__).parent / "fixtures"


def reference_windows(lowered: str, window) -> list[tuple[int, int]]:
    windows: list[tuple[int, int]] = []
    for match in window.finditer(lowered):
        low = max(0, match.start() - TRIGGER_WINDOW)
        high = min(len(lowered), match.end() + TRIGGER_WINDOW)
        if windows and low <= windows[-1][1] and high - windows[-1][0] <= MAX_WINDOW:
            windows[-1] = (windows[-1][0], high)
        else:
            windows.append((low, high))
    return windows


def reference_find(text: str) -> list[SecretFinding]:
    """``find_secrets`` without the run gates and the anchor automaton (the same decoding
    of encoded runs around them)."""
    return find_secrets(text, reference_plain)


def reference_plain(text: str) -> list[SecretFinding]:
    lowered = text.lower()
    if len(lowered) != len(text):
        lowered = "".join(char.lower()[:1] or char for char in text)
    findings = []
    for detector in detectors():
        if not any(anchor in lowered for anchor in detector.anchors):
            continue
        spans = [(0, len(text))] if detector.window is None else reference_windows(
            lowered, detector.window
        )
        match = next(
            (found for low, high in spans for pattern in detector.patterns
             if (found := pattern.search(text, low, high))),
            None,
        )
        if match:
            findings.append(SecretFinding(detector.name, *match.span()))
    return sorted(findings, key=lambda f: (f.start, f.detector))


def strings(value) -> list[str]:
    """Every string inside a decoded JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return [text for item in value for text in strings(item)]
    return []


def fixture_texts() -> list[str]:
    """Every string of every JSON/JSONL fixture, and every other fixture file whole."""
    texts = []
    for path in sorted(p for p in FIXTURES.rglob("*") if p.is_file()):
        raw = path.read_text(encoding="utf-8")
        texts.append(raw)
        if path.suffix == ".jsonl":
            texts += [t for line in raw.splitlines() if line.strip()
                      for t in strings(json.loads(line))]
        elif path.suffix == ".json":
            texts += strings(json.loads(raw))
    return [text for text in dict.fromkeys(texts) if text]


def secret_corpus() -> list[str]:
    gate_secrets = [text for text, _ in test_privacy_gate.SECRETS.values()]
    return [*test_privacy.SECRETS.values(), test_privacy.PEM, *gate_secrets,
            test_privacy_gate.PEM[1]]


def variants(secret: str) -> list[str]:
    """The secret as is, inside real text, cut short, upper/lower-cased and with
    non-ASCII look-alikes (Kelvin sign, long s, dotless i) in place of letters."""
    filler = test_privacy.fixture_texts()[5][:3000]
    return [
        secret, f"{filler}\n{secret}\n{filler}", secret[:-3], secret[:-10],
        secret.upper(), secret.lower(), secret.replace("k", "\u212a"),
        secret.replace("s", "\u017f"), secret.replace("i", "\u0131"),
        secret.replace("0", "\u0660"), secret + "é" * 40,
    ]


#: Texts built to reach the gated detectors: long runs next to their keywords.
NEAR_MISSES = [
    "api_key = " + "a" * 44, "api_key = " + "a" * 43, "ibm_cloud_iam_key: " + "A-_9" * 11,
    "cloudant_key = " + "abcdefgh" * 3, "cloudant_key = " + "abcdefgh" * 3 + "é",
    "cl_pass: " + "0123456789abcdef" * 4, "https://user:" + "ab" * 12 + "@acct.cloudant.com",
    "sl_api_key = " + "ab12" * 16, "http://api.softlayer.com/soap/v3/" + "ab12" * 16,
    "AC" + "0123abcd" * 4, "SK" + "0123abcd" * 4 + "x", "12345678:" + "A_b-" * 9,
    "M" + "a" * 23 + ".abcdef." + "b" * 27, "0123456789abcdef" * 2 + "-us12",
    "secret_access_key = " + "ab12cd34" * 6, "ibm_cos_secret_key: " + "AB12CD34" * 6,
    "token = " + "x" * 43 + "é", "\u0661" * 9 + ":" + "a" * 35, "ac" + "\u212a" * 32,
]


def test_the_fixtures_hold_enough_real_text():
    assert len(fixture_texts()) > 5000


@pytest.mark.parametrize("name", ["fixtures", "secrets", "near misses"])
def test_the_run_gates_change_no_finding(name):
    texts = {
        "fixtures": fixture_texts,
        "secrets": lambda: [v for secret in secret_corpus() for v in variants(secret)],
        "near misses": lambda: [v for text in NEAR_MISSES + test_privacy.NOT_SECRETS
                                for v in variants(text)],
    }[name]()
    differences = [text[:60] for text in texts if find_secrets(text) != reference_find(text)]
    assert differences == []


def test_the_near_misses_reach_the_gated_detectors():
    """The comparison above is only worth something if the gated detectors fire."""
    gated = {d.name for d in detectors() if d.token_run or d.alnum_run}
    fired = {f.detector for text in NEAR_MISSES for f in find_secrets(text)}
    assert gated <= fired, sorted(gated - fired)

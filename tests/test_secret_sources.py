"""query/privacy/secrets.py's detectors and their sources agree.

Every detector names its source (``detector_sources``). The gitleaks rules taken are vendored
unchanged in tests/secret_rules/gitleaks.json (commit and date there): each cited rule is in
the copy and each rule of the copy is cited, and on a sample of each rule gitleaks' own regex
matches and a detector citing that rule finds it (the table may be broader than its source,
never narrower). Every detect-secrets regex plugin is used, or left out here with the reason.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import re
from pathlib import Path

import detect_secrets.plugins
import pytest

from lookback.query.privacy.secrets import detector_sources, find_secrets

GITLEAKS = json.loads((Path(__file__).parent / "secret_rules" / "gitleaks.json").read_text())
RULES: dict[str, dict] = GITLEAKS["rules"]

#: detect-secrets plugins not used, and why (query/privacy/secrets.py's docstring).
LEFT_OUT = {
    "ArtifactoryDetector": "matches plain capitalised words such as APACHEKAFKA",
    "JwtTokenDetector": "backtracks quadratically on long base64 runs; replaced",
    "KeywordDetector": "flags ordinary code; replaced by the credential-name rules",
    "Base64HighEntropyString": "flags hashes and ids",
    "HexHighEntropyString": "flags hashes and ids",
    "IPPublicDetector": "an address is not a secret",
}

JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ."
       "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
#: A text each rule finds (fake values in each issuer's documented shape).
SAMPLES = {
    "1password-secret-key": "A3-ASWWYB-798JRY-LJVD4-23DC2-86TVM-H43EB",
    "1password-service-account-token": "ops_eyJ" + "aB3dE6fG9hJ2kL5mN8pQ1rS4tU7vW0xY" * 9,
    "age-secret-key": "AGE-SECRET-KEY-1QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7LQPZRY9X8GF2TVDW0S3JN54KHCE",
    "alibaba-access-key-id": "id: LTAI5tBcc9SecYAo3pXzKbQ7 ",
    "alibaba-secret-key": "alibaba_secret: abcdefghij0123456789abcdefghij ",
    "anthropic-api-key": "sk-ant-api03-" + ("aB3dE6fG9hJ2kL5mN8pQ1rS4tU7vW0xY" * 3)[:93]
                         + "AA ",
    "atlassian-api-token": "ATATT3" + ("xFfGF0aB3dE6fG9hJ2kL5mN8pQ1rS4tU7vW0xY" * 5)[:186] + " ",
    "curl-auth-header": 'curl -H "Authorization: Bearer 4f9d2c8a1b7e6f3d0c5a9b8e" https://h',
    "curl-auth-user": "curl -u admin:s3cretpass https://ci.example.com",
    "databricks-api-token": "dapi0123456789abcdef0123456789abcdef ",
    "digitalocean-access-token": "doo_v1_" + "0123456789abcdef" * 4 + " ",
    "digitalocean-pat": "dop_v1_" + "0123456789abcdef" * 4 + " ",
    "digitalocean-refresh-token": "dor_v1_" + "0123456789abcdef" * 4 + " ",
    "doppler-api-token": "dp.pt.U8h3nK2bLq9ZxW4cV7tR1yE6uI0oPaSdFgHjKlZxCvB",
    "gcp-api-key": "key AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW ",
    "generic-api-key": 'api_key = "k8Jd93LmQ2xP0vRt"',
    "github-app-token": "ghs_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
    "github-fine-grained-pat": "github_pat_11ABCDEFG0" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ01" * 2
                               + "aBcDeFgHiJkLmNoPqRsTuV",
    "github-oauth": "gho_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
    "github-pat": "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
    "github-refresh-token": "ghr_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
    "grafana-cloud-api-token": "glc_aB3dE6fG9hJ2kL5mN8pQ1rS4tU7vW0xYzA= ",
    "grafana-service-account-token": "glsa_aB3dE6fG9hJ2kL5mN8pQ1rS4tU7vW0xY_0a1b2c3d ",
    "hashicorp-tf-api-token": "abcdefghij1234.atlasv1." + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" * 2,
    "heroku-api-key-v2": "HRKU-AA" + "aB3dE6fG9hJ2kL5mN8pQ1rS4tU7vW" * 2 + " ",
    "huggingface-access-token": "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZaBcDeFgH ",
    "huggingface-organization-api-token": "api_org_aBcDeFgHiJkLmNoPqRsTuVwXyZaBcDeFgH ",
    "jwt": f"token {JWT} ",
    "linear-api-key": "lin_api_" + "aB3dE6fG9hJ2kL5mN8pQ1rS4tU7vW0xY12345678",
    "mailgun-private-api-token": "mailgun_key: key-0123456789abcdef0123456789abcdef ",
    "mailgun-pub-key": "mailgun_pub: pubkey-0123456789abcdef0123456789abcdef ",
    "mailgun-signing-key": "mailgun_signing = 1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d-1a2b3c4d-5e6f7a8b ",
    "new-relic-browser-api-token": "newrelic_key: NRJS-0a1b2c3d4e5f6a7b8c9 ",
    "new-relic-insert-key": "newrelic_key: NRII-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z ",
    "new-relic-user-api-key": "newrelic_key: NRAK-7JQ2XK4L9P3M8N1B6V5C0Z2A4SD ",
    "npm-access-token": "npm_aB3dE6fG9hJ2kL5mN8pQ1rS4tU7vW0xY1234 ",
    "okta-access-token": "okta_token: 00QCjAl4MlV-WPXM-ABcdefghijklmnopqrstuvwXY ",
    "openai-api-key": "sk-proj-" + ("aB3dE6fG9hJ2kL5mN8pQ1rS4tU7vW0xY1" * 3)[:74] + "T3BlbkFJ"
                      + ("aB3dE6fG9hJ2kL5mN8pQ1rS4tU7vW0xY1" * 3)[:74] + " ",
    "perplexity-api-key": "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 ",
    "planetscale-api-token": "pscale_tkn_aB3dE6fG9hJ2kL5mN8pQ1rS4tU7vW0xY ",
    "planetscale-oauth-token": "pscale_oauth_aB3dE6fG9hJ2kL5mN8pQ1rS4tU7vW0xY ",
    "planetscale-password": "pscale_pw_aB3dE6fG9hJ2kL5mN8pQ1rS4tU7vW0xY ",
    "postman-api-token": "PMAK-0123456789abcdef01234567-0123456789abcdef0123456789abcdef01 ",
    "private-key": "-----BEGIN RSA PRIVATE KEY-----\n" + "MIIEpAIBAAKCAQEA49/MVm753TwlYya8" * 3
                   + "\n-----END RSA PRIVATE KEY-----",
    "pulumi-api-token": "pul-3f9a1c2b7d8e4f5a6b7c8d9e0f1a2b3c4d5e6f7a ",
    "shopify-access-token": "shpat_0123456789abcdef0123456789abcdef",
    "shopify-custom-access-token": "shpca_0123456789abcdef0123456789abcdef",
    "shopify-private-app-access-token": "shppa_0123456789abcdef0123456789abcdef",
    "shopify-shared-secret": "shpss_0123456789abcdef0123456789abcdef",
    "stripe-access-token": "sk_test_4eC39HqLyjWDarjtT1zdp7dc ",  # sk_live_: detect-secrets
    "vault-batch-token": "hvb." + "aB3dE6fG9hJ2kL5mN8pQ1rS4tU7vW0xY" * 5 + " ",
    "vault-service-token": "hvs." + "aB3dE6fG9hJ2kL5mN8pQ1rS4tU7vW0xY" * 3 + " ",
}


def go_to_python(regex: str) -> str:
    """A gitleaks (Go RE2) regex in Python's syntax: ``(?i)`` after the start holds to the
    end of its group in RE2 and is an error in Python, so it becomes a group ``(?i:…)``
    that ends there; ``\\z`` is ``\\Z``."""
    regex = regex.replace(r"\z", r"\Z")
    while (flag := regex.find("(?i)", 1)) > 0:
        end = _group_end(regex, flag + 4)
        regex = regex[:flag] + "(?i:" + regex[flag + 4:end] + ")" + regex[end:]
    return regex


def _group_end(regex: str, position: int) -> int:
    """Where the group around ``position`` closes (the text's end outside any group)."""
    depth, in_class = 0, False
    while position < len(regex):
        char = regex[position]
        if char == "\\":
            position += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "(":
            depth += 1
        elif char == ")":
            if depth == 0:
                return position
            depth -= 1
        position += 1
    return position


def cited() -> dict[str, set[str]]:
    """gitleaks rule id -> the detectors citing it."""
    found: dict[str, set[str]] = {}
    for name, source in detector_sources().items():
        for part in source.split():
            if part.startswith("gitleaks:"):
                found.setdefault(part.removeprefix("gitleaks:"), set()).add(name)
    return found


def test_the_copy_names_its_source():
    assert GITLEAKS["source"].endswith(f"{GITLEAKS['commit']}/config/gitleaks.toml")
    assert GITLEAKS["copied"] and GITLEAKS["license"].startswith("MIT")


def test_every_cited_rule_is_in_the_copy_and_every_copied_rule_is_cited():
    assert set(cited()) == set(RULES)
    assert set(SAMPLES) == set(RULES)


def test_every_detector_names_a_source():
    for name, source in detector_sources().items():
        assert all(part.split(":")[0] in {"detect-secrets", "gitleaks", "vendor", "lookback"}
                   for part in source.split()), (name, source)


@pytest.mark.parametrize("rule", sorted(RULES))
def test_the_table_finds_what_its_gitleaks_rule_finds(rule):
    sample = SAMPLES[rule]
    assert re.search(go_to_python(RULES[rule]["regex"]), sample), "the sample is not the rule's"
    assert any(keyword in sample.lower() for keyword in RULES[rule]["keywords"])
    found = {finding.detector for finding in find_secrets(sample)}
    assert found & cited()[rule], (rule, found)


def test_every_detect_secrets_regex_plugin_is_used_or_left_out_for_a_reason():
    plugins = {cls.__name__ for module in _plugin_modules() for cls in vars(module).values()
               if inspect.isclass(cls) and cls.__module__ == module.__name__
               and not inspect.isabstract(cls) and getattr(cls, "secret_type", None)}
    used = {part.removeprefix("detect-secrets:") for source in detector_sources().values()
            for part in source.split() if part.startswith("detect-secrets:")}
    assert plugins == used | set(LEFT_OUT), sorted(plugins ^ (used | set(LEFT_OUT)))
    assert not used & set(LEFT_OUT)


def _plugin_modules() -> list:
    return [importlib.import_module(f"detect_secrets.plugins.{info.name}")
            for info in pkgutil.iter_modules(detect_secrets.plugins.__path__)
            if info.name != "base"]

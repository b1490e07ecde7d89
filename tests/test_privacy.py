"""query.privacy: classification of real-looking secrets, markers, the provider policy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lookback.errors import SettingsError
from lookback.query.privacy.policy import (
    Classification,
    PrivacyPolicy,
    PrivacySettingsError,
    classify,
    classify_spans,
)
from lookback.settings import Privacy, load_settings
from tests.server import test_privacy_gate

FIXTURES = Path(__file__).parent / "fixtures" / "pi-sessions"

# Real-looking, fake credentials (AWS's documented example key and made-up tokens).
SECRETS = {
    "aws access key": "export AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE",
    "aws secret key": "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "github token": "git clone https://ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789@github.com/o/r",
    "github fine-grained": "GH_TOKEN=github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789"
    "abcdefghijklmnopqrstuvwxyzABCDEFG",
    "slack token": "SLACK_BOT_TOKEN=xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "jwt": "Authorization: Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3"
    "ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    "postgres url": "DATABASE_URL=postgres://app_user:hunter2pass@db.internal:5432/app",
    "openai project key": "OPENAI_API_KEY=sk-proj-Abc123def456GHI789jkl012MNO345pqr678STU901",
    "anthropic key": 'client = Anthropic(api_key="sk-ant-api03-AbC123dEf456GhI789jKl012MnO")',
    "google api key": "const key = 'AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvWx';",
    "stripe live key": "stripe.api_key = 'sk_live_4eC39HqLyjWDarjtT1zdp7dc'",
    "password assignment": 'db_config = {"password": "Tr0ub4dor&3-horse"}',
    "telegram bot token": "TELEGRAM_TOKEN=1234567890:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1",
    "cloudant password": 'cloudant_password = "' + "0123456789abcdef" * 4 + '"',
    "npm token": "//registry.npmjs.org/:_authToken=npm_a1B2c3D4e5F6g7H8i9J0kLmNoPqRsTuVwXyZ",
    # *_PASSWORD / *_SECRET / *_TOKEN assignments: env, YAML and JSON forms.
    "env password, quoted": 'DB_PASSWORD="hunter2hunter2"',
    "env password, plain": "POSTGRES_PASSWORD=s3cr3tPassw0rd",
    "yaml secret": "  client_secret: 9f8e7d6c5b4a3x",
    "json token": '{"SLACK_BOT_TOKEN": "abc123def456ghi"}',
    "compose password": "      - MYSQL_ROOT_PASSWORD=example123",
    "password-only url": "REDIS_URL=redis://:Sup3rSecretPw@cache.internal:6379/0",
    # beside the shapes of tests/server/test_privacy_gate.py
    "mysqldump -p": "mysqldump -h db -u backup -pBackUp99 app > app.sql",
    "curl -u": "curl -u admin:s3cretpass https://ci.example.com/api/json",
    "basic auth header": "Authorization: Basic YWRtaW46czNjcmV0cGFzc3dk",
    "x-auth-token": "X-Auth-Token: 8d3f1a9c7e5b2d4f6a8c",
    "private-token": 'curl --header "PRIVATE-TOKEN: f00dcafe1234beef5678" https://gitlab',
    "json dotted password": '{"password": "Horse.Battery.Staple"}',
    "yaml dotted digits": "  client_secret: abc123.def456.ghi789",
    "stripe test key": "stripe.api_key = sk_test_4eC39HqLyjWDarjtT1zdp7dc",
    "netrc one line": "machine ftp.example.com login bob password hunter22",
    "sshpass": "sshpass -p 'Sup3r$ecret' ssh deploy@host",
    "jwt in a url": "https://cdn.example.com/a.png?token=eyJ0eXAiOiJKV1QiLCJhbGciOiJIUzI1NiJ9"
    ".eyJzdWIiOiJ1cm46YXBwOjdlMGQxODg5In0.c2lnbmF0dXJlMTIz",
}

PEM = (
    "Here is the deploy key:\n-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)


def fixture_texts() -> list[str]:
    """Every text a Pi fixture gives the model: message text, tool calls, outputs."""
    texts = []
    for path in sorted(FIXTURES.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            message = entry.get("message") or {}
            content = message.get("content")
            if isinstance(content, str):
                texts.append(content)
            for block in content if isinstance(content, list) else []:
                if block.get("type") == "text":
                    texts.append(block["text"])
                elif block.get("type") == "toolCall":
                    texts.append(json.dumps(block.get("arguments")))
            texts += [message.get("output") or "", entry.get("summary") or ""]
    return [text for text in texts if text]


def test_classifications_are_ordered_and_spelled_like_the_settings():
    assert Classification.NORMAL < Classification.INTERNAL < Classification.SENSITIVE
    assert Classification.SENSITIVE < Classification.LOCAL_ONLY
    assert [c.label for c in Classification] == ["normal", "internal", "sensitive", "local-only"]
    assert Classification.parse("Local_Only") is Classification.LOCAL_ONLY
    with pytest.raises(PrivacySettingsError, match="unknown privacy classification 'secret'"):
        Classification.parse("secret")


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_detected_secrets_are_sensitive_and_never_echoed(name):
    text = f"Some context before.\n{SECRETS[name]}\nAnd after."
    result = classify_spans(text)
    assert result.classification is Classification.SENSITIVE, name
    assert all(reason.startswith("secret:") for reason in result.reasons)
    secret_part = SECRETS[name].split("=", 1)[-1].strip()[-12:]
    assert secret_part not in repr(result)


def test_private_keys_are_local_only():
    result = classify_spans(PEM)
    assert result.classification is Classification.LOCAL_ONLY
    assert result.reasons == ["secret:Private Key"]
    start = min(span.start for span in result.spans)
    assert PEM[start:].startswith("-----BEGIN OPENSSH PRIVATE KEY")


def test_real_session_text_stays_normal():
    texts = fixture_texts()
    assert len(texts) > 2000  # the two large real sessions are in there
    flagged = [text[:80] for text in texts if classify(text) is not Classification.NORMAL]
    assert flagged == []


#: Ordinary code and prose about credentials: near misses of every detector's shape.
NOT_SECRETS = [
    "password = getpass.getpass()",
    'token = os.environ["GITHUB_TOKEN"]',
    "See https://github.com/badlogic/pi-mono for the sk-learn comparison",
    'api_key = "${OPENAI_API_KEY}"',
    "const sessionKey = `${cwd}:${id}`;",
    "db_password: string;",
    "DB_PASSWORD=${DB_PASSWORD}",
    "const token = process.env.GITHUB_TOKEN;",
    "max_tokens: 4096",
    "secret: Optional[str] = None",
    "token = next_token",
    "redis://localhost:6379/0",
    # assignments whose value is a call, a reference, a type, a number or a placeholder
    "password = get_password()", "token_count=5", "password = self.password",
    "token: accessToken,", "apiKey = apiKey;", "client(api_key=api_key)", "password=password,",
    "self.token = token", "SECRET_KEY = env('SECRET_KEY')", "if token == 'none':",
    "password: xxxxxx", "DB_PASSWORD=********", "password: true", "sort(key=lambda x: x)",
    "tokenizer_path = './tok.json'", "secret_name = 'prod-db'", "key = 'value'",
    "primary_key=True", "private_key_path: ~/.ssh/id_rsa", "PWD=/home/me/project",
    "OLDPWD=/home/me", "OPENAI_API_KEY=your-api-key-here", "API_KEY=YOUR_API_KEY",
    "export ANTHROPIC_API_KEY=sk-ant-...", "bypass=enabled1",
    # flags and commands without a credential
    "--password-file path/to/file", "--password-file=/run/secrets/pw", "--token TOKEN",
    "pass the --token flag instead", "use --password to set it", "mysql -u root -p mydb",
    "mysql -P 3306 -h db", "docker login --password-stdin ghcr.io",
    'redis-cli -a "$REDIS_PASSWORD" ping', "aws configure set region eu-west-1",
    'curl -u "$USER:$PASS" https://h', "machine learning password reset",
    # headers without one
    "Authorization: Bearer <token>", "Authorization: Bearer $TOKEN",
    'headers = {"Authorization": f"Bearer {token}"}', "X-Api-Key: YOUR_API_KEY",
    "the bearer token is rotated daily", "X-Request-Id: 1234567890abcdef1234",
    "the session token expired", "Authorization: Basic auth",
]


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_ordinary_code_about_credentials_stays_normal(text):
    assert classify(text) is Classification.NORMAL


def test_markers_classify_their_span():
    text = "public notes [lookback:internal]roadmap for Q3[/lookback:internal] more"
    result = classify_spans(text)
    assert result.classification is Classification.INTERNAL
    (span,) = result.spans
    assert text[span.start : span.end] == "[lookback:internal]roadmap for Q3[/lookback:internal]"
    assert span.reason == "marker:internal"


def test_unclosed_marker_runs_to_the_end_and_orphan_close_from_the_start():
    opened = "ok so far [lookback:sensitive] customer list follows"
    (span,) = classify_spans(opened).spans
    assert (span.end, span.classification) == (len(opened), Classification.SENSITIVE)
    cut = "the excerpt began inside the marked part[/LOOKBACK:LOCAL-ONLY] then public"
    (span,) = classify_spans(cut).spans
    assert span.start == 0 and span.classification is Classification.LOCAL_ONLY


def test_the_highest_span_decides():
    text = "[lookback:internal]a[/lookback:internal] " + SECRETS["github token"]
    result = classify_spans(text)
    assert result.classification is Classification.SENSITIVE
    assert {s.classification for s in result.spans} == {
        Classification.INTERNAL,
        Classification.SENSITIVE,
    }


def test_secret_at_the_end_of_a_megabyte_is_found():
    filler = "\n".join(fixture_texts())[:1_000_000]
    assert classify(filler + "\n" + SECRETS["aws secret key"]) is Classification.SENSITIVE
    dense = "key = token pass secret aws -us _authToken xox //a/ " * 20_000
    assert classify(dense) is Classification.NORMAL
    assert classify(dense + SECRETS["slack token"]) is Classification.SENSITIVE


@pytest.mark.parametrize("run", ["eyJ", "sk-", "//a", "key = token ", "eyJ=", "=eyJa.",
                                 "api_key = ", "--token ", "Bearer ", "X-Api-Key: "])
def test_long_repetitive_runs_stay_linear_and_normal(run):
    # detect-secrets' own JWT regex backtracks quadratically on such a run (minutes).
    text = run * 100_000
    assert classify(text) is Classification.NORMAL
    assert classify(text + " " + SECRETS["jwt"]) is Classification.SENSITIVE


SETTINGS = {
    "privacy": {
        "default_max": "internal",
        "local_providers": ["ollama", "llama.cpp", "lmstudio"],
        "providers": {"anthropic": "internal", "openai": "normal"},
    }
}


def typed(privacy: object, tmp_home: Path | None = None) -> Privacy:
    """``privacy`` as the settings loader makes it (its shape checked there)."""
    home = tmp_home or Path("/nonexistent-lookback-home")
    return load_settings(overrides={"privacy": privacy}, environ={"LOOKBACK_HOME": str(home)}
                         ).privacy


def test_policy_from_settings():
    policy = PrivacyPolicy.from_settings(typed(SETTINGS["privacy"]))
    assert policy.max_for("anthropic") is Classification.INTERNAL
    assert policy.max_for("OpenAI") is Classification.NORMAL
    assert policy.max_for("ollama") is Classification.LOCAL_ONLY
    assert policy.max_for("google") is Classification.INTERNAL
    assert policy.max_for(None) is Classification.INTERNAL


def test_policy_defaults_treat_every_provider_as_remote():
    policy = PrivacyPolicy.from_settings(None)
    assert policy.max_for("ollama") is Classification.INTERNAL
    environ = {"LOOKBACK_HOME": "/nonexistent-lookback-home",
               "LOOKBACK_PRIVACY__LOCAL_PROVIDERS": "ollama, lmstudio",
               "LOOKBACK_PRIVACY__DEFAULT_MAX": "normal"}
    policy = PrivacyPolicy.from_settings(load_settings(environ=environ))
    assert policy.max_for("lmstudio") is Classification.LOCAL_ONLY
    assert policy.max_for("anthropic") is Classification.NORMAL


@pytest.mark.parametrize(
    ("privacy", "message"),
    [
        ({"default_max": "top-secret"}, "unknown privacy classification"),
        ({"default_max": "local-only"}, "default_max cannot be local-only"),
        ({"providers": {"anthropic": "local-only"}}, "anthropic cannot be local-only"),
    ],
)
def test_bad_levels_get_a_clear_error(privacy, message):
    with pytest.raises(PrivacySettingsError, match=message):
        PrivacyPolicy.from_settings(typed(privacy))


@pytest.mark.parametrize(
    ("privacy", "message"),
    [
        ({"providers": ["anthropic"]}, "privacy.providers: expected a table"),
        ({"local_providers": [1]}, r"privacy.local_providers\[0\]: expected `str`"),
        ({"max": "internal"}, "unknown setting 'privacy.max'"),
        ("internal", "setting privacy: expected a table"),
    ],
)
def test_malformed_settings_get_a_clear_error_where_they_are_loaded(privacy, message):
    with pytest.raises(SettingsError, match=message):
        typed(privacy)


def evidence(entry_id: str, excerpt: str, **extra) -> dict:
    return {"entry_id": entry_id, "session_id": "s1", "excerpt": excerpt, **extra}


def test_the_policy_withholds_whole_sources_and_keeps_no_text():
    items = [
        evidence("e1", "public sealed class OracleProvider {}"),
        evidence("e2", "[lookback:internal]release plan[/lookback:internal]"),
        evidence("e3", "config:\n" + SECRETS["postgres url"]),
        evidence("e4", PEM),
    ]
    policy = PrivacyPolicy.from_settings(typed(SETTINGS["privacy"]))
    allowed, excluded = policy.apply(items, "anthropic")
    assert [(i["entry_id"], i["classification"]) for i in allowed] == [
        ("e1", "normal"),
        ("e2", "internal"),
    ]
    assert [(x["source"], x["classification"]) for x in excluded] == [
        ("s1:e3", "sensitive"),
        ("s1:e4", "local-only"),
    ]
    assert set(excluded[0]) == {"source", "entry_id", "session_id", "classification", "reason"}
    assert "Basic Auth Credentials" in excluded[0]["reason"]
    dumped = json.dumps(excluded)
    assert "hunter2pass" not in dumped and "b3BlbnNzaC1rZXkt" not in dumped
    assert "classification" not in items[0]  # inputs are not modified


def test_local_provider_sees_local_only_evidence():
    policy = PrivacyPolicy.from_settings(typed(SETTINGS["privacy"]))
    allowed, excluded = policy.apply([evidence("e4", PEM)], "ollama")
    assert [i["classification"] for i in allowed] == ["local-only"] and excluded == []


def test_message_text_and_prior_classification_count_too():
    marked = {"role": "user", "content": "[lookback:sensitive] from the full entry"}
    items = [
        evidence("e1", "plain excerpt", message=marked),
        evidence("e2", "plain excerpt", classification="sensitive"),
    ]
    allowed, excluded = PrivacyPolicy().apply(items, "anthropic")
    assert allowed == []
    assert [x["classification"] for x in excluded] == ["sensitive", "sensitive"]


def test_malformed_evidence_is_excluded_not_passed_through():
    items = [{"entry_id": "e1", "excerpt": "no session"}, "junk", evidence("e2", 42)]
    allowed, excluded = PrivacyPolicy().apply(items, "ollama")
    assert allowed == []
    assert [x["reason"] for x in excluded] == [
        "malformed evidence: missing session_id",
        "malformed evidence: not an object",
        "malformed evidence: excerpt is not text",
    ]


@pytest.mark.parametrize("name", sorted(test_privacy_gate.SHAPES))
def test_every_common_shape_is_sensitive(name):
    """The shapes of issue 20 (end to end: tests/server/test_privacy_gate.py), on their own
    line and inside a line of prose."""
    secret, never_shown = test_privacy_gate.SHAPES[name]
    for text in (secret, f"ok, I ran it:\n{secret}\nand it worked", f"note: {secret} (done)"):
        result = classify_spans(text)
        assert result.classification is Classification.SENSITIVE, (name, text)
        assert never_shown not in repr(result)

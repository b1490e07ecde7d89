"""One privacy gate: every path that returns session text — the Python API, the CLI and
every HTTP endpoint (the Pi tool uses /v1/search and /v1/source; /v1/plan answers a
decision without text) — withholds the same secret corpus under the CONFIGURED policy,
judging each source on its whole row.

Each secret sits far from the searched term (after 24,000 characters), outside every
excerpt window (1,200 for search, 6,000 for evidence, the first 20,000 for source), so
only whole-row classification can catch it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lookback import api
from lookback.settings import Settings, load_settings
from tests.support import index_paths, write_pi_session

from .client import Client
from .conftest import start_server, stop_server

TERM = "FrobnicateWidget"
FILLER = "the widget pipeline keeps running quietly through the night " * 200  # 12,000 chars
#: A fake JSON Web Token (header, payload, signature).
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJsb29rYmFjay10ZXN0In0."
       "Qm9ndXNTaWduYXR1cmVGb3JUZXN0czEyMw")
#: Every common secret shape (issue 20 of the project's tracker: each reached a remote
#: provider whole) -> (secret text, the part of it that must never be returned).
SHAPES = {
    "env-jwt": (f"API_TOKEN={JWT}", "Qm9ndXNTaWduYXR1cmVGb3JUZXN0czEyMw"),
    "env-dotted-password": ("DB_PASSWORD=Horse.Battery.Staple", "Horse.Battery.Staple"),
    "env-dotted-secret": ("CLIENT_SECRET=abc123.def456.ghi789", "abc123.def456.ghi789"),
    "env-google-oauth": ("ACCESS_TOKEN=ya29.a0AfH6SMBx3kQ9zZp1Lm2Nq8Rt5Vw7Yc0Ud4Ef6Gh",
                         "a0AfH6SMBx3kQ9zZp1Lm2Nq8Rt5Vw7Yc0Ud4Ef6Gh"),
    "flag-jwt": (f"./deploy.sh --env prod --token={JWT.replace('MyMw', 'NDU2')}",
                 "Qm9ndXNTaWduYXR1cmVGb3JUZXN0czNDU2"),
    "bearer-hex": ("curl -H 'Authorization: Bearer 4f9d2c8a1b7e6f3d0c5a9b8e7d6c5b4a' "
                   "https://api.example.com/v1/items", "4f9d2c8a1b7e6f3d0c5a9b8e7d6c5b4a"),
    "bearer-opaque": ("Authorization: Bearer Zx8kQ2mN7pL4vR9tY3wB6cF1hJ5gD0sA",
                      "Zx8kQ2mN7pL4vR9tY3wB6cF1hJ5gD0sA"),
    "api-key-unquoted": ("client = Client(api_key=k8Jd93LmQ2xP0vRt)", "k8Jd93LmQ2xP0vRt"),
    "stripe-hex": ("STRIPE_API_KEY=9f8e7d6c5b4a39281706f5e4d3c2b1a0",
                   "9f8e7d6c5b4a39281706f5e4d3c2b1a0"),
    "x-api-key": ('curl -H "X-Api-Key: 7c1e9a2b5d8f4e6a0b3c" https://api.example.com',
                  "7c1e9a2b5d8f4e6a0b3c"),
    "pgpassword": ("PGPASSWORD=Tr1cky.pgpw psql -h db -U app", "Tr1cky.pgpw"),
    "aws-configure": ("aws configure set aws_secret_access_key "
                      "Zq9vL2mK8nB4xC7wT1yR5uE3iO6pA0sDfGhJkL12",
                      "Zq9vL2mK8nB4xC7wT1yR5uE3iO6pA0sDfGhJkL12"),
    "hugging-face": ('login("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")',
                     "QwErTyUiOpAsDfGhJkLzXcVbNmQwErTyUi"),
    "npm": ("echo npm_Zy9Xw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa > ~/.npmtoken",
            "Zy9Xw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa"),
    "mysql": ("mysql -u root -pS3cr3tMy -h db.internal app", "S3cr3tMy"),
    "password-flag": ("pg_restore --password Hunter2x --dbname app dump.sql", "Hunter2x"),
    "netrc": ("machine api.example.com\n  login octocat\n  password n3trcP4ss\n",
              "n3trcP4ss"),
    "docker-login": ("docker login -u ci -p d0ck3rPa55 registry.example.com", "d0ck3rPa55"),
    "redis-cli": ("redis-cli -h cache -a r3d1sS3cret ping", "r3d1sS3cret"),
    "db-pass": ("DB_PASS=pl41nt3xtpw", "pl41nt3xtpw"),
    "django": ("SECRET_KEY = 'django-insecure-q8#k2@l$z^p%x&w*e)r_t+y=u9v!'",
               "q8#k2@l$z^p%x&w*e)r_t+y=u9v!"),
}
#: entry id -> (secret text, the part of it that must never be returned)
SECRETS = {
    "env-quoted": ('DB_PASSWORD="hunter2hunter2"', "hunter2hunter2"),
    "env-plain": ("export POSTGRES_PASSWORD=s3cr3tPassw0rd", "s3cr3tPassw0rd"),
    "yaml": ("database:\n  client_secret: 9f8e7d6c5b4a3x\n", "9f8e7d6c5b4a3x"),
    "json": ('{"SLACK_BOT_TOKEN": "abc123def456ghi"}', "abc123def456ghi"),
    "url": ("REDIS_URL=redis://:Sup3rSecretPw@cache.internal:6379/0", "Sup3rSecretPw"),
    **SHAPES,
}
PEM = ("pem", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
       "-----END OPENSSH PRIVATE KEY-----", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ")
CLEAN = "clean"
ALL_SECRET_IDS = {*SECRETS, PEM[0]}
NEVER_SHOWN = [value for _, value in SECRETS.values()] + [PEM[2]]
CONFIG = '[privacy.providers]\n"trusted-lab" = "sensitive"\n'


def row_text(secret: str) -> str:
    return f"{FILLER} the {TERM} step, then {FILLER} {secret}"


@pytest.fixture
def corpus(tmp_path: Path, home: Path) -> Path:
    entries = [(entry_id, row_text(secret)) for entry_id, (secret, _) in SECRETS.items()]
    entries += [(PEM[0], row_text(PEM[1])), (CLEAN, row_text("nothing private here"))]
    entries += [("last", "and now the question")]
    path = write_pi_session(tmp_path / "sessions" / "secret.jsonl", entries,
                            session_id="secret-session", cwd=str(tmp_path / "proj"))
    report = index_paths(home, path)
    assert report.read.entries == len(entries)
    (home / "config.toml").write_text(CONFIG)
    return path


@pytest.fixture
def settings(home: Path, corpus: Path) -> Settings:
    return load_settings(environ={"LOOKBACK_HOME": str(home)})


def requests(session: Path, provider: str | None) -> dict[str, dict]:
    common = {"session_file": str(session), **({"provider": provider} if provider else {})}
    return {
        "retrieve": {**common, "message": f"what did the {TERM} step do?",
                     "context_ids": ["last"], "max_results": 100,
                     "max_retrieved_history_tokens": 1_000_000},
        "search": {**common, "text": TERM, "scope": "session", "max_results": 100},
        **{f"source:{entry_id}": {**common, "entry_id": entry_id}
           for entry_id in [*ALL_SECRET_IDS, CLEAN]},
    }


def shown_ids(name: str, answer: dict) -> set[str]:
    """Entry ids whose text the answer returns."""
    if name == "retrieve":
        return {item["entry_id"] for item in answer["evidence"]}
    if name == "search":
        return {item["entry_id"] for item in answer["results"]}
    return {answer["entry"]["entry_id"]} if answer.get("entry") else set()


def excluded_ids(answer: dict) -> set[str]:
    return {item["entry_id"] for item in answer.get("excluded") or []}


def check(name: str, answer: dict, provider: str | None) -> None:
    dumped = json.dumps(answer, ensure_ascii=False)
    assert not any(value in dumped for value in NEVER_SHOWN), name
    shown = shown_ids(name, answer)
    if provider == "trusted-lab":  # the configured level: sensitive, never local-only
        hidden = {PEM[0]}
    else:
        hidden = ALL_SECRET_IDS
    if name.startswith("source:"):
        entry_id = name.split(":", 1)[1]
        assert shown == ({entry_id} - hidden), name
        assert excluded_ids(answer) == ({entry_id} & hidden), name
        return
    assert CLEAN in shown, name
    assert not shown & hidden, (name, shown & hidden)
    assert hidden <= excluded_ids(answer), name
    assert (ALL_SECRET_IDS - hidden) <= shown, name


PROVIDERS = [None, "anthropic", "trusted-lab"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_python_api_passes_the_gate(settings, corpus, provider):
    for name, request in requests(corpus, provider).items():
        function = api.retrieve if name == "retrieve" else (
            api.search if name == "search" else api.source)
        check(name, function(request, settings=settings), provider)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_every_http_endpoint_passes_the_gate(settings, corpus, provider):
    server, thread = start_server(settings)
    try:
        client = Client(server.server_address, server.app)
        for name, request in requests(corpus, provider).items():
            path = "/v1/source" if name.startswith("source:") else f"/v1/{name}"
            answer = client.post(path, request)
            assert answer.status == 200, (name, answer.body)
            check(name, answer.body, provider)
        # /v1/plan answers a decision from kinds, token counts and source ids: no text.
        local = client.post("/v1/retrieve", {**requests(corpus, "ollama")["retrieve"]}).body
        assert ALL_SECRET_IDS <= {item["entry_id"] for item in local["evidence"]}
        planned = client.post("/v1/plan", {
            "messages": [{"kind": "user", "tokens": 10}],
            "evidence": [{"source": f"secret-session:{item['entry_id']}",
                          "session_id": "secret-session", "entry_id": item["entry_id"],
                          "tokens": item["tokens"]} for item in local["evidence"]],
            "max_retrieved_history_tokens": 1_000_000})
        assert planned.status == 200
        assert not any(value in json.dumps(planned.body) for value in NEVER_SHOWN)
    finally:
        stop_server(server, thread)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_cli_passes_the_gate(home, corpus, provider):
    environ = {**os.environ, "LOOKBACK_HOME": str(home)}
    environ.pop("LOOKBACK_CONFIG", None)
    command = [sys.executable, "-m", "lookback.cli"]
    request = requests(corpus, provider)["retrieve"]
    done = subprocess.run([*command, "retrieve"], input=json.dumps(request), env=environ,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    check("retrieve", json.loads(done.stdout), provider)
    flags = ["--provider", provider] if provider else []
    done = subprocess.run([*command, "search", TERM, "--session-file", str(corpus),
                           "--scope", "session", "--max-results", "100", "--json", *flags],
                          env=environ, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    check("search", json.loads(done.stdout), provider)


@pytest.mark.parametrize("provider", [None, "anthropic"])
def test_context_retrieved_passes_the_gate(home, settings, corpus, provider, capsys):
    """``lookback context retrieved`` re-reads what a retrieval returned (here to a local
    provider, which sees everything) and shows it to a remote one only through the gate."""
    from lookback.cli import main
    from lookback.server.app import ReaderApp

    app = ReaderApp(settings)
    try:
        body = json.dumps({**requests(corpus, "ollama")["retrieve"]}).encode()
        status, payload, _ = app.handle("POST", "/v1/retrieve", None, body)
        assert status == 200
        assert ALL_SECRET_IDS <= {item["entry_id"] for item in json.loads(payload)["evidence"]}
        app.manifests.flush()
    finally:
        app.close()
    flags = ["--provider", provider] if provider else []
    assert main(["--home", str(home), "context", "retrieved", "--json", *flags]) == 0
    out = capsys.readouterr().out
    assert not any(value in out for value in NEVER_SHOWN)
    items = {item["entry_id"]: item for item in json.loads(out)["records"][-1]["items"]}
    for entry_id in ALL_SECRET_IDS:
        expected = "local-only" if entry_id == PEM[0] else "sensitive"
        assert (items[entry_id]["excerpt"], items[entry_id].get("withheld")) == (None, expected)
    assert items[CLEAN]["excerpt"] and "withheld" not in items[CLEAN]

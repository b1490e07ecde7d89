"""What a client may receive is granted by the reader's configuration per token, never by
the request's ``provider`` claim (issue 27, finding 3 / item 2): a token holder that names
a local provider gets no local-only text unless its token's grant says so, on every path
that returns text (retrieve, search, source, the MCP tools, the hooks' retrieve).
A request's ``provider`` may narrow what the grant allows, never widen it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lookback.errors import UserError
from lookback.mcp import HistoryTools
from lookback.server import ReaderApp
from tests.support import index_paths, write_pi_session

from .conftest import settings_for

TERM = "FrobnicateWidget"
#: A fake private key (local-only by its detector) and a user's own markers.
PEM = ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
       "-----END OPENSSH PRIVATE KEY-----")
KEY_BODY = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ"
ENTRIES = {
    "clean": f"the {TERM} step runs nightly",
    "sensitive": f"the {TERM} step [lookback:sensitive]uses the staging vault sensbody"
                 "[/lookback:sensitive]",
    "localmark": f"the {TERM} step [lookback:local-only]reads ~/notes locbody"
                 "[/lookback:local-only]",
    "pem": f"the {TERM} step signs with\n{PEM}",
    "last": "and now the question",
}
SECRET_TEXT = {"sensitive": "sensbody", "localmark": "locbody", "pem": KEY_BODY}

REMOTE = "token-remote-0001"  # the default grant: what an unnamed remote provider sees
SENSITIVE = "token-sens-000002"  # granted up to sensitive
LOCAL = "token-local-00003"  # granted everything: the owner's own local model, say


@pytest.fixture
def session(tmp_path: Path, home: Path) -> Path:
    path = write_pi_session(tmp_path / "sessions" / "grant.jsonl", ENTRIES.items(),
                            session_id="grant-session", cwd=str(tmp_path / "proj"),
                            compacted_after="pem", first_kept="last")
    assert index_paths(home, path).read.entries == len(ENTRIES) + 1
    return path


@pytest.fixture
def app(home: Path, session: Path):
    tokens = {REMOTE: "*", SENSITIVE: {"projects": "*", "privacy": "sensitive"},
              LOCAL: {"projects": "*", "privacy": "local-only"}}
    made = ReaderApp(settings_for(home, server__tokens=tokens))
    yield made
    made.close()


def post(app: ReaderApp, path: str, body: dict, token: str | None) -> dict:
    status, payload, _ = app.handle("POST", path, token and f"Bearer {token}",
                                    json.dumps(body).encode())
    assert status == 200, payload
    return json.loads(payload) if isinstance(payload, bytes) else payload


def shown(app: ReaderApp, session: Path, token: str | None, provider: str | None) -> set[str]:
    """The entries whose text any endpoint returned; checks no withheld text leaked."""
    common = {"session_file": str(session), **({"provider": provider} if provider else {})}
    seen: set[str] = set()
    answers = [post(app, "/v1/retrieve", {**common, "message": f"what did {TERM} do?",
                                          "context_ids": ["last"]}, token),
               post(app, "/v1/search", {**common, "text": TERM, "scope": "session"}, token)]
    seen |= {item["entry_id"] for item in answers[0]["evidence"]}
    seen |= {item["entry_id"] for item in answers[1]["results"]}
    for entry_id in ENTRIES:
        source = post(app, "/v1/source", {**common, "entry_id": entry_id}, token)
        answers.append(source)
        if source.get("entry"):
            seen.add(source["entry"]["entry_id"])
    dumped = json.dumps(answers)
    for entry_id, secret in SECRET_TEXT.items():
        assert (secret in dumped) == (entry_id in seen), entry_id
    return seen - {"last", "compacted"}


@pytest.mark.parametrize("provider", [None, "local", "ollama", "anthropic"])
def test_a_token_naming_a_local_provider_gets_no_local_only_text(home, session, provider):
    plain = ReaderApp(settings_for(home, server__tokens={REMOTE: "*"}))  # no privacy grant
    try:
        assert shown(plain, session, REMOTE, provider) == {"clean"}
    finally:
        plain.close()


@pytest.mark.parametrize("provider", [None, "local", "ollama", "anthropic"])
def test_a_tokens_answers_hold_no_more_than_its_grant(app, session, provider):
    assert shown(app, session, REMOTE, provider) == {"clean"}
    # Up to sensitive, and only as far as the provider it names may see (a local one:
    # everything; a remote or unnamed one: privacy.default_max, internal).
    local = provider in ("local", "ollama")
    assert shown(app, session, SENSITIVE, provider) == (
        {"clean", "sensitive"} if local else {"clean"})


def test_a_local_grant_follows_the_providers_claim_downwards(app, session):
    # The grant allows everything; the request's provider narrows it as configured.
    assert shown(app, session, LOCAL, "local") == {"clean", "sensitive", "localmark", "pem"}
    assert shown(app, session, LOCAL, "ollama") == {"clean", "sensitive", "localmark", "pem"}
    assert shown(app, session, LOCAL, "anthropic") == {"clean"}
    assert shown(app, session, LOCAL, None) == {"clean"}


def test_a_cached_answer_never_crosses_grants(app, session):
    body = {"session_file": str(session), "provider": "local",
            "message": f"what did {TERM} do?", "context_ids": ["last"]}
    first = post(app, "/v1/retrieve", body, LOCAL)
    assert {"pem", "localmark"} <= {item["entry_id"] for item in first["evidence"]}
    second = post(app, "/v1/retrieve", body, REMOTE)  # the same request, another token
    assert {item["entry_id"] for item in second["evidence"]} == {"clean"}
    assert KEY_BODY not in json.dumps(second)


def test_the_mcp_tools_hold_the_grant_too(app, session):
    tools = HistoryTools(app, provider="local")  # the client's claim, fixed per server
    for token, visible in ((REMOTE, False), (LOCAL, True)):
        found = tools.search(f"Bearer {token}", query=TERM, scope="session",
                             session_file=str(session), provider="local")
        read = tools.read(f"Bearer {token}", entry_id="pem", session_file=str(session),
                          provider="local")
        assert (KEY_BODY in found) == visible and (KEY_BODY in read) == visible
        assert ("locbody" in found) == visible


def test_without_tokens_the_owners_reader_trusts_its_owners_provider(home, session):
    owner = ReaderApp(settings_for(home))
    try:
        assert shown(owner, session, None, "local") == {"clean", "sensitive", "localmark",
                                                        "pem"}
        assert shown(owner, session, None, None) == {"clean"}
    finally:
        owner.close()


def test_an_unknown_privacy_grant_is_refused_at_start(home):
    with pytest.raises(UserError, match="token #1"):
        ReaderApp(settings_for(home, server__tokens={
            REMOTE: {"projects": "*", "privacy": "secret-ish"}}))


def test_the_claude_code_hook_holds_the_grant_over_http(home, session):
    """The hook names its provider (``claude_code.provider``, here a local one); over a
    live reader, the token's grant decides."""
    from lookback.claude_hook import run_hook

    from .conftest import start_server, stop_server

    tokens = {REMOTE: "*", LOCAL: {"projects": "*", "privacy": "local-only"}}
    server, thread = start_server(settings_for(home, server__tokens=tokens))
    try:
        stdin = json.dumps({"hook_event_name": "UserPromptSubmit", "transcript_path":
                            str(session), "prompt": f"what did the {TERM} step sign with?"})
        outputs = {token: run_hook(stdin.encode(), url="", home=str(home), provider="local",
                                   timeout_ms=30_000, token=token) or ""
                   for token in (REMOTE, LOCAL)}
    finally:
        stop_server(server, thread)
    assert KEY_BODY in outputs[LOCAL]  # the grant allows it: the hook's claim stands
    assert "nightly" in outputs[REMOTE] and KEY_BODY not in outputs[REMOTE]

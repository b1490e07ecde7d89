"""Tokens, project grants that leak nothing, and loopback-only binding without tokens."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lookback.errors import UserError
from lookback.index.layout import project_key
from lookback.server import make_server

from .conftest import SESSION_ID, retrieve_body, settings_for, write_session

OWNER = "owner-token-0001"
OTHER = "other-token-0002"
EVERYTHING = "admin-token-0003"


@pytest.fixture
def tokens(project_cwd: Path) -> dict:
    return {OWNER: [str(project_cwd)], OTHER: ["some-other-project"], EVERYTHING: "*"}


def test_every_request_needs_a_bearer_token(serve, session_file, tokens):
    client = serve(server__tokens=tokens)
    for answer in (client.post("/v1/retrieve", retrieve_body(session_file)),
                   client.get("/v1/health"),
                   client.post("/v1/retrieve", retrieve_body(session_file), token="wrong-token"),
                   client.post("/v1/retrieve", retrieve_body(session_file),
                               headers={"authorization": f"Basic {OWNER}"})):
        assert answer.status == 401
        assert answer.body["error"]["code"] == "unauthorized"
        assert answer.headers["www-authenticate"] == "Bearer"


def test_granted_tokens_get_answers(serve, session_file, tokens):
    client = serve(server__tokens=tokens)
    for token in (OWNER, EVERYTHING):
        answer = client.post("/v1/retrieve", retrieve_body(session_file), token=token)
        assert answer.status == 200
        assert {e["entry_id"] for e in answer.body["evidence"]} == {"a1000001", "a1000002"}


def test_a_grant_by_folder_name_works_too(serve, session_file, project_cwd):
    client = serve(server__tokens={OWNER: [project_key(str(project_cwd))]})
    body = {"project": project_key(str(project_cwd)), "session_id": SESSION_ID,
            "message": "`AgentSession.messages`"}
    assert client.post("/v1/retrieve", body, token=OWNER).status == 200


def test_403_says_nothing_about_the_project(serve, session_file, tokens, tmp_path):
    client = serve(server__tokens=tokens)
    existing = client.post("/v1/retrieve", retrieve_body(session_file), token=OTHER)
    unindexed = write_session(tmp_path / "elsewhere", tmp_path / "never-indexed")
    not_indexed = client.post("/v1/retrieve", retrieve_body(unindexed), token=OTHER)
    missing_file = client.post("/v1/retrieve", retrieve_body(tmp_path / "no-such.jsonl"),
                               token=OTHER)
    by_name = client.post("/v1/search", {"project": "no-such-project", "session_id": "x",
                                         "text": "anything"}, token=OTHER)
    bad_name = client.post("/v1/source", {"project": "../../etc", "session_id": "x",
                                          "entry_id": "y"}, token=OTHER)
    answers = [existing, not_indexed, missing_file, by_name, bad_name]
    assert {a.status for a in answers} == {403}
    assert all(a.body == existing.body for a in answers)
    assert "project" in existing.body["error"]["message"]
    assert str(session_file) not in str(existing.body)


def test_restricted_tokens_see_only_their_projects(serve, session_file, tokens):
    client = serve(server__tokens=tokens)
    client.post("/v1/retrieve", retrieve_body(session_file), token=OWNER)
    client.app.manifests.flush()
    manifest = f"/v1/manifest?session_id={SESSION_ID}"
    assert len(client.get(manifest, token=OWNER).body["entries"]) == 1
    assert client.get(manifest, token=OTHER).body == {"session_id": SESSION_ID, "entries": []}
    assert client.get("/v1/health", token=OTHER).body["projects"] == []
    assert len(client.get("/v1/health", token=OWNER).body["projects"]) == 1


def test_non_loopback_binding_needs_tokens(home):
    with pytest.raises(UserError, match="refusing to listen on 0.0.0.0"):
        make_server(settings_for(home), "0.0.0.0", 0)
    server = make_server(settings_for(home, server__tokens={OWNER: "*"}), "0.0.0.0", 0)
    server.server_close()
    server.app.close()


def test_serve_command_refuses_with_a_clear_message(home):
    done = subprocess.run([sys.executable, "-m", "lookback.cli", "--home", str(home), "serve",
                           "--host", "0.0.0.0", "--port", "0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "refusing to listen on 0.0.0.0" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("tokens", [["just-a-list"], {"short": "*"}, {OWNER: "some-project"}])
def test_malformed_token_settings_are_refused(home, tokens):
    with pytest.raises(UserError, match="server.tokens"):
        make_server(settings_for(home, server__tokens=tokens), "127.0.0.1", 0)


@pytest.mark.parametrize("token", ["tökentoken-0001", "token\u00a0with-nbsp", "token with space",
                                   "token-with-tab\t1"])
def test_tokens_a_client_cannot_send_are_refused_at_start(home, token):
    """A header is bytes (decoded as latin-1 here); a token outside printable ASCII could
    never be matched, so it is refused up front, saying which token and why."""
    with pytest.raises(UserError, match=r"server.tokens: token #1 .*printable ASCII"):
        make_server(settings_for(home, server__tokens={token: "*"}), "127.0.0.1", 0)


def test_a_non_ascii_authorization_header_is_a_plain_401(serve, session_file, tokens):
    client = serve(server__tokens=tokens)
    answer = client.post("/v1/retrieve", retrieve_body(session_file),
                         headers={"authorization": "Bearer tökentoken-0001".encode().decode(
                             "latin-1")})
    assert answer.status == 401

"""`lookback context`: renders the manifest the server wrote; `retrieved` re-reads excerpts
from the index (the manifest file itself holds no text)."""

from __future__ import annotations

import json

from lookback.cli import main
from lookback.query.contract.messages import estimate_message_tokens

from .conftest import EARLY_USER_TEXT, SESSION_ID, retrieve_body


def item_cost(item: dict) -> int:
    """What the planner charges for an evidence item (its envelope or its declared tokens)."""
    return max(item["tokens"], estimate_message_tokens(item["message"]))


def run_context(home, capsys, *args: str) -> str:
    assert main(["--home", str(home), "context", *args]) == 0
    return capsys.readouterr().out


def record_retrievals(app, session_file, *bodies: dict) -> None:
    for body in bodies:
        status, _, _ = app.handle("POST", "/v1/retrieve", None, json.dumps(body).encode())
        assert status == 200
    app.manifests.flush()


def test_retrieved_shows_local_excerpts_and_counts(app, home, session_file, capsys):
    record_retrievals(app, session_file, retrieve_body(session_file))
    out = run_context(home, capsys, "retrieved", "--session-file", str(session_file))
    assert f"session {SESSION_ID}" in out
    assert "a1000001" in out and "a1000002" in out
    assert json.dumps(EARLY_USER_TEXT) in out  # re-read from the index
    assert "candidates=" in out and "deduplicated=" in out
    assert "alternate_branch_candidates=0" in out
    assert "latency=" in out and "tokens=" in out


def test_json_views_and_all(app, home, session_file, capsys):
    record_retrievals(app, session_file, retrieve_body(session_file),
                      retrieve_body(session_file, message="what about `setThinkingLevel()`?"))
    latest = json.loads(run_context(home, capsys, "included", "--json",
                                    "--session-id", SESSION_ID))
    assert [r["status"] for r in latest["records"]] == ["ok"]
    every = json.loads(run_context(home, capsys, "manifest", "all", "--json"))
    assert every["session_id"] == SESSION_ID  # the latest recorded session by default
    assert len(every["records"]) == 2
    assert every["records"][0]["retrievedEventIds"] == [
        f"{SESSION_ID}:a1000002", f"{SESSION_ID}:a1000001"]
    # Only `retrieved` carries excerpts; manifest records have none.
    assert all("excerpt" not in i for r in every["records"] for i in r["items"])


def test_excluded_lists_planner_exclusions(app, home, session_file, capsys):
    record_retrievals(app, session_file, retrieve_body(session_file))
    evidence = json.loads(app.handle("POST", "/v1/retrieve", None, json.dumps(
        retrieve_body(session_file)).encode())[1])["evidence"]
    messages = [{"kind": "user", "tokens": 20}]
    evidence = [{**item, "tokens": item_cost(item)} for item in evidence]
    status, _, _ = app.handle("POST", "/v1/plan", None, json.dumps(
        {"messages": messages, "evidence": evidence,
         "max_retrieved_history_tokens": item_cost(evidence[0])}).encode())
    assert status == 200
    app.manifests.flush()
    out = run_context(home, capsys, "excluded", "all")
    assert "1 excluded source(s) in 2 retrieval(s)" in out
    assert "a1000001" in out and "planner" in out and "retrieval budget full" in out


def test_manifest_file_holds_no_text(app, home, session_file):
    record_retrievals(app, session_file, retrieve_body(session_file))
    data = (home / "manifests" / "manifests.sqlite").read_bytes()
    wal = home / "manifests" / "manifests.sqlite-wal"
    data += wal.read_bytes() if wal.exists() else b""
    assert b"a1000001" in data  # the ids are there...
    for text in (EARLY_USER_TEXT, "AgentSession.messages", "AppMessage", "union type"):
        assert text.encode() not in data  # ...the text is not


def test_nothing_recorded_yet(home, capsys):
    out = run_context(home, capsys, "manifest")
    assert "no retrievals recorded" in out


def test_unknown_view_is_a_usage_error(home, capsys):
    try:
        main(["--home", str(home), "context", "everything"])
    except SystemExit as exit_:
        assert exit_.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_retrieved_passes_the_privacy_gate(tmp_path, home, project_cwd, capsys):
    """A row holding a secret is shown only to a provider the policy admits it for."""
    from lookback.server import ReaderApp
    from tests.support import index_paths

    from .conftest import FIXTURE, settings_for, write_session

    secret = " The cache is redis://:s3cretpw@cache:6379/0"
    source = tmp_path / "source" / FIXTURE.name
    source.parent.mkdir()
    source.write_text(FIXTURE.read_text(encoding="utf-8").replace(
        EARLY_USER_TEXT, EARLY_USER_TEXT + secret), encoding="utf-8")
    session = write_session(tmp_path / "sessions", project_cwd, source)
    index_paths(home, session)
    reader_app = ReaderApp(settings_for(home))
    try:  # a local provider may see sensitive text, so the item is retrieved and recorded
        record_retrievals(reader_app, session, retrieve_body(session, provider="ollama"))
    finally:
        reader_app.close()

    strict = run_context(home, capsys, "retrieved", "--session-file", str(session))
    assert "(withheld: sensitive)" in strict
    assert "s3cretpw" not in strict and EARLY_USER_TEXT not in strict
    local = run_context(home, capsys, "retrieved", "--provider", "ollama",
                        "--session-file", str(session))
    assert "s3cretpw" in local

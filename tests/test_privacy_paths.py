"""The one privacy gate, path by path: every path that returns session text asks
``PrivacyPolicy.gate`` about the secret-bearing source and withholds it with the same
reason, word for word.

The paths: the Python API (retrieve, search, source), the HTTP endpoints (the Pi
extension's), the CLI (``retrieve``, ``search``, ``context retrieved``), the MCP tools
(``history_search``, ``history_read``) and the Claude Code and Codex hooks. The secret sits far
from the searched term (tests/server/test_privacy_gate.py's row shape), so only the
whole-row classification of the gate can catch it.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from lookback import api, claude_hook, codex_hook
from lookback.cli import main
from lookback.mcp import HistoryTools
from lookback.query.privacy.policy import PrivacyPolicy, Verdict
from lookback.server.app import ReaderApp
from lookback.settings import Settings, load_settings
from tests.server.conftest import start_server, stop_server
from tests.server.test_privacy_gate import SECRETS, TERM, row_text
from tests.support import index_paths

SECRET, NEVER_SHOWN = SECRETS["env-quoted"]
PROVIDER = "anthropic"
SESSION_ID = "gated-session"


@pytest.fixture
def session(tmp_path: Path, home: Path) -> Path:
    """A Pi session whose compaction removed a secret-bearing entry and a clean one."""
    entries: list[dict[str, Any]] = [
        {"type": "message", "id": "secret", "message": {
            "role": "user", "content": [{"type": "text", "text": row_text(SECRET)}]}},
        {"type": "message", "id": "clean", "message": {
            "role": "assistant",
            "content": [{"type": "text", "text": row_text("nothing private here")}]}},
        {"type": "compaction", "id": "cut", "summary": "earlier work", "firstKeptEntryId":
         "last", "tokensBefore": 100},
        {"type": "message", "id": "last", "message": {
            "role": "user", "content": [{"type": "text", "text": "and now the question"}]}},
    ]
    lines: list[dict[str, Any]] = [{"type": "session", "version": 3, "id": SESSION_ID,
                                    "cwd": str(tmp_path / "proj"),
                                    "timestamp": "2026-01-01T00:00:00Z"}]
    parent = None
    for number, entry in enumerate(entries):
        lines.append({**entry, "parentId": parent,
                      "timestamp": f"2026-01-01T00:00:{number:02d}Z"})
        parent = entry["id"]
    path = tmp_path / "sessions" / "gated.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    index_paths(home, path)
    return path


@pytest.fixture
def settings(home: Path, session: Path) -> Settings:
    return load_settings(environ={"LOOKBACK_HOME": str(home)})


@pytest.fixture
def verdicts(monkeypatch: pytest.MonkeyPatch) -> list[Verdict]:
    """Every verdict the gate gives while a test runs (the real gate, recorded)."""
    seen: list[Verdict] = []
    real = PrivacyPolicy.gate

    def gate(self: PrivacyPolicy, source: Any, provider: str | None) -> Verdict:
        verdict = real(self, source, provider)
        seen.append(verdict)
        return verdict

    monkeypatch.setattr(PrivacyPolicy, "gate", gate)
    return seen


def the_reason(settings: Settings) -> str:
    reason = api.privacy_policy(settings).gate(row_text(SECRET), PROVIDER).reason
    assert reason is not None
    assert reason.startswith("privacy: sensitive exceeds internal allowed for provider "
                             "anthropic (secret:")
    return reason


def requests(session: Path) -> dict[str, dict[str, Any]]:
    common = {"session_file": str(session), "provider": PROVIDER}
    return {"retrieve": {**common, "message": f"what did the {TERM} step do?"},
            "search": {**common, "text": TERM, "scope": "session"},
            "source": {**common, "entry_id": "secret"}}


def withheld(answer: dict[str, Any]) -> dict[str, str]:
    """Entry id -> reason of every source the answer withheld."""
    return {item["entry_id"]: item["reason"] for item in answer["excluded"]}


def assert_gated(seen: list[Verdict], shown: str, reason: str) -> None:
    """The gate refused the secret source with ``reason``, and no text of it got out."""
    assert reason in {verdict.reason for verdict in seen}
    assert NEVER_SHOWN not in shown


def test_the_python_api_and_http_give_one_reason(settings, session, verdicts):
    reason = the_reason(settings)
    for name, request in requests(session).items():
        answer = getattr(api, name)(request, settings=settings)
        assert withheld(answer) == {"secret": reason}, name
        assert_gated(verdicts, json.dumps(answer), reason)
        verdicts.clear()
    app = ReaderApp(settings)
    try:
        for name, request in requests(session).items():
            status, payload, _ = app.handle("POST", f"/v1/{name}", None,
                                            json.dumps(request).encode())
            answer = json.loads(payload) if isinstance(payload, bytes) else payload
            assert status == 200 and withheld(answer) == {"secret": reason}, name
            assert_gated(verdicts, json.dumps(answer), reason)
            verdicts.clear()
    finally:
        app.close()


def test_the_cli_gives_the_same_reason(settings, home, session, verdicts, monkeypatch,
                                       capsys):
    reason = the_reason(settings)
    monkeypatch.setenv("LOOKBACK_HOME", str(home))
    monkeypatch.delenv("LOOKBACK_CONFIG", raising=False)
    stdin = io.TextIOWrapper(io.BytesIO(json.dumps(requests(session)["retrieve"]).encode()))
    monkeypatch.setattr("sys.stdin", stdin)
    assert main(["retrieve"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert withheld(answer) == {"secret": reason}
    assert_gated(verdicts, json.dumps(answer), reason)
    verdicts.clear()
    assert main(["search", TERM, "--session-file", str(session), "--scope", "session",
                 "--provider", PROVIDER, "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert withheld(answer) == {"secret": reason}
    assert_gated(verdicts, json.dumps(answer), reason)


def test_context_retrieved_gives_the_same_reason(settings, home, session, verdicts, capsys):
    """What a local provider was given is shown to a remote one only through the gate."""
    app = ReaderApp(settings)
    try:
        local = {**requests(session)["retrieve"], "provider": "ollama"}
        status, payload, _ = app.handle("POST", "/v1/retrieve", None, json.dumps(local).encode())
        assert status == 200 and "secret" in {e["entry_id"] for e in json.loads(payload)[
            "evidence"]}
        app.manifests.flush()
    finally:
        app.close()
    verdicts.clear()
    assert main(["--home", str(home), "context", "retrieved", "--json",
                 "--provider", PROVIDER]) == 0
    out = capsys.readouterr().out
    items = {item["entry_id"]: item for item in json.loads(out)["records"][-1]["items"]}
    reason = the_reason(settings)
    assert items["secret"]["withheld_reason"] == reason
    assert items["secret"]["excerpt"] is None and items["clean"]["excerpt"]
    assert_gated(verdicts, out, reason)


def test_the_mcp_tools_pass_the_gate(settings, session, verdicts):
    reason = the_reason(settings)
    app = ReaderApp(settings)
    try:
        tools = HistoryTools(app, provider=PROVIDER)
        found = tools.search(None, query=TERM, scope="session", session_file=str(session))
        assert "1 more withheld by the privacy policy" in found
        assert_gated(verdicts, found, reason)
        verdicts.clear()
        read = tools.read(None, entry_id="secret", session_file=str(session))
        assert "withheld by the privacy policy" in read
        assert_gated(verdicts, read, reason)
    finally:
        app.close()


@pytest.mark.parametrize("hook", [claude_hook, codex_hook], ids=["claude-code", "codex"])
def test_the_hooks_pass_the_gate(settings, session, verdicts, hook):
    reason = the_reason(settings)
    server, thread = start_server(settings)
    try:
        stdin = json.dumps({"hook_event_name": "UserPromptSubmit",
                            "prompt": f"what did the {TERM} step do?",
                            "transcript_path": str(session)}).encode()
        output = hook.run_hook(stdin, url="", home=str(settings.home), provider=PROVIDER,
                               timeout_ms=30_000)
    finally:
        stop_server(server, thread)
    assert output is not None and "clean" in output  # the clean source got through
    assert_gated(verdicts, output, reason)


def test_lookback_show_passes_the_same_gate(settings, home, session, verdicts, monkeypatch,
                                            capsys):
    """``lookback show`` reads through ``source_answer`` (``/v1/source``'s call): the
    secret entry is withheld for a remote provider with the gate's reason, shown to a
    local one; its clean neighbour is shown to both."""
    reason = the_reason(settings)
    monkeypatch.setenv("LOOKBACK_HOME", str(home))
    monkeypatch.delenv("LOOKBACK_CONFIG", raising=False)
    code = main(["show", "secret", "--session-file", str(session), "--provider", PROVIDER])
    out, err = capsys.readouterr()
    assert code == 1 and reason in err
    assert_gated(verdicts, out + err, reason)
    code = main(["show", "clean", "--session-file", str(session), "--provider", PROVIDER,
                 "--before", "1", "--json"])
    answer = json.loads(capsys.readouterr().out)
    assert code == 0 and answer["entry"]["entry_id"] == "clean"
    assert answer["before"] == [] and withheld(answer) == {"secret": reason}
    assert NEVER_SHOWN not in json.dumps(answer)
    code = main(["show", "secret", "--session-file", str(session), "--provider", "ollama"])
    assert code == 0 and "session gated-session  [sensitive]" in capsys.readouterr().out


def pi_session(path: Path, cwd: Path, texts: dict[str, str]) -> Path:
    """A Pi session of one message per (entry id, text), a compaction, a question."""
    lines: list[dict[str, Any]] = [{"type": "session", "version": 3, "id": "shapes-session",
                                    "cwd": str(cwd), "timestamp": "2026-01-01T00:00:00Z"}]
    parent = None
    entries: list[dict[str, Any]] = [
        *({"type": "message", "id": entry_id, "message": {
            "role": "user", "content": [{"type": "text", "text": text}]}}
          for entry_id, text in texts.items()),
        {"type": "compaction", "id": "cut", "summary": "earlier work",
         "firstKeptEntryId": "last", "tokensBefore": 100},
        {"type": "message", "id": "last", "message": {
            "role": "user", "content": [{"type": "text", "text": "and now the question"}]}}]
    for number, entry in enumerate(entries):
        lines.append({**entry, "parentId": parent,
                      "timestamp": f"2026-01-01T00:{number // 60:02d}:{number % 60:02d}Z"})
        parent = entry["id"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_the_shapes_that_passed_the_gate_are_withheld_through_search_and_mcp(
        tmp_path, home, monkeypatch, capsys):
    """Issue 29 (2): these reached the answer through ``lookback search`` and MCP."""
    from tests.test_privacy import ISSUE_29

    texts = {name: f"the {TERM} step printed {secret} and stopped"
             for name, (secret, _) in ISSUE_29.items()}
    session = pi_session(tmp_path / "sessions" / "shapes.jsonl", tmp_path / "proj",
                         {**texts, "clean": f"the {TERM} step printed nothing private"})
    index_paths(home, session)
    settings = load_settings(environ={"LOOKBACK_HOME": str(home)})
    never = [value for _, value in ISSUE_29.values()]
    answer = api.search({"session_file": str(session), "text": TERM, "scope": "session",
                         "max_results": 100, "provider": PROVIDER}, settings=settings)
    assert [item["entry_id"] for item in answer["results"]] == ["clean"]
    assert set(withheld(answer)) == set(ISSUE_29)
    assert not [value for value in never if value in json.dumps(answer)]
    monkeypatch.setenv("LOOKBACK_HOME", str(home))
    assert main(["search", TERM, "--session-file", str(session), "--scope", "session",
                 "--max-results", "100", "--provider", PROVIDER, "--json"]) == 0
    printed = capsys.readouterr().out
    assert [item["entry_id"] for item in json.loads(printed)["results"]] == ["clean"]
    assert not [value for value in never if value in printed]
    app = ReaderApp(settings)
    try:
        found = HistoryTools(app, provider=PROVIDER).search(
            None, query=TERM, scope="session", session_file=str(session), limit=50)
    finally:
        app.close()
    assert f"{len(ISSUE_29)} more withheld by the privacy policy" in found
    assert not [value for value in never if value in found]


def test_a_local_provider_gets_marked_text_without_its_markers(tmp_path, home):
    """Issue 29 (2): the markers are not the text; an escaped one is text, not a marker."""
    session = pi_session(tmp_path / "sessions" / "marked.jsonl", tmp_path / "proj", {
        "marked": f"the {TERM} plan: [lookback:local-only]ship on the 4th[/lookback:local-only]",
        "escaped": f"the {TERM} docs: write \\[lookback:sensitive] before a private span"})
    index_paths(home, session)
    settings = load_settings(environ={"LOOKBACK_HOME": str(home),
                                      "LOOKBACK_PRIVACY__LOCAL_PROVIDERS": "ollama"})
    common = {"session_file": str(session), "provider": "ollama"}
    source = api.source({**common, "entry_id": "marked"}, settings=settings)
    assert source["entry"]["excerpt"] == f"the {TERM} plan: ship on the 4th"
    found = api.search({**common, "text": TERM, "scope": "session"}, settings=settings)
    excerpts = {item["entry_id"]: item["excerpt"] for item in found["results"]}
    assert excerpts["marked"] == f"the {TERM} plan: ship on the 4th"
    retrieved = api.retrieve({**common, "message": f"what was the {TERM} plan?"},
                             settings=settings)
    quoted = json.dumps(retrieved["evidence"])
    assert "ship on the 4th" in quoted and "lookback:local-only" not in quoted
    remote = api.source({**common, "provider": PROVIDER, "entry_id": "escaped"},
                        settings=settings)
    assert remote["entry"]["excerpt"].endswith("write \\[lookback:sensitive] before a private span")
    assert remote["entry"]["classification"] == "normal"

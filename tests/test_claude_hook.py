"""The Claude Code hook (lookback/claude_hook.py), its CLI command and its installer, against a
live reader serving the recorded Claude Code fixture — and fail-open against broken ones."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lookback import claude_hook
from lookback.cli import main
from lookback.commands.install import hook_command
from lookback.query.context.evidence import FOOTER, HEADER
from tests.hook_cases import (
    FailOpenCases,
    Reader,
    Stdin,
    calls,
    context_of,
    fake_reader,
    reader_options,
)
from tests.server.conftest import settings_for, start_server, stop_server
from tests.support import index_paths
from tests.test_claude_code import MAIN, MAIN_ID, PROJECT_DIR, by_text

MARK_SCRIPT = "claude_hook.py"
PROMPT = "Which deploy key did we pick, ORCHID_LATCH_9031?"


def hook_input(prompt: str = PROMPT, transcript: Path = MAIN, **extra: Any) -> bytes:
    return json.dumps({"session_id": MAIN_ID, "transcript_path": str(transcript),
                       "cwd": "/tmp/lookback-claude-fixture/project", "prompt": prompt,
                       "hook_event_name": "UserPromptSubmit", **extra}).encode()


@pytest.fixture
def reader(home: Path) -> Iterator[Reader]:
    """A live reader (`lookback serve` in-process) over the indexed Claude Code fixture."""
    index_paths(home, PROJECT_DIR)
    server, thread = start_server(settings_for(home))
    yield Reader(str(home))
    stop_server(server, thread)


def run(stdin: bytes, reader: str | Reader, timeout_ms: float = 3000,
        provider: str = "anthropic"):
    return claude_hook.run_hook(stdin, **reader_options(reader), provider=provider,
                                timeout_ms=timeout_ms)


# -- answers ------------------------------------------------------------------------------------


def test_the_hook_hands_back_the_removed_entry_in_the_spec_envelope(reader):
    context = context_of(run(hook_input(), reader))
    first = by_text(MAIN, "ORCHID_LATCH_9031")
    assert context.startswith(HEADER) and context.endswith(FOOTER)
    assert f"Source entry: {first['uuid']} (session {MAIN_ID})" in context
    assert 'Quoted content JSON: "The deploy key name is ORCHID_LATCH_9031.' in context
    assert "THOUGHT_SECRET_77" not in context


def test_the_context_is_exactly_the_readers_evidence_messages(reader):
    body = claude_hook.retrieve_request(json.loads(hook_input()), "anthropic")
    response = claude_hook.post_json("", "/v1/retrieve", body, home=reader.home,
                                     deadline=time.monotonic() + 5)
    texts = [block["text"] for item in response["evidence"]
             for block in item["message"]["content"]]
    assert len(texts) >= 1
    assert context_of(run(hook_input(), reader)) == "\n\n".join(texts)


def test_the_request_names_the_transcript_prompt_and_provider():
    with fake_reader(body=b'{"status": "no-query", "evidence": []}') as fake:
        assert run(hook_input(), fake.url, provider="anthropic") is None
    assert calls(fake) == [("/v1/retrieve", {"session_file": str(MAIN), "message": PROMPT,
                                               "provider": "anthropic",
                                               "max_retrieved_history_tokens": 2500})]


def test_only_whole_envelopes_up_to_claude_codes_limit(reader):
    body = claude_hook.retrieve_request(json.loads(hook_input()), "anthropic")
    response = claude_hook.post_json("", "/v1/retrieve", body, home=reader.home,
                                     deadline=time.monotonic() + 5)
    [first, *rest] = response["evidence"]
    big = {**first, "message": {"role": "user", "content": [
        {"type": "text", "text": HEADER + "\n" + "é" * 9_850 + "\n" + FOOTER}]}}
    ranked = {**response, "evidence": [first, big, *rest, first]}
    context = claude_hook.additional_context(ranked)
    envelopes = context.split("\n\n" + HEADER)
    assert len(context.encode("utf-16-le")) // 2 <= claude_hook.MAX_CONTEXT_UNITS
    assert "é" not in context  # the big one did not fit: left out whole
    assert len(envelopes) == len(rest) + 2  # the smaller ones after it still came
    assert context.startswith(first["message"]["content"][0]["text"])
    assert all(e.endswith(FOOTER) for e in envelopes)


def test_no_topic_or_nothing_removed_adds_nothing(reader):
    assert run(hook_input("ok grazie, vai pure"), reader) is None
    assert run(hook_input("what is PRESERVED_PROMPT_6021 about?"), reader) is None


# -- fail-open ----------------------------------------------------------------------------------


class TestFailOpen(FailOpenCases):
    hook = claude_hook
    error_answers = [(500, b'{"status": "error"}'), (200, b"not json"),
                     (200, b'{"status": "ok", "evidence": "junk"}'),
                     (200, b'{"status": "not-indexed", "evidence": []}'), (200, b"[1, 2]")]
    bad_inputs = [b"", b"not json", b"[]", hook_input(hook_event_name="PreToolUse"),
                  hook_input(prompt="   "), hook_input(transcript=Path("relative.jsonl"))]
    hook_input = staticmethod(hook_input)
    run = staticmethod(run)


def test_the_cli_command_fails_open_too(monkeypatch, capsys, home, tmp_path):
    monkeypatch.setenv("LOOKBACK_HOME", str(home))
    # nothing listens on the socket of that (empty) home
    monkeypatch.setattr(sys, "stdin", Stdin(hook_input()))
    assert main(["hook", "claude-code"]) == 0
    assert capsys.readouterr().out == ""
    (tmp_path / "bad.toml").write_text("this is not toml [")
    monkeypatch.setenv("LOOKBACK_CONFIG", str(tmp_path / "bad.toml"))
    assert main(["hook", "claude-code"]) == 0
    assert capsys.readouterr().out == ""


def test_the_cli_command_answers_with_the_settings_reader(monkeypatch, capsys, reader):
    monkeypatch.setenv("LOOKBACK_HOME", reader.home)
    monkeypatch.setattr(sys, "stdin", Stdin(hook_input()))
    assert main(["hook", "claude-code"]) == 0
    assert HEADER in context_of(capsys.readouterr().out)


# -- install ------------------------------------------------------------------------------------


def test_install_writes_a_hook_that_runs(monkeypatch, capsys, tmp_path, reader):
    """Into the project's personal settings.local.json: it names this machine's Python, so
    it was wrong in the shared settings.json a team commits."""
    project = tmp_path / "project"
    settings_file = project / ".claude" / "settings.local.json"
    settings_file.parent.mkdir(parents=True)
    other = {"hooks": [{"type": "command", "command": "echo other"}]}
    settings_file.write_text(json.dumps({"model": "x", "hooks": {"UserPromptSubmit": [other]}}))
    monkeypatch.setenv("LOOKBACK_HOME", reader.home)
    assert main(["install", "claude-code", "--project", str(project)]) == 0
    assert main(["install", "claude-code", "--project", str(project)]) == 0  # idempotent
    written = json.loads(settings_file.read_text())
    groups = written["hooks"]["UserPromptSubmit"]
    assert written["model"] == "x" and groups[0] == other and len(groups) == 2
    assert not (project / ".claude" / "settings.json").exists()
    hook = groups[1]["hooks"][0]
    assert hook["type"] == "command" and "claude_hook.py" in hook["command"]
    assert " -S -I " in hook["command"] and "--provider anthropic" in hook["command"]
    done = subprocess.run(hook["command"], shell=True, input=hook_input(),
                          capture_output=True, timeout=30, check=False)
    assert done.returncode == 0 and HEADER in context_of(done.stdout.decode())
    capsys.readouterr()


def test_install_writes_through_a_symlink_and_keeps_the_files_mode(capsys, tmp_path):
    """A settings file kept in a dotfiles folder stays a link, and one only its owner may
    read (Claude Code's settings may hold API keys in ``env``) stays so."""
    dotfiles = tmp_path / "dotfiles" / "settings.json"
    dotfiles.parent.mkdir()
    dotfiles.write_text(json.dumps({"env": {"ANTHROPIC_API_KEY": "sk-kept"}}))
    dotfiles.chmod(0o600)
    link = tmp_path / "project" / ".claude" / "settings.json"
    link.parent.mkdir(parents=True)
    link.symlink_to(dotfiles)
    assert main(["install", "claude-code", "--shared", "--project", str(tmp_path / "project")]) \
        == 0
    assert link.is_symlink() and link.resolve() == dotfiles
    written = json.loads(dotfiles.read_text())
    assert written["env"] == {"ANTHROPIC_API_KEY": "sk-kept"}
    assert MARK_SCRIPT in json.dumps(written["hooks"]["UserPromptSubmit"])
    assert dotfiles.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in dotfiles.parent.iterdir()) == ["settings.json"]  # no leftovers
    capsys.readouterr()


@pytest.mark.parametrize("hooks", ["echo mine", [1], {"UserPromptSubmit": "echo mine"},
                                   {"UserPromptSubmit": {"command": "echo mine"}}])
def test_install_refuses_hooks_it_cannot_read_and_writes_nothing(capsys, tmp_path, hooks):
    """A ``hooks`` that is not an object of lists was a traceback, or was rewritten: a
    string split into its letters, a table's values dropped."""
    settings_file = tmp_path / ".claude" / "settings.local.json"
    settings_file.parent.mkdir()
    text = json.dumps({"model": "x", "hooks": hooks})
    settings_file.write_text(text)
    assert main(["install", "claude-code", "--project", str(tmp_path)]) == 2
    assert settings_file.read_text() == text
    assert "`hooks` must be an object" in capsys.readouterr().err


def test_install_into_a_project_folder_that_is_not_there_is_refused(capsys, tmp_path):
    """A mistyped --project was created, and the hook installed where no project is."""
    missing = tmp_path / "no-such-project"
    assert main(["install", "claude-code", "--project", str(missing)]) == 2
    assert f"{missing}: no such project folder" in capsys.readouterr().err
    assert not missing.exists()


def test_install_print_shows_the_change_and_makes_none(capsys, home, monkeypatch, tmp_path):
    monkeypatch.setenv("LOOKBACK_HOME", str(home))
    monkeypatch.setenv("LOOKBACK_CLAUDE_CODE__PROVIDER", "bedrock")
    monkeypatch.chdir(tmp_path)
    assert main(["install", "claude-code", "--print"]) == 0
    printed = capsys.readouterr().out
    target = tmp_path.resolve() / ".claude" / "settings.local.json"
    assert printed.startswith(f"create {target}:\n--- /dev/null\n+++ {target}\n")
    added = "".join(line[1:] for line in printed.splitlines()[4:] if line.startswith("+"))
    command = json.loads(added)["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"]
    assert "--provider bedrock" in command and "--timeout-ms 1500 " in command
    assert command.endswith("--max-tokens 2500")  # capped at what Claude Code takes whole
    monkeypatch.setenv("LOOKBACK_RETRIEVAL__MAX_RETRIEVED_HISTORY_TOKENS", "800")
    assert main(["install", "claude-code", "--print"]) == 0
    assert capsys.readouterr().out.count("--max-tokens 800") == 1
    assert not (tmp_path / ".claude").exists()


@pytest.mark.parametrize("url, parts", [
    ("http://127.0.0.1:8765", ("127.0.0.1", 8765, "")),
    ("http://localhost:9/lookback/", ("localhost", 9, "/lookback")),
    ("http://[::1]:8765", ("::1", 8765, "")), ("http://example.org", ("example.org", 80, ""))])
def test_readers(url, parts):
    assert claude_hook.split_url(url) == parts


@pytest.mark.parametrize("url", ["https://x:1", "http://:80", "http://x:port", "ftp://x"])
def test_unusable_readers_are_skipped(url):
    with pytest.raises(claude_hook.HookSkipped):
        claude_hook.split_url(url)


def test_hook_command_quotes_paths():
    from lookback.settings import load_settings

    command = hook_command(load_settings({}, environ={}), python="/opt/my python/bin/python3")
    assert command.startswith("'/opt/my python/bin/python3' -S -I ")


def test_the_providers_privacy_policy_decides_what_leaves(home, tmp_path):
    """A sensitive span in the removed turn: withheld whole from Anthropic, given to a local
    model (``privacy.local_providers``)."""
    rows = [json.loads(line) for line in MAIN.read_text(encoding="utf-8").splitlines()]
    first = by_text(MAIN, "ORCHID_LATCH_9031")
    secret = "The vault password is [lookback:sensitive]hunter2-VAULT[/lookback:sensitive]."
    for row in rows:
        if row.get("uuid") == first["uuid"]:
            row["message"]["content"] += " " + secret
    copy = tmp_path / "sessions" / MAIN.name
    copy.parent.mkdir()
    copy.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    index_paths(home, copy)
    server, thread = start_server(settings_for(home))
    reader = Reader(str(home))
    try:
        remote = run(hook_input(transcript=copy), reader, provider="anthropic")
        local = run(hook_input(transcript=copy), reader, provider="local")
    finally:
        stop_server(server, thread)
    assert remote is None or (first["uuid"] not in remote and "hunter2" not in remote)
    assert first["uuid"] in context_of(local) and "hunter2-VAULT" in context_of(local)

"""The Codex hook (lookback/codex_hook.py), its CLI command and its installer, against a live
reader serving the recorded Codex rollouts — evidence never quoted twice per compaction window,
the thread's total bounded — and fail-open against broken readers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lookback import codex_config, codex_hook, hook_client
from lookback.cli import main
from lookback.commands.install import codex_hook_command
from lookback.ingest import codex
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
from tests.support import index_paths, persist_hook_context
from tests.test_codex import CWD, MAIN, MAIN_ID, SESSIONS, item, lines_of

PROMPT = "What did we decide about the config format, DEC-TOML-7?"


def hook_input(prompt: str = PROMPT, transcript: Path = MAIN, **extra: Any) -> bytes:
    return json.dumps({"session_id": MAIN_ID, "turn_id": "t", "transcript_path": str(transcript),
                       "cwd": CWD, "model": "fake-model", "permission_mode": "bypassPermissions",
                       "hook_event_name": "UserPromptSubmit", "prompt": prompt,
                       **extra}).encode()


@pytest.fixture
def rollout(tmp_path: Path) -> Path:
    """A writable copy of the recorded sessions folder; the main rollout in it."""
    shutil.copytree(SESSIONS, tmp_path / "sessions")
    return tmp_path / "sessions" / MAIN.relative_to(SESSIONS)


@pytest.fixture
def reader(home: Path, rollout: Path) -> Iterator[Reader]:
    """A live reader (`lookback serve` in-process) over the copied Codex sessions; it indexes
    the rollout's new lines before answering (embedded freshness)."""
    index_paths(home, rollout.parent)
    server, thread = start_server(settings_for(home))
    yield Reader(str(home))
    stop_server(server, thread)


def run(stdin: bytes, reader: str | Reader, **options: Any) -> str | None:
    return codex_hook.run_hook(stdin, **reader_options(reader),
                               provider=options.pop("provider", "openai"),
                               timeout_ms=options.pop("timeout_ms", 5000), **options)


def persist(rollout: Path, context: str) -> None:
    """What Codex does with a hook's output: a developer message in the rollout."""
    persist_hook_context(rollout, context, f"msg_hook_{time.monotonic_ns()}")


# -- answers ------------------------------------------------------------------------------------


def test_the_hook_quotes_what_the_compaction_dropped(rollout, reader):
    context = context_of(run(hook_input(transcript=rollout), reader))
    reply = item(MAIN, "Fake reply 2", "assistant")
    assert context.startswith(HEADER) and context.endswith(FOOTER)
    assert f"Source entry: {reply['id']} (session {MAIN_ID})" in context
    assert f"Source entry: {item(MAIN, 'DEC-TOML-7')['id']} " not in context  # still live
    assert len(context.encode()) <= codex_hook.MAX_CONTEXT_TOKENS * codex_hook.BYTES_PER_TOKEN


def test_what_an_earlier_turn_quoted_is_never_quoted_again(rollout, reader):
    first = context_of(run(hook_input(transcript=rollout), reader))
    quoted = codex_hook._sources(first)
    persist(rollout, first)
    assert codex_hook.quoted_so_far(str(rollout)) == (quoted, len(first.encode()))
    again = run(hook_input(transcript=rollout), reader)
    assert again is None or not codex_hook._sources(context_of(again)) & quoted


def test_after_a_compaction_the_dropped_evidence_may_come_again(rollout, reader):
    first = context_of(run(hook_input(transcript=rollout), reader))
    persist(rollout, first)
    compacted = next(o for o in lines_of(MAIN) if o["type"] == "compacted")
    with rollout.open("a", encoding="utf-8") as handle:  # a second compaction drops the hook's
        handle.write(json.dumps(compacted, separators=(",", ":")) + "\n")
    assert codex_hook.quoted_so_far(str(rollout)) == (set(), 0)
    assert codex_hook._sources(context_of(run(hook_input(transcript=rollout), reader))) \
        & codex_hook._sources(first)


def test_the_thread_total_is_bounded(rollout, reader):
    first = context_of(run(hook_input(transcript=rollout), reader))
    persist(rollout, first)
    used = len(first.encode()) // codex_hook.BYTES_PER_TOKEN
    with fake_reader(body=b'{"status": "ok", "evidence": []}') as fake:
        assert run(hook_input(transcript=rollout), fake.url, thread_tokens=used + 50) is None
    assert calls(fake) == []  # no room: nobody asked
    with fake_reader(body=b'{"status": "ok", "evidence": []}') as fake:
        run(hook_input(transcript=rollout), fake.url, thread_tokens=used + 700)
    [(_, body)] = calls(fake)
    assert body["max_retrieved_history_tokens"] == 700
    assert body["quoted_ids"] == sorted(codex_hook._sources(first))


def test_only_whole_envelopes_within_codexs_limit():
    envelope = HEADER + "\nSource entry: e{n} (session s)\n" + "é" * 1500 + "\n" + FOOTER
    evidence = [{"message": {"content": [{"type": "text", "text": envelope.format(n=n)}]}}
                for n in range(6)]
    answer = json.dumps({"status": "ok", "evidence": evidence}).encode()
    with fake_reader(body=answer) as fake, _rollout_without_context() as path:
        context = context_of(run(hook_input(transcript=path), fake.url))
    assert len(context.encode()) <= 10_000
    assert context.count(HEADER) == 3  # 3,000-odd bytes each: the fourth would not fit
    assert all(part.endswith(FOOTER) for part in context.split("\n\n" + HEADER))


class _rollout_without_context:
    def __enter__(self) -> Path:
        import tempfile

        self.folder = tempfile.TemporaryDirectory()
        path = Path(self.folder.name) / "rollout.jsonl"
        shutil.copy(MAIN, path)
        return path

    def __exit__(self, *exc: object) -> None:
        self.folder.cleanup()


# -- fail-open ----------------------------------------------------------------------------------


class TestFailOpen(FailOpenCases):
    hook = codex_hook
    error_answers = [(500, b'{"status": "error"}'), (200, b"not json"),
                     (200, b'{"status": "ok", "evidence": "junk"}'), (200, b"[1, 2]")]
    bad_inputs = [b"", b"not json", b"[]", hook_input(hook_event_name="Stop"),
                  hook_input(prompt=" "), hook_input(transcript=Path("relative.jsonl")),
                  hook_input(transcript=Path("/nonexistent/rollout.jsonl"))]
    hook_input = staticmethod(hook_input)
    run = staticmethod(run)


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_a_rollout_that_is_no_file_adds_nothing_and_asks_nobody(tmp_path, special):
    """The hook reads the rollout itself: a FIFO there blocked it on open, past its own
    timeout, until Codex killed it (the script under ``-S -I``, as installed)."""
    if special == "fifo":
        special = str(tmp_path / "rollout.jsonl")
        os.mkfifo(special)
    with fake_reader(body=b'{"status": "ok"}') as fake:
        done = subprocess.run([sys.executable, "-S", "-I", codex_hook.__file__, "--url", fake.url,
                               "--timeout-ms", "500"], input=hook_input(transcript=Path(special)),
                              capture_output=True, timeout=30, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    assert calls(fake) == []


def huge_rollout(rollout: Path) -> Path:
    """The recorded rollout grown past what the hook may scan: a sparse gigabyte before
    its real lines (their compaction left out: the hook must look further back for one)."""
    huge = rollout.with_name(rollout.name.replace(".jsonl", "-huge.jsonl"))
    lines = [line for line in rollout.read_bytes().splitlines(keepends=True)
             if codex_hook.COMPACTED not in line]
    with huge.open("wb") as handle:
        handle.write(lines[0])  # the session_meta line first
        handle.truncate(codex_hook.MAX_SCAN_BYTES * 4)
        handle.seek(0, os.SEEK_END)
        handle.write(b"\n" + b"".join(lines[1:]))
    return huge


def test_a_rollout_too_long_to_scan_adds_nothing_and_asks_nobody(rollout):
    """Issue 29 (7): a 6 GB rollout took the hook 5.3 s, past Codex's 1,500 ms: the scan
    is bounded in bytes (and time), and past the bound the hook fails open."""
    huge = huge_rollout(rollout)
    with pytest.raises(hook_client.HookSkipped):
        codex_hook.quoted_so_far(str(huge))
    with fake_reader(body=b'{"status": "ok"}') as fake:
        done = subprocess.run([sys.executable, "-S", "-I", codex_hook.__file__, "--url", fake.url,
                               "--timeout-ms", "1500"], input=hook_input(transcript=huge),
                              capture_output=True, timeout=60, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    assert calls(fake) == []


def test_the_scan_stops_at_its_deadline(rollout, monkeypatch):
    """Issue 29 (7): a fork's parent looked for through a large tree took 4.3 s: the walk,
    like the rollout scan, stops when the hook's share of its timeout is spent."""
    fork = rollout.with_name("rollout-2026-12-01T20-00-00-01a232ea-ffff-7000-8000-00000000f0f0"
                             ".jsonl")
    fork.write_text(json.dumps({"type": "session_meta", "payload": {
        "id": "01a232ea-ffff-7000-8000-00000000f0f0", "cwd": CWD, "history_base": {
            "thread_id": "01a232ea-0000-7000-8000-000000000000", "end_byte_offset": 10}}}) + "\n")
    for day in range(40):
        (rollout.parents[2] / "old" / str(day)).mkdir(parents=True)
    folders: list[str] = []
    real_walk = os.walk

    def walk(top: str):  # the clock passes the deadline once the walk has begun
        for step in real_walk(top):
            folders.append(step[0])
            if len(folders) == 3:
                monkeypatch.setattr(codex_hook.time, "monotonic", lambda: float("inf"))
            yield step

    monkeypatch.setattr(codex_hook.os, "walk", walk)
    with fake_reader(body=b'{"status": "ok"}') as fake:
        assert run(hook_input(transcript=fork), fake.url, timeout_ms=3_600_000) is None
    assert len(folders) == 3  # not one folder more once the deadline had passed
    assert calls(fake) == []


def test_the_cli_command_answers_and_fails_open(monkeypatch, capsys, rollout, reader,
                                                tmp_path):
    monkeypatch.setenv("LOOKBACK_HOME", reader.home)
    monkeypatch.setattr(sys, "stdin", Stdin(hook_input(transcript=rollout)))
    assert main(["hook", "codex"]) == 0
    assert HEADER in context_of(capsys.readouterr().out)
    monkeypatch.setenv("LOOKBACK_HOME", str(tmp_path / "no-reader"))  # nothing on its socket
    monkeypatch.setattr(sys, "stdin", Stdin(hook_input(transcript=rollout)))
    assert main(["hook", "codex"]) == 0
    assert capsys.readouterr().out == ""


# -- install ------------------------------------------------------------------------------------


def test_install_writes_a_trusted_hook_that_runs(monkeypatch, capsys, tmp_path, rollout,
                                                 reader):
    codex_home = tmp_path / "codex-home"
    codex_home.mkdir()
    other = {"hooks": [{"type": "command", "command": "echo other"}]}
    (codex_home / "hooks.json").write_text(json.dumps({"hooks": {"UserPromptSubmit": [other]}}))
    (codex_home / "config.toml").write_text('model = "fake-model"\n\n[model_providers.fake]\n'
                                            'name = "Fake"\n')
    monkeypatch.setenv("LOOKBACK_ACTION__ENABLED", "false")  # the prompt hook alone
    monkeypatch.setenv("CODEX_HOME", str(codex_home))
    monkeypatch.setenv("LOOKBACK_HOME", reader.home)
    assert main(["install", "codex"]) == 0
    assert main(["install", "codex"]) == 0  # idempotent
    groups = json.loads((codex_home / "hooks.json").read_text())["hooks"]["UserPromptSubmit"]
    assert groups[0] == other and len(groups) == 2
    handler = groups[1]["hooks"][0]
    assert "codex_hook.py" in handler["command"] and " -S -I " in handler["command"]
    assert "--provider openai" in handler["command"] and "--thread-tokens 10000" in \
        handler["command"]
    config = tomllib.loads((codex_home / "config.toml").read_text())
    assert config["model"] == "fake-model" and config["model_providers"]["fake"]["name"] == "Fake"
    key = f"{codex_home / 'hooks.json'}:user_prompt_submit:1:0"
    assert codex_config.trusted_hashes(config) == {
        key: codex_config.hook_hash("UserPromptSubmit", handler)}
    assert (codex_home / "config.toml").read_text().count("[hooks.state.") == 1
    done = subprocess.run(handler["command"], shell=True, input=hook_input(transcript=rollout),
                          capture_output=True, timeout=30, check=False)
    assert done.returncode == 0 and HEADER in context_of(done.stdout.decode())
    capsys.readouterr()


def test_a_reinstall_with_new_settings_retrusts_in_place(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("LOOKBACK_ACTION__ENABLED", "false")  # the prompt hook alone
    monkeypatch.setenv("CODEX_HOME", str(tmp_path))
    assert main(["install", "codex"]) == 0
    monkeypatch.setenv("LOOKBACK_CODEX__HOOK_TIMEOUT_MS", "900")
    assert main(["install", "codex"]) == 0
    handler = json.loads((tmp_path / "hooks.json").read_text())["hooks"]["UserPromptSubmit"][0][
        "hooks"][0]
    assert "--timeout-ms 900 " in handler["command"]
    trusted = codex_config.trusted_hashes(tomllib.loads((tmp_path / "config.toml").read_text()))
    assert trusted == {f"{tmp_path / 'hooks.json'}:user_prompt_submit:0:0":
                       codex_config.hook_hash("UserPromptSubmit", handler)}
    capsys.readouterr()


def test_install_writes_through_symlinks_and_keeps_the_files_mode(monkeypatch, capsys, tmp_path):
    """A config.toml kept in a dotfiles folder (it may hold providers' keys, 0600) stays a
    link to a file only its owner may read."""
    codex_home, dotfiles = tmp_path / "codex-home", tmp_path / "dotfiles"
    codex_home.mkdir()
    dotfiles.mkdir()
    (dotfiles / "config.toml").write_text('model = "kept"\n')
    (dotfiles / "config.toml").chmod(0o600)
    (codex_home / "config.toml").symlink_to(dotfiles / "config.toml")
    monkeypatch.setenv("LOOKBACK_ACTION__ENABLED", "false")  # the prompt hook alone
    monkeypatch.setenv("CODEX_HOME", str(codex_home))
    assert main(["install", "codex"]) == 0
    assert (codex_home / "config.toml").is_symlink()
    config = tomllib.loads((dotfiles / "config.toml").read_text())
    assert config["model"] == "kept" and len(codex_config.trusted_hashes(config)) == 1
    assert (dotfiles / "config.toml").stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in dotfiles.iterdir()) == ["config.toml"]  # no leftovers
    capsys.readouterr()


def test_install_refuses_a_config_it_cannot_extend_and_writes_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("CODEX_HOME", str(tmp_path))
    (tmp_path / "config.toml").write_text("hooks = { state = {} }\n")
    assert main(["install", "codex"]) != 0
    assert not (tmp_path / "hooks.json").exists()
    assert (tmp_path / "config.toml").read_text() == "hooks = { state = {} }\n"


def test_the_trust_hash_is_codexs_rule():
    """sha256 of the key-sorted compact JSON of the normalized handler; a matcher only for
    events that have one; non-default limits included (docs/codex-session-format.md)."""
    import hashlib

    handler = {"type": "command", "command": "python3 /x/hook.py UserPromptSubmit 12000"}
    blob = ('{"event_name":"user_prompt_submit","hooks":[{"async":false,"command":'
            '"python3 /x/hook.py UserPromptSubmit 12000","timeout":600,"type":"command"}]}')
    assert codex_config.hook_hash("UserPromptSubmit", handler, matcher="ignored") == \
        "sha256:" + hashlib.sha256(blob.encode()).hexdigest()
    assert codex_config.hook_hash("PostToolUse", handler, "Bash") != \
        codex_config.hook_hash("PostToolUse", handler)
    assert codex_config.hook_hash("UserPromptSubmit", {**handler, "additionalContextLimit": 2500}) \
        == codex_config.hook_hash("UserPromptSubmit", handler)
    assert codex_config.hook_hash("UserPromptSubmit", {**handler, "additionalContextLimit": 0}) \
        != codex_config.hook_hash("UserPromptSubmit", handler)


def test_install_print_shows_every_change_and_makes_none(capsys, monkeypatch, home, tmp_path):
    """--print showed the hooks.json snippet only, not the trust entry it adds to
    config.toml; now each file's change, and nothing is written."""
    monkeypatch.setenv("LOOKBACK_HOME", str(home))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    assert main(["install", "codex", "--print"]) == 0
    printed = capsys.readouterr().out
    hooks, config = printed.split(f"create {tmp_path / 'codex' / 'config.toml'}:\n")
    added = "".join(line[1:] for line in hooks.splitlines()[4:] if line.startswith("+"))
    command = json.loads(added)["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"]
    from lookback.settings import load_settings
    assert command == codex_hook_command(load_settings({"home": str(home)}, environ={}))
    assert "--max-tokens 2500" in command
    assert '+[hooks.state."' in config and "+trusted_hash = " in config
    assert not (tmp_path / "codex").exists()


def test_a_fork_counts_its_parents_contexts_up_to_the_fork_point(rollout, reader):
    first = context_of(run(hook_input(transcript=rollout), reader))
    persist(rollout, first)
    fork_point = rollout.stat().st_size
    persist(rollout, first.replace("Source entry: ", "Source entry: later-"))  # after the fork
    meta = {"type": "session_meta", "payload": {
        "id": "01a232ea-ffff-7000-8000-00000000f0f0", "cwd": CWD, "forked_from_id": MAIN_ID,
        "history_base": {"thread_id": MAIN_ID, "end_byte_offset": fork_point}}}
    fork = rollout.with_name("rollout-2026-12-01T20-00-00-01a232ea-ffff-7000-8000-00000000f0f0"
                             ".jsonl")
    fork.write_text(json.dumps(meta) + "\n")
    assert codex_hook.quoted_so_far(str(fork)) == (codex_hook._sources(first),
                                                   len(first.encode()))
    elsewhere = rollout.parent.parent / "02" / fork.name  # the parent found in another day
    elsewhere.parent.mkdir()
    fork.rename(elsewhere)
    assert codex_hook.quoted_so_far(str(elsewhere))[0] == codex_hook._sources(first)
    with fork.open("w") as handle:  # a fork whose parent is gone: its own lines only
        handle.write(json.dumps({**meta, "payload": {**meta["payload"], "history_base": {
            "thread_id": "01a232ea-0000-7000-8000-000000000000", "end_byte_offset": 10}}}) + "\n")
    assert codex_hook.quoted_so_far(str(fork)) == (set(), 0)
    outside = rollout.parents[4] / "x" / "y" / "copies" / elsewhere.name  # no sessions above
    outside.parent.mkdir(parents=True)
    elsewhere.rename(outside)
    # Looked for where ingest looks (beside it only), so the hook counts what the index
    # holds: "three folders up" walked the whole temporary folder and found the parent.
    assert codex_hook.quoted_so_far(str(outside)) == (set(), 0)


@pytest.mark.parametrize("path", [
    "/home/u/.codex/sessions/2026/12/01/rollout-a.jsonl",
    "/home/u/.codex/sessions/rollout-a.jsonl",
    "/x/sessions-copy/2026/12/01/rollout-a.jsonl",
    "/x/y/sessions/z/rollout-a.jsonl",
    "/tmp/x/y/z/w/rollout-a.jsonl",
    "/a/b/rollout-a.jsonl",
    "/1/2/3/rollout-a.jsonl",
    "/rollout-a.jsonl",
])
def test_the_hook_looks_for_a_forks_parent_where_ingest_does(path):
    """The hook runs as a plain script and imports no project module, so it has its own
    copy of ingest's rule for the folder a fork's parent is looked for in."""
    assert codex_hook._sessions_root(path) == str(codex.sessions_root_of(Path(path)))


# -- no reader: the hook starts one --------------------------------------------------------------


def test_reader_down_starts_a_reader_in_the_background_as_the_claude_hook_does(monkeypatch,
                                                                               home):
    started: list[list[str]] = []

    class Recorder:
        def __init__(self, command, **options):
            assert options["start_new_session"] is True  # detached from the agent
            started.append(command)

    monkeypatch.setattr(subprocess, "Popen", Recorder)
    monkeypatch.delenv("LOOKBACK_AUTOSTART")
    assert run(hook_input(), Reader(str(home))) is None  # nothing on its socket
    assert started == [[sys.executable, "-m", "lookback", "--home", str(home), "serve",
                        "--ensure", "--started-by", "codex"]]
    with fake_reader() as fake:
        pass  # closed: nothing listens
    assert run(hook_input(), fake.url) is None  # a TCP reader is a team's: never started here
    with fake_reader(500, b"{}") as failing:  # a reader that answers badly is not replaced
        assert run(hook_input(), failing.url) is None
    monkeypatch.setenv("LOOKBACK_AUTOSTART", "0")
    assert run(hook_input(), Reader(str(home))) is None
    assert len(started) == 1


def test_a_new_user_gets_evidence_from_the_second_prompt_on(monkeypatch, capsys, tmp_path,
                                                            rollout):
    """`lookback install codex` and nothing else: the first prompt finds no reader, is left
    unchanged and starts one (the real `lookback serve --ensure`); the next gets evidence."""
    from lookback import local_reader
    from tests.e2e.harness import wait_for_health

    data = tmp_path / "lookback-data"
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex-home"))
    monkeypatch.setenv("LOOKBACK_HOME", str(data))
    assert main(["install", "codex"]) == 0
    handler = json.loads((tmp_path / "codex-home" / "hooks.json").read_text())["hooks"][
        "UserPromptSubmit"][0]["hooks"][0]
    # what Codex passes on to the hook: the user's environment, autostart on (the default)
    environment = {**{k: v for k, v in os.environ.items() if not k.startswith("LOOKBACK_")},
                   "LOOKBACK_HOME": str(data)}

    def prompt() -> subprocess.CompletedProcess:
        return subprocess.run(handler["command"], shell=True, input=hook_input(
            transcript=rollout), capture_output=True, timeout=60, check=False, env=environment)

    try:
        first = prompt()
        assert (first.returncode, first.stdout) == (0, b"")
        wait_for_health(local_reader.address(data), timeout=60)
        assert HEADER in context_of(prompt().stdout.decode())
        started = json.loads((data / "serve.pid").read_text())
        assert started["started_by"] == "codex"
    finally:
        subprocess.run([sys.executable, "-m", "lookback", "--home", str(data), "serve",
                        "--stop"], capture_output=True, timeout=60, check=False, env=environment)
    capsys.readouterr()

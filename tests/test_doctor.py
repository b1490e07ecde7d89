"""``lookback doctor`` tried as a new user would: real session folders, settings files and
indexes in a temporary HOME. Each problem the issue names — hook missing, Pi package missing,
a damaged index, a session 10 minutes behind — is found with the command that fixes it, and
running that very command makes the finding go away; a fresh machine (no reader yet, sessions
not indexed yet) is a note, not a problem: the reader starts on first use."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lookback import cli, pi_package
from lookback.doctor import Finding, Situation, run_checks
from lookback.server import make_server
from lookback.settings import load_settings
from tests.server.test_freshness import entry_line
from tests.support import fixture_path

CLAUDE_FIXTURES = Path(__file__).parent / "fixtures" / "claude-code" / "projects"


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A new user's HOME: Pi and Claude Code sessions on disk, nothing of Lookback set up;
    no reader listens on the configured port."""
    home = tmp_path / "user"
    pi_sessions = home / ".pi" / "agent" / "sessions" / "--work-project--"
    pi_sessions.mkdir(parents=True)
    shutil.copyfile(fixture_path("branching.jsonl"), pi_sessions / "branching.jsonl")
    shutil.copytree(CLAUDE_FIXTURES, home / ".claude" / "projects")
    (home / "work").mkdir()
    for name in ("CLAUDE_CONFIG_DIR", "PI_CODING_AGENT_DIR", "PI_CODING_AGENT_SESSION_DIR",
                 "LOOKBACK_TOKEN", "LOOKBACK_SESSIONS_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("LOOKBACK_HOME", str(home / "lookback-data"))
    monkeypatch.delenv("LOOKBACK_CONFIG", raising=False)
    monkeypatch.setenv("LOOKBACK_SERVER__PORT", str(_free_port()))
    # This Lookback's `lookback` on the PATH: the fixes name it bare (see the test below).
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(home / "work")
    return home


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def doctor(capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, list[dict]]]:
    capsys.readouterr()  # what earlier commands printed
    code = cli.main(["doctor", "--json"])
    report = json.loads(capsys.readouterr().out)
    by_check: dict[str, list[dict]] = {}
    for finding in report["checks"]:
        by_check.setdefault(finding["check"], []).append(finding)
    assert report["ok"] is (code == 0)
    return code, by_check


def lookback(*argv: str) -> int:
    return cli.main(list(argv))


def problems(by_check: dict[str, list[dict]]) -> dict[str, list[dict]]:
    return {name: found for name, found in by_check.items()
            if any(f["status"] == "problem" for f in found)}


def test_a_new_user_is_told_each_problem_with_its_fix(user, capsys):
    """Before: the reader not running yet was a problem (exit 1) whose fix was the foreground
    `lookback serve`, and the Pi fix was `pi install <a folder a wheel does not have>`."""
    code, found = doctor(capsys)
    assert code == 1
    assert set(problems(found)) == {"pi package", "claude-code hook"}
    assert found["reader"][0]["status"] == "note"  # started on first use
    assert found["reader"][0]["fix"] == "lookback serve --ensure"
    assert found["claude-code hook"][0]["fix"] == "lookback install claude-code --user"
    assert found["pi package"][0]["fix"] == "lookback install pi"
    assert found["sessions: pi"][0]["status"] == "note"
    assert found["sessions: pi"][0]["details"]["not_indexed"] == 1
    assert found["sessions: pi"][0]["fix"].startswith("lookback index ")
    assert found["indexes"][0]["status"] == "note"  # nothing indexed yet
    assert "remote providers see up to internal" in found["privacy"][0]["summary"]

    # The user runs every fix the doctor named, exactly as written.
    capsys.readouterr()
    for name in ("sessions: pi", "sessions: claude-code", "claude-code hook", "pi package"):
        assert lookback(*shlex.split(found[name][0]["fix"])[1:]) == 0
    code, found = doctor(capsys)
    assert code == 0 and problems(found) == {}
    assert found["sessions: pi"][0]["summary"].endswith("1 sessions, all indexed")
    assert found["claude-code hook"][0]["status"] == "ok"
    assert found["pi package"][0]["status"] == "ok"
    assert found["pi package"][0]["details"]["command"] == pi_package.this_command()


def test_the_pi_package_is_found_by_its_content_wherever_it_lies(user, capsys, tmp_path,
                                                                 monkeypatch):
    """Doctor took any source with "lookback" in its path for the extension, and compared
    a relative source (as Pi 1.x writes it, from the settings file's folder) with the
    current folder: from a clone in a folder without that word, `pi install` of the real
    extension was reported missing (tests/e2e/test_doctor_clients.py), while a folder named
    `lookback-notes` or a packed tarball, which makes every Pi run fail, passed."""
    settings_file = user / ".pi" / "agent" / "settings.json"
    shipped = pi_package.shipped_dir()
    assert shipped is not None
    neutral = tmp_path / "neutral" / "ext"
    shutil.copytree(shipped, neutral)
    (tmp_path / "lookback-notes").mkdir()

    def pi_finding(packages: list) -> dict:
        settings_file.write_text(json.dumps({"packages": packages}))
        return doctor(capsys)[1]["pi package"][0]

    assert pi_finding([str(tmp_path / "lookback-notes")])["status"] == "problem"
    relative = os.path.relpath(neutral, settings_file.parent)  # what `pi install` writes
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no `lookback` there
    found = pi_finding([relative])
    # Found, by content; its command is `lookback` on a PATH that has none: a problem.
    assert found["details"]["package"] == str(settings_file.parent / relative)
    assert found["summary"].endswith("starts the reader with lookback, which is not found on "
                                     "the PATH")
    program = shlex.join([sys.executable, "-P", "-m", "lookback"])  # none on this PATH
    assert found["fix"] == f"{program} install pi"

    packed = tmp_path / "lookback-pi-0.1.0.tgz"
    import tarfile
    with tarfile.open(packed, "w:gz") as archive:
        archive.add(neutral / "package.json", "package/package.json")
    found = pi_finding([str(packed)])
    assert found["status"] == "problem" and "packed tarball" in found["summary"]
    assert found["fix"] == f"pi remove {packed} && {program} install pi"

    # `lookback install pi` replaces the entries that are Lookback's, wherever they lie.
    settings_file.write_text(json.dumps({"packages": ["npm:other", relative]}))
    capsys.readouterr()
    assert lookback("install", "pi") == 0
    packages = json.loads(settings_file.read_text())["packages"]
    assert packages == ["npm:other", str(user / "lookback-data" / "pi-extension")]
    assert doctor(capsys)[1]["pi package"][0]["status"] == "ok"


def test_a_copy_of_the_extension_from_another_version_is_a_problem(user, capsys):
    """After an upgrade Pi still loads the copy `install pi` made: doctor says so."""
    assert lookback("install", "pi") == 0
    copy = user / "lookback-data" / "pi-extension" / "index.ts"
    copy.write_text(copy.read_text() + "\n// an older version\n")
    found = doctor(capsys)[1]["pi package"][0]
    assert found["status"] == "problem" and "not this Lookback's version" in found["summary"]
    assert lookback(*shlex.split(found["fix"])[1:]) == 0
    assert doctor(capsys)[1]["pi package"][0]["status"] == "ok"


def test_off_the_path_each_fix_names_this_lookback_by_its_path(user, capsys, monkeypatch):
    """The README leaves `lookback` in a venv: a fix saying `lookback install pi` was a
    command not found. Off the PATH a fix names this Lookback itself, and runs as printed."""
    monkeypatch.setenv("PATH", os.defpath)
    _, found = doctor(capsys)
    program = shlex.join([sys.executable, "-P", "-m", "lookback"])
    assert found["pi package"][0]["fix"] == f"{program} install pi"
    env = {**os.environ, "PATH": os.defpath}
    done = subprocess.run(found["pi package"][0]["fix"], shell=True, env=env, cwd=user / "work",
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert doctor(capsys)[1]["pi package"][0]["status"] == "ok"


def test_the_readers_fix_starts_it_in_the_background(user, capsys):
    """The fix of a fresh machine's reader note, run as written, starts the reader; it was the
    foreground `lookback serve`, which never returns."""
    _, found = doctor(capsys)
    assert found["reader"][0]["status"] == "note"
    try:
        assert lookback(*shlex.split(found["reader"][0]["fix"])[1:]) == 0
        deadline = time.monotonic() + 60
        while doctor(capsys)[1]["reader"][0]["status"] != "ok":  # it starts in the background
            assert time.monotonic() < deadline, "the reader did not answer within 60 s"
            time.sleep(0.2)
    finally:
        lookback("serve", "--stop")


def test_a_running_reader_is_found_with_its_version_and_mode(user, capsys):
    settings = load_settings()
    server = make_server(settings)  # on the data home's Unix socket
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        _, found = doctor(capsys)
    finally:
        server.shutdown()
        server.server_close()
        server.app.close()
        thread.join(timeout=5)
    reader = found["reader"][0]
    assert reader["status"] == "ok" and reader["details"]["mode"] == "embedded"
    assert reader["details"]["version"] not in ("", None)
    assert reader["details"]["url"] == f"unix:{server.server_address}"


def test_a_damaged_index_is_found_and_its_repair_command_works(user, capsys):
    assert lookback("index") == 0
    _, found = doctor(capsys)
    assert not any(name.startswith("index: ") for name in found)
    project = next(p for p in (user / "lookback-data" / "projects").iterdir()
                   if "project" in p.name and (p / "CURRENT").exists())
    current = (project / "CURRENT").read_text().strip()
    index_file = next(project.glob(f"*{current}*.sqlite"), None) or next(project.glob("*.sqlite"))
    with open(index_file, "r+b") as handle:  # a zeroed header, as a crash or a bad disk leaves
        handle.write(b"\0" * 100)
    code, found = doctor(capsys)
    damaged = found[f"index: {project.name}"][0]
    assert code == 1 and damaged["status"] == "problem" and "damaged" in damaged["summary"]
    assert damaged["fix"] == f"lookback reindex --repair --project {project.name}"
    capsys.readouterr()
    assert lookback(*shlex.split(damaged["fix"])[1:]) == 0
    _, found = doctor(capsys)
    assert f"index: {project.name}" not in found


def test_a_session_ten_minutes_behind_is_found_and_indexing_it_fixes_it(user, capsys):
    assert lookback("index") == 0
    session = user / ".pi" / "agent" / "sessions" / "--work-project--" / "branching.jsonl"
    last_id = json.loads(session.read_text().splitlines()[-1])["id"]
    with open(session, "a", encoding="utf-8") as handle:
        handle.write(entry_line("late0001", last_id, "a turn nobody indexed"))
    ten_minutes_ago = time.time() - 600
    os.utime(session, (ten_minutes_ago, ten_minutes_ago))
    capsys.readouterr()
    code, found = doctor(capsys)
    behind = found["freshness"][0]
    assert code == 1 and behind["status"] == "problem"
    assert "10 min behind" in behind["summary"]
    assert behind["fix"] == f"lookback index {shlex.quote(str(session.resolve()))}"
    capsys.readouterr()
    assert lookback(*shlex.split(behind["fix"])[1:]) == 0
    _, found = doctor(capsys)
    assert found["freshness"][0]["status"] == "ok"


def test_text_output_names_each_problem_and_its_fix(user, capsys):
    assert cli.main(["doctor"]) == 1
    text = capsys.readouterr().out
    assert "PROBLEM  pi package: the Lookback package is not in" in text
    assert "fix: lookback install pi" in text
    assert "note     reader: no reader answers" in text and "fix: lookback serve --ensure" in text
    assert text.rstrip().endswith("problems found")


def test_a_check_that_breaks_is_a_problem_and_the_others_still_run(user):
    def broken(situation: Situation) -> list[Finding]:
        raise RuntimeError("boom")

    def fine(situation: Situation) -> list[Finding]:
        return [Finding("fine", "ok", "all good")]

    findings = run_checks(Situation(load_settings(), dict(os.environ), Path.cwd()),
                          [broken, fine])
    assert [(f.check, f.status) for f in findings] == [("broken", "problem"), ("fine", "ok")]


def test_a_hook_whose_python_is_gone_or_asks_another_port_is_a_problem(user, capsys):
    assert lookback("install", "claude-code", "--user") == 0
    settings_file = user / ".claude" / "settings.json"
    installed = json.loads(settings_file.read_text())
    hook = installed["hooks"]["UserPromptSubmit"][0]["hooks"][0]
    good = hook["command"]

    hook["command"] = good.replace(shlex.split(good)[0], str(user / "old-venv" / "python"), 1)
    settings_file.write_text(json.dumps(installed))
    _, found = doctor(capsys)
    finding = found["claude-code hook"][0]
    assert finding["status"] == "problem" and "no longer exists" in finding["summary"]
    assert finding["fix"] == "lookback install claude-code --user"

    parts = shlex.split(good)
    parts += ["--url", "http://127.0.0.1:1"]  # what an older install wrote
    hook["command"] = shlex.join(parts)
    settings_file.write_text(json.dumps(installed))
    _, found = doctor(capsys)
    assert "asks http://127.0.0.1:1, but the reader is configured at your Unix socket" in \
        found["claude-code hook"][0]["summary"]

    parts = shlex.split(good)
    parts[parts.index("--home") + 1] = str(user / "another-home")
    hook["command"] = shlex.join(parts)
    settings_file.write_text(json.dumps(installed))
    _, found = doctor(capsys)
    assert f"asks the reader of data home {user / 'another-home'}, not of" in \
        found["claude-code hook"][0]["summary"]

    assert lookback("install", "claude-code", "--user") == 0  # the fix
    _, found = doctor(capsys)
    assert found["claude-code hook"][0]["status"] == "ok"


def test_hook_groups_of_the_wrong_shape_are_no_hook_and_install_fixes_them(user, capsys,
                                                                          monkeypatch):
    """A group whose ``hooks`` is not a list was "the check failed: TypeError", with no
    fix; it holds no hook the agent runs, so the hook is missing, and install adds it."""
    monkeypatch.setenv("CODEX_HOME", str(user / ".codex"))
    odd = json.dumps({"hooks": {"UserPromptSubmit": [{"hooks": 5}]}})
    for settings_file in (user / ".claude" / "settings.json", user / ".codex" / "hooks.json"):
        settings_file.parent.mkdir(parents=True, exist_ok=True)
        settings_file.write_text(odd)
    _, found = doctor(capsys)
    for check, fix in (("claude-code hook", "lookback install claude-code --user"),
                       ("codex hook", "lookback install codex")):
        (finding,) = found[check]
        assert finding["status"] == "problem" and "is not in" in finding["summary"]
        assert finding["fix"] == fix
        assert lookback(*shlex.split(fix)[1:]) == 0
    _, found = doctor(capsys)
    assert found["claude-code hook"][0]["status"] == found["codex hook"][0]["status"] == "ok"


def test_an_mcp_registration_whose_command_is_gone_is_a_problem(user, capsys):
    claude_json = user / ".claude.json"
    claude_json.write_text(json.dumps({"mcpServers": {"lookback": {
        "type": "stdio", "command": str(user / "old-venv" / "bin" / "lookback"),
        "args": ["mcp"]}}}))
    _, found = doctor(capsys)
    finding = found["mcp: claude-code"][0]
    assert finding["status"] == "problem" and "is not found" in finding["summary"]
    assert finding["fix"] == ("claude mcp remove --scope user lookback && claude mcp add --scope "
                              f"user lookback -- {sys.executable} -P -m lookback mcp --provider "
                              "anthropic")
    claude_json.write_text(json.dumps({"mcpServers": {"lookback": {
        "type": "stdio", "command": sys.executable, "args": ["-m", "lookback.cli", "mcp"]}}}))
    _, found = doctor(capsys)
    assert found["mcp: claude-code"][0]["status"] == "ok"
    assert found["mcp: pi"][0]["status"] == "note"  # not registered with Pi: optional


def test_an_mcp_server_is_lookbacks_by_what_it_runs_not_by_its_path(user, capsys):
    """Any server whose JSON held the word "lookback" (a path) was taken for Lookback's."""
    claude_json = user / ".claude.json"
    other = {"type": "stdio", "command": "/srv/lookback-tools/bin/notes", "args": ["serve"]}
    claude_json.write_text(json.dumps({"mcpServers": {"notes": other}}))
    assert doctor(capsys)[1]["mcp: claude-code"][0]["status"] == "note"  # not registered
    ours = {"type": "stdio", "command": sys.executable, "args": ["-P", "-m", "lookback", "mcp"]}
    claude_json.write_text(json.dumps({"mcpServers": {"notes": other, "history": ours}}))
    assert doctor(capsys)[1]["mcp: claude-code"][0]["status"] == "ok"


CODEX_SESSIONS = Path(__file__).parent / "fixtures" / "codex" / "sessions"


def test_codex_hook_missing_untrusted_or_changed_is_found_and_install_fixes_it(
        user, capsys, monkeypatch):
    codex_home = user / ".codex"
    shutil.copytree(CODEX_SESSIONS, codex_home / "sessions")
    monkeypatch.setenv("CODEX_HOME", str(codex_home))
    code, found = doctor(capsys)
    assert found["codex hook"][0]["status"] == "problem"
    assert found["codex hook"][0]["fix"] == "lookback install codex"
    assert found["sessions: codex"][0]["status"] == "note"
    assert found["sessions: codex"][0]["details"]["not_indexed"] == 4
    for fix in (found["codex hook"][0]["fix"], found["sessions: codex"][0]["fix"]):
        assert lookback(*shlex.split(fix)[1:]) == 0
    code, found = doctor(capsys)
    assert found["codex hook"][0]["status"] == "ok"
    assert found["sessions: codex"][0]["summary"].endswith("4 sessions, all indexed")

    hooks_file = codex_home / "hooks.json"
    original = hooks_file.read_text()
    hooks = json.loads(original)
    hooks["hooks"]["UserPromptSubmit"][0]["hooks"][0]["timeout"] = 30  # edited by hand
    hooks_file.write_text(json.dumps(hooks))
    _, found = doctor(capsys)
    assert "changed since it was trusted" in found["codex hook"][0]["summary"]
    hooks_file.write_text(original)
    config = codex_home / "config.toml"
    config.write_text("\n".join(line for line in config.read_text().splitlines()
                                if "trusted_hash" not in line and "hooks.state" not in line))
    _, found = doctor(capsys)
    assert "is not trusted" in found["codex hook"][0]["summary"]
    assert lookback("install", "codex") == 0
    _, found = doctor(capsys)
    assert found["codex hook"][0]["status"] == "ok"


def test_codex_mcp_registration_in_config_toml_is_found(user, capsys, monkeypatch):
    codex_home = user / ".codex"
    codex_home.mkdir()
    monkeypatch.setenv("CODEX_HOME", str(codex_home))
    _, found = doctor(capsys)
    assert found["mcp: codex"][0]["status"] == "note"
    assert "codex mcp add lookback" in found["mcp: codex"][0]["summary"]
    (codex_home / "config.toml").write_text(
        f'[mcp_servers.lookback]\ncommand = "{sys.executable}"\n'
        'args = ["-m", "lookback.cli", "mcp", "--provider", "openai"]\n')
    _, found = doctor(capsys)
    assert found["mcp: codex"][0]["status"] == "ok"


def test_a_missing_untrusted_or_broken_pretooluse_hook_is_a_problem(user, capsys, monkeypatch):
    """With ``action.enabled`` (the default) install writes a PreToolUse hook beside the
    UserPromptSubmit one; doctor found all well while it was missing (an install from before
    it), untrusted by Codex (skipped silently) or ran a Python that is gone."""
    codex_home = user / ".codex"
    codex_home.mkdir()
    monkeypatch.setenv("CODEX_HOME", str(codex_home))
    assert lookback("install", "claude-code", "--user") == 0
    assert lookback("install", "codex") == 0
    assert {doctor(capsys)[1][c][0]["status"] for c in ("claude-code hook", "codex hook")} \
        == {"ok"}
    settings_file, hooks_file = user / ".claude" / "settings.json", codex_home / "hooks.json"
    for check, place, fix in (("claude-code hook", settings_file,
                               "lookback install claude-code --user"),
                              ("codex hook", hooks_file, "lookback install codex")):
        installed = json.loads(place.read_text())
        action = installed["hooks"].pop("PreToolUse")
        place.write_text(json.dumps(installed))
        finding = doctor(capsys)[1][check][0]
        assert finding["status"] == "problem" and "PreToolUse" in finding["summary"]
        assert finding["fix"] == fix
        good = action[0]["hooks"][0]["command"]
        action[0]["hooks"][0]["command"] = good.replace(
            shlex.split(good)[0], str(user / "old-venv" / "python"), 1)
        installed["hooks"]["PreToolUse"] = action
        place.write_text(json.dumps(installed))
        finding = doctor(capsys)[1][check][0]
        assert finding["status"] == "problem" and "no longer exists" in finding["summary"]
        assert lookback(*shlex.split(fix)[1:]) == 0  # the fix, as printed
        assert doctor(capsys)[1][check][0]["status"] == "ok"
    config = codex_home / "config.toml"
    lines = config.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "pre_tool_use" in line)
    config.write_text("\n".join(lines[:at] + lines[at + 2:]))  # its table and trusted_hash
    finding = doctor(capsys)[1]["codex hook"][0]
    assert finding["status"] == "problem" and "PreToolUse" in finding["summary"]

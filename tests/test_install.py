"""`lookback install` then `lookback uninstall`, for each agent, on settings files as the agents
write them (other keys, other hooks, comments in TOML, a symlinked file, a 0600 mode): the
files come back byte for byte, and `--print` changes nothing. Nothing uninstalled before
(issue 27, finding 8); Claude Code's hook went into the team's shared settings.json."""

from __future__ import annotations

import json
import os
import shlex
import tomllib
from pathlib import Path

import pytest

from lookback import codex_config, pi_package
from lookback.cli import main

#: Claude Code's personal settings as it writes them itself (JSON.stringify(_, null, 2)).
CLAUDE_LOCAL = json.dumps({"permissions": {"allow": ["Bash(npm test:*)"], "deny": []},
                           "env": {"FOO": "bär"}}, indent=2, ensure_ascii=False) + "\n"
#: Pi's settings.json as Pi writes it (no final newline).
PI_SETTINGS = json.dumps({"lastChangelogVersion": "1.6.0", "defaultProvider": "fakellm",
                          "packages": ["npm:pi-other@1.0.0"]}, indent=2)
#: A Codex config.toml with comments and tables around, and another tool's hook.
CODEX_CONFIG = """# my Codex settings
model = "gpt-5"  # the default

[model_providers.local]
name = "Local"   # a comment kept
base_url = "http://127.0.0.1:1234/v1"

[hooks.state."{hooks}:user_prompt_submit:0:0"]
trusted_hash = "sha256:{other}"
"""
OTHER_GROUP = {"hooks": [{"type": "command", "command": "echo other", "timeout": 5}]}


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "user"
    (home / "work").mkdir(parents=True)
    for name in ("CLAUDE_CONFIG_DIR", "PI_CODING_AGENT_DIR", "LOOKBACK_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("LOOKBACK_HOME", str(home / "data"))
    monkeypatch.setenv("CODEX_HOME", str(home / ".codex"))
    monkeypatch.chdir(home / "work")
    return home


def snapshot(root: Path) -> dict[str, tuple[bytes | str, int]]:
    """Every file and link under ``root``: its bytes (a link: its target) and mode."""
    found: dict[str, tuple[bytes | str, int]] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            found[key] = (os.readlink(path), 0)
        elif path.is_file():
            found[key] = (path.read_bytes(), path.stat().st_mode & 0o777)
    return found


def lookback(*argv: str) -> int:
    return main(list(argv))


def round_trip(user: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """install (after --print changed nothing), then uninstall: the tree is as it was."""
    before = snapshot(user)
    assert lookback("install", *argv, "--print") == 0
    printed = capsys.readouterr().out
    assert snapshot(user) == before
    assert lookback("install", *argv) == 0
    assert snapshot(user) != before
    assert lookback("install", *argv) == 0  # a re-run changes nothing
    assert "nothing changed" in capsys.readouterr().out
    assert lookback("uninstall", *argv, "--print") == 0
    assert lookback("uninstall", *argv) == 0
    after = snapshot(user)
    assert after == before, {k for k in set(after) | set(before) if after.get(k) != before.get(k)}
    return printed


def test_claude_code_personal_settings_round_trip_byte_for_byte(user, capsys):
    local = user / "work" / ".claude" / "settings.local.json"
    local.parent.mkdir()
    local.write_text(CLAUDE_LOCAL, encoding="utf-8")
    printed = round_trip(user, capsys, "claude-code")
    assert f"change {local}:" in printed and "claude_hook.py" in printed


def test_a_hook_left_in_the_shared_file_is_named_with_its_removal(user, capsys):
    """Earlier versions wrote the shared settings.json; Claude Code runs both files' hooks."""
    assert lookback("install", "claude-code", "--shared") == 0
    capsys.readouterr()
    assert lookback("install", "claude-code") == 0
    out = capsys.readouterr().out
    assert "`lookback uninstall claude-code --shared` removes it" in out
    assert lookback("uninstall", "claude-code", "--shared") == 0
    assert not (user / "work" / ".claude" / "settings.json").exists()
    assert "claude_hook.py" in (user / "work" / ".claude" / "settings.local.json").read_text()


def test_claude_code_into_no_file_leaves_no_file(user, capsys):
    (user / "work" / ".claude").mkdir()
    round_trip(user, capsys, "claude-code")
    assert not (user / "work" / ".claude" / "settings.local.json").exists()


def test_claude_code_shared_and_user_files_through_a_symlink_keep_link_and_mode(user, capsys):
    dotfiles = user / "dotfiles" / "settings.json"
    dotfiles.parent.mkdir()
    dotfiles.write_text(json.dumps({"env": {"ANTHROPIC_API_KEY": "sk-kept"}}, indent=4))
    dotfiles.chmod(0o600)
    (user / ".claude").mkdir()
    (user / ".claude" / "settings.json").symlink_to(dotfiles)
    round_trip(user, capsys, "claude-code", "--user")
    shared = user / "work" / ".claude" / "settings.json"
    shared.parent.mkdir()
    shared.write_text('{"model": "opus"}')  # one line, no newline: a hand-written file
    before = shared.read_text()
    assert lookback("install", "claude-code", "--shared") == 0
    assert "claude_hook.py" in shared.read_text()
    assert not (shared.parent / "settings.local.json").exists()
    assert lookback("uninstall", "claude-code", "--shared") == 0
    assert json.loads(shared.read_text()) == json.loads(before)


def test_codex_hooks_and_trust_round_trip_with_comments_and_another_hook(user, capsys):
    codex = user / ".codex"
    codex.mkdir()
    hooks = codex / "hooks.json"
    hooks.write_text(json.dumps({"hooks": {"UserPromptSubmit": [OTHER_GROUP]}}, indent=2) + "\n")
    other = codex_config.hook_hash("UserPromptSubmit", OTHER_GROUP["hooks"][0])
    (codex / "config.toml").write_text(
        CODEX_CONFIG.format(hooks=hooks, other=other.removeprefix("sha256:")))
    (codex / "config.toml").chmod(0o600)
    printed = round_trip(user, capsys, "codex")
    assert f"change {codex / 'config.toml'}:" in printed and "+trusted_hash" in printed


def test_codex_into_a_home_without_config_toml_leaves_none(user, capsys):
    """A Codex home as a fresh Codex leaves it, no config.toml yet. Before: install created
    one for the trust entry and uninstall left it behind, empty."""
    (user / ".codex").mkdir()
    round_trip(user, capsys, "codex")
    assert not (user / ".codex" / "config.toml").exists()


def test_uninstalling_codex_before_another_hook_moves_that_hooks_trust_up(user, capsys):
    """Codex's trust keys name positions: the hook after ours must stay trusted."""
    codex = user / ".codex"
    codex.mkdir()
    assert lookback("install", "codex") == 0
    hooks = codex / "hooks.json"
    document = json.loads(hooks.read_text())
    document["hooks"]["UserPromptSubmit"].append(OTHER_GROUP)  # the user adds one after ours
    hooks.write_text(json.dumps(document, indent=2) + "\n")
    with open(codex / "config.toml", "a", encoding="utf-8") as config:
        key = codex_config.hook_key(hooks, "UserPromptSubmit", 1, 0)
        config.write(f'\n[hooks.state.{json.dumps(key)}]\ntrusted_hash = '
                     f'"{codex_config.hook_hash("UserPromptSubmit", OTHER_GROUP["hooks"][0])}"\n')
    assert lookback("uninstall", "codex") == 0
    assert json.loads(hooks.read_text()) == {"hooks": {"UserPromptSubmit": [OTHER_GROUP]}}
    trusted = codex_config.trusted_hashes(tomllib.loads((codex / "config.toml").read_text()))
    assert trusted == {codex_config.hook_key(hooks, "UserPromptSubmit", 0, 0):
                       codex_config.hook_hash("UserPromptSubmit", OTHER_GROUP["hooks"][0])}


def test_pi_settings_round_trip_and_the_copy_goes(user, capsys):
    agent = user / ".pi" / "agent"
    agent.mkdir(parents=True)
    (agent / "settings.json").write_text(PI_SETTINGS)
    printed = round_trip(user, capsys, "pi")
    assert f"+    \"{user / 'data' / 'pi-extension'}\"" in printed
    assert not (user / "data" / "pi-extension").exists()


def test_pi_install_copies_the_extension_with_this_installs_command(user, capsys):
    agent = user / ".pi" / "agent"
    agent.mkdir(parents=True)
    assert lookback("install", "pi") == 0
    out = capsys.readouterr().out
    assert "lookback serve" not in out.replace(shlex.join(pi_package.this_command()), "")
    copy = user / "data" / "pi-extension"
    shipped = pi_package.shipped_dir()
    assert shipped is not None and pi_package.is_package(copy)
    assert pi_package.shipped_files(copy) == pi_package.shipped_files(shipped)
    assert pi_package.recorded_command(copy) == pi_package.this_command()
    recorded = json.loads((copy / pi_package.COMMAND_FILE).read_text())
    assert recorded["action"] == {"enabled": True, "max_tokens": 1000}  # point of action: on
    assert json.loads((agent / "settings.json").read_text()) == {"packages": [str(copy)]}


def test_flags_of_claude_code_are_refused_for_the_others(user, capsys):
    for agent in ("pi", "codex"):
        assert lookback("install", agent, "--shared") == 2
        assert "Claude Code's" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["install", "--help"], ["install", "claude-code"],
                                  ["install", "codex"]])
def test_nothing_tells_the_user_to_start_the_reader(user, capsys, argv):
    """`install claude-code|codex` and `install --help` said "start `lookback serve`",
    though the hooks start it themselves."""
    (user / ".codex").mkdir()
    try:
        lookback(*argv)
    except SystemExit:
        pass
    out = capsys.readouterr().out
    assert out and "start `lookback serve`" not in out and "start lookback serve" not in out
    assert "on first use" in " ".join(out.split())


def test_codex_is_named_wherever_the_agents_are_listed(tmp_path, capsys):
    """Codex was missing from `--help`, `index --help`'s default, `watch --help`, the
    not-a-session error, the MCP instructions and the package description."""
    import tomllib as toml

    from lookback.ingest.pipeline import peek_header
    from lookback.ingest.reader import NotASession
    from lookback.mcp import INSTRUCTIONS

    for argv in (["--help"], ["index", "--help"], ["watch", "--help"]):
        with pytest.raises(SystemExit):
            lookback(*argv)
        assert "Codex" in capsys.readouterr().out, argv
    assert "Codex" in INSTRUCTIONS
    pyproject = toml.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert "Codex" in pyproject["project"]["description"]
    notes = tmp_path / "notes.jsonl"
    notes.write_text('{"hello": "world"}\n')
    with pytest.raises(NotASession, match="no Codex session_meta"):
        peek_header(notes)


def test_the_point_of_action_hook_comes_with_the_prompt_hook_and_goes_when_turned_off(
        user, capsys, monkeypatch):
    local = user / "work" / ".claude" / "settings.local.json"
    assert lookback("install", "claude-code") == 0
    hooks = json.loads(local.read_text())["hooks"]
    [group] = hooks["PreToolUse"]
    assert group["matcher"] == "Read|Edit|MultiEdit|Write|NotebookEdit|Bash|Grep|Glob"
    command = shlex.split(group["hooks"][0]["command"])
    assert command[1:3] == ["-S", "-I"] and command[3].endswith("action_hook.py")
    assert command[command.index("--agent") + 1] == "claude-code"
    assert command[command.index("--max-tokens") + 1] == "1000"
    assert "claude_hook.py" in json.dumps(hooks["UserPromptSubmit"])
    monkeypatch.setenv("LOOKBACK_ACTION__ENABLED", "false")
    assert lookback("install", "claude-code") == 0
    hooks = json.loads(local.read_text())["hooks"]
    assert "PreToolUse" not in hooks and "claude_hook.py" in json.dumps(hooks)
    monkeypatch.delenv("LOOKBACK_ACTION__ENABLED")
    assert lookback("install", "claude-code") == 0
    assert lookback("uninstall", "claude-code") == 0
    assert not local.exists()


def test_codex_trusts_the_point_of_action_hook_and_forgets_it_when_turned_off(
        user, capsys, monkeypatch):
    codex = user / ".codex"
    codex.mkdir()
    assert lookback("install", "codex") == 0
    hooks_file = codex / "hooks.json"
    [group] = json.loads(hooks_file.read_text())["hooks"]["PreToolUse"]
    assert "matcher" not in group and "--agent codex" in group["hooks"][0]["command"]
    trusted = codex_config.trusted_hashes(tomllib.loads((codex / "config.toml").read_text()))
    assert trusted[codex_config.hook_key(hooks_file, "PreToolUse", 0, 0)] == \
        codex_config.hook_hash("PreToolUse", group["hooks"][0])
    monkeypatch.setenv("LOOKBACK_ACTION__ENABLED", "false")
    assert lookback("install", "codex") == 0
    assert "PreToolUse" not in json.loads(hooks_file.read_text())["hooks"]
    trusted = codex_config.trusted_hashes(tomllib.loads((codex / "config.toml").read_text()))
    assert list(trusted) == [codex_config.hook_key(hooks_file, "UserPromptSubmit", 0, 0)]

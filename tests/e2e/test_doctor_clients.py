"""`lookback doctor` reads what the real clients write: Pi 1.x's `pi install` (settings.json
packages, a path relative to the settings file's folder) and `pi mcp add` (mcp.json), Claude
Code's `claude mcp add --scope user` (~/.claude.json), Codex's `codex mcp add` (config.toml) —
each turns its finding from a problem or note into ok, run exactly as the doctor words its
fix; and a hook `lookback install codex` wrote is one the real Codex runs. The Pi package is
found by its content: this failed from a clone in a folder without "lookback" in its name."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from lookback import pi_package

from .claude_harness import install_claude
from .codex_harness import install_codex
from .harness import install_pi1
from .npm_install import installed_or_fail

LOOKBACK = str(Path(sys.executable).with_name("lookback"))


def doctor(env: dict[str, str], cwd: Path) -> dict[str, dict]:
    done = subprocess.run([LOOKBACK, "doctor", "--json"], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120, check=False)
    report = json.loads(done.stdout)
    assert (done.returncode == 0) is report["ok"], done.stderr
    return {finding["check"]: finding for finding in report["checks"]}


def run(command: list[str], env: dict[str, str], cwd: Path) -> None:
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def test_doctor_sees_what_pi_and_claude_code_wrote(tmp_path):
    home, project = tmp_path / "user", tmp_path / "project"
    (home / ".pi" / "agent").mkdir(parents=True)
    (home / ".claude").mkdir()
    project.mkdir()
    pi, node_env = installed_or_fail(install_pi1, "Pi 1.x")
    claude = installed_or_fail(install_claude, "Claude Code")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LOOKBACK_", "PI_", "CLAUDE_", "ANTHROPIC_"))}
    env.update(node_env, HOME=str(home), LOOKBACK_HOME=str(tmp_path / "data"),
               PI_OFFLINE="1", DISABLE_AUTOUPDATER="1",
               CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
    # As the README leaves it: this Lookback in its venv, none on the PATH.
    env["PATH"] = os.pathsep.join(folder for folder in env["PATH"].split(os.pathsep)
                                  if not (Path(folder) / "lookback").exists())

    before = doctor(env, project)
    assert before["pi package"]["status"] == "problem"
    assert before["mcp: pi"]["status"] == "note" and before["mcp: claude-code"]["status"] == "note"

    # Pi's own `pi install` of the extension (as from a clone) is found, whatever the folder's
    # name; it starts the reader with `lookback` from a PATH that has none: doctor says so.
    shipped = pi_package.shipped_dir()
    assert shipped is not None
    run([str(pi), "install", str(shipped)], env, project)
    found = doctor(env, project)["pi package"]
    assert found["details"]["package"] != "" and "not found on the PATH" in found["summary"]
    assert found["fix"] == f"{LOOKBACK} install pi"  # none on the PATH: this one, by its path

    # The fixes, exactly as the doctor words them (the MCP ones name this Python).
    for fix in (found["fix"], before["mcp: pi"]["summary"].split("(optional): ")[1],
                before["mcp: claude-code"]["summary"].split("(optional): ")[1]):
        program, *rest = shlex.split(fix)
        command = {LOOKBACK: [LOOKBACK], "pi": [str(pi)], "claude": claude}[program]
        run([*command, *rest], env, project)

    after = doctor(env, project)
    assert after["pi package"]["status"] == "ok", after["pi package"]
    assert after["mcp: pi"]["status"] == "ok", after["mcp: pi"]
    assert after["mcp: claude-code"]["status"] == "ok", after["mcp: claude-code"]
    settings = json.loads((home / ".pi" / "agent" / "settings.json").read_text())
    assert settings["packages"] == [str(tmp_path / "data" / "pi-extension")]  # in Pi's place


def test_doctor_sees_what_codex_wrote(tmp_path):
    home, project = tmp_path / "user", tmp_path / "project"
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True)
    project.mkdir()
    codex = installed_or_fail(install_codex, "Codex")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LOOKBACK_", "CODEX_", "OPENAI_"))}
    env.update(HOME=str(home), LOOKBACK_HOME=str(tmp_path / "data"))  # Codex's default home

    before = doctor(env, project)
    assert before["codex hook"]["status"] == "problem"
    assert before["codex hook"]["fix"] in ("lookback install codex", f"{LOOKBACK} install codex")
    assert before["mcp: codex"]["status"] == "note"

    run([LOOKBACK, "install", "codex"], env, project)
    program, *rest = shlex.split(before["mcp: codex"]["summary"].split("(optional): ")[1])
    assert program == "codex"
    run([str(codex), *rest], env, project)

    after = doctor(env, project)
    assert after["codex hook"]["status"] == "ok", after["codex hook"]
    assert after["mcp: codex"]["status"] == "ok", after["mcp: codex"]

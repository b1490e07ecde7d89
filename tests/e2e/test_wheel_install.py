"""Lookback as a user installs it: the sdist and the wheel built from a copy of this
repository, the wheel installed (its dependencies from the package index) into a fresh venv in
a temporary folder that is not on the PATH, and the user's path run there, each command as the
docs write it; then the real Pi 1.6.0 with the extension `lookback install pi` put in place,
which gets evidence from its second model call on, nothing started by hand.

Before (issue 27, findings 4, 5, 10): the wheel had no Pi extension and no docs, the sdist
shipped tests without their fixtures, no LICENSE; the extension started the reader with the
`lookback` on Pi's PATH (`reader start failed: ENOENT` on every run); `lookback mcp` named
`pi-lookback[mcp]`, which is not on PyPI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from lookback import local_reader

from . import harness
from .npm_install import installed_or_fail

pytestmark = pytest.mark.slow
SAMPLES = harness.REPO_ROOT / "tests" / "fixtures"
#: What the build copies: the repository as a clone has it (no venvs, caches or builds).
NOT_COPIED = shutil.ignore_patterns(".git", ".venv", "node_modules", "__pycache__", "*.egg-info",
                                    "build", "dist", ".*_cache", ".hypothesis")


@dataclass
class Installed:
    """A wheel installed into a venv of its own, and a user (HOME) to run it as."""

    root: Path
    sdist: Path
    wheel: Path
    venv: Path
    env: dict[str, str]

    @property
    def lookback(self) -> str:
        return str(self.venv / "bin" / "lookback")

    def run(self, *argv: str, stdin: str = "", check: bool = True, timeout: float = 300,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([self.lookback, *argv], input=stdin, env=env or self.env,
                              cwd=self.root / "work", capture_output=True, text=True,
                              timeout=timeout, check=False)
        if check:
            assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-2000:])
        return done

    def shell(self, command: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """A command exactly as Lookback printed it for the user to run."""
        done = subprocess.run(command, shell=True, env=self.env, cwd=self.root / "work",
                              capture_output=True, text=True, timeout=timeout, check=False)
        assert done.returncode == 0, (command, done.stderr[-2000:])
        return done


def without_lookback(path: str) -> str:
    """A PATH with no folder that holds a `lookback` (the README's set-up leaves it in a venv)."""
    return os.pathsep.join(folder for folder in path.split(os.pathsep)
                           if folder and not (Path(folder) / "lookback").exists())


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("user")
    source = root / "source"
    shutil.copytree(harness.REPO_ROOT, source, ignore=NOT_COPIED)
    dist = root / "dist"
    built = subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(source)],
                           capture_output=True, text=True, timeout=900, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    [sdist], [wheel] = sorted(dist.glob("*.tar.gz")), sorted(dist.glob("*.whl"))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    done = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", str(wheel)],
                          capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    home = root / "home"
    (home / ".pi" / "agent").mkdir(parents=True)
    (root / "work").mkdir()
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("LOOKBACK_", "PI_", "CLAUDE_", "CODEX_", "VIRTUAL_ENV",
                                  "PYTHON", "XDG_"))}
    env.update(HOME=str(home), PATH=without_lookback(env.get("PATH", "")))
    return Installed(root, sdist, wheel, venv, env)


def test_the_sdist_and_the_wheel_carry_what_a_user_needs(installed):
    with tarfile.open(installed.sdist) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert "LICENSE" in names and "integrations/pi/index.ts" in names and "docs/usage.md" in names
    assert "lookback/server/static/page.js" in names
    assert not {name for name in names if name.startswith(("tests/", "bench/"))}  # ships none
    with zipfile.ZipFile(installed.wheel) as wheel:
        files = set(wheel.namelist())
        [metadata] = [n for n in files if n.endswith(".dist-info/METADATA")]
        meta = wheel.read(metadata).decode()
    assert {"lookback/integrations/pi/index.ts", "lookback/integrations/pi/package.json",
            "lookback/integrations/pi/src/autostart.ts", "lookback/docs/usage.md",
            "lookback/docs/mcp.md", "lookback/py.typed",
            "lookback/server/static/index.html",  # the page's files
            "lookback/server/static/page.js", "lookback/server/static/page.css",
            "lookback/docs/page.md", "lookback/docs/page/session.png"} <= files
    assert not any("/test/" in name or name.startswith("tests/") for name in files)
    assert any(name.endswith("licenses/LICENSE") or name.endswith(".dist-info/LICENSE")
               for name in files)
    assert "Classifier: License :: OSI Approved :: MIT License" in meta
    assert "Keywords:" in meta and "Codex" in meta


def test_the_users_path_from_the_wheel_off_the_path(installed):
    session = SAMPLES / "pi-sessions" / "before-compaction.jsonl"
    done = installed.run("index", str(SAMPLES / "pi-sessions"), str(SAMPLES / "claude-code"))
    assert "indexed" in done.stdout + done.stderr
    request = {"session_file": str(session),
               "message": "why does `unsubscribe` clear the event listeners?"}
    answer = json.loads(installed.run("retrieve", stdin=json.dumps(request)).stdout)
    assert answer["status"] == "ok" and answer["evidence"]
    found = json.loads(installed.run("search", "unsubscribe", "--session-file", str(session),
                                     "--json").stdout)
    assert found["results"]

    # The installed help names where the installed docs are, and they are there.
    docs = installed.run("--help").stdout.rsplit("Documentation (docs/*.md): ", 1)[1].split()[0]
    assert Path(docs, "usage.md").is_file() and str(installed.venv) in docs
    assert installed.run("mcp", "--help").stdout.startswith("usage: lookback mcp")

    report = json.loads(installed.run("doctor", "--json", check=False).stdout)
    checks = {finding["check"]: finding for finding in report["checks"]}
    assert checks["reader"]["status"] == "note"  # a fresh machine: started on first use
    # Off the PATH the fix names this Lookback by its path, and runs as printed.
    assert checks["pi package"]["fix"] == f"{installed.lookback} install pi"
    installed.shell(checks["pi package"]["fix"])
    copy = Path(installed.env["HOME"]) / ".local" / "share" / "lookback" / "pi-extension"
    command = json.loads((copy / "lookback.json").read_text())["command"]
    assert Path(command[0]).parent == installed.venv / "bin"  # the venv's own Python
    assert command[1:] == ["-P", "-m", "lookback"]
    report = json.loads(installed.run("doctor", "--json", check=False).stdout)
    checks = {finding["check"]: finding for finding in report["checks"]}
    assert checks["pi package"]["status"] == "ok", checks["pi package"]
    assert report["ok"], [f for f in report["checks"] if f["status"] == "problem"]

    # `lookback mcp` without the SDK names the command that installs it; that command works.
    failed = installed.run("mcp", check=False, stdin="")
    assert failed.returncode == 2 and "pi-lookback[mcp]" not in failed.stderr
    install = failed.stderr.split("Python: ", 1)[1].strip()
    assert install.startswith(str(installed.venv / "bin" / "python"))  # this venv's pip
    installed.shell(install)
    probe = subprocess.run([str(installed.venv / "bin" / "python"), "-c",
                            "import mcp.server.mcpserver"], capture_output=True, timeout=120,
                           check=False)
    assert probe.returncode == 0, probe.stderr


def test_pi_runs_the_installed_lookback_with_none_on_its_path(installed, tmp_path):
    """The real Pi 1.6.0, the extension installed by `lookback install pi` from the wheel:
    its first call starts the reader (this install's command), the second gets evidence."""
    pi, node_env = installed_or_fail(harness.install_pi1, "Pi 1.x")
    data_home = Path(installed.env["HOME"]) / ".local" / "share" / "lookback"  # the default
    url = local_reader.address(data_home, installed.env)  # this user's reader's socket
    with harness.FakeModelServer() as model:
        agent = harness.write_agent_dir(tmp_path / "agent", model.port)
        env = {**installed.env, "PI_CODING_AGENT_DIR": str(agent), "PI_OFFLINE": "1"}
        env["PATH"] = without_lookback(node_env.get("PATH", env["PATH"]))
        assert subprocess.run(["sh", "-c", "command -v lookback"], env=env,
                              capture_output=True, check=False).returncode != 0
        installed.run("install", "pi", env=env)  # into this agent dir
        assert json.loads((agent / "settings.json").read_text())["packages"]
        project = tmp_path / "project"
        project.mkdir()
        session = harness.prepare_session(tmp_path, project)
        command = [str(pi), "--offline", "--provider", "fakellm", "--model", "fake-model", "-nc",
                   "--no-skills", "--no-prompt-templates", "--no-themes", "--session",
                   str(session), "-p"]
        prompt = "Does `AgentSession.messages` still return `AppMessage[]` after the refactor?"
        try:
            runs = []
            for attempt in range(2):
                model.take()
                done = subprocess.run([*command, prompt], env=env, cwd=project,
                                      capture_output=True, text=True, timeout=180, check=False)
                assert done.returncode == 0, done.stderr[-2000:]
                runs.append(model.take())
                if attempt == 0:  # the extension started the reader: wait until it answers
                    harness.wait_for_health(url, timeout=120)
        finally:
            installed.run("serve", "--stop", check=False)
    first, second = runs
    assert len(first) == 1 and not harness.any_evidence(first[0])  # it was starting
    assert harness.evidence_before_prompt(second[-1], prompt)

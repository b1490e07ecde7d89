"""`lookback serve --ensure` / `--stop`: a reader nobody starts by hand, once per machine."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from lookback.background import read_started
from lookback.doctor import check_reader
from lookback.settings import load_settings
from tests.e2e.harness import free_port, wait_for_health

LOOKBACK = [sys.executable, "-m", "lookback"]


def environment(home: Path) -> dict[str, str]:
    """The test's own settings only: an empty config file in its home."""
    config = home / "config.toml"
    config.touch()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOKBACK_")}
    return {**env, "LOOKBACK_CONFIG": str(config)}


def lookback(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*LOOKBACK, "--home", str(home), *args], capture_output=True,
                          text=True, timeout=120, env=environment(home), check=False)


def test_two_sessions_asking_at_once_start_one_reader_and_stop_stops_it(home):
    port = str(free_port())
    ensure = [*LOOKBACK, "--home", str(home), "serve", "--ensure", "--started-by", "pi",
              "--port", port]
    both = [subprocess.Popen(ensure, stdout=subprocess.PIPE, text=True, env=environment(home))
            for _ in range(2)]
    states = sorted(json.loads(p.communicate(timeout=120)[0])["reader"] for p in both)
    try:
        assert states.count("started") == 1 and states[0] in ("running", "started", "starting")
        wait_for_health(f"http://127.0.0.1:{port}", timeout=60)
        assert json.loads(lookback(home, "serve", "--ensure", "--port", port).stdout)[
            "reader"] == "running"
        started = read_started(load_settings({"home": str(home)}, environ={}))
        assert started is not None and started.started_by == "pi" and started.alive()
        assert (home / "logs" / "serve.log").exists()
    finally:
        stopped = lookback(home, "serve", "--stop")
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout) == {"stopped": started.pid, "started_by": "pi"}
    assert not started.alive() and not (home / "serve.pid").exists()
    assert lookback(home, "serve", "--stop").returncode == 1  # nothing left to stop


def test_a_pid_file_naming_a_process_that_is_no_reader_neither_blocks_nor_kills(home):
    """The pid file outlives its reader (a reboot, a crash); its pid may now be another
    process's. Once, --ensure answered "starting" for as long as that process lived (no
    reader, ever) and --stop sent it SIGTERM, then SIGKILL."""
    other = subprocess.Popen(["sleep", "120"])
    port = free_port()
    try:
        (home / "serve.pid").write_text(json.dumps({
            "pid": other.pid, "host": "127.0.0.1", "port": port, "started_by": "pi",
            "started_at": 1.0, "log": str(home / "logs" / "serve.log"),
            "identity": "a-boot-before:1234"}))
        assert lookback(home, "serve", "--stop").returncode == 1  # nothing of ours to stop
        assert other.poll() is None
        done = lookback(home, "serve", "--ensure", "--port", str(port))
        try:
            assert json.loads(done.stdout)["reader"] == "started"
            wait_for_health(f"http://127.0.0.1:{port}", timeout=60)
        finally:
            stopped = lookback(home, "serve", "--stop")
        assert stopped.returncode == 0 and json.loads(stopped.stdout)["stopped"] != other.pid
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_a_reader_already_listening_is_left_alone(home):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = str(listener.getsockname()[1])
        done = lookback(home, "serve", "--ensure", "--port", port)
    assert json.loads(done.stdout)["reader"] == "running"
    assert not (home / "serve.pid").exists()


def test_doctor_names_who_started_the_reader(home):
    port = free_port()
    settings = load_settings({"home": str(home), "server": {"port": port}}, environ={})
    lookback(home, "serve", "--ensure", "--started-by", "claude-code", "--port", str(port))
    try:
        wait_for_health(f"http://127.0.0.1:{port}", timeout=60)
        from lookback.doctor import Situation

        [finding] = check_reader(Situation(settings, environ={"HOME": str(home)}, cwd=home))
        assert finding.details["started_by"] == "claude-code"
        assert "started by claude-code" in finding.summary
    finally:
        lookback(home, "serve", "--stop")


def test_the_claude_code_hook_finding_no_reader_starts_one_and_adds_nothing(home):
    """The hook as Claude Code runs it (`python -S -I claude_hook.py`): this prompt gets
    nothing (fail-open), and `lookback serve --ensure` starts the reader for the next one."""
    from lookback import claude_hook
    from tests.test_claude_hook import hook_input

    port = free_port()
    env = {**environment(home), "LOOKBACK_HOME": str(home), "LOOKBACK_AUTOSTART": "1"}
    script = str(Path(claude_hook.__file__))
    done = subprocess.run([sys.executable, "-S", "-I", script, "--url",
                           f"http://127.0.0.1:{port}"], input=hook_input(),
                          capture_output=True, timeout=60, env=env, check=False)
    assert (done.returncode, done.stdout) == (0, b"")
    try:
        wait_for_health(f"http://127.0.0.1:{port}", timeout=60)
        started = read_started(load_settings({"home": str(home)}, environ={}))
        assert started is not None and started.started_by == "claude-code"
        assert started.port == port
    finally:
        lookback(home, "serve", "--stop")


def test_a_hook_starts_no_reader_for_a_remote_url_or_when_turned_off(home, monkeypatch):
    from lookback import hook_client

    spawned: list[list[str]] = []
    monkeypatch.setattr(subprocess, "Popen", lambda command, **_: spawned.append(command))
    monkeypatch.setenv("LOOKBACK_AUTOSTART", "1")
    hook_client.start_reader("http://reader.example:8765", "claude-code")
    monkeypatch.setenv("LOOKBACK_AUTOSTART", "0")
    hook_client.start_reader("http://127.0.0.1:8765", "claude-code")
    assert spawned == []
    monkeypatch.setenv("LOOKBACK_AUTOSTART", "1")
    hook_client.start_reader("http://127.0.0.1:8765", "claude-code")
    assert spawned == [[sys.executable, "-m", "lookback", "serve", "--ensure",
                        "--started-by", "claude-code", "--port", "8765"]]

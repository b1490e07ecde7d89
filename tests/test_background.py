"""`lookback serve --ensure` / `--stop`: a reader nobody starts by hand, once per data home,
on its user's Unix socket; what is not that reader is never taken for it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from lookback import local_reader
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


def lookback(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([*LOOKBACK, "--home", str(home), *args], capture_output=True,
                          text=True, timeout=120, env={**environment(home), **env},
                          check=False)


def test_two_sessions_asking_at_once_start_one_reader_and_stop_stops_it(home):
    ensure = [*LOOKBACK, "--home", str(home), "serve", "--ensure", "--started-by", "pi"]
    both = [subprocess.Popen(ensure, stdout=subprocess.PIPE, text=True, env=environment(home))
            for _ in range(2)]
    answers = [json.loads(p.communicate(timeout=120)[0]) for p in both]
    states = sorted(answer["reader"] for answer in answers)
    try:
        assert states.count("started") == 1 and states[0] in ("running", "started", "starting")
        assert {answer["address"] for answer in answers} == {local_reader.address(home)}
        wait_for_health(local_reader.address(home), timeout=60)
        assert json.loads(lookback(home, "serve", "--ensure").stdout)["reader"] == "running"
        started = read_started(load_settings({"home": str(home)}, environ={}))
        assert started is not None and started.started_by == "pi" and started.alive(home)
        assert started.address == local_reader.address(home)
        assert (home / "logs" / "serve.log").exists()
    finally:
        stopped = lookback(home, "serve", "--stop")
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout) == {"stopped": started.pid, "started_by": "pi"}
    assert not started.alive(home) and not (home / "serve.pid").exists()
    assert not os.path.exists(local_reader.socket_path(home))  # the reader removed its socket
    assert lookback(home, "serve", "--stop").returncode == 1  # nothing left to stop


def _pid_file_test(home: Path, record: dict) -> None:
    other = subprocess.Popen(["sleep", "120"])
    try:
        (home / "serve.pid").write_text(json.dumps({"pid": other.pid, **record}))
        assert lookback(home, "serve", "--stop").returncode == 1  # nothing of ours to stop
        assert other.poll() is None
        done = lookback(home, "serve", "--ensure")
        try:
            assert json.loads(done.stdout)["reader"] == "started"
            wait_for_health(local_reader.address(home), timeout=60)
        finally:
            stopped = lookback(home, "serve", "--stop")
        assert stopped.returncode == 0 and json.loads(stopped.stdout)["stopped"] != other.pid
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_a_pid_file_naming_a_process_that_is_no_reader_neither_blocks_nor_kills(home):
    """The pid file outlives its reader (a reboot, a crash); its pid may now be another
    process's. Once, --ensure answered "starting" for as long as that process lived (no
    reader, ever) and --stop sent it SIGTERM, then SIGKILL."""
    _pid_file_test(home, {"address": local_reader.address(home), "started_by": "pi",
                          "started_at": 1.0, "log": str(home / "logs" / "serve.log"),
                          "identity": "a-boot-before:1234"})


def test_a_pid_file_from_before_the_process_identity_neither_blocks_nor_kills(home):
    """Issue 29 item 8: a pid file an older version wrote (no ``identity``, host and port)
    whose pid is now an unrelated process made --ensure start nothing and --stop kill it."""
    _pid_file_test(home, {"host": "127.0.0.1", "port": 8765, "started_by": "pi",
                          "started_at": 1.0, "log": str(home / "logs" / "serve.log")})


def test_something_on_the_tcp_port_is_not_taken_for_the_reader(home):
    """Issue 27 finding 2: a process listening on the reader's old port made --ensure
    answer "running" and start nothing; the hooks then sent it the prompts."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = str(squatter.getsockname()[1])
        done = lookback(home, "serve", "--ensure", LOOKBACK_SERVER__PORT=port)
        try:
            assert json.loads(done.stdout)["reader"] == "started"
            wait_for_health(local_reader.address(home), timeout=60)
        finally:
            lookback(home, "serve", "--stop")
        squatter.setblocking(False)
        try:
            squatter.accept()
            raise AssertionError("something connected to the squatter")
        except BlockingIOError:
            pass  # nobody ever connected to it


def test_something_else_on_the_socket_is_foreign_and_nothing_starts(home):
    """A process that is not this home's reader (here: one that accepts and says nothing)
    at the socket's path: --ensure says so and starts nothing; no reader can bind there."""
    path = local_reader.socket_path(home)
    local_reader.check_dir(os.path.dirname(path), create=True)
    with socket.socket(socket.AF_UNIX) as squatter:
        squatter.bind(path)
        squatter.listen()
        try:
            done = lookback(home, "serve", "--ensure")
            answer = json.loads(done.stdout)
            assert (done.returncode, answer["reader"]) == (1, "foreign")
            assert not (home / "serve.pid").exists()
            served = lookback(home, "serve")
            assert served.returncode == 1 and "already listens" in served.stderr
        finally:
            os.unlink(path)


def test_doctor_names_who_started_the_reader(home):
    settings = load_settings({"home": str(home)}, environ={})
    lookback(home, "serve", "--ensure", "--started-by", "claude-code")
    try:
        wait_for_health(local_reader.address(home), timeout=60)
        from lookback.doctor import Situation

        [finding] = check_reader(Situation(settings, environ={"HOME": str(home)}, cwd=home))
        assert finding.details["started_by"] == "claude-code"
        assert "started by claude-code" in finding.summary
    finally:
        lookback(home, "serve", "--stop")


def test_the_claude_code_hook_finding_no_reader_starts_one_and_adds_nothing(home):
    """The hook as Claude Code runs it (`python -S -I claude_hook.py --home …`): this prompt
    gets nothing (fail-open), and `lookback serve --ensure` starts the reader for the next
    one."""
    from lookback import claude_hook
    from tests.test_claude_hook import hook_input

    env = {**environment(home), "LOOKBACK_AUTOSTART": "1"}
    script = str(Path(claude_hook.__file__))
    done = subprocess.run([sys.executable, "-S", "-I", script, "--home", str(home)],
                          input=hook_input(), capture_output=True, timeout=60, env=env,
                          check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    try:
        wait_for_health(local_reader.address(home), timeout=60)
        started = read_started(load_settings({"home": str(home)}, environ={}))
        assert started is not None and started.started_by == "claude-code"
    finally:
        lookback(home, "serve", "--stop")


def test_a_hook_starts_no_reader_without_a_home_or_when_turned_off(home, monkeypatch):
    from lookback import hook_client

    spawned: list[list[str]] = []
    monkeypatch.setattr(subprocess, "Popen", lambda command, **_: spawned.append(command))
    monkeypatch.setenv("LOOKBACK_AUTOSTART", "1")
    hook_client.start_reader("", "claude-code")
    monkeypatch.setenv("LOOKBACK_AUTOSTART", "0")
    hook_client.start_reader(str(home), "claude-code")
    assert spawned == []
    monkeypatch.setenv("LOOKBACK_AUTOSTART", "1")
    hook_client.start_reader(str(home), "claude-code")
    assert spawned == [[sys.executable, "-m", "lookback", "--home", str(home), "serve",
                        "--ensure", "--started-by", "claude-code"]]


def test_tcp_without_tokens_is_refused_with_what_to_do(home):
    """Issue 27 finding 1: `lookback serve` without tokens listened on 127.0.0.1:8765,
    where every local account could read every project."""
    port = str(free_port())
    done = lookback(home, "serve", "--port", port)
    assert done.returncode == 2  # a usage error
    assert "without tokens" in done.stderr and "[server.tokens]" in done.stderr
    assert "leave out --host/--port" in done.stderr
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", int(port))) != 0


def test_a_reader_with_tokens_is_still_found_without_one(home):
    """Its identity is answered without a token (and none is sent for it): --ensure finds
    the reader, which still wants the token for everything else."""
    from tests.e2e.harness import reader_get
    from tests.server.processes import wait_until

    tokens = json.dumps({"a-long-token-0001": "*"})
    assert json.loads(lookback(home, "serve", "--ensure", LOOKBACK_SERVER__TOKENS=tokens)
                      .stdout)["reader"] == "started"
    try:
        address = local_reader.address(home)
        wait_until(lambda: os.path.exists(local_reader.socket_path(home)), "the reader")
        status, identity = reader_get(address, "/v1/health?projects=0")
        assert (status, identity["identity"]) == (200, local_reader.fingerprint(home))
        assert reader_get(address, "/v1/health")[0] == 401
        assert json.loads(lookback(home, "serve", "--ensure").stdout)["reader"] == "running"
    finally:
        lookback(home, "serve", "--stop")


def test_a_reader_started_under_one_environment_is_found_from_another(home, tmp_path,
                                                                     monkeypatch):
    """Issue 27: a reader started with XDG_RUNTIME_DIR set listens in that directory; cron,
    `sudo -u` or another shell (no XDG_RUNTIME_DIR, another TMPDIR) compute another. They
    find it through the socket it records in the data home, checked as any socket is."""
    runtime, other = tmp_path / "xr", tmp_path / "ot"
    runtime.mkdir(mode=0o700)
    other.mkdir()
    started_env = {"XDG_RUNTIME_DIR": str(runtime)}
    socket_there = local_reader.socket_path(home, started_env)
    assert socket_there.startswith(str(runtime))
    assert json.loads(lookback(home, "serve", "--ensure", **started_env).stdout)["reader"] \
        == "started"
    try:
        wait_for_health(local_reader.UNIX_PREFIX + socket_there, timeout=60)
        monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
        monkeypatch.setenv("TMPDIR", str(other))
        assert local_reader.socket_path(home) != socket_there  # this environment's
        plain = {**environment(home), "TMPDIR": str(other)}
        plain.pop("XDG_RUNTIME_DIR", None)
        ensured = subprocess.run([*LOOKBACK, "--home", str(home), "serve", "--ensure"],
                                 capture_output=True, text=True, timeout=120, env=plain,
                                 check=False)
        answer = json.loads(ensured.stdout)
        assert (ensured.returncode, answer["reader"], answer["socket"]) == \
            (0, "running", socket_there)
        address = subprocess.run([*LOOKBACK, "--home", str(home), "serve", "--address"],
                                 capture_output=True, text=True, timeout=120, env=plain,
                                 check=False)
        assert json.loads(address.stdout)["socket"] == socket_there
        # The hooks' client, in this environment: found and its identity checked.
        from lookback import hook_client

        health = hook_client.get_json("", "/v1/health", deadline=time.monotonic() + 30,
                                      home=str(home))
        assert isinstance(health, dict) and health["identity"] == local_reader.fingerprint(home)
        from lookback.doctor import Situation

        settings = load_settings({"home": str(home)}, environ={})
        [finding] = check_reader(Situation(settings, environ={"HOME": str(home)}, cwd=home))
        assert finding.status == "ok", finding.summary
        assert finding.details["url"] == local_reader.UNIX_PREFIX + socket_there
    finally:
        stopped = lookback(home, "serve", "--stop")
    assert stopped.returncode == 0, stopped.stderr
    assert not (home / local_reader.ADDRESS_FILE).exists()  # the reader took its record


def test_a_recorded_socket_that_is_not_ours_is_passed_over(home, tmp_path):
    """The record is a hint: a socket it names in a directory of another user gets nothing
    sent, and does not stop the reader being looked for (and started) where it belongs."""
    foreign = tmp_path / "f"
    foreign.mkdir(mode=0o700)
    os.chown(foreign, 65534, 65534)
    (home / local_reader.ADDRESS_FILE).write_text(str(foreign / "x.sock") + "\n")
    assert local_reader.socket_candidates(home) == [str(foreign / "x.sock"),
                                                    local_reader.socket_path(home)]
    from lookback import hook_client

    try:
        hook_client.get_json("", "/v1/health", deadline=time.monotonic() + 5, home=str(home))
    except local_reader.NoReader:
        pass
    else:
        raise AssertionError("nothing listens where this environment puts the reader")


def test_a_recorded_reader_that_runs_but_never_answers_is_not_starting_forever(home,
                                                                             tmp_path):
    """A live recorded reader not found where this environment looks is asked at the address
    it recorded; one that has not answered there for a minute is ``not-answering`` (exit 1,
    with what to do), not ``starting`` for as long as it lives. Nothing is started."""
    from lookback.background import STARTING_SECONDS, process_identity

    private = tmp_path / "p"
    private.mkdir(mode=0o700)
    other = subprocess.Popen(["sleep", "120"])
    try:
        record = {"pid": other.pid, "identity": process_identity(other.pid),
                  "address": local_reader.UNIX_PREFIX + str(private / "gone.sock"),
                  "started_by": "pi", "log": str(home / "logs" / "serve.log")}
        answers = []
        for started_at in (time.time(), time.time() - STARTING_SECONDS - 1):
            (home / "serve.pid").write_text(json.dumps({**record, "started_at": started_at}))
            done = lookback(home, "serve", "--ensure")
            answers.append((done.returncode, json.loads(done.stdout)["reader"]))
        assert answers == [(0, "starting"), (1, "not-answering")]
        assert "lookback serve --stop" in json.loads(done.stdout)["reason"]
        assert other.poll() is None and not os.path.exists(local_reader.socket_path(home))
    finally:
        other.kill()
        other.wait()


def test_serve_page_beside_a_running_reader_names_page_only_which_works(home):
    """A reader the Pi extension or a hook started holds the socket: ``serve --page`` says
    which command serves the page beside it, and that command, as printed, serves it."""
    lookback(home, "serve", "--ensure")
    try:
        wait_for_health(local_reader.address(home), timeout=60)
        refused = lookback(home, "serve", "--page")
        assert refused.returncode == 1 and "already listens" in refused.stderr
        assert "`lookback serve --page-only`" in refused.stderr
        page = subprocess.Popen([*LOOKBACK, "--home", str(home), "serve", "--page-only"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                env=environment(home))
        try:
            assert page.stdout is not None
            assert page.stdout.readline().startswith("Lookback page: http://127.0.0.1:")
        finally:
            page.terminate()
            assert page.wait(timeout=30) == 0
    finally:
        lookback(home, "serve", "--stop")


def test_a_page_port_in_use_is_a_clear_error_for_page_and_page_only(home):
    """``--page-port`` naming a busy port was a traceback (AttributeError) from the page's
    listener closing before it had a site."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = str(squatter.getsockname()[1])
        for flag in ("--page", "--page-only"):
            done = lookback(home, "serve", flag, "--page-port", port)
            assert done.returncode == 1, done.stderr
            assert f"cannot serve the page on port {port}" in done.stderr
            assert "Traceback" not in done.stderr
    assert not os.path.exists(local_reader.socket_path(home))  # --page: the reader went too

"""A reader nobody has to start: ``lookback serve --ensure`` and ``lookback serve --stop``.

When the Pi extension or an agent hook finds no reader, it runs ``lookback serve --ensure``,
which returns at once: a reader that answers is left alone; otherwise, under a lock in the data
dir (so two sessions never start two), one ``lookback serve`` is started detached, its output
appended to ``<home>/logs/serve.log``, and a pid file ``<home>/serve.pid`` records its pid,
address and who started it (``lookback doctor`` shows it). ``lookback serve --stop`` stops that
reader. The first call is answered fail-open; the next one finds the reader.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lookback.settings import Settings
from lookback.workers.lifeline import alive

PID_FILE = "serve.pid"
LOCK_FILE = "serve.lock"
LOG_FILE = Path("logs") / "serve.log"
#: How long ``--stop`` waits for the reader to exit after SIGTERM before it sends SIGKILL.
STOP_WAIT_SECONDS = 10.0


@dataclass(frozen=True)
class Started:
    """What the pid file says of a reader started in the background."""

    pid: int
    host: str
    port: int
    started_by: str
    started_at: float
    log: str
    #: ``process_identity`` of the reader when it was started (None: an older pid file,
    #: or no /proc here)
    identity: str | None = None

    def alive(self) -> bool:
        """The recorded reader still runs: its pid is alive *and* is still that process
        (a pid is reused, after a reboot above all: the file outlives the reader)."""
        if not alive(self.pid):
            return False
        return self.identity is None or process_identity(self.pid) == self.identity


def process_identity(pid: int) -> str | None:
    """Which process ``pid`` is, beyond its number: this boot's id and the process's
    start time (clock ticks since boot), from /proc; None where there is none."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None
    return f"{boot}:{fields[19]}"  # field 22, starttime (the fields after the name)


def pid_path(settings: Settings) -> Path:
    return Path(settings.home) / PID_FILE


def log_path(settings: Settings) -> Path:
    return Path(settings.home) / LOG_FILE


def read_started(settings: Settings) -> Started | None:
    """The background reader the pid file names (None: none, or an unreadable file)."""
    try:
        data: Any = json.loads(pid_path(settings).read_text(encoding="utf-8"))
        identity = data.get("identity")
        return Started(int(data["pid"]), str(data["host"]), int(data["port"]),
                       str(data["started_by"]), float(data["started_at"]), str(data["log"]),
                       identity if isinstance(identity, str) else None)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def answers(host: str, port: int, timeout: float = 0.3) -> bool:
    """True when something accepts connections at host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def ensure(settings: Settings, started_by: str, port: int | None = None) -> str:
    """Start the reader in the background unless one answers or is starting; never waits
    for it. Returns ``"running"``, ``"starting"`` (another process holds the lock, or the
    recorded reader is alive but not answering yet) or ``"started"``."""
    host, port = settings.server.host, port if port is not None else settings.server.port
    if answers(host, port):
        return "running"
    home = Path(settings.home)
    home.mkdir(parents=True, exist_ok=True)
    with open(home / LOCK_FILE, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return "starting"  # another session is starting it right now
        recorded = read_started(settings)
        if recorded is not None and recorded.alive() and recorded.port == port:
            return "starting"
        if answers(host, port):
            return "running"
        pid = _spawn(settings, port)
        record = {"pid": pid, "host": host, "port": port, "started_by": started_by,
                  "started_at": time.time(), "log": str(log_path(settings)),
                  "identity": process_identity(pid)}
        temporary = pid_path(settings).with_suffix(".tmp")
        temporary.write_text(json.dumps(record), encoding="utf-8")
        temporary.replace(pid_path(settings))
    return "started"


def _spawn(settings: Settings, port: int) -> int:
    """``lookback serve`` detached from the caller: its own session, no terminal, output
    appended to the log."""
    log = log_path(settings)
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "lookback", "--home", str(settings.home), "serve",
               "--port", str(port), "--quiet"]
    with open(log, "ab") as output, open(os.devnull, "rb") as nothing:
        process = subprocess.Popen(command, stdin=nothing, stdout=output, stderr=output,
                                   start_new_session=True, close_fds=True)
    return process.pid


def stop(settings: Settings) -> Started | None:
    """Stop the background reader (SIGTERM, then SIGKILL after ``STOP_WAIT_SECONDS``) and
    remove its pid file; None when none runs."""
    recorded = read_started(settings)
    if recorded is None or not recorded.alive():
        pid_path(settings).unlink(missing_ok=True)
        return None
    os.kill(recorded.pid, signal.SIGTERM)
    limit = time.monotonic() + STOP_WAIT_SECONDS
    while recorded.alive() and time.monotonic() < limit:
        time.sleep(0.05)
    if recorded.alive():
        os.kill(recorded.pid, signal.SIGKILL)
    pid_path(settings).unlink(missing_ok=True)
    return recorded

"""A reader nobody has to start: ``lookback serve --ensure`` and ``lookback serve --stop``.

When the Pi extension or an agent hook finds no reader, it runs ``lookback serve --ensure``,
which returns at once: this data home's reader, answering on the user's Unix socket
(``lookback.local_reader``; checked: directory, peer uid, identity), is left alone; otherwise,
under a lock in the data dir (so two sessions never start two), one ``lookback serve`` is
started detached, its output appended to ``<home>/logs/serve.log``, and a pid file
``<home>/serve.pid`` records its pid, the process's identity, its address and who started it
(``lookback doctor`` shows it). Something else at the socket (another data home's reader, a
process that is not a reader) is ``foreign``: nothing is started, nothing is sent to it.
``lookback serve --stop`` stops the recorded reader. The first call is answered fail-open;
the next one finds the reader.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lookback import hook_client, local_reader
from lookback.index.layout import make_home
from lookback.settings import Settings
from lookback.workers.lifeline import alive

PID_FILE = "serve.pid"
LOCK_FILE = "serve.lock"
LOG_FILE = Path("logs") / "serve.log"
#: How long ``--stop`` waits for the reader to exit after SIGTERM before it sends SIGKILL.
STOP_WAIT_SECONDS = 10.0
#: How long ``probe`` waits for the reader's identity.
PROBE_SECONDS = 1.0
#: How long a recorded reader that runs but does not answer yet counts as ``starting``; after
#: that ``--ensure`` says it does not answer (rather than ``starting`` forever).
STARTING_SECONDS = 60.0


@dataclass(frozen=True)
class Started:
    """What the pid file says of a reader started in the background."""

    pid: int
    address: str
    started_by: str
    started_at: float
    log: str
    #: ``process_identity`` of the reader when it was started (None: a pid file written
    #: before there was one, or no /proc here)
    identity: str | None = None

    def alive(self, home: str | Path) -> bool:
        """The recorded reader still runs: its pid is alive *and* is still that process (a
        pid is reused, after a reboot above all: the file outlives the reader). A record
        without the process's identity (an older pid file) counts only while its pid runs
        ``lookback … --home <home> … serve``, as ``_spawn`` starts it: never a stranger."""
        if not alive(self.pid):
            return False
        if self.identity is not None:
            return process_identity(self.pid) == self.identity
        return runs_reader_of(self.pid, home)


@dataclass(frozen=True)
class Probe:
    """What answers at this data home's socket: ``ours``, ``none`` or ``foreign`` (with
    why it is not ours); ``address``: where the reader answered, when it did."""

    state: str
    reason: str = ""
    address: str = ""


def process_identity(pid: int) -> str | None:
    """Which process ``pid`` is, beyond its number: this boot's id and the process's
    start time (clock ticks since boot), from /proc; None where there is none."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None
    return f"{boot}:{fields[19]}"  # field 22, starttime (the fields after the name)


def runs_reader_of(pid: int, home: str | Path) -> bool:
    """``pid``'s command line is a ``lookback serve`` of ``home`` (False where /proc does
    not say)."""
    try:
        arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    words = [os.fsdecode(word) for word in arguments]
    try:
        named = words[words.index("--home") + 1]
    except (ValueError, IndexError):
        return False
    return "lookback" in words and "serve" in words and \
        os.path.realpath(named) == os.path.realpath(home)


def pid_path(settings: Settings) -> Path:
    return Path(settings.home) / PID_FILE


def log_path(settings: Settings) -> Path:
    return Path(settings.home) / LOG_FILE


def where(settings: Settings, address: str = "") -> dict[str, str]:
    """Where this data home's reader listens (``address`` when known, else the socket it
    recorded when one is there, else this environment's) and what its ``/v1/health`` calls
    it."""
    path = address.removeprefix(local_reader.UNIX_PREFIX) if address \
        else local_reader.find_socket(settings.home)
    return {"address": local_reader.UNIX_PREFIX + path, "socket": path,
            "identity": local_reader.fingerprint(settings.home)}


def tcp_url(settings: Settings) -> str:
    """The TCP reader the settings name (``server.host``), or "" for the Unix socket."""
    host = settings.server.host
    return hook_client.http_url(host, settings.server.port) if host else ""


def read_started(settings: Settings) -> Started | None:
    """The background reader the pid file names (None: none, or an unreadable file)."""
    try:
        data: Any = json.loads(pid_path(settings).read_text(encoding="utf-8"))
        identity = data.get("identity")
        address = data.get("address") or hook_client.http_url(str(data["host"]),
                                                              int(data["port"]))
        return Started(int(data["pid"]), str(address), str(data["started_by"]),
                       float(data["started_at"]), str(data["log"]),
                       identity if isinstance(identity, str) else None)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def probe(settings: Settings, seconds: float = PROBE_SECONDS, url: str = "") -> Probe:
    """Whether this data home's reader answers on the user's socket (``url``: at that
    ``unix:`` address), verified as every client verifies it (``hook_client.open_reader``)."""
    deadline = time.monotonic() + seconds
    try:
        reader = hook_client.open_reader(url, str(settings.home), deadline,
                                         os.environ.get("LOOKBACK_TOKEN") or None)
        with reader:
            return Probe("ours", address=local_reader.UNIX_PREFIX + reader.path)
    except local_reader.NoReader:
        return Probe("none")
    except local_reader.NotOurReader as error:
        return Probe("foreign", str(error))
    except hook_client.HookSkipped as error:  # it answered with an error, or too slowly
        return Probe("foreign", f"the reader there did not answer: {error}")
    except OSError as error:
        return Probe("foreign", f"the socket there does not answer: "
                                f"{error.strerror or type(error).__name__}")


def ensure(settings: Settings, started_by: str) -> Probe:
    """Start this data home's reader in the background unless it answers or is starting;
    never waits for it. The state is ``running``, ``starting`` (another process holds the
    lock, or the recorded reader is alive but not answering yet), ``started``, ``foreign``
    (something that is not this reader is at its socket: nothing started) or
    ``not-answering`` (the recorded reader runs but has not answered for
    ``STARTING_SECONDS``: nothing started)."""
    found = probe(settings)
    if found.state == "ours":
        return Probe("running", address=found.address)
    if found.state == "foreign":
        return found
    home = Path(settings.home)
    make_home(home)
    with open(home / LOCK_FILE, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return Probe("starting")  # another session is starting it right now
        recorded = read_started(settings)
        if recorded is not None and recorded.alive(home) \
                and recorded.address.startswith(local_reader.UNIX_PREFIX):
            return _recorded_state(settings, recorded)
        found = probe(settings)
        if found.state != "none":
            return Probe("running", address=found.address) if found.state == "ours" else found
        pid = _spawn(settings)
        record = {"pid": pid, "address": local_reader.address(settings.home),
                  "started_by": started_by, "started_at": time.time(),
                  "log": str(log_path(settings)), "identity": process_identity(pid)}
        temporary = pid_path(settings).with_suffix(".tmp")
        temporary.write_text(json.dumps(record), encoding="utf-8")
        temporary.replace(pid_path(settings))
    return Probe("started")


def _recorded_state(settings: Settings, recorded: Started) -> Probe:
    """The state of a recorded reader that still runs but was not found where this
    environment looks: asked at the address it recorded, checked the same way."""
    found = probe(settings, url=recorded.address)
    if found.state == "ours":
        return Probe("running", address=recorded.address)
    if found.state == "foreign":
        return found
    if time.time() - recorded.started_at < STARTING_SECONDS:
        return Probe("starting", address=recorded.address)
    return Probe("not-answering", f"the reader {recorded.started_by} started (pid "
                 f"{recorded.pid}) runs but does not answer at {recorded.address}: run "
                 "`lookback serve --stop`, then `lookback serve --ensure`",
                 address=recorded.address)


def _spawn(settings: Settings) -> int:
    """``lookback serve`` on the Unix socket, detached from the caller: its own session, no
    terminal, output appended to the log."""
    log = log_path(settings)
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "lookback", "--home", str(settings.home), "serve",
               "--quiet"]
    # The socket even where server.host names a (team's) TCP address: that is what the
    # clients that run --ensure look for.
    environment = {**os.environ, "LOOKBACK_SERVER__HOST": ""}
    with open(log, "ab") as output, open(os.devnull, "rb") as nothing:
        process = subprocess.Popen(command, stdin=nothing, stdout=output, stderr=output,
                                   start_new_session=True, close_fds=True, env=environment)
    return process.pid


def stop(settings: Settings) -> Started | None:
    """Stop the background reader (SIGTERM, then SIGKILL after ``STOP_WAIT_SECONDS``) and
    remove its pid file; None when none runs."""
    recorded = read_started(settings)
    home = settings.home
    if recorded is None or not recorded.alive(home):
        pid_path(settings).unlink(missing_ok=True)
        return None
    os.kill(recorded.pid, signal.SIGTERM)
    limit = time.monotonic() + STOP_WAIT_SECONDS
    while recorded.alive(home) and time.monotonic() < limit:
        time.sleep(0.05)
    if recorded.alive(home):
        os.kill(recorded.pid, signal.SIGKILL)
    pid_path(settings).unlink(missing_ok=True)
    return recorded

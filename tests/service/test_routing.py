"""Any reader answers for any project: several hosts, each with its own data directory,
real worker group and real TCP reader (tokens), on one Redis under a private prefix.

Every check goes through every live reader over HTTP: each entry of each session is read
by id (``/v1/source``) and each project's retrieve answers ``ok`` — wherever the project
is indexed. A reader forwards to the owner's registered reader; when it cannot, it marks
its answer (``stale`` for its own copy, ``elsewhere`` for none), never ``ok``.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lookback.workers.owner import owner_of, take
from lookback.workers.sink import RedisSink
from tests.server.client import Client
from tests.server.conftest import PROMPT
from tests.server.processes import free_port
from tests.service import helpers
from tests.service.conftest import REDIS_URL, Service, cleanup, make_service
from tests.service.helpers import complete_once, publish
from tests.service.test_crashes import OwnRedis
from tests.service.test_workers import start_watcher, stop

TOKEN = "team-token-routing-0123"
#: A token only some readers know: the owner re-checks the caller's token.
LOCAL_TOKEN = "only-some-readers-4567"
FAST = {"LOOKBACK_WORKERS__LEASE_SECONDS": "2", "LOOKBACK_WORKERS__KEEP_LOG": "true",
        "LOOKBACK_SERVER__FORWARD_TIMEOUT_SECONDS": "1"}


class Reader:
    """``lookback serve`` on a TCP port of 127.0.0.1, with the host's settings."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.port = int(service.environ["LOOKBACK_SERVER__PORT"])
        self.log = service.tmp / "serve.log"
        service.home.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "lookback.cli", "--home", str(service.home), "serve",
             "--quiet"], env=service.environ, cwd=helpers.REPO, stdout=subprocess.DEVNULL,
            stderr=self.log.open("w"))
        helpers.wait_for(self._listening, 60, "the reader listening")
        key = service.config.reader_key(f"{service.config.host}:{service.home}")
        helpers.wait_for(lambda: service.client.exists(key), 30, "the reader registered")
        self.client = Client(self.port)

    def _listening(self) -> bool:
        assert self.process.poll() is None, self.log.read_text()
        return '"listening"' in self.log.read_text()

    def post(self, path: str, body: dict, token: str = TOKEN, **headers: str) -> dict:
        try:
            answer = self.client.request("POST", path, body, token=token,
                                         headers=headers or None)
        except (ConnectionError, http.client.HTTPException):  # an idle connection closed
            answer = self.client.request("POST", path, body, token=token,
                                         headers=headers or None)
        assert answer.status == 200, (answer.status, answer.body)
        return answer.body  # type: ignore[no-any-return]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@dataclass
class Host:
    service: Service
    worker: helpers.WorkerProcess | None = None
    reader: Reader | None = None
    started: list = field(default_factory=list)

    def start(self) -> Host:
        self.worker = self.service.worker(threads=1).start()
        self.reader = Reader(self.service)
        return self

    def kill(self) -> None:
        """SIGKILL its worker group and its reader: the host is gone for good."""
        if self.worker is not None:
            self.worker.kill()
        if self.reader is not None:
            self.reader.kill()

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()
        if self.reader is not None:
            self.reader.kill()


def make_hosts(tmp_path: Path, names: list[str], redis_url: str = REDIS_URL,
               **extra: str) -> list[Host]:
    hosts, prefix = [], {}
    for name in names:
        (tmp_path / name).mkdir()
        tokens = {TOKEN: "*"} if name == names[0] else {TOKEN: "*", LOCAL_TOKEN: "*"}
        service = make_service(tmp_path / name, redis_url, LOOKBACK_WORKERS__HOST=name,
                               LOOKBACK_SERVER__HOST="127.0.0.1",
                               LOOKBACK_SERVER__PORT=str(free_port()),
                               LOOKBACK_SERVER__TOKENS=json.dumps(tokens), **{**FAST, **extra},
                               **prefix)
        prefix = {"LOOKBACK_WORKERS__KEY_PREFIX": service.config.prefix}
        hosts.append(Host(service))
    return hosts


def teardown(hosts: list[Host]) -> None:
    for host in hosts:
        host.stop()
    cleanup(hosts[0].service)
    for host in hosts[1:]:
        host.service.client.close()


def place_and_apply(hosts: list[Host], cwds: list[str], sessions: Path,
                    entries: int) -> tuple[list[str], list[Path], list[Reader]]:
    """Host n owns project n; its first ``entries`` lines are published and applied on
    its owner. The projects' keys, their session files and the running readers."""
    first = hosts[0].service
    keys = [RedisSink(first.config).project(cwd) for cwd in cwds]
    for key, host in zip(keys, hosts, strict=True):
        take(host.service.config, first.client, key)
    for host in hosts:
        host.start()
    sessions.mkdir()
    paths = publish(first.config, sessions, cwds, 0, entries, "route")
    for host, path, cwd in zip(hosts, paths, cwds, strict=True):
        helpers.wait_for(lambda s=host.service, p=path, c=cwd: complete_once(s.home, p, c), 60,
                         f"{cwd} applied on its owner")
    return keys, paths, [host.reader for host in hosts if host.reader is not None]


def unanswered(reader: Reader, path: Path, cwd: str) -> list[str]:
    """What ``reader`` does not answer as ``ok`` about the session: each entry read by id
    (naming the project, as MCP does), and a retrieve naming the session file (as the Pi
    extension and the hooks do). Empty when the reader answers all of it."""
    missing = []
    for session_id, entry_id, _, _ in helpers.expected_entries(path):
        answer = reader.post("/v1/source", {"project": cwd, "session_id": session_id,
                                            "entry_id": entry_id})
        if answer["status"] not in ("ok", "withheld") or (
                answer["entry"] is not None and answer["entry"]["entry_id"] != entry_id):
            missing.append(f"{entry_id}: {answer['status']}")
    retrieved = reader.post("/v1/retrieve", {"session_file": str(path), "message": PROMPT})
    if retrieved["status"] != "ok":
        missing.append(f"retrieve: {retrieved['status']}")
    return missing


def answered_everywhere(readers: list[Reader], paths: list[Path], cwds: list[str]) -> bool:
    return all(not unanswered(reader, path, cwd) for reader in readers
               for path, cwd in zip(paths, cwds, strict=True))


def complete(service: Service, path: Path, cwd: str) -> bool:
    return helpers.indexed_entries(service.home, cwd) == helpers.expected_entries(path)


def owner_host(service: Service, cwd: str) -> str | None:
    owner = owner_of(service.config, service.client, RedisSink(service.config).project(cwd))
    return None if owner is None else owner.host


def test_every_reader_answers_a_moved_project_and_marks_what_it_cannot_ask(tmp_path) -> None:
    """Three hosts, a project each. Every reader answers every project (forwarded to the
    owner, which re-checks the caller's token). A project moved from host a to host b
    (pause, take: b rebuilds it from the kept stream) is answered by every reader from b,
    also by a, which still holds its old copy. With b's reader gone, a marks its copy
    `stale` and c answers `elsewhere`; a forwarded request is never forwarded again."""
    cwds = [f"/work/team/route-{n}" for n in range(3)]
    hosts = make_hosts(tmp_path, ["a", "b", "c"])
    try:
        first = hosts[0].service
        sessions = tmp_path / "sessions"
        keys, paths, readers = place_and_apply(hosts, cwds, sessions, 30)
        for reader in readers:
            for path, cwd in zip(paths, cwds, strict=True):
                assert unanswered(reader, path, cwd) == [], (reader.port, cwd)

        # The owner checks the caller's token again: one it does not know is refused.
        refused = readers[1].client.request("POST", "/v1/retrieve", {
            "session_file": str(paths[0]), "message": PROMPT}, token=LOCAL_TOKEN)
        assert refused.status == 401  # host a's reader does not know LOCAL_TOKEN
        assert readers[2].post("/v1/retrieve", {"session_file": str(paths[1]),
                                                "message": PROMPT},
                               token=LOCAL_TOKEN)["status"] == "ok"  # b knows it

        # Move project 0 from host a to host b: pause, take (b rebuilds from the stream).
        code = subprocess.run([sys.executable, "-m", "lookback", "owner", cwds[0], "--pause"],
                              env=first.environ, capture_output=True, timeout=60).returncode
        assert code == 0
        take(hosts[1].service.config, first.client, keys[0])
        paths = publish(first.config, sessions, cwds, 30, 50, "route")
        helpers.wait_for(lambda: complete_once(hosts[1].service.home, paths[0], cwds[0]), 60,
                         "project 0 rebuilt on host b")
        assert helpers.indexed_entries(first.home, cwds[0]) != \
            helpers.expected_entries(paths[0])  # a's copy is stale now
        for path, cwd, host in zip(paths[1:], cwds[1:], hosts[1:], strict=True):
            helpers.wait_for(lambda s=host.service, p=path, c=cwd: complete_once(s.home, p, c), 60,
                             f"{cwd} applied on its owner")
        for reader in readers:
            for path, cwd in zip(paths, cwds, strict=True):
                assert unanswered(reader, path, cwd) == [], (reader.port, cwd)

        # A forwarded request is answered where it lands: a's copy, marked.
        again = readers[0].post("/v1/retrieve", {"session_file": str(paths[0]),
                                                 "message": PROMPT},
                                **{"lookback-forwarded": "elsewhere:/x"})
        assert again["status"] == "stale"

        # Host b's reader hangs (SIGSTOP): the forward gives up after its timeout and
        # a answers from its copy, marked.
        body = {"session_file": str(paths[0]), "message": PROMPT}
        stopped = hosts[1].reader.process  # type: ignore[union-attr]
        os.kill(stopped.pid, signal.SIGSTOP)
        try:
            hung = readers[0].post("/v1/retrieve", body)
        finally:
            os.kill(stopped.pid, signal.SIGCONT)
        assert hung["status"] == "stale"  # (or its address expired meanwhile: stale too)
        assert any("b:" in warning for warning in hung["diagnostics"]["warnings"])

        # Host b's reader stops: a's stale copy is marked, c (no copy) says elsewhere.
        hosts[1].reader.kill()  # type: ignore[union-attr]
        hosts[1].reader = None
        stale = readers[0].post("/v1/retrieve", body)
        assert stale["status"] == "stale"
        assert any("b:" in warning for warning in stale["diagnostics"]["warnings"])
        assert readers[2].post("/v1/retrieve", body)["status"] == "elsewhere"
        searched = readers[0].post("/v1/search", {"project": cwds[0], "text": "test"})
        assert searched["status"] == "stale"

        # `lookback status` lists each host's reader and names the host without one
        # (b's address lapses with its lease: the killed reader renews it no more).
        gone = first.config.reader_key(f"b:{hosts[1].service.home}")
        helpers.wait_for(lambda: not first.client.exists(gone), 30, "b's address to lapse")
        done = subprocess.run([sys.executable, "-m", "lookback", "status", "--json"],
                              env=first.environ, capture_output=True, text=True, timeout=60)
        status = json.loads(done.stdout)
        listed = status["hosts"]
        assert listed[f"a:{first.home}"]["reader"] == f"http://127.0.0.1:{readers[0].port}"
        assert listed[f"b:{hosts[1].service.home}"]["reader"] is None
        assert any(f"worker host b:{hosts[1].service.home} owns 2 projects but no reader"
                   in problem["problem"] for problem in status["service_problems"])
    finally:
        teardown(hosts)


@pytest.mark.slow
def test_a_host_killed_for_good_every_reader_answers_every_entry(tmp_path) -> None:
    """SIGKILL host a (workers and reader) for good: without anyone acting, its project
    is taken over (from the kept stream) and every entry, old and new, is answered
    through each remaining reader; the new owner holds each entry once."""
    cwds = [f"/work/team/kill-{n}" for n in range(3)]
    hosts = make_hosts(tmp_path, ["a", "b", "c"])
    try:
        first = hosts[0].service
        sessions = tmp_path / "sessions"
        _, paths, readers = place_and_apply(hosts, cwds, sessions, 40)
        assert answered_everywhere(readers, paths, cwds)

        hosts[0].kill()
        paths = publish(first.config, sessions, cwds, 40, 80, "route")
        survivors = [host.reader for host in hosts[1:] if host.reader is not None]
        helpers.wait_for(lambda: owner_host(first, cwds[0]) in ("b", "c"), 90,
                         "project 0 taken over")
        helpers.wait_for(lambda: answered_everywhere(survivors, paths, cwds), 90,
                         "every entry answered through every reader", every=0.5)
        new_owner = hosts[1] if owner_host(first, cwds[0]) == "b" else hosts[2]
        assert complete_once(new_owner.service.home, paths[0], cwds[0])
        for host, path, cwd in zip(hosts[1:], paths[1:], cwds[1:], strict=True):
            assert complete_once(host.service.home, path, cwd)
    finally:
        teardown(hosts)


@pytest.mark.slow
def test_redis_restarted_without_persistence_no_reader_answers_a_stale_copy(tmp_path) -> None:
    """Redis loses everything (killed, its files removed, restarted): the watcher sends
    the files again and the workers claim the projects anew, perhaps on other hosts.
    Every reader then answers every entry, those written after the restart included, so
    none answers from a copy left behind."""
    own = OwnRedis(tmp_path / "redis")
    own.start()
    cwds = [f"/work/team/restart-{n}" for n in range(4)]
    hosts = make_hosts(tmp_path, ["a", "b"], own.url,
                       LOOKBACK_WORKERS__LEASE_SECONDS="5")
    watcher = None
    try:
        first = hosts[0].service
        for host in hosts:
            host.start()
        sessions = tmp_path / "sessions"
        sessions.mkdir()
        paths = []
        for number, cwd in enumerate(cwds):
            path = sessions / f"w{number}.jsonl"
            helpers.append(path, helpers.session_lines(f"restart-{number}", cwd)[:30])
            paths.append(path)
        watcher = start_watcher(first, sessions)
        helpers.wait_for(lambda: all(owner_host(first, cwd) for cwd in cwds), 60,
                         "every project claimed")
        owners = {cwd: owner_host(first, cwd) for cwd in cwds}
        homes = {host.service.config.host: host.service for host in hosts}
        helpers.wait_for(lambda: all(complete_once(homes[owners[cwd]].home, path, cwd)  # type: ignore[index]
                                     for path, cwd in zip(paths, cwds, strict=True)), 60,
                         "every project applied on its owner")
        readers = [host.reader for host in hosts if host.reader is not None]
        assert answered_everywhere(readers, paths, cwds)

        own.kill()
        shutil.rmtree(own.folder)
        own.start()  # empty: no owners, no streams, no file states
        for path, cwd, number in zip(paths, cwds, range(len(cwds)), strict=True):
            helpers.append(path, helpers.session_lines(f"restart-{number}", cwd)[30:60])
        helpers.wait_for(lambda: all(owner_host(first, cwd) for cwd in cwds), 90,
                         "every project claimed again")
        owners = {cwd: owner_host(first, cwd) for cwd in cwds}
        # (complete, not complete_once: the re-sent files are new stream entries, which
        # a host that held the project logs again; its entries stay unique)
        helpers.wait_for(lambda: all(complete(homes[owners[cwd]], path, cwd)  # type: ignore[index]
                                     for path, cwd in zip(paths, cwds, strict=True)), 90,
                         "every project applied on its (new) owner")
        helpers.wait_for(lambda: answered_everywhere(readers, paths, cwds), 60,
                         "every entry answered through every reader", every=0.5)
    finally:
        if watcher is not None:
            stop(watcher)
        for host in hosts:
            host.stop()
        for host in hosts:
            host.service.client.close()
        own.kill()

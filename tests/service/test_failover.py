"""Failover without an operator: leases, fencing epochs, the stream kept for a new owner.

Two "hosts" (two data directories, two real dramatiq worker groups with their own
``workers.host``) on the real Redis under one private key prefix, with a short lease
and ``workers.keep_log`` on. A host that stops renewing its lease loses its projects
to the live one, which rebuilds them from the kept stream; a host paused past its
lease and resumed writes nothing; every entry ends on the survivor exactly once.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from lookback.workers.apply import drain
from lookback.workers.nudge import APPLY_ACTOR, send
from lookback.workers.owner import claim, my_queues, owner_of, take
from lookback.workers.sink import RedisSink
from tests.service import helpers
from tests.service.conftest import REDIS_URL, Service, cleanup, make_service
from tests.service.helpers import complete_once, publish

PROJECTS = [f"/work/team/fail-{n}" for n in range(4)]
FAST = {"LOOKBACK_WORKERS__LEASE_SECONDS": "2", "LOOKBACK_WORKERS__KEEP_LOG": "true"}


@pytest.fixture
def hosts(tmp_path: Path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    first = make_service(tmp_path / "a", REDIS_URL, LOOKBACK_WORKERS__HOST="host-a", **FAST)
    second = make_service(tmp_path / "b", REDIS_URL, LOOKBACK_WORKERS__HOST="host-b",
                          LOOKBACK_WORKERS__KEY_PREFIX=first.config.prefix, **FAST)
    started: list[helpers.WorkerProcess] = []
    try:
        yield first, second, started
    finally:
        for worker in started:
            if worker.process is not None and worker.process.poll() is None:
                os.killpg(worker.process.pid, signal.SIGCONT)
            worker.stop()
        cleanup(first)
        second.client.close()


def test_a_dead_host_loses_its_projects_to_a_live_one(hosts, tmp_path) -> None:
    first, second, started = hosts
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    keys = [RedisSink(first.config).project(cwd) for cwd in PROJECTS]
    for key in keys[:2]:
        take(first.config, first.client, key)
    for key in keys[2:]:
        take(second.config, first.client, key)
    host_a = first.worker(threads=1).start()
    started += [host_a, second.worker(threads=1).start()]
    paths = publish(first.config, sessions, PROJECTS, 0, 60, "fail")
    for service, path, cwd in zip([first, first, second, second], paths, PROJECTS, strict=True):
        helpers.wait_for(lambda s=service, p=path, c=cwd: complete_once(s.home, p, c), 60,
                         f"{cwd} applied on its owner")
    epoch = owner_of(first.config, first.client, keys[0]).epoch  # type: ignore[union-attr]

    # 1. Host A stops (SIGSTOP) past its lease: B takes its projects, from the kept stream.
    os.killpg(host_a.process.pid, signal.SIGSTOP)  # type: ignore[union-attr]
    frozen = [helpers.indexed_entries(first.home, cwd) for cwd in PROJECTS[:2]]
    paths = publish(first.config, sessions, PROJECTS, 60, 120, "fail")
    for path, cwd in zip(paths, PROJECTS, strict=True):
        helpers.wait_for(lambda p=path, c=cwd: complete_once(second.home, p, c), 90,
                         f"{cwd} complete on host B")
    owner = owner_of(first.config, first.client, keys[0])
    assert owner is not None and owner.host == "host-b" and owner.epoch > epoch

    # 2. A resumes: it renews its lease, hears a stale nudge, and writes nothing.
    os.killpg(host_a.process.pid, signal.SIGCONT)  # type: ignore[union-attr]
    lease = first.config.lease_key(f"host-a:{first.home}")
    helpers.wait_for(lambda: first.client.exists(lease), 30, "host A to renew its lease")
    send(first.config, APPLY_ACTOR, my_queues(first.config)[0], keys[0])  # A's own queue
    paths = publish(first.config, sessions, PROJECTS, 120, 160, "fail")
    log = tmp_path / "a" / "worker.log"
    helpers.wait_for(lambda: f"{keys[0]} belongs to host-b" in log.read_text(), 30,
                     "host A to forward the stale nudge")
    for path, cwd in zip(paths, PROJECTS, strict=True):
        helpers.wait_for(lambda p=path, c=cwd: complete_once(second.home, p, c), 60,
                         f"{cwd} complete on host B after A resumed")
    assert [helpers.indexed_entries(first.home, cwd) for cwd in PROJECTS[:2]] == frozen

    # 3. A dies for good (SIGKILL): B goes on answering every entry exactly once.
    host_a.kill()
    paths = publish(first.config, sessions, PROJECTS, 160, 220, "fail")
    for path, cwd in zip(paths, PROJECTS, strict=True):
        helpers.wait_for(lambda p=path, c=cwd: complete_once(second.home, p, c), 60,
                         f"{cwd} complete on host B after A died")


def test_a_stale_owner_commits_no_batch_after_a_takeover(hosts, tmp_path) -> None:
    """The owner is checked inside each batch's transaction: host B takes the project
    between A's batches (A's lease gone), and A's next batch rolls back."""
    first, second, _ = hosts
    batched = make_service(tmp_path / "a", REDIS_URL, LOOKBACK_WORKERS__HOST="host-a",
                           LOOKBACK_WORKERS__KEY_PREFIX=first.config.prefix,
                           LOOKBACK_WORKERS__BATCH_EVENTS="10", **FAST)
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    path = publish(first.config, sessions, PROJECTS, 0, 80, "fail")[0]
    key = RedisSink(first.config).project(PROJECTS[0])
    take(batched.config, first.client, key)

    def lose_the_lease(batches: int) -> None:
        if batches == 1:  # A's lease expires (a long pause); B takes the project
            first.client.delete(batched.config.lease_key(f"host-a:{batched.home}"))
            assert claim(second.config, first.client, key).host == "host-b"

    report = drain(batched.config, first.client, key, on_batch=lose_the_lease)
    assert report.batches == 1 and report.skipped and "host-b" in report.skipped
    assert len(helpers.logged_entry_ids(batched.home, PROJECTS[0])) <= 10
    second_report = drain(second.config, first.client, key)  # B rebuilds from the kept stream
    assert second_report.skipped is None
    assert complete_once(second.home, path, PROJECTS[0])
    batched.client.close()


def test_a_second_worker_under_a_live_hosts_name_refuses(hosts, tmp_path) -> None:
    """Same name, same data directory (compose's defaults on two machines): the second
    `lookback worker` finds the first one's lease held and refuses to start."""
    import subprocess
    import sys

    first, _, _ = hosts
    environ = {**first.environ, "LOOKBACK_WORKERS__LEASE_SECONDS": "1"}
    argv = [sys.executable, "-m", "lookback", "worker", "--no-background"]
    running = subprocess.Popen(argv, env=environ, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        lease = first.config.lease_key(f"host-a:{first.home}")
        helpers.wait_for(lambda: b" pid " in (first.client.get(lease) or b""), 60,
                         "the first worker's lease")
        second = subprocess.run(argv, env=environ, capture_output=True, text=True, timeout=60)
        assert second.returncode != 0
        assert "another live worker runs as host 'host-a'" in second.stderr
        assert running.poll() is None  # the first one goes on
    finally:
        running.terminate()
        running.wait(timeout=30)


def lookback(service: Service, *argv: str) -> tuple[int, str, str]:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "lookback", "--home", str(service.home),
                           *argv], env=service.environ, capture_output=True, text=True,
                          timeout=60)
    return done.returncode, done.stdout, done.stderr


def test_take_and_index_refuse_what_would_split_a_project(tmp_path) -> None:
    """Without keep_log: a take on a host lacking the trimmed events refuses (it would
    serve part of the project as complete), and so does `lookback index` of a project
    another host owns, naming that host; after copying the folder the take works."""
    import shutil

    from lookback.index.layout import project_dir

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    first = make_service(tmp_path / "a", REDIS_URL, LOOKBACK_WORKERS__HOST="host-a")
    second = make_service(tmp_path / "b", REDIS_URL, LOOKBACK_WORKERS__HOST="host-b",
                          LOOKBACK_WORKERS__KEY_PREFIX=first.config.prefix)
    try:
        sessions = tmp_path / "sessions"
        sessions.mkdir()
        path = publish(first.config, sessions, PROJECTS, 0, 40, "fail")[0]
        key = RedisSink(first.config).project(PROJECTS[0])
        assert drain(first.config, first.client, key).applied > 0  # host A applies, trims

        code, _, error = lookback(second, "owner", PROJECTS[0], "--take")
        assert code == 1 and "refusing to take" in error and "host-a" in error
        assert owner_of(first.config, first.client, key).host == "host-a"  # type: ignore[union-attr]

        code, _, error = lookback(second, "index", str(path))
        assert code == 1 and f"{PROJECTS[0]} (owned by host-a:{first.home})" in error
        assert project_dir(second.home, PROJECTS[0]).index_path() is None  # nothing written

        target = project_dir(second.home, PROJECTS[0]).path  # the documented move
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(project_dir(first.home, PROJECTS[0]).path, target)
        code, out, error = lookback(second, "owner", PROJECTS[0], "--take")
        assert code == 0 and "owned by host-b" in out, error
    finally:
        cleanup(first)
        second.client.close()


def test_status_and_doctor_name_a_dead_owner_and_its_orphaned_queue(hosts, tmp_path) -> None:
    """Host A owns a project and has a nudge queued, then stops renewing its lease (no
    worker runs): `lookback status` and `lookback doctor` name the dead host, its
    projects and its orphaned queue, each with a fix; once B takes the project over only
    the queue is left."""
    import json

    from lookback.doctor import Situation, check_service
    from lookback.workers.nudge import nudge

    first, second, _ = hosts
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    publish(first.config, sessions, PROJECTS, 0, 20, "fail")
    key = RedisSink(first.config).project(PROJECTS[0])
    take(first.config, first.client, key)  # A's lease is held now (by `owner --take`)
    first.client.delete(first.config.nudge_key(key))
    assert nudge(first.config, first.client, key)  # goes to A's own queue
    lease = first.config.lease_key(f"host-a:{first.home}")
    helpers.wait_for(lambda: not first.client.exists(lease), 30, "host A's lease to expire")

    code, out, _ = lookback(second, "status", "--json")
    status = json.loads(out)
    host = status["hosts"][f"host-a:{first.home}"]
    assert code == 0 and not host["live"] and host["projects"] == 1 and host["depth"] == 1
    problems = [p["problem"] for p in status["service_problems"]]
    assert any("host-a" in p and "is dead" in p and "1 projects" in p for p in problems)
    assert any("holds 1 nudges no worker reads" in p for p in problems)
    code, out, _ = lookback(second, "status")
    assert "DEAD (lease expired)" in out and "fix: a live `lookback worker` takes them" in out

    findings = check_service(Situation(second.settings, second.environ, tmp_path))
    assert {f.status for f in findings} == {"problem"} and all(f.fix for f in findings)
    _, out, _ = lookback(second, "doctor")  # the check runs in `lookback doctor`
    assert f"service: worker host host-a:{first.home} is dead" in out

    assert drain(second.config, first.client, key).applied > 0  # B takes it over
    status = json.loads(lookback(second, "status", "--json")[1])
    problems = [p["problem"] for p in status["service_problems"]]
    assert len(problems) == 1 and "holds 1 nudges" in problems[0]


def test_a_reader_names_the_host_that_owns_a_project(hosts, tmp_path) -> None:
    """Host B's reader asked about a project host A indexed answers `elsewhere` naming
    host A (not `not-indexed`, which says there is no history); a project nobody owns
    stays `not-indexed`."""
    from tests.server.conftest import PROMPT
    from tests.server.processes import ServeProcess

    first, second, _ = hosts
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    paths = publish(first.config, sessions, PROJECTS, 0, 30, "fail")
    key = RedisSink(first.config).project(PROJECTS[0])
    assert drain(first.config, first.client, key).applied > 0  # indexed on host A
    second.home.mkdir(parents=True, exist_ok=True)
    reader = ServeProcess(second.home, second.environ)
    try:
        answer = reader.client.post("/v1/retrieve", {"session_file": str(paths[0]),
                                                     "message": PROMPT})
        assert answer.status == 200 and answer.body["status"] == "elsewhere"
        assert any(f"host-a:{first.home}" in warning
                   for warning in answer.body["diagnostics"]["warnings"])
        answer = reader.client.post("/v1/retrieve", {"session_file": str(paths[1]),
                                                     "message": PROMPT})
        assert answer.body["status"] == "not-indexed"
    finally:
        reader.stop()


def test_a_worker_without_its_hosts_lease_applies_nothing(hosts, tmp_path) -> None:
    """Another live instance holds host A's lease (a dramatiq worker started by hand
    under a used name): A's drain applies nothing and re-queues nothing (it used to
    forward the nudge to its own queue, over and over)."""
    from lookback.workers.status import queue_figures

    first, _, _ = hosts
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    publish(first.config, sessions, PROJECTS, 0, 20, "fail")
    key = RedisSink(first.config).project(PROJECTS[0])
    first.client.set(first.config.lease_key(f"host-a:{first.home}"), "otherbox pid 1 x",
                     px=60_000)
    take(first.config, first.client, key)
    report = drain(first.config, first.client, key)
    assert report.applied == 0 and report.skipped and "another instance" in report.skipped
    assert queue_figures(first.config, first.client, my_queues(first.config)[0])["depth"] == 0
    assert helpers.indexed_entries(first.home, PROJECTS[0]) == []


def test_a_redis_restart_with_its_append_only_file_moves_nothing(tmp_path) -> None:
    """Redis killed and restarted on its AOF (compose.yaml's setup) under two live
    hosts: owners, epochs and kept streams come back, no project moves, and the events
    published afterwards land once on their owner."""
    from tests.service.test_crashes import OwnRedis

    own = OwnRedis(tmp_path / "redis")
    own.start()
    steady = {**FAST, "LOOKBACK_WORKERS__LEASE_SECONDS": "10"}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    first = make_service(tmp_path / "a", own.url, LOOKBACK_WORKERS__HOST="host-a", **steady)
    second = make_service(tmp_path / "b", own.url, LOOKBACK_WORKERS__HOST="host-b",
                          LOOKBACK_WORKERS__KEY_PREFIX=first.config.prefix, **steady)
    started = []
    try:
        keys = [RedisSink(first.config).project(cwd) for cwd in PROJECTS]
        for key, service in zip(keys, [first, first, second, second], strict=True):
            take(service.config, first.client, key)
        started += [first.worker(threads=1).start(), second.worker(threads=1).start()]
        sessions = tmp_path / "sessions"
        sessions.mkdir()
        owners = [first, first, second, second]
        paths = publish(first.config, sessions, PROJECTS, 0, 50, "fail")
        for service, path, cwd in zip(owners, paths, PROJECTS, strict=True):
            helpers.wait_for(lambda s=service, p=path, c=cwd: complete_once(s.home, p, c), 60,
                             f"{cwd} applied on its owner")
        before = [owner_of(first.config, first.client, key) for key in keys]

        own.kill()
        own.start()  # same port, same append-only file
        first.client.close()
        assert [owner_of(first.config, first.client, key) for key in keys] == before
        paths = publish(first.config, sessions, PROJECTS, 50, 100, "fail")
        for service, path, cwd in zip(owners, paths, PROJECTS, strict=True):
            helpers.wait_for(lambda s=service, p=path, c=cwd: complete_once(s.home, p, c), 60,
                             f"{cwd} applied on its owner after the restart")
        for other, cwd in zip([second, second, first, first], PROJECTS, strict=True):
            assert helpers.indexed_entries(other.home, cwd) == []  # nothing moved
        assert [owner_of(first.config, first.client, key) for key in keys] == before
    finally:
        for worker in started:
            worker.stop()
        cleanup(first)
        second.client.close()
        own.kill()

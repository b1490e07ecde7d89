"""One owner per project across worker hosts: two "hosts" (two index homes, two worker
groups with their own host names) on one real Redis, one key prefix. Every project
must end up complete on exactly one host, nothing lost, and a project moved on
purpose (pause, copy its folder, take) continues on its new host exactly."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lookback.index.layout import project_dir
from lookback.ingest.pipeline import ingest_files
from lookback.workers.nudge import nudge
from lookback.workers.owner import owner_of, pause, take
from lookback.workers.port import RedisPort
from lookback.workers.sink import RedisSink
from tests.service import helpers
from tests.service.conftest import REDIS_URL, Service, cleanup, make_service

PROJECTS = [f"/work/team/app-{n}" for n in range(6)]
PINNED_TO_B = PROJECTS[:2]  # claimed for host B up front, as an operator would


@pytest.fixture
def hosts(tmp_path: Path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    first = make_service(tmp_path / "a", REDIS_URL, LOOKBACK_WORKERS__HOST="host-a")
    second = make_service(tmp_path / "b", REDIS_URL, LOOKBACK_WORKERS__HOST="host-b",
                          LOOKBACK_WORKERS__KEY_PREFIX=first.config.prefix)
    started = []
    try:
        yield first, second, started
    finally:
        for worker in started:
            worker.stop()
        cleanup(first)
        second.client.close()


def write_sessions(folder: Path, lines: int, offset: int = 0) -> list[Path]:
    """One session per project; ``lines`` fixture lines each (appended after ``offset``)."""
    paths = []
    for number, cwd in enumerate(PROJECTS):
        path = folder / f"s{number}.jsonl"
        helpers.append(path, helpers.session_lines(f"owner-{number}", cwd)[offset:offset + lines])
        paths.append(path)
    return paths


def holders(first: Service, second: Service, cwd: str, expected: list) -> list[str]:
    """Which hosts hold the project's complete index."""
    return [name for name, service in (("host-a", first), ("host-b", second))
            if helpers.indexed_entries(service.home, cwd) == expected]


def partial(service: Service, cwd: str) -> bool:
    return project_dir(service.home, cwd).index_path() is not None


def test_every_project_is_applied_on_exactly_one_host(hosts, tmp_path) -> None:
    first, second, started = hosts
    client: RedisPort = first.client
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    paths = write_sessions(sessions, 80)
    with RedisSink(second.config) as sink:  # register the projects, claim two for host B
        for cwd in PINNED_TO_B:
            take(second.config, client, sink.project(cwd))
    started.append(first.worker(threads=2).start())
    started.append(second.worker(threads=2).start())
    with RedisSink(first.config) as sink:  # host A's watcher publishes everything
        ingest_files(paths, sink)
    write_sessions(sessions, 120, offset=80)  # a second round, after the claims
    with RedisSink(first.config) as sink:
        ingest_files(paths, sink)

    for path, cwd in zip(paths, PROJECTS, strict=True):
        expected = helpers.expected_entries(path)
        found = helpers.wait_for(lambda e=expected, c=cwd: holders(first, second, c, e), 90,
                                 f"{cwd} complete on a host")
        assert len(found) == 1
        other = second if found == ["host-a"] else first
        assert not partial(other, cwd), f"{cwd} was also applied on the other host"
        owner = owner_of(first.config, client, RedisSink(first.config).project(cwd))
        assert owner is not None and owner.host == found[0]
        log_key = first.config.log_key(RedisSink(first.config).project(cwd))
        # the drain trims its log after the commit the wait above saw
        helpers.wait_for(lambda k=log_key: client.xlen(k) == 0, 30, f"{cwd}'s log trimmed")
    for cwd in PINNED_TO_B:
        assert holders(first, second, cwd, helpers.indexed_entries(second.home, cwd)) == ["host-b"]


def test_a_project_moves_on_purpose_without_losing_events(hosts, tmp_path) -> None:
    first, second, started = hosts
    client: RedisPort = first.client
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    path = write_sessions(sessions, 60)[0]
    cwd = PROJECTS[0]
    sink = RedisSink(first.config)
    project = sink.project(cwd)
    take(first.config, client, project)
    started.append(first.worker(threads=2).start())
    started.append(second.worker(threads=2).start())
    ingest_files([path], sink)
    before = helpers.expected_entries(path)
    helpers.wait_for(lambda: helpers.indexed_entries(first.home, cwd) == before, 60,
                     "host A to apply")

    paused = pause(first.config, client, project)  # 1. nobody applies from now on
    assert paused is not None and paused.paused
    helpers.append(path, helpers.session_lines("owner-0", cwd)[60:200])
    ingest_files([path], sink)  # events wait in the stream
    assert client.xlen(first.config.log_key(project)) > 0
    assert helpers.indexed_entries(first.home, cwd) == before

    target = project_dir(second.home, cwd).path  # 2. copy the project's folder
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(project_dir(first.home, cwd).path, target)
    assert take(second.config, client, project).host == "host-b"  # 3. take it over there
    nudge(second.config, client, project, force=True)

    after = helpers.expected_entries(path)
    helpers.wait_for(lambda: helpers.indexed_entries(second.home, cwd) == after, 60,
                     "host B to continue")
    helpers.wait_for(lambda: client.xlen(first.config.log_key(project)) == 0, 30, "the trim")
    assert helpers.indexed_entries(first.home, cwd) == before  # the old copy stayed where it was
    sink.close()


def test_lookback_owner_shows_pauses_and_takes(hosts, tmp_path) -> None:
    first, second, _ = hosts
    import json

    from lookback.cli import main

    sessions = tmp_path / "sessions"
    sessions.mkdir()
    with RedisSink(first.config) as sink:  # registered, not applied (no workers here)
        ingest_files(write_sessions(sessions, 10)[3:4], sink)

    def run(service: Service, *argv: str) -> str:
        import contextlib
        import io

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["--home", str(service.home), *argv]) == 0
        return out.getvalue()

    with pytest.MonkeyPatch.context() as patch:
        for key in ("LOOKBACK_REDIS_URL", "LOOKBACK_WORKERS__KEY_PREFIX", "LOOKBACK_CONFIG",
                    "LOOKBACK_WORKERS__HOST"):
            patch.setenv(key, first.environ[key])
        assert "no owner yet" in run(first, "owner", PROJECTS[3])
        assert "owned by host-a" in run(first, "owner", PROJECTS[3], "--take")
        assert "paused" in run(first, "owner", PROJECTS[3], "--pause")
        patch.setenv("LOOKBACK_WORKERS__HOST", "host-b")
        assert "owned by host-b" in run(second, "owner", PROJECTS[3], "--take")
        assert f"index home {second.home}" in run(first, "owner", PROJECTS[3])
        assert json.loads(run(first, "owner", PROJECTS[3], "--json"))["owner"] == {
            "host": "host-b", "home": str(second.home), "paused": False}
        status = json.loads(run(first, "status", "--json"))
        owners = {p.get("cwd"): p.get("service_owner") for p in status["projects"]}
        assert owners[PROJECTS[3]] == f"host-b:{second.home}"


def test_the_redis_client_fits_the_port() -> None:
    import redis

    assert isinstance(redis.Redis.from_url(REDIS_URL), RedisPort)


def test_a_move_during_a_drain_loses_nothing(tmp_path) -> None:
    """Pause while host A is in the middle of a long drain (small batches, no time
    limit): `lookback owner --pause` returns only once A stopped, so the copied folder
    holds all A applied and the stream all it did not; B ends with every entry once."""
    import contextlib
    import io

    from lookback.cli import main

    slow = {"LOOKBACK_WORKERS__BATCH_EVENTS": "5", "LOOKBACK_WORKERS__DRAIN_SECONDS": "600"}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    first = make_service(tmp_path / "a", REDIS_URL, LOOKBACK_WORKERS__HOST="host-a", **slow)
    second = make_service(tmp_path / "b", REDIS_URL, LOOKBACK_WORKERS__HOST="host-b",
                          LOOKBACK_WORKERS__KEY_PREFIX=first.config.prefix, **slow)
    started = []
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    cwd = PROJECTS[0]
    paths = [sessions / f"move-{n}.jsonl" for n in range(3)]
    lines = [helpers.session_lines(f"move-{n}", cwd) for n in range(3)]

    def lookback(service: Service, *argv: str) -> str:
        out = io.StringIO()
        with pytest.MonkeyPatch.context() as patch:
            for key in ("LOOKBACK_REDIS_URL", "LOOKBACK_WORKERS__KEY_PREFIX", "LOOKBACK_CONFIG",
                        "LOOKBACK_WORKERS__HOST"):
                patch.setenv(key, service.environ[key])
            with contextlib.redirect_stdout(out):
                assert main(["--home", str(service.home), *argv]) == 0
        return out.getvalue()

    def count(service: Service) -> int:
        return len(helpers.indexed_entries(service.home, cwd))

    try:
        sink = RedisSink(first.config)
        project = sink.project(cwd)
        take(first.config, first.client, project)
        for path, text in zip(paths, lines, strict=True):
            helpers.append(path, text[:700])
        ingest_files(paths, sink)  # about 2,000 events queued for host A
        started.append(first.worker(threads=1).start())
        helpers.wait_for(lambda: count(first) > 0, 60, "host A to start applying")

        assert "paused" in lookback(first, "owner", cwd, "--pause")  # 1. mid-drain
        applied = helpers.indexed_entries(first.home, cwd)
        stream = first.client.xlen(first.config.log_key(project))
        for path, text in zip(paths, lines, strict=True):  # more events while paused
            helpers.append(path, text[700:])
        ingest_files(paths, sink)
        assert first.client.xlen(first.config.log_key(project)) > stream

        target = project_dir(second.home, cwd).path  # 2. copy the project's folder
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(project_dir(first.home, cwd).path, target)
        assert "owned by host-b" in lookback(second, "owner", cwd, "--take")  # 3. take it
        started.append(second.worker(threads=1).start())

        expected = sorted(entry for path in paths for entry in helpers.expected_entries(path))
        helpers.wait_for(lambda: first.client.xlen(first.config.log_key(project)) == 0, 120,
                 "the stream applied and trimmed")
        assert sorted(helpers.indexed_entries(second.home, cwd)) == expected
        found = helpers.logged_entry_ids(second.home, cwd)
        assert len(found) == len(set(found)) == len(expected)  # each event applied once
        assert helpers.indexed_entries(first.home, cwd) == applied  # A applied nothing after pause
        sink.close()
    finally:
        for worker in started:
            worker.stop()
        cleanup(first)
        second.client.close()

"""``lookback worker`` killed with SIGKILL leaves no worker running (issue 10, item 8).

Before, its two dramatiq process groups (each in its own session) ran on as orphans
after a SIGKILL of the supervisor, and a restarted supervisor added two more.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from lookback.workers.lifeline import group_members
from lookback.workers.processes import Group
from tests.service.helpers import REPO, wait_for


def worker_groups(service) -> list[int]:
    """The process groups ``lookback worker`` recorded for this data directory."""
    groups: list[int] = []
    for path in (service.home / "workers").glob("*.json"):
        groups.extend(json.loads(path.read_text())["groups"])
    return groups


def start_supervisor(service, log: str) -> subprocess.Popen:
    output = open(service.tmp / log, "ab")
    return subprocess.Popen([sys.executable, "-m", "lookback.cli", "worker"],
                            env=service.environ, cwd=REPO, stdout=output, stderr=output)


def test_a_killed_supervisor_leaves_no_worker_process(service):
    supervisor = start_supervisor(service, "worker.log")
    try:
        groups = wait_for(lambda: len(worker_groups(service)) == 2 and worker_groups(service),
                          60, "the two worker groups")
        wait_for(lambda: all(len(group_members(g)) >= 2 for g in groups), 60,
                 "each master's worker processes")
        os.kill(supervisor.pid, signal.SIGKILL)  # the OOM killer: no clean-up in it
        supervisor.wait(10)
        wait_for(lambda: not any(group_members(g) for g in groups), 60,
                 "every worker process to end with its supervisor")
    finally:
        if supervisor.poll() is None:
            supervisor.terminate()  # it stops its groups itself
            supervisor.wait(60)
        for group in worker_groups(service):
            if group_members(group):
                os.killpg(group, signal.SIGKILL)


def test_a_restarted_supervisor_stops_the_groups_a_killed_one_left(service):
    # What an older supervisor left: a worker group without a parent-death signal,
    # recorded under a supervisor pid that is gone.
    orphan = subprocess.Popen(Group("index", "lookback-index", 1, 1, 100).argv(),
                              env=service.environ, cwd=REPO, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dead = subprocess.Popen(["true"])
    dead.wait()
    (service.home / "workers").mkdir(parents=True)
    (service.home / "workers" / f"{dead.pid}.json").write_text(
        json.dumps({"supervisor": dead.pid, "groups": [orphan.pid]}))
    wait_for(lambda: len(group_members(orphan.pid)) >= 2, 60, "the orphan's workers")
    supervisor = start_supervisor(service, "worker2.log")
    try:
        wait_for(lambda: orphan.poll() is not None and not group_members(orphan.pid), 60,
                 "the orphaned group to be stopped")
        wait_for(lambda: "stopped 1 worker group(s) a killed supervisor left running"
                 in (service.tmp / "worker2.log").read_text(), 30, "the supervisor's note")
        assert not (service.home / "workers" / f"{dead.pid}.json").exists()
    finally:
        supervisor.terminate()
        supervisor.wait(60)
        if orphan.poll() is None:
            os.killpg(orphan.pid, signal.SIGKILL)
    assert not any(group_members(g) for g in worker_groups(service))

"""Configuration: embedded mode needs no Redis at all; service mode says what it needs;
``lookback status`` reports the service figures (lag, set-aside events, queues)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from lookback.ingest.events import Event
from lookback.ingest.pipeline import ingest_files
from lookback.service import service_status
from lookback.workers.apply import drain
from lookback.workers.event_stream import EVENT_FIELD
from lookback.workers.sink import RedisSink
from tests.service.helpers import LARGE, REPO, append, expected_entries, indexed_entries

EMBEDDED = """
import sys
from lookback.cli import main
code = main(["index", sys.argv[1]])
assert code == 0, code
code = main(["status", "--json"])
assert code == 0, code
loaded = sorted(name for name in ("redis", "dramatiq") if name in sys.modules)
print("LOADED", loaded)
"""


def test_embedded_mode_works_without_redis(tmp_path) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("LOOKBACK_")}
    environ.update(LOOKBACK_HOME=str(tmp_path / "home"),
                   LOOKBACK_CONFIG=str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    run = subprocess.run([sys.executable, "-c", EMBEDDED, str(LARGE)], env=environ, cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "LOADED []" in run.stdout, "embedded mode imported Redis or dramatiq"
    status = json.loads(run.stdout.split("LOADED")[0].split("\n", 1)[1])
    assert status["mode"] == "embedded" and "queues" not in status
    cwd = "/Users/badlogic/workspaces/pi-mono"  # the fixture's own header cwd
    assert indexed_entries(tmp_path / "home", cwd) == expected_entries(LARGE)


def test_worker_without_redis_is_a_clear_error(tmp_path) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("LOOKBACK_")}
    environ["LOOKBACK_HOME"] = str(tmp_path)
    run = subprocess.run([sys.executable, "-m", "lookback.cli", "worker"], env=environ,
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "LOOKBACK_REDIS_URL" in run.stderr and "Traceback" not in run.stderr


def test_status_shows_lag_and_set_aside_events(service, tmp_path) -> None:
    cwd = "/work/status-project"
    path = tmp_path / "s.jsonl"
    lines = LARGE.read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    header.update(id="status-1", cwd=cwd)
    append(path, [json.dumps(header) + "\n", *lines[1:101]])
    with RedisSink(service.config) as sink:
        published = ingest_files([path], sink).events
    project = sink.project(cwd)
    service.client.xadd(service.config.log_key(project), {EVENT_FIELD: b"{broken"})
    drain(service.config, service.client, project)
    pending = Event("leaf", "status-1", cwd, {"target_id": "v1:3"})
    service.client.xadd(service.config.log_key(project), {EVENT_FIELD: pending.to_json()})
    from lookback.index.layout import list_projects
    from lookback.index.status import project_status

    report = {"projects": [project_status(p) for p in list_projects(service.home)]}
    service_status(service.settings, report)

    [row] = report["projects"]
    assert row["events_applied"] == published
    assert row["service_set_aside"] == 1
    assert row["service_lag_events"] == 1 == row["service_log_length"]
    assert row["service_lag_seconds"] >= 0
    assert set(report["queues"]) == {"lookback-index", "lookback-background"}
    assert report["queues"]["lookback-index"]["depth"] >= 1  # the producer's nudge
    assert indexed_entries(service.home, cwd) == expected_entries(path)

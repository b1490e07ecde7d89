"""``lookback status`` says when this home's running reader cannot keep its indexes fresh
(issue 29, failure 9's last part): it asks the reader on its Unix socket (checked as every
client checks it) for ``/v1/health``'s freshness counters. A real ``lookback serve`` whose
writers cannot open their files under a low open-files limit; conditions, never sleeps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .conftest import FIXTURE, write_session
from .processes import ServeProcess, wait_until

#: Room to start and answer, none for a writer's files (budgets: ``lookback.budget``).
LIMIT = 12


def status(home: Path, environ: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lookback.cli", "--home", str(home), "status",
                           *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **environ}, check=False)


def test_status_says_when_the_readers_freshness_fails_for_lack_of_open_files(home, tmp_path):
    """Before: the writers' "Too many open files" was counted nowhere, and ``status`` read
    only the index files: it said nothing while new entries stayed unindexed."""
    session = write_session(tmp_path / "sessions" / "p", tmp_path / "work" / "project", FIXTURE)
    environ = {"LOOKBACK_HOME": str(home), "LOOKBACK_CONFIG": str(home / "none.toml"),
               "LOOKBACK_FRESHNESS__TAIL": "false", "LOOKBACK_SESSIONS_DIR": str(home / "none")}
    (home / "none.toml").write_text("")

    quiet = status(home, environ, "--json")  # no reader: nothing said about one, no error
    assert quiet.returncode == 0, quiet.stderr
    assert "reader" not in json.loads(quiet.stdout)

    served = ServeProcess(home, environ, max_open_files=LIMIT)
    try:
        answer = served.client.post("/v1/search", {"session_file": str(session),
                                                   "text": "AppMessage", "scope": "session"})
        assert answer.status == 200  # answered all the same (fail open)

        def job_done() -> bool:
            counters = served.client.get("/v1/health").body["server"]["freshness"]
            return counters["jobs"] >= 1 and counters["pending"] == 0

        wait_until(job_done, "the freshness job for the session run")
        text = status(home, environ)
        report = status(home, environ, "--json")
    finally:
        served.stop()
    assert text.returncode == 0 and report.returncode == 0, text.stderr + report.stderr
    assert "reader: freshness cannot keep up" in text.stdout
    assert "lack of open files" in text.stdout
    assert "ulimit -n" in text.stdout and "docs/troubleshooting.md" in text.stdout
    reader = json.loads(report.stdout)["reader"]
    assert reader["freshness"]["out_of_files"] >= 1
    assert reader["freshness"]["failed"] >= reader["freshness"]["out_of_files"]
    assert reader["files"]["limit"] == LIMIT
    assert "freshness cannot keep up" in reader["problem"] and "ulimit -n" in reader["fix"]

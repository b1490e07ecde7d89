"""Service mode: bad lines never stop the producer, a nudge or the workers (issue 10, item 1).

Before the repair, a lone surrogate made ``lookback index --queue`` crash and a
nudge answer 500 (the event could not be encoded for Redis), and the project's
whole batch never reached the workers.
"""

from __future__ import annotations

import json
import subprocess
import sys

from lookback.index.layout import project_key

from tests.service.helpers import FIXTURES, REPO, indexed_entries, session_lines, wait_for
from tests.test_isolation import BAD_LINES

CWD = "/work/odd-service"


def odd_session(path, session_id: str) -> set[str]:
    """The fixture's lines with every bad line spliced in; returns the good entry ids."""
    lines = session_lines(session_id, CWD, source=FIXTURES / "pi-session-v3.jsonl")
    bad = [line + "\n" for line in BAD_LINES.values()]
    path.write_bytes("".join(lines[:5] + bad + lines[5:]).encode("utf-8", "surrogateescape"))
    return {json.loads(line)["id"] for line in lines[1:]}


def ids(service) -> set[str]:
    return {entry_id for _, entry_id, _, _ in indexed_entries(service.home, CWD)}


def test_bad_lines_pass_the_producer_the_nudge_and_the_workers(service, workers, tmp_path):
    from lookback.service import nudge_session

    nudged, queued = tmp_path / "nudged.jsonl", tmp_path / "sessions" / "queued.jsonl"
    queued.parent.mkdir()
    good = odd_session(nudged, "odd-nudged")
    good_queued = odd_session(queued, "odd-queued")
    workers.append(service.worker().start())
    assert nudge_session(service.settings, str(nudged)) > 0
    result = subprocess.run([sys.executable, "-m", "lookback.cli", "index", "--queue",
                             str(queued.parent)], env=service.environ, cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    wait_for(lambda: good <= ids(service) and good_queued <= ids(service), 60,
             "every good line of both sessions")
    assert "bad-1" in ids(service)  # the repaired lines too
    assert service.client.hlen(service.config.poison_key(project_key(CWD))) == 0

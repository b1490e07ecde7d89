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


def test_a_worker_sets_aside_an_event_nested_too_deep_and_goes_on(service, workers, tmp_path):
    """An event no producer of this version writes (100,000 levels deep) reaches the
    stream; the worker sets it aside and applies the events after it."""
    from lookback.ingest.reader import read_session
    from lookback.workers.sink import RedisSink

    path = tmp_path / "deep.jsonl"
    path.write_text((FIXTURES / "pi-session-v3.jsonl").read_text())
    batches = list(read_session(str(path)))
    events = [event for batch in batches for event in batch.events]
    project = project_key("/workspace/demo")
    with RedisSink(service.config, service.client) as sink:
        sink.write(type(batches[0])(events[:4], batches[-1].state))
        service.client.xadd(service.config.log_key(project),
                            {b"e": b'{"kind":"entry","payload":' + b"[" * 100_000
                             + b"]" * 100_000 + b"}"})
        sink.write(type(batches[0])(events[4:], batches[-1].state))
    workers.append(service.worker().start())
    wait_for(lambda: {f"{n:08x}" for n in range(1, 11)} <= {
        entry_id for _, entry_id, _, _ in indexed_entries(service.home, "/workspace/demo")},
        60, "the events after the deep one")
    assert service.client.hlen(service.config.poison_key(project)) == 1

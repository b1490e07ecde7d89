"""The Redis stream log, the producers' sink and the actor's drain, run in-process.

These call ``RedisSink`` and ``workers.apply.drain`` directly against the real Redis
(no dramatiq worker), to pin down the ordering, idempotency and poison rules the
worker tests then rely on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from lookback.index.layout import project_dir
from lookback.index.store import open_writer
from lookback.ingest.events import Event
from lookback.ingest.pipeline import ingest_files
from lookback.workers.apply import drain
from lookback.workers.event_stream import EVENT_FIELD, next_id
from lookback.workers.sink import Backoff, RedisSink
from tests.service.helpers import (
    append,
    expected_entries,
    fts_hits,
    indexed_entries,
    logged_entry_ids,
    session_lines,
)

CWD = "/home/dev/pi-mono"


def write_session(folder: Path, name: str, lines: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    append(path, lines)
    return path


def test_the_successor_of_a_stream_id_counts_its_sequence_up() -> None:
    assert next_id("1700000000000-4") == "1700000000000-5"
    assert next_id("1700000000000-9") == "1700000000000-10"  # a number, not text


def test_sink_publishes_then_drain_applies_in_order_and_trims(service, tmp_path) -> None:
    lines = session_lines("s-1", CWD)
    path = write_session(tmp_path / "sessions", "a.jsonl", lines[:300])
    with RedisSink(service.config) as sink:
        report = ingest_files([path], sink)
    project = sink.project(CWD)
    stream = service.config.log_key(project)
    assert service.client.xlen(stream) == report.events > 0

    result = drain(service.config, service.client, project)

    assert result.applied == report.events
    assert indexed_entries(service.home, CWD) == sorted(expected_entries(path),
                                                       key=lambda e: (e[0], e[2]))
    assert service.client.xlen(stream) == 0, "applied events are trimmed from the stream"
    # Text of the real session is searchable: the user's request about the theme docs.
    assert fts_hits(service.home, CWD, '"user-message-selector"')


def test_resending_and_redraining_adds_nothing(service, tmp_path, monkeypatch) -> None:
    path = write_session(tmp_path / "sessions", "a.jsonl", session_lines("s-1", CWD)[:120])
    with RedisSink(service.config) as sink:
        ingest_files([path], sink)
        again = ingest_files([path], sink)  # the stored file state says: nothing new
    assert again.events == 0
    project = sink.project(CWD)
    stream = service.config.log_key(project)
    # A worker that dies after its commit but before trimming the stream:
    monkeypatch.setattr("lookback.workers.apply.trim_through", lambda *args: 0)
    first = drain(service.config, service.client, project)
    monkeypatch.undo()
    assert service.client.xlen(stream) == first.applied > 0
    before = logged_entry_ids(service.home, CWD)

    second = drain(service.config, service.client, project)

    assert second.applied == 0 and second.set_aside == 0
    assert service.client.xlen(stream) == 0
    assert logged_entry_ids(service.home, CWD) == before
    assert len(set(before)) == len(before) == len(expected_entries(path))


def test_appended_lines_and_restarted_producer_resume_exactly(service, tmp_path) -> None:
    lines = session_lines("s-2", CWD)
    path = write_session(tmp_path / "sessions", "b.jsonl", lines[:200])
    with RedisSink(service.config) as sink:
        ingest_files([path], sink)
    append(path, lines[200:260])
    append(path, [lines[260][: len(lines[260]) // 2]])  # Pi is still writing this line
    with RedisSink(service.config) as sink:  # a new producer: state comes from Redis
        ingest_files([path], sink)
    drain(service.config, service.client, sink.project(CWD))
    entries = indexed_entries(service.home, CWD)
    assert entries == expected_entries(path)
    assert max(seq for _, _, seq, _ in entries) == 259  # the half line is not read yet


def test_poison_event_is_set_aside_and_the_rest_applies(service, tmp_path) -> None:
    import apsw

    path = write_session(tmp_path / "sessions", "c.jsonl", session_lines("s-3", CWD)[:50])
    with RedisSink(service.config) as sink:
        ingest_files([path], sink)
    project = sink.project(CWD)
    drain(service.config, service.client, project)
    # A constraint of the index that one event breaks: SQLite refuses it on every try.
    index = open_writer(project_dir(service.home, CWD).index_path())
    index.execute("CREATE TRIGGER refuse BEFORE INSERT ON entries WHEN NEW.entry_id = 'x2' "
                  "BEGIN SELECT RAISE(ABORT, 'refused'); END")
    index.close()
    stream = service.config.log_key(project)
    service.client.xadd(stream, {EVENT_FIELD: b"not json"})
    bad_seq = Event("entry", "s-3", CWD, {"entry": {"id": "x1", "seq": "not-a-number"}})
    service.client.xadd(stream, {EVENT_FIELD: bad_seq.to_json().encode()})
    refused = Event("entry", "s-3", CWD, {"entry": {"id": "x2", "seq": 8999, "text": "no"}})
    service.client.xadd(stream, {EVENT_FIELD: refused.to_json().encode()})
    later = Event("entry", "s-3", CWD, {"entry": {"id": "late-1", "seq": 9000,
                                                   "type": "message", "text": "zanzibar"}})
    service.client.xadd(stream, {EVENT_FIELD: later.to_json().encode()})

    # Undecodable and invalid events are set aside at once; the one the index refuses
    # is retried (the error propagates to dramatiq) until it has failed max_failures times.
    for _ in range(service.config.max_failures - 1):
        with pytest.raises(apsw.ConstraintError):
            drain(service.config, service.client, project)
    result = drain(service.config, service.client, project)

    poison = service.client.hgetall(service.config.poison_key(project))
    reasons = sorted(json.loads(v)["reason"].split(":")[0] for v in poison.values())
    assert reasons == ["ConstraintError", "EventError", "EventError"]
    assert result.set_aside == 1
    assert fts_hits(service.home, CWD, "zanzibar") == ["late-1"]
    assert len(indexed_entries(service.home, CWD)) == len(expected_entries(path)) + 1


def test_unreachable_redis_is_retried_with_backoff_and_said(service, tmp_path) -> None:
    path = write_session(tmp_path / "sessions", "d.jsonl", session_lines("s-4", CWD)[:20])
    said: list[str] = []
    real = service.client
    failures = {"left": 3}

    class Flaky:
        """Refuses the first three calls, like a Redis that is restarting."""

        def __getattr__(self, name: str):
            attribute = getattr(real, name)
            if not callable(attribute):
                return attribute

            def call(*args, **kwargs):
                if failures["left"] > 0:
                    failures["left"] -= 1
                    raise redis.ConnectionError("connection refused")
                return attribute(*args, **kwargs)

            return call

    backoff = Backoff(say=said.append, sleep=lambda seconds: None)
    sink = RedisSink(service.config, Flaky(), backoff=backoff)
    ingest_files([path], sink)
    assert len(said) == 3 and all("retrying in" in line for line in said)
    assert not any("pi-mono" in line or "s-4" in line for line in said)
    drain(service.config, service.client, sink.project(CWD))
    assert indexed_entries(service.home, CWD) == expected_entries(path)


def test_the_worker_applies_only_events_of_its_streams_project(service, tmp_path) -> None:
    """Issue 27 item 2: the grant a nudge was published under travels with its events,
    and the worker checks it and the event's own project against the stream's, whatever
    put the event there (a producer of another version, a hand-written XADD)."""
    from lookback.workers.event_stream import GRANT_FIELD

    other = "/home/dev/other-project"
    path = write_session(tmp_path / "sessions", "g.jsonl", session_lines("s-g", CWD)[:20])
    with RedisSink(service.config) as sink:
        ingest_files([path], sink)
    project, foreign = sink.project(CWD), sink.project(other)
    stream = service.config.log_key(project)
    granted_elsewhere = Event("entry", "s-g", CWD, {"entry": {
        "id": "g-1", "seq": 9000, "type": "message", "text": "grantedelsewhere"}})
    service.client.xadd(stream, {EVENT_FIELD: granted_elsewhere.to_json().encode(),
                                 GRANT_FIELD: foreign.encode()})
    names_other = Event("entry", "s-g", other, {"entry": {
        "id": "g-2", "seq": 9001, "type": "message", "text": "namesother"}})
    service.client.xadd(stream, {EVENT_FIELD: names_other.to_json().encode()})
    own = Event("entry", "s-g", CWD, {"entry": {
        "id": "g-3", "seq": 9002, "type": "message", "text": "owngrant"}})
    service.client.xadd(stream, {EVENT_FIELD: own.to_json().encode(),
                                 GRANT_FIELD: project.encode()})

    result = drain(service.config, service.client, project)

    assert (result.refused, result.set_aside) == (2, 2)
    assert fts_hits(service.home, CWD, "grantedelsewhere") == []
    assert fts_hits(service.home, CWD, "namesother") == []
    assert fts_hits(service.home, CWD, "owngrant") == ["g-3"]
    poison = service.client.hgetall(service.config.poison_key(project))
    assert all(json.loads(v)["event"] == "" for v in poison.values())  # no text kept


def test_a_granted_nudge_publishes_its_grant_with_every_event(service, tmp_path) -> None:
    from lookback.workers.event_stream import read_after

    path = write_session(tmp_path / "sessions", "h.jsonl", session_lines("s-h", CWD)[:20])
    project = RedisSink(service.config).project(CWD)
    with RedisSink(service.config, only_project=project) as sink:
        report = ingest_files([path], sink)
    items = read_after(service.client, service.config.log_key(project), "0-0",
                       max_events=1000, max_bytes=1 << 24)
    assert len(items) == report.events > 0
    assert {item.grant for item in items} == {project}
    assert drain(service.config, service.client, project).applied == report.events


def test_a_watching_sink_with_tokens_never_moves_a_file(service, tmp_path) -> None:
    """``lookback watch`` in service mode with ``server.tokens`` set: a file held by one
    project is not published into another, whatever its header says now."""
    from lookback.errors import ForeignProject

    lines = session_lines("s-m", CWD)[:20]
    path = write_session(tmp_path / "sessions", "m.jsonl", lines)
    with RedisSink(service.config) as sink:
        ingest_files([path], sink)
    moved = session_lines("s-m", "/home/dev/elsewhere")[:20]
    path.write_text("".join(moved))
    with RedisSink(service.config, keep_held=True) as sink:
        report = ingest_files([path], sink)
        with pytest.raises(ForeignProject):
            sink.claim(str(path), "/home/dev/elsewhere")
    assert report.events == 0 and len(report.errors) == 1 and sink.refused == 2
    elsewhere = service.config.log_key(sink.project("/home/dev/elsewhere"))
    assert service.client.xlen(elsewhere) == 0

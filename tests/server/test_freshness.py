"""The reader keeps live sessions fresh itself (embedded mode, ``lookback.freshness``).

Real session files, real indexes, no manual indexing after the start: what Pi appends
is retrievable at the next request; a file Pi rewrites (v1 -> v3, new ids) is
re-indexed before the answer, which then names only ids of the current file; while a
rewrite cannot be indexed yet, the answer carries no evidence and says why.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lookback import api
from lookback.application.modes import open_keeper
from lookback.freshness import FreshnessEngine
from lookback.index.project import ProjectWriter
from lookback.query.contract.request import SessionNames
from lookback.server import ReaderApp
from lookback.settings import Freshness, Watch
from tests.support import index_paths

from .conftest import FIXTURE, PROMPT, settings_for, write_session

NEW_TEXT = "remember the flag --frobnicate-widgets for the build"


def entry_line(entry_id: str, parent: str, text: str, role: str = "user") -> str:
    return json.dumps({"type": "message", "id": entry_id, "parentId": parent,
                       "timestamp": "2025-12-08T23:04:00.000Z",
                       "message": {"role": role, "content": [{"type": "text", "text": text}],
                                   "timestamp": 2}}) + "\n"


def post(app: ReaderApp, path: str, body: dict) -> tuple[int, dict]:
    status, payload, _ = app.handle("POST", path, None, json.dumps(body).encode())
    return status, payload if isinstance(payload, dict) else json.loads(payload)


@pytest.fixture
def live_app(home: Path) -> Iterator[ReaderApp]:
    """A reader over an empty home: nothing was indexed before it started."""
    app = ReaderApp(settings_for(home, freshness__wait_ms=5000))
    yield app
    app.close()


def test_an_appended_entry_is_retrievable_at_the_next_request(app, session_file):
    with open(session_file, "a", encoding="utf-8") as handle:
        handle.write(entry_line("a1000008", "a1000007", NEW_TEXT))
        handle.write(entry_line("a1000009", "a1000008", "ok", role="assistant"))
    status, answer = post(app, "/v1/retrieve", {
        "session_file": str(session_file), "leaf_id": "a1000009",
        "context_ids": ["a1000009"],  # as if Pi had compacted the flag away already
        "message": "which flag was it, --frobnicate-widgets?"})
    assert status == 200
    assert answer["status"] == "ok"
    assert [e["entry_id"] for e in answer["evidence"]] == ["a1000008"]
    assert answer["diagnostics"]["freshness"]["state"] == "indexed"
    assert answer["diagnostics"]["freshness"]["entries"] == 2


def test_a_session_never_indexed_is_indexed_by_its_first_request(live_app, tmp_path,
                                                                 project_cwd):
    session = write_session(tmp_path / "sessions", project_cwd)
    status, answer = post(live_app, "/v1/retrieve",
                          {"session_file": str(session), "message": PROMPT})
    assert status == 200 and answer["status"] == "ok"
    assert {e["entry_id"] for e in answer["evidence"]} == {"a1000001", "a1000002"}
    again = post(live_app, "/v1/retrieve", {"session_file": str(session),
                                            "message": "and `AppMessage` itself?"})[1]
    assert again["diagnostics"]["freshness"]["state"] == "fresh"


def test_a_session_file_pi_has_not_written_yet_answers_quietly(live_app, tmp_path):
    missing = tmp_path / "sessions" / "not-yet.jsonl"
    status, answer = post(live_app, "/v1/retrieve",
                          {"session_file": str(missing), "message": PROMPT})
    assert status == 200
    assert answer["status"] == "not-indexed"
    assert post(live_app, "/v1/nudge", {"session_file": str(missing)}) == (
        202, {"status": "missing"})


def v1_lines(cwd: Path) -> list[str]:
    """The compacted fixture as Pi's v1 format: no version, no ids (positions are ids)."""
    lines = FIXTURE.read_text(encoding="utf-8").splitlines()
    header = {**json.loads(lines[0]), "cwd": str(cwd)}
    del header["version"]
    body = []
    for line in lines[1:]:
        entry = json.loads(line)
        entry.pop("id"), entry.pop("parentId")
        if entry["type"] == "compaction":
            entry.pop("firstKeptEntryId")
            entry["firstKeptEntryIndex"] = 3  # counts the header, as Pi's does
        body.append(json.dumps(entry))
    return [json.dumps(header), *body]


def migrate_like_pi(v1: list[str]) -> tuple[list[str], list[str]]:
    """What Pi 0.73.1 does on open: version 3, a fresh random id per entry, parents
    chained, the compaction's index turned into the kept entry's new id."""
    header = {**json.loads(v1[0]), "version": 3}
    ids = [uuid.uuid4().hex[:8] for _ in v1[1:]]
    out, parent = [json.dumps(header)], None
    for entry_id, line in zip(ids, v1[1:], strict=True):
        entry = {**json.loads(line), "id": entry_id, "parentId": parent}
        if entry["type"] == "compaction":
            entry["firstKeptEntryId"] = ids[entry.pop("firstKeptEntryIndex") - 1]
        out.append(json.dumps(entry))
        parent = entry_id
    return out, ids


def test_a_rewritten_session_is_answered_with_the_current_files_ids(live_app, tmp_path,
                                                                     project_cwd):
    session = tmp_path / "sessions" / "old.jsonl"
    session.parent.mkdir()
    v1 = v1_lines(project_cwd)
    session.write_text("\n".join(v1) + "\n", encoding="utf-8")
    first = post(live_app, "/v1/retrieve", {"session_file": str(session), "message": PROMPT})[1]
    assert first["status"] == "ok"
    assert {e["entry_id"] for e in first["evidence"]} == {"v1:1", "v1:2"}

    v3, ids = migrate_like_pi(v1)
    session.write_text("\n".join(v3) + "\n", encoding="utf-8")  # in place, as Pi does
    answer = post(live_app, "/v1/retrieve", {
        "session_file": str(session), "message": PROMPT, "leaf_id": ids[-1],
        "branch_ids": ids, "context_ids": ids[2:]})[1]
    assert answer["status"] == "ok"
    assert {e["entry_id"] for e in answer["evidence"]} == {ids[0], ids[1]}
    assert answer["diagnostics"]["freshness"]["state"] == "indexed"


def test_while_a_rewrite_cannot_be_indexed_the_answer_has_no_old_ids(home, tmp_path,
                                                                      project_cwd):
    app = ReaderApp(settings_for(home, freshness__wait_ms=300))
    try:
        session = tmp_path / "sessions" / "old.jsonl"
        session.parent.mkdir()
        v1 = v1_lines(project_cwd)
        session.write_text("\n".join(v1) + "\n", encoding="utf-8")
        assert post(app, "/v1/retrieve",
                    {"session_file": str(session), "message": PROMPT})[1]["evidence"]
        v3, ids = migrate_like_pi(v1)
        session.write_text("\n".join(v3) + "\n", encoding="utf-8")
        with ProjectWriter(home, str(project_cwd)):  # `lookback index` holds the lock
            answer = post(app, "/v1/retrieve", {"session_file": str(session),
                                                "message": PROMPT, "branch_ids": ids})[1]
        assert answer["status"] == "not-indexed"
        assert answer["evidence"] == []
        assert answer["diagnostics"]["freshness"]["state"] == "rewrite-pending"
        assert any("rewritten" in w for w in answer["diagnostics"]["warnings"])
        after = post(app, "/v1/retrieve", {"session_file": str(session), "message": PROMPT,
                                           "branch_ids": ids, "context_ids": ids[2:]})[1]
        assert {e["entry_id"] for e in after["evidence"]} == {ids[0], ids[1]}
    finally:
        app.close()


def wait_until_found(home: Path, session: Path, text: str, timeout: float = 20) -> list[str]:
    """Entry ids an in-process search (which never indexes) finds, once it finds any."""
    settings = settings_for(home)
    limit = time.monotonic() + timeout
    while True:
        found = api.search({"text": text, "scope": "session", "session_file": str(session)},
                           settings=settings)
        ids = [r["entry_id"] for r in found.get("results", [])]
        if ids or time.monotonic() > limit:
            return ids
        time.sleep(0.05)


def test_a_nudge_indexes_in_the_background(app, home, session_file):
    with open(session_file, "a", encoding="utf-8") as handle:
        handle.write(entry_line("a1000008", "a1000007", NEW_TEXT))
    status, answer = post(app, "/v1/nudge", {"session_file": str(session_file)})
    assert (status, answer) == (202, {"status": "queued"})
    assert wait_until_found(home, session_file, "--frobnicate-widgets") == ["a1000008"]


def test_the_tailer_indexes_what_pi_appends_without_any_request(home, tmp_path, project_cwd):
    sessions = tmp_path / "sessions"
    session = write_session(sessions, project_cwd)
    engine = FreshnessEngine(home, watch=Watch(poll_ms=20, rescan_seconds=0.2),
                             roots=[sessions]).start_tailer()
    try:
        assert wait_until_found(home, session, "AppMessage") != []
        with open(session, "a", encoding="utf-8") as handle:
            handle.write(entry_line("a1000008", "a1000007", NEW_TEXT))
        assert wait_until_found(home, session, "--frobnicate-widgets") == ["a1000008"]
    finally:
        engine.close()


def test_turned_off_or_in_service_mode_the_reader_writes_nothing(home, session_file):
    app = ReaderApp(settings_for(home, freshness__enabled=False))
    try:
        before = sorted(p.name for p in home.rglob("*"))
        assert post(app, "/v1/nudge", {"session_file": str(session_file)}) == (
            202, {"status": "embedded"})
        assert sorted(p.name for p in home.rglob("*")) == before
    finally:
        app.close()
    keeper = open_keeper(settings_for(home, redis_url="redis://127.0.0.1:6379/15"))
    try:
        assert keeper.mode == "service"
        assert keeper.refresh(SessionNames(session_file=str(session_file)), None) is None
        assert sorted(p.name for p in home.rglob("*")) == before
    finally:
        keeper.close()



def test_a_rewrite_of_a_file_indexed_by_another_process_is_never_answered_from(
        home, tmp_path, project_cwd):
    """`lookback index` (or an earlier reader) indexed the v1 file; Pi rewrote it; this
    reader has never seen it and cannot write yet: it must still not answer with v1 ids."""
    session = tmp_path / "sessions" / "old.jsonl"
    session.parent.mkdir()
    v1 = v1_lines(project_cwd)
    session.write_text("\n".join(v1) + "\n", encoding="utf-8")
    assert index_paths(home, session).read.entries == 7
    v3, ids = migrate_like_pi(v1)
    session.write_text("\n".join(v3) + "\n", encoding="utf-8")
    app = ReaderApp(settings_for(home, freshness__wait_ms=100, freshness__rewrite_wait_ms=100))
    try:
        with ProjectWriter(home, str(project_cwd)):  # the writer lock is taken
            answer = post(app, "/v1/retrieve", {"session_file": str(session),
                                                "message": PROMPT, "branch_ids": ids})[1]
        assert answer["status"] == "not-indexed" and answer["evidence"] == []
        assert answer["diagnostics"]["freshness"]["state"] == "rewrite-pending"
    finally:
        app.close()


def test_maintenance_gets_the_writer_lock_while_a_session_is_live(home, tmp_path, project_cwd):
    """An entry appended every few milliseconds keeps the freshness writer busy with one
    project; `lookback index` and `lookback reindex` of that same project still get its
    writer lock (the freshness writer yields between batches and jobs) and finish."""
    import subprocess
    import sys
    import threading

    sessions = tmp_path / "sessions"
    live = write_session(sessions, project_cwd)
    other = write_session(tmp_path / "other", project_cwd)  # same project, another session
    lines = other.read_text().splitlines()
    header = json.loads(lines[0])
    other.write_text("\n".join([json.dumps({**header, "id": "maintenance-session"}),
                                *lines[1:]]) + "\n")
    engine = FreshnessEngine(home, watch=Watch(poll_ms=5, rescan_seconds=0.2),
                             roots=[sessions]).start_tailer()
    stop = threading.Event()
    appended = [0]

    def append() -> None:
        parent = "a1000007"
        while not stop.is_set():
            entry_id = f"live-{appended[0]}"
            with open(live, "a", encoding="utf-8") as handle:
                handle.write(entry_line(entry_id, parent, f"live note {appended[0]}"))
            parent, appended[0] = entry_id, appended[0] + 1
            stop.wait(0.01)

    appender = threading.Thread(target=append)
    try:
        assert wait_until_found(home, live, "AppMessage") != []
        appender.start()
        assert wait_until_found(home, live, "live") != []  # the engine is writing
        environ = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                   "LOOKBACK_CONFIG": str(home / "none.toml")}
        for command in (["index", str(other)], ["reindex", "--project", str(project_cwd)]):
            done = subprocess.run([sys.executable, "-m", "lookback.cli", "--home", str(home),
                                   *command], capture_output=True, text=True, timeout=300,
                                  env=environ)
            assert done.returncode == 0, (command, done.stderr)
        assert appender.is_alive()  # the session stayed live all along
    finally:
        stop.set()
        if appender.is_alive():
            appender.join()
        engine.close()
    assert wait_until_found(home, other, "AppMessage") != []
    assert wait_until_found(home, live, f"live note {appended[0] - 1}") != []


def test_while_a_rewrite_is_being_written_a_request_still_sees_a_rewrite(home, tmp_path,
                                                                           project_cwd):
    """A request that comes while the indexing thread commits a rewritten file's new
    lines (the tailer found the rewrite first) must not take the file for an append
    and answer from a half-written index: it is told ``rewrite-pending``."""
    import threading

    session = tmp_path / "sessions" / "old.jsonl"
    session.parent.mkdir()
    v1 = v1_lines(project_cwd)
    session.write_text("\n".join(v1) + "\n", encoding="utf-8")
    engine = FreshnessEngine(home, config=Freshness(wait_ms=60_000, rewrite_wait_ms=0))
    engine.start()
    try:
        assert engine.ensure(str(session)).state == "indexed"
        session.write_text("\n".join(migrate_like_pi(v1)[0]) + "\n", encoding="utf-8")
        during: list[str] = []
        write = engine.sink.write

        def write_while_asked(batch):  # what a request sees while this batch commits
            if not during and any(event.kind == "reset" for event in batch.events):
                asker = threading.Thread(target=lambda: during.append(
                    engine.ensure(str(session), wait_ms=0).state))
                asker.start()
                asker.join()
            write(batch)

        engine.sink.write = write_while_asked
        assert engine.ensure(str(session)).state == "indexed"
        assert during == ["rewrite-pending"]
    finally:
        engine.close()


def test_an_index_an_older_version_wrote_is_rebuilt_when_the_reader_starts(
        home, session_file, project_cwd):
    """After an upgrade that changed the tokenizer, `lookback serve` alone brings the
    index up to date: no `lookback reindex` by hand (service mode's workers do the same)."""
    import apsw

    from lookback.index.layout import project_dir
    from lookback.index.schema import WORD_TOKENIZE
    from lookback.index.store import needs_rebuild, open_reader

    project = project_dir(home, str(project_cwd))
    old = apsw.Connection(str(project.index_path()))
    with old:  # what the previous release wrote: the FTS table without word stems
        old.execute("DROP TABLE entries_fts")
        old.execute("CREATE VIRTUAL TABLE entries_fts USING fts5(text, content='entries', "
                    f"content_rowid='rowid', tokenize=\"{WORD_TOKENIZE}\")")
        old.execute("INSERT INTO entries_fts(entries_fts) VALUES ('rebuild')")
        old.execute("UPDATE meta SET value = '1' WHERE key = 'tokenizer_version'")
    old.close()
    generation = project.current_generation()

    def stemmed_hits() -> int:  # "merged" finds "declaration merging" only through stems
        connection = open_reader(project.index_path())
        try:
            return connection.execute(
                "SELECT count(*) FROM entries_fts WHERE entries_fts MATCH 'merged'"
            ).fetchone()[0]
        finally:
            connection.close()

    assert stemmed_hits() == 0
    engine = FreshnessEngine(home).start_tailer()
    try:
        deadline = time.monotonic() + 60
        while engine.rebuilt is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert engine.rebuilt == 1
    finally:
        engine.close()
    assert project.current_generation() == generation + 1
    connection = open_reader(project.index_path())
    try:
        assert not needs_rebuild(connection)
        assert connection.execute("SELECT count(*) FROM entries").fetchone()[0] == 7
    finally:
        connection.close()
    assert stemmed_hits() == 1

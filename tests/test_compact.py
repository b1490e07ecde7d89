"""``lookback compact`` (issue 29, bounded storage; docs/data-controls.md): the events no
replay needs go, the file is vacuumed, and neither the index nor a reindex of the compacted
log answers any differently."""

from __future__ import annotations

import json
from pathlib import Path

from lookback import api
from lookback.index.layout import project_dir
from lookback.index.store import open_reader
from tests.data_controls import lookback, pi_session
from tests.server.conftest import settings_for
from tests.support import index_paths

TEXTS = ["the HAZEL_CACHE_31 warms on boot", "ok", "we keep HAZEL_CACHE_31 small",
         "fine", "filler about the weather", "more filler about lunch"]


def state(home: Path, cwd: str) -> tuple[list[tuple], int]:
    """(every entry as the projections hold it, without rowids; events in the log)."""
    connection = open_reader(project_dir(home, cwd).index_path())
    try:
        entries = sorted(connection.execute(
            "SELECT session_id, entry_id, parent_id, seq, type, role, text, eligible,"
            " first_kept_id FROM entries"))
        events = connection.execute("SELECT count(*) FROM events").fetchone()[0]
    finally:
        connection.close()
    return entries, events


def test_compact_drops_what_no_replay_needs_and_changes_no_answer(home, tmp_path):
    cwd = str(tmp_path / "work")
    session = pi_session(tmp_path / "sessions" / "s.jsonl", TEXTS, cwd=cwd, session_id="s",
                         kept_from=4)
    index_paths(home, session)
    # the file rewritten in place (Pi does so with old files): read again behind a reset
    session.write_text(session.read_text().replace("warms on boot", "warms on boot!"))
    index_paths(home, session)
    # an entry id written twice (last write wins)
    with session.open("a") as handle:
        for text in ("a draft of the note", "the final HAZEL_CACHE_31 note"):
            handle.write(json.dumps({"type": "message", "id": "twice", "parentId": "after2",
                                     "timestamp": "2026-01-01T00:02:00Z",
                                     "message": {"role": "user", "content": text,
                                                 "timestamp": 1767225720000}}) + "\n")
    index_paths(home, session)
    forgot = lookback(home, "forget", "--text", "we keep hazel")
    assert forgot.returncode == 0, forgot.stderr
    settings = settings_for(home)

    def answers() -> list:
        request = {"session_file": str(session), "message": "HAZEL_CACHE_31"}
        found = api.retrieve(request, settings=settings)
        search = api.search({"text": "HAZEL_CACHE_31", "session_file": str(session),
                             "scope": "session"}, settings=settings)
        return [[(e["entry_id"], e["excerpt"]) for e in found["evidence"]],
                [(r["entry_id"], r["excerpt"]) for r in search["results"]]]

    before, events = state(home, cwd)
    asked = answers()
    assert asked[0]  # something to compare
    done = lookback(home, "compact", "--json")
    assert done.returncode == 0, done.stderr
    [report] = json.loads(done.stdout)["projects"]
    # the first read's 9 entries went with the rewrite, the draft with its second version
    assert (report["events_before"], report["events_dropped"]) == (events, 10)
    assert report["bytes_after"] <= report["bytes_before"]
    assert state(home, cwd) == (before, events - 10)
    assert answers() == asked
    assert lookback(home, "reindex").returncode == 0
    assert state(home, cwd) == (before, events - 10)  # the compacted log replays the same
    assert answers() == asked
    assert ("s", "m2") in {(s, e) for s, e, *_ in before}
    assert [text for s, e, *_, text, _, _ in before if e == "m2"] == [""]  # still forgotten

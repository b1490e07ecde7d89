"""The answer cache: hits for repeated inputs, invalidated by new index commits and by a
reindex swap (after which the server answers from the new generation file)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from lookback.cli import main
from lookback.index.layout import find_project
from lookback.index.rebuild import rebuild
from lookback.server import ReaderApp
from tests.support import index_paths

from .conftest import retrieve_body, settings_for


def retrieve(app, body: dict) -> tuple[int, dict, dict]:
    status, payload, fields = app.handle("POST", "/v1/retrieve", None, json.dumps(body).encode())
    return status, json.loads(payload), fields


def append_user_entry(session_file: Path, entry_id: str, parent: str, text: str) -> None:
    entry = {"type": "message", "id": entry_id, "parentId": parent,
             "timestamp": "2025-12-08T23:05:00.000Z",
             "message": {"role": "user", "content": [{"type": "text", "text": text}],
                         "timestamp": 1765235100000}}
    with open(session_file, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")


def test_repeated_request_is_a_cache_hit_with_the_same_answer(app, session_file):
    first = retrieve(app, retrieve_body(session_file))
    second = retrieve(app, retrieve_body(session_file))
    assert first[2]["cache"] == "miss" and second[2]["cache"] == "hit"
    assert second[1] == first[1]
    other = retrieve(app, retrieve_body(session_file, message="`setThinkingLevel` again?"))
    assert other[2]["cache"] == "miss"
    with_leaf = retrieve(app, retrieve_body(session_file, leaf_id="a1000004"))
    assert with_leaf[2]["cache"] == "miss"


def test_new_entries_invalidate_the_cache(app, home, session_file):
    before = retrieve(app, retrieve_body(session_file))
    assert retrieve(app, retrieve_body(session_file))[2]["cache"] == "hit"

    append_user_entry(session_file, "a1000008", "a1000007", "unrelated note about lunch")
    assert index_paths(home, session_file).read.entries == 1

    after = retrieve(app, retrieve_body(session_file))
    assert after[2]["cache"] == "miss"
    assert after[1]["diagnostics"]["index_watermark"] > before[1]["diagnostics"][
        "index_watermark"]
    assert retrieve(app, retrieve_body(session_file))[2]["cache"] == "hit"


def test_reindex_swap_is_picked_up(app, home, session_file, project_cwd):
    before = retrieve(app, retrieve_body(session_file))
    project = find_project(home, str(project_cwd))
    old_generation = project.current_generation()

    report = rebuild(project)
    assert project.current_generation() == old_generation + 1
    assert report is not None

    after = retrieve(app, retrieve_body(session_file))
    assert after[2]["cache"] == "miss"  # new generation file: new watermark
    assert [e["entry_id"] for e in after[1]["evidence"]] == \
        [e["entry_id"] for e in before[1]["evidence"]]
    assert app.reader.watermark(project)[0] == str(project.generation_path(old_generation + 1))


def test_lookback_reindex_command_under_a_live_server(serve, home, session_file, capsys):
    client = serve()
    first = client.post("/v1/retrieve", retrieve_body(session_file))
    assert main(["--home", str(home), "reindex"]) == 0
    capsys.readouterr()
    again = client.post("/v1/retrieve", retrieve_body(session_file))
    assert again.status == 200
    assert again.body["evidence"] == first.body["evidence"]


class FakeClock:
    """The server's "now", moved by the test (epoch seconds)."""

    def __init__(self, iso: str) -> None:
        self.now = datetime.fromisoformat(iso).timestamp()

    def __call__(self) -> float:
        return self.now


def dated_reasons(answer: dict) -> list[str]:
    return [reason for item in answer["evidence"] for reason in item["reasons"]
            if reason.startswith("dated ")]


def test_a_relative_date_is_not_served_stale_across_midnight(home, session_file):
    # No message_time and no timestamp: "yesterday" means the day before the call. The
    # session's turns are dated 2025-12-08; asked on the 9th they are yesterday's, asked
    # on the 10th they are a day before yesterday. The index does not change.
    clock = FakeClock("2025-12-09T23:59:00+00:00")
    app = ReaderApp(settings_for(home), clock=clock)
    try:
        body = retrieve_body(session_file, message="what did `AgentSession.messages` "
                                                   "return yesterday?")
        on_the_9th = retrieve(app, body)
        assert on_the_9th[2]["cache"] == "miss"
        assert dated_reasons(on_the_9th[1])
        assert all(r.startswith("dated in `yesterday`") for r in dated_reasons(on_the_9th[1]))
        clock.now += 30  # same day: the same answer, from the cache
        assert retrieve(app, body)[2]["cache"] == "hit"

        clock.now += 60  # 2025-12-10T00:00:30Z
        on_the_10th = retrieve(app, body)
        assert on_the_10th[2]["cache"] == "miss"
        assert dated_reasons(on_the_10th[1])
        assert all(r.startswith("dated near `yesterday`")
                   for r in dated_reasons(on_the_10th[1]))
        # A message that names no time keys by request and index alone, whatever the hour.
        plain = retrieve_body(session_file)
        assert retrieve(app, plain)[2]["cache"] == "miss"
        clock.now += 86_400
        assert retrieve(app, plain)[2]["cache"] == "hit"
    finally:
        app.close()

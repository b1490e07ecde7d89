"""Do-not-index markers and opt-outs (issue 29, data controls; docs/data-controls.md):
``<private>…</private>`` is never indexed or returned, a project in ``excluded_projects``
is neither captured nor answered from, and a message starting with ``[lookback:skip]``
gets no retrieval — through every path that returns text, and through reindex and repair."""

from __future__ import annotations

import json
from pathlib import Path

from lookback import api, claude_hook, codex_hook
from lookback.index.layout import project_dir
from lookback.index.store import open_reader
from tests.data_controls import (
    every_answer,
    folder_bytes,
    holding,
    live_reader,
    lookback,
    pi_session,
)
from tests.support import index_paths

PATHS = ["api", "cli", "codex-hook", "hook", "http", "mcp"]
MARKED = [
    "the deploy notes: <private>PASSWORD_HUNTER_42 is the root password</private> and the "
    "host is ORCHID_HOST_7 behind the gateway",
    "ok, ORCHID_HOST_7 noted",
    "and one more: <PRIVATE>NEVER_SEEN_99 sits in the drawer",  # never closed: to the end
    r"a literal example of the tag: \<private>ESCAPED_TAG_5\</private> stays as written",
    "filler about the weather", "more filler about lunch"]


def indexed_texts(home: Path, cwd: str) -> dict[str, str]:
    connection = open_reader(project_dir(home, cwd).index_path())
    try:
        return dict(connection.execute("SELECT entry_id, text FROM entries"))
    finally:
        connection.close()


def test_private_spans_are_never_indexed_and_the_rest_stays(home, tmp_path):
    (home / "none.toml").write_text("")
    cwd = str(tmp_path / "work")
    session = pi_session(tmp_path / "sessions" / "s.jsonl", MARKED, cwd=cwd,
                         session_id="marked", kept_from=4)
    index_paths(home, session)
    folder = project_dir(home, cwd).path
    for query in ("PASSWORD_HUNTER_42", "NEVER_SEEN_99"):
        assert holding(every_answer(home, session, query, ["m0", "m2"]), "drawer") == []
        assert holding(every_answer(home, session, query, ["m0", "m2"]), "root password") == []
    # the text around a span is kept, found and returned everywhere
    assert holding(every_answer(home, session, "ORCHID_HOST_7", ["m0"]),
                   "behind the gateway") == PATHS
    # an escaped tag is literal text
    assert holding(every_answer(home, session, "ESCAPED_TAG_5", ["m3"]),
                   "stays as written") == PATHS
    texts = indexed_texts(home, cwd)
    assert texts["m0"] == "the deploy notes:  and the host is ORCHID_HOST_7 behind the gateway"
    assert texts["m2"] == "and one more: "
    assert texts["m3"] == MARKED[3]

    def nowhere() -> None:
        stored = folder_bytes(folder)
        assert b"password_hunter_42" not in stored and b"never_seen_99" not in stored

    nowhere()
    assert lookback(home, "reindex").returncode == 0
    nowhere()
    project_dir(home, cwd).index_path().write_text("not an index\n" * 200)
    repaired = lookback(home, "reindex", "--repair", str(session.parent))
    assert "from 1 session files" in repaired.stdout, repaired.stderr
    for damaged in folder.glob("*.damaged"):
        damaged.unlink()
    nowhere()
    assert indexed_texts(home, cwd)["m0"] == texts["m0"]


def test_an_excluded_project_is_neither_captured_nor_answered(home, tmp_path):
    (home / "none.toml").write_text("")
    kept, off = str(tmp_path / "kept"), str(tmp_path / "clients" / "secret-client")
    texts = ["we chose the FERN_ROUTER_12 for the edge", "ok", "x", "y", "filler", "more"]
    kept_file = pi_session(tmp_path / "sessions" / "kept.jsonl", texts, cwd=kept,
                           session_id="kept", kept_from=4)
    off_file = pi_session(tmp_path / "sessions" / "off.jsonl", texts, cwd=off,
                          session_id="off", kept_from=4)
    excluded = {"LOOKBACK_EXCLUDED_PROJECTS": str(tmp_path / "clients")}  # a folder above
    done = lookback(home, "index", str(tmp_path / "sessions"), "--json", **excluded)
    assert json.loads(done.stdout)["excluded_skipped"] == 1, done.stderr
    assert project_dir(home, kept).index_path() is not None
    assert project_dir(home, off).index_path() is None  # never captured
    # indexed before the switch was set: the switch still stops every answer
    index_paths(home, off_file)
    assert holding(every_answer(home, off_file, "FERN_ROUTER_12", ["m0"]), "for the edge") == PATHS
    answers = every_answer(home, off_file, "FERN_ROUTER_12", ["m0"], environ=excluded,
                           excluded_projects=[str(tmp_path / "clients")])
    assert holding(answers, "for the edge") == []
    assert "switched off" in answers["cli"] and "switched off" in answers["mcp"]
    assert holding(every_answer(home, kept_file, "FERN_ROUTER_12", ["m0"], environ=excluded,
                                excluded_projects=[str(tmp_path / "clients")]),
                   "for the edge") == PATHS
    # the reader's freshness does not capture it either
    off_file.write_text(off_file.read_text() + json.dumps(
        {"type": "message", "id": "late", "parentId": "after2", "timestamp": "t",
         "message": {"role": "user", "content": "LATE_TURN_33 arrives", "timestamp": 1}}) + "\n")
    with live_reader(home, excluded_projects=[off]) as reader:
        answer = reader.client.post("/v1/retrieve", {"session_file": str(off_file),
                                                     "message": "LATE_TURN_33"}).body
        assert answer["status"] == "disabled"
    assert "late" not in indexed_texts(home, off)


def test_a_message_can_opt_out_of_retrieval(home, tmp_path):
    (home / "none.toml").write_text("")
    texts = ["we chose the FERN_ROUTER_12 for the edge", "ok", "x", "y", "filler", "more"]
    session = pi_session(tmp_path / "sessions" / "s.jsonl", texts, cwd=str(tmp_path / "w"),
                         session_id="s", kept_from=4)
    index_paths(home, session)

    def retrieved(message: str) -> list[str]:
        found = []
        with live_reader(home) as reader:
            body = {"session_file": str(session), "message": message}
            for answer in (api.retrieve(body, settings=reader.settings),
                           reader.client.post("/v1/retrieve", body).body):
                found.append(json.dumps(answer))
            hook = json.dumps({"session_id": "s", "transcript_path": str(session),
                               "cwd": str(home), "prompt": message,
                               "hook_event_name": "UserPromptSubmit"}).encode()
            found.append(claude_hook.run_hook(hook, url=reader.url, home=reader.home,
                                              provider="anthropic", timeout_ms=5000) or "")
            codex = json.dumps({"session_id": "s", "turn_id": "t",
                                "transcript_path": str(session), "cwd": str(home),
                                "prompt": message, "hook_event_name": "UserPromptSubmit"})
            found.append(codex_hook.run_hook(codex.encode(), url=reader.url, home=reader.home,
                                             provider="openai", timeout_ms=5000) or "")
        return [answer for answer in found if "for the edge" in answer]

    assert len(retrieved("why FERN_ROUTER_12?")) == 4
    assert retrieved("[lookback:skip] why FERN_ROUTER_12?") == []
    assert retrieved("  [LOOKBACK:SKIP]\nwhy FERN_ROUTER_12?") == []
    assert len(retrieved(r"\[lookback:skip] why FERN_ROUTER_12?")) == 4  # escaped: literal
    with live_reader(home) as reader:
        answer = reader.client.post("/v1/retrieve", {"session_file": str(session),
                                                     "message": "[lookback:skip] FERN"}).body
    assert answer["status"] == "no-query"
    assert answer["diagnostics"]["warnings"] == [
        "the message opts out of retrieval ([lookback:skip])"]

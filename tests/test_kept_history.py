"""History outlives the agent's own cleanup (issue 29, data controls; docs/data-controls.md):
a session whose file is deleted (Claude Code's ``cleanupPeriodDays``) stays found after
``index``, ``reindex`` and a repair from the log, ``status`` counts it, and ``doctor``
says which cleanup period applies."""

from __future__ import annotations

import json
from pathlib import Path

from lookback import api
from lookback.doctor import NOTE, Situation, check_transcript_cleanup
from lookback.index.layout import project_dir
from tests.data_controls import damage_projections, live_reader, lookback, pi_session
from tests.server.conftest import settings_for

TEXTS = ["the MAPLE_QUEUE_58 drains every night at two", "ok", "x", "y", "filler", "more"]
KEPT = "drains every night"


def found_everywhere(home: Path, cwd: str) -> dict[str, bool]:
    """Whether each path that reads history by project still quotes the session."""
    search = {"text": "MAPLE_QUEUE_58", "project": cwd, "scope": "project"}
    source = {"project": cwd, "session_id": "gone", "entry_id": "m0", "after": 2}
    with live_reader(home) as reader:
        found = {
            "api": KEPT in json.dumps([api.search(search, settings=reader.settings),
                                       api.source(source, settings=reader.settings)]),
            "http": KEPT in json.dumps([reader.client.post("/v1/search", search).body,
                                        reader.client.post("/v1/source", source).body]),
            "mcp": KEPT in reader.tools.search(None, query="MAPLE_QUEUE_58", scope="project",
                                               project=cwd)
            and KEPT in reader.tools.read(None, entry_id="m0", project=cwd, session_id="gone"),
        }
    done = lookback(home, "search", "MAPLE_QUEUE_58", "--project", cwd, "--scope", "project",
                    "--json")
    found["cli"] = KEPT in done.stdout
    return found


def test_a_deleted_session_file_stays_found(home, tmp_path):
    (home / "none.toml").write_text("")
    cwd = str(tmp_path / "work")
    folder = tmp_path / "sessions"
    session = pi_session(folder / "gone.jsonl", TEXTS, cwd=cwd, session_id="gone",
                         kept_from=4)
    pi_session(folder / "stays.jsonl", ["another session", "ok"], cwd=cwd, session_id="stays")
    assert lookback(home, "index", str(folder)).returncode == 0
    everywhere = {"api": True, "cli": True, "http": True, "mcp": True}
    assert found_everywhere(home, cwd) == everywhere

    session.unlink()  # the agent's cleanup
    assert lookback(home, "index", str(folder)).returncode == 0
    assert found_everywhere(home, cwd) == everywhere
    assert lookback(home, "reindex").returncode == 0
    assert found_everywhere(home, cwd) == everywhere
    damage_projections(project_dir(home, cwd).index_path())
    repaired = lookback(home, "reindex", "--repair")
    assert "from its event log" in repaired.stdout, repaired.stderr
    assert found_everywhere(home, cwd) == everywhere

    [status] = json.loads(lookback(home, "status", "--json").stdout)["projects"]
    assert (status["sessions"], status["sessions_without_source"]) == (2, 1)
    text = lookback(home, "status").stdout
    assert "kept, file gone    1 sessions" in text


def test_doctor_says_which_cleanup_period_deletes_transcripts(home, tmp_path):
    user = tmp_path / "user"
    (user / ".claude" / "projects").mkdir(parents=True)
    cwd = tmp_path / "work"
    session = pi_session(tmp_path / "sessions" / "gone.jsonl", TEXTS, cwd=str(cwd),
                         session_id="gone")
    assert lookback(home, "index", str(session)).returncode == 0
    session.unlink()
    settings = settings_for(home)

    def note(cwd_now: Path) -> str:
        [finding] = check_transcript_cleanup(Situation(settings, {"HOME": str(user)}, cwd_now))
        assert finding.status == NOTE
        return finding.summary

    assert "older than 30 days (Claude Code's default)" in note(tmp_path)
    assert "(1 sessions kept so far" in note(tmp_path)
    (user / ".claude" / "settings.json").write_text(json.dumps({"cleanupPeriodDays": 7}))
    assert f"7 days ({user / '.claude' / 'settings.json'})" in note(tmp_path)
    (cwd / ".claude").mkdir(parents=True)
    local = cwd / ".claude" / "settings.local.json"
    local.write_text(json.dumps({"cleanupPeriodDays": 3650}))
    summary = note(tmp_path)
    assert f"3650 days ({local}) for 1 folders" in summary and "7 days" in summary
    local.write_text(json.dumps({"cleanupPeriodDays": 0}))
    assert "sets 0, which Claude Code refuses" in note(tmp_path)
    # no Claude Code here: nothing to say
    assert check_transcript_cleanup(Situation(settings, {"HOME": str(tmp_path / "none")},
                                              tmp_path)) == []

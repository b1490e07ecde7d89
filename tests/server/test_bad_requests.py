"""Bad requests, whatever the input, get the documented error: ``RequestError`` from the
Python API, 400 and a JSON error object over HTTP, exit 2 and a JSON error object from
the CLI — never a traceback, a 500 or a hang. Also: the project oracle is closed and
manifest records are keyed by the granted project."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from lookback import api
from lookback.api import RequestError
from tests.support import index_paths

from .conftest import SESSION_ID, retrieve_body, settings_for, write_session

S = "\ud83d"  # half an emoji: what JSON.stringify writes for a cut surrogate pair
FUNCTIONS = {"retrieve": {"message": "`AgentSession.messages`"},
             "search": {"text": "AgentSession"}, "source": {"entry_id": "a1000001"}}


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def bad_requests(session_file: Path, project_cwd: Path, tmp_path: Path) -> dict[str, dict]:
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\nworld\n")
    return {
        "surrogate session_file": {"session_file": f"/tmp/{S}.jsonl"},
        "surrogate leaf_id": {"session_file": str(session_file), "leaf_id": S},
        "surrogate branch_ids": {"session_file": str(session_file), "branch_ids": [S]},
        "surrogate session_id": {"project": str(project_cwd), "session_id": S},
        "surrogate project": {"project": S, "session_id": SESSION_ID},
        "non-session file": {"session_file": str(notes)},
        "a directory": {"session_file": str(tmp_path)},
        "session_file true": {"session_file": True},
        "provider 5": {"session_file": str(session_file), "provider": 5},
        "project a list": {"project": [], "session_id": SESSION_ID},
        "NUL in session_file": {"session_file": "/tmp/a\x00b.jsonl"},
        "NUL in project": {"project": "a\x00b", "session_id": SESSION_ID},
        "NUL in session_id": {"project": str(project_cwd), "session_id": "x\x00"},
        "no session named": {},
    }


@pytest.fixture
def cases(session_file: Path, project_cwd: Path, tmp_path: Path) -> dict[str, dict]:
    return bad_requests(session_file, project_cwd, tmp_path)


def applicable(cases: dict[str, dict]) -> list[tuple[str, str, dict]]:
    """(case, function, request); source takes no leaf_id or branch_ids."""
    return [(name, function, {**fields, **request})
            for name, request in cases.items() for function, fields in FUNCTIONS.items()
            if not (function == "source" and ("leaf_id" in request or "branch_ids" in request))]


def test_the_api_raises_request_error(home, cases):
    settings = settings_for(home)
    for name, function, request in applicable(cases):
        try:
            getattr(api, function)(request, settings=settings)
        except RequestError:
            continue
        pytest.fail(f"{function} answered {name} without a RequestError")


def test_the_api_survives_deep_nesting(home, session_file):
    settings = settings_for(home)
    with pytest.raises(RequestError):
        api.retrieve({"session_file": str(session_file), "message": nested(1000)},
                     settings=settings)
    deep = {"role": "user", "content": nested(1000)}
    answer = api.retrieve({"session_file": str(session_file), "messages": [deep]},
                          settings=settings)
    assert answer["status"] == "no-query"


def test_http_answers_400_with_an_error_object(serve, cases, session_file):
    client = serve()
    for name, function, request in applicable(cases):
        answer = client.post(f"/v1/{function}", request)
        assert answer.status == 400, (name, function, answer.body)
        assert answer.body["status"] == "error" and answer.body["error"]["code"], name
    deep = (b'{"session_file": "%s", "message": "m", "extra": ' % str(session_file).encode()
            + b"[" * 1000 + b"]" * 1000 + b"}")
    for function in FUNCTIONS:
        answer = client.post(f"/v1/{function}", raw=deep)
        assert answer.status == 400 and answer.body["error"]["code"] == "invalid-request"
    assert client.post("/v1/retrieve", retrieve_body(session_file)).status == 200


def run_cli(home: Path, stdin: bytes, *args: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "LOOKBACK_HOME": str(home),
               "LOOKBACK_CONFIG": str(home / "none.toml")}
    return subprocess.run([sys.executable, "-m", "lookback.cli", *args], input=stdin,
                          env=environ, capture_output=True, timeout=120)


def test_the_cli_exits_2_with_a_json_error(home, cases, session_file):
    (home / "none.toml").write_text("")
    inputs = [json.dumps({**FUNCTIONS["retrieve"], **request}).encode()
              for name, request in cases.items()
              if name in ("surrogate session_file", "non-session file", "session_file true",
                          "provider 5", "NUL in session_file", "surrogate leaf_id")]
    inputs.append(b'{"session_file": "%s", "message": "m", "extra": ' % str(
        session_file).encode() + b"[" * 5000 + b"]" * 5000 + b"}")
    for stdin in inputs:
        done = run_cli(home, stdin, "retrieve")
        assert done.returncode == 2, (stdin[:80], done.stderr[-500:])
        assert json.loads(done.stdout)["status"] == "error"
        assert b"Traceback" not in done.stderr
    notes = cases["non-session file"]["session_file"]
    done = run_cli(home, b"", "search", "AgentSession", "--session-file", notes, "--json")
    assert done.returncode == 2 and json.loads(done.stdout)["error"]["code"] == "not-a-session"


def finishes(call: Any, seconds: float = 20) -> Any:
    """``call()`` in a thread; fails (instead of hanging the suite) when it does not end."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = call()
        except Exception as error:
            result["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the call hangs"
    if "error" in result:
        raise result["error"]
    return result["value"]


@pytest.fixture
def not_regular(tmp_path: Path) -> dict[str, str]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "to-zero").symlink_to("/dev/zero")
    (tmp_path / "to-fifo").symlink_to(fifo)
    return {"/dev/zero": "/dev/zero", "fifo": str(fifo), "link to /dev/zero":
            str(tmp_path / "to-zero"), "link to a fifo": str(tmp_path / "to-fifo")}


def test_only_regular_files_are_opened_as_sessions(home, session_file, not_regular):
    settings = settings_for(home)
    for name, path in not_regular.items():
        for function, fields in FUNCTIONS.items():
            with pytest.raises(RequestError, match="not a Pi or Claude Code session"):
                finishes(lambda f=function, fl=fields, p=path: getattr(api, f)(
                    {**fl, "session_file": p}, settings=settings))
            assert name


def test_the_server_neither_hangs_nor_starves_on_special_files(serve, session_file,
                                                               not_regular):
    client = serve(server__request_timeout_seconds=5)
    for path in not_regular.values():
        assert finishes(lambda p=path: client.post("/v1/nudge", {"session_file": p})).status \
            in (202, 400)
        answer = finishes(lambda p=path: client.post("/v1/retrieve", retrieve_body(Path(p))))
        assert answer.status == 400 and answer.body["error"]["code"] == "not-a-session"
    # Every worker is still free: real requests are answered.
    for _ in range(8):
        assert client.post("/v1/retrieve", retrieve_body(session_file)).status == 200


OWNER, OTHER = "owner-token-0001", "other-token-0002"


def test_a_token_cannot_tell_missing_non_session_and_foreign_files_apart(
        serve, session_file, home, project_cwd, tmp_path):
    mine = tmp_path / "mine"
    index_paths(home, write_session(tmp_path / "mine-sessions", mine))
    client = serve(server__tokens={OWNER: [str(project_cwd)], OTHER: [str(mine)]})
    notes = tmp_path / "notes.txt"
    notes.write_text("not a session\n")
    # Token OTHER names its own project and a path it wants to learn about.
    answers = [client.post("/v1/retrieve", {**retrieve_body(path), "project": str(mine)},
                           token=OTHER)
               for path in (tmp_path / "missing.jsonl", notes, session_file)]
    assert {a.status for a in answers} == {403}
    assert answers[0].body == answers[1].body == answers[2].body


def test_another_projects_session_id_cannot_evict_its_manifest(serve, session_file, home,
                                                                project_cwd, tmp_path):
    mine = tmp_path / "mine"
    index_paths(home, write_session(tmp_path / "mine-sessions", mine))
    client = serve(server__tokens={OWNER: [str(project_cwd)], OTHER: [str(mine)]})
    assert client.post("/v1/retrieve", retrieve_body(session_file), token=OWNER).status == 200
    client.app.manifests.flush()
    manifest = f"/v1/manifest?session_id={SESSION_ID}"
    before = client.get(manifest, token=OWNER).body["entries"]
    assert len(before) == 1
    for _ in range(60):  # more than manifest.keep_per_session (50)
        client.post("/v1/retrieve", {"project": str(mine), "session_id": SESSION_ID,
                                     "message": "`AgentSession.messages`"}, token=OTHER)
    client.app.manifests.flush()
    assert client.get(manifest, token=OWNER).body["entries"] == before
    assert len(client.get(manifest, token=OTHER).body["entries"]) == 50

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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
            with pytest.raises(RequestError, match="not a Pi, Claude Code or Codex session"):
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


# -- Bad values in a request's fields: a 400 naming the field, never a 500 ----------------

def post(app: Any, path: str, body: Any) -> tuple[int, Any]:
    status, payload, _ = app.handle("POST", path, None, json.dumps(body).encode())
    return status, json.loads(payload) if isinstance(payload, bytes) else payload


def plan_body(**changes: Any) -> dict:
    body = {"messages": [{"kind": "user", "tokens": 10}],
            "evidence": [{"session_id": SESSION_ID, "entry_id": "a1000001", "tokens": 5}]}
    body.update(changes)
    return body


@pytest.mark.parametrize(("path", "body", "named"), [
    ("/v1/plan", plan_body(messages=[{"kind": {}, "tokens": 10}]), "messages[0].kind"),
    ("/v1/plan", plan_body(messages=[{"kind": "user", "tokens": "10"}]), "messages[0].tokens"),
    ("/v1/plan", plan_body(messages=["user"]), "messages"),
    ("/v1/plan", plan_body(evidence=[{"session_id": [SESSION_ID], "entry_id": "a1000001",
                                      "tokens": 5}]), "evidence[0].session_id"),
    ("/v1/plan", plan_body(evidence=[{"session_id": SESSION_ID, "entry_id": {"a": 1},
                                      "tokens": 5}]), "evidence[0].entry_id"),
    ("/v1/plan", plan_body(evidence=[{"session_id": SESSION_ID, "entry_id": "a1000001",
                                      "tokens": True}]), "evidence[0].tokens"),
    ("/v1/plan", plan_body(hard_limit_tokens="9"), "hard_limit_tokens"),
    ("/v1/plan", plan_body(max_retrieved_history_tokens=-1), "max_retrieved_history_tokens"),
    ("/v1/retrieve", {"plan": {"kinds": [["user"]], "tokens": [10]}}, "plan.kinds"),
    ("/v1/retrieve", {"plan": {"kinds": ["user"], "tokens": [{}]}}, "plan.tokens"),
    ("/v1/retrieve", {"plan": ["user"]}, "plan must be an object"),
    ("/v1/retrieve", {"plan": {"kinds": ["user"], "tokens": [10],
                               "input_target_tokens": [1]}}, "plan.input_target_tokens"),
    ("/v1/nudge", {"session_file": "/\u0000x"}, "session_file"),
    ("/v1/nudge", {"session_file": ["/tmp/x.jsonl"]}, "session_file"),
])  # fmt: skip
def test_a_bad_field_is_a_400_that_names_it(app, session_file, path, body, named):
    if path == "/v1/retrieve":
        body = {**retrieve_body(session_file), **body}
    status, payload = post(app, path, body)
    assert status == 400, payload
    assert payload["error"]["code"] == "invalid-request"
    assert named in payload["error"]["message"]


def test_an_unknown_kind_still_falls_back_rather_than_failing(app):
    status, payload = post(app, "/v1/plan", plan_body(messages=[{"kind": "robot", "tokens": 1}]))
    assert status == 200
    assert payload["fallback"] == "malformed message at index 0: unknown kind"


def test_a_null_budget_is_the_default_for_retrieval_and_its_plan(app, session_file):
    """Retrieval and plan read one parsed request: null is the default for both."""
    plan = {"kinds": ["user"], "tokens": [10]}
    answers = {value: post(app, "/v1/retrieve", retrieve_body(
                   session_file, max_retrieved_history_tokens=value, plan=plan))
               for value in (None, 16000)}
    for value, (status, answer) in answers.items():
        assert status == 200, (value, answer)
        assert answer["plan"]["fallback"] is None, value
        assert answer["plan"]["decision"]["sources"], value
        assert answer["plan"]["tokens"]["retrieval_budget"] == 16000
    assert answers[None][1]["plan"] == answers[16000][1]["plan"]
    status, planned = post(app, "/v1/plan", plan_body(max_retrieved_history_tokens=None))
    assert status == 200 and planned["tokens"]["retrieval_budget"] == 16000


@pytest.mark.parametrize("stdin", [b"null", b"5", b"true", b'"text"', b"[]", b"1.5"])
def test_the_cli_answers_a_json_scalar_with_exit_2(home, stdin):
    (home / "none.toml").write_text("")
    done = run_cli(home, stdin, "retrieve")
    assert done.returncode == 2, done.stderr[-500:]
    assert json.loads(done.stdout)["error"]["message"] == "the request must be a JSON object"
    assert b"Traceback" not in done.stderr


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=20) | st.sampled_from(["", "/", "/\u0000x", "user", "-1", "a1000001"]),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


def base_bodies(session_file: Path) -> dict[str, dict]:
    names = {"session_file": str(session_file)}
    return {
        "/v1/retrieve": {**retrieve_body(session_file), "context_ids": ["a1000001"],
                         "provider": "anthropic", "max_results": 5,
                         "max_retrieved_history_tokens": 1000, "semantic": False,
                         "plan": {"kinds": ["user"], "tokens": [10], "hard_limit_tokens": 9000,
                                  "input_target_tokens": 8000,
                                  "max_retrieved_history_tokens": 500}},
        "/v1/search": {**names, "text": "AgentSession", "scope": "session", "limit": 5},
        "/v1/source": {**names, "entry_id": "a1000001"},
        "/v1/plan": plan_body(max_retrieved_history_tokens=100, hard_limit_tokens=900,
                              input_target_tokens=800),
        "/v1/nudge": names,
    }


def field_paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path inside ``value``, list items included (``("plan", "kinds", 0)``)."""
    items = value.items() if isinstance(value, dict) else (
        enumerate(value) if isinstance(value, list) else ())
    paths = []
    for key, child in items:
        paths.append((*prefix, key))
        paths += field_paths(child, (*prefix, key))
    return paths


def replaced(body: Any, path: tuple, value: Any) -> Any:
    body = json.loads(json.dumps(body))
    target = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return body


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_json_in_any_field_is_answered_never_a_500(app, session_file, data):
    bodies = base_bodies(session_file)
    path = data.draw(st.sampled_from(sorted(bodies)))
    where = data.draw(st.sampled_from(field_paths(bodies[path])))
    value = data.draw(JSON)
    status, payload = post(app, path, replaced(bodies[path], where, value))
    assert status in (200, 202, 400, 403, 404), (path, where, value, payload)
    if status >= 400:
        assert payload["status"] == "error" and payload["error"]["message"]

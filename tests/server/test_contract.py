"""The typed wire contract: each request is decoded once, where it enters, and the engine
is handed the decoded request pinned to the session the app resolved and authorized.

The HTTP reader decodes (``query.contract.request.parse_*``) and the Python API uses a
decoded request as it is (``lookback.api`` decodes only a dict); the answer cache keys
on the decoded request, so keys the reader ignores do not split it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest

from lookback import api
from lookback.query.contract import request as wire
from lookback.server.app import ReaderApp

from .conftest import SESSION_ID, retrieve_body, settings_for


class Recording:
    """``lookback.api`` that keeps every request it is handed."""

    def __init__(self) -> None:
        self.requests: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        function = getattr(api, name)

        def call(request: Any, *args: Any, **kwargs: Any) -> Any:
            self.requests.append(request)
            return function(request, *args, **kwargs)

        return call


def post(app: ReaderApp, path: str, body: dict) -> tuple[int, Any, dict]:
    status, payload, fields = app.handle("POST", path, None, json.dumps(body).encode())
    return status, json.loads(payload) if isinstance(payload, bytes) else payload, fields


@pytest.fixture
def recording(home: Path, session_file: Path, monkeypatch: pytest.MonkeyPatch):
    """A reader app over a recording engine, whose API must never decode a dict again."""
    def decoded_twice(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the engine decoded a request the app had decoded")

    for name in ("parse_request", "parse_search", "parse_source"):
        monkeypatch.setattr(api, name, decoded_twice)
    engine = Recording()
    app = ReaderApp(settings_for(home), engine=engine)
    yield app, engine
    app.close()


def test_the_engine_gets_each_request_decoded_once_and_pinned(recording, session_file,
                                                              project_cwd):
    app, engine = recording
    real = os.path.realpath(session_file)
    bodies = {
        "/v1/retrieve": (retrieve_body(session_file), wire.RetrievalRequest),
        "/v1/search": ({"session_file": str(session_file), "text": "AgentSession"},
                       wire.SearchRequest),
        "/v1/source": ({"session_file": str(session_file), "entry_id": "a1000001"},
                       wire.SourceRequest),
    }
    for path, (body, kind) in bodies.items():
        status, answer, _ = post(app, path, body)
        assert status == 200 and answer["status"] in ("ok", "no-query"), (path, answer)
        asked = engine.requests[-1]
        assert type(asked) is kind, path
        # Pinned: the resolved project and session, never the file to resolve again.
        assert asked.session_file is None and asked.session_id == SESSION_ID, path
        assert asked.project == app.reader.resolve(session_file=real).project.name, path
    assert len(engine.requests) == len(bodies)


def test_keys_the_reader_ignores_do_not_split_the_answer_cache(app, session_file):
    body = retrieve_body(session_file)
    first = post(app, "/v1/retrieve", body)
    again = post(app, "/v1/retrieve", {**body, "client_note": "ignored", "max_results": None})
    assert first[0] == again[0] == 200 and first[1] == again[1]
    assert (first[2]["cache"], again[2]["cache"]) == ("miss", "hit")
    other = post(app, "/v1/retrieve", {**body, "max_results": 1})
    assert other[2]["cache"] == "miss"


def test_the_python_api_decodes_a_dict_and_takes_a_decoded_request(home, session_file):
    settings = settings_for(home)
    body = retrieve_body(session_file)
    typed = api.retrieve(wire.parse_request(body, settings.retrieval), settings=settings)
    plain = api.retrieve(body, settings=settings)
    assert typed["status"] == "ok" and typed["evidence"]
    for answer in (typed, plain):
        answer["diagnostics"].pop("latency_ms")
    assert typed == plain
    for decode, function, body in (
            (wire.parse_search, api.search, {"session_file": str(session_file),
                                             "text": "AgentSession"}),
            (wire.parse_source, api.source, {"session_file": str(session_file),
                                             "entry_id": "a1000001"})):
        assert function(decode(body), settings=settings) == function(body, settings=settings)


def test_a_decoded_request_round_trips_through_json(session_file):
    for decode, kind, body in (
            (wire.parse_request, wire.RetrievalRequest,
             {**retrieve_body(session_file), "branch_ids": ["a", "b"],
              "plan": {"kinds": ["user"], "tokens": [3]}}),
            (wire.parse_search, wire.SearchRequest,
             {"project": "p", "text": "x", "scope": "project"}),
            (wire.parse_source, wire.SourceRequest,
             {"project": "p", "session_id": "s", "entry_id": "e", "before": 2})):
        decoded = decode(body)
        assert msgspec.json.decode(msgspec.json.encode(decoded), type=kind) == decoded


@pytest.mark.parametrize(("decode", "body", "message"), [
    (wire.parse_search, {"project": "p", "text": "x", "scope": "everything"},
     "scope must be one of branch, session, project"),
    (wire.parse_search, {"project": "p", "text": "x", "max_results": 0},
     "max_results must be an integer between 1 and 100"),
    (wire.parse_source, {"project": "p", "session_id": "s"}, "give entry_id"),
    (wire.parse_source, {"project": "p", "session_id": "s", "entry_id": "e", "after": 99},
     "after must be an integer between 0 and 20"),
])
def test_bad_fields_are_named(decode, body, message):
    with pytest.raises(wire.RequestError, match=message):
        decode(body)

"""Every endpoint of `lookback serve`, over real HTTP, on the indexed compacted session."""

from __future__ import annotations

import json

from lookback import api
from lookback.query.contract.messages import EVIDENCE_HEADER, estimate_message_tokens

from .conftest import EARLY_USER_TEXT, PROMPT, SESSION_ID, retrieve_body


def test_retrieve_returns_the_compacted_away_turns_as_evidence(serve, session_file):
    client = serve()
    answer = client.post("/v1/retrieve", retrieve_body(session_file))

    assert answer.status == 200
    assert answer.headers["content-type"] == "application/json"
    assert answer.body["status"] == "ok"
    ids = [item["entry_id"] for item in answer.body["evidence"]]
    # a1000001/a1000002 were compacted away; a1000003 onward is still in context.
    assert set(ids) == {"a1000001", "a1000002"}
    for item in answer.body["evidence"]:
        assert item["session_id"] == SESSION_ID
        text = item["message"]["content"][0]["text"]
        assert text.startswith(EVIDENCE_HEADER)
        assert f"Source entry: {item['entry_id']}" in text
    user_item = next(i for i in answer.body["evidence"] if i["entry_id"] == "a1000001")
    assert json.dumps(EARLY_USER_TEXT) in user_item["message"]["content"][0]["text"]


def test_search_and_source(serve, session_file):
    client = serve()
    found = client.post("/v1/search", {"text": "setThinkingLevel", "scope": "session",
                                       "session_file": str(session_file)})
    assert found.status == 200
    assert "a1000004" in [row["entry_id"] for row in found.body["results"]]

    source = client.post("/v1/source", {"session_file": str(session_file),
                                        "entry_id": "a1000001"})
    assert source.status == 200
    assert EARLY_USER_TEXT in json.dumps(source.body)


def test_plan_decides_from_kinds_and_tokens_and_records_it(serve, session_file):
    client = serve()
    evidence = client.post("/v1/retrieve", retrieve_body(session_file)).body["evidence"]
    described = [{"kind": "user", "tokens": 12}, {"kind": "assistant", "tokens": 8},
                 {"kind": "user", "tokens": 20}]
    refs = [{"entry_id": e["entry_id"], "session_id": e["session_id"],
             "tokens": max(e["tokens"], estimate_message_tokens(e["message"]))}
            for e in evidence]
    # A budget that fits only the first (best-ranked) evidence item.
    planned = client.post("/v1/plan", {"messages": described, "evidence": refs,
                                       "max_retrieved_history_tokens": refs[0]["tokens"]})

    assert planned.status == 200
    assert planned.body["decision"] == {
        "insert_before": 2, "sources": [f"{SESSION_ID}:{evidence[0]['entry_id']}"]}
    assert "messages" not in planned.body  # a decision, never a conversation
    assert [e["entry_id"] for e in planned.body["excluded"]] == [evidence[1]["entry_id"]]

    client.app.manifests.flush()
    latest = client.get(f"/v1/manifest?session_id={SESSION_ID}").body["entries"][-1]
    assert latest["planner"]["included"] == 1
    planner_excluded = [e for e in latest["excluded"] if e["stage"] == "planner"]
    assert [e["entry_id"] for e in planner_excluded] == [evidence[1]["entry_id"]]
    assert planner_excluded[0]["reason"].startswith("retrieval budget full")
    included = [i["entry_id"] for i in latest["items"] if i["included"]]
    assert included == [evidence[0]["entry_id"]]


def test_plan_given_a_conversation_decides_nothing(serve, session_file):
    client = serve()
    evidence = client.post("/v1/retrieve", retrieve_body(session_file)).body["evidence"]
    conversation = [{"role": "user", "content": [{"type": "text", "text": PROMPT}]}]
    answer = client.post("/v1/plan", {"messages": conversation, "evidence": evidence})
    assert answer.status == 200
    assert answer.body["decision"] is None
    assert answer.body["fallback"] == "malformed message at index 0: unknown kind"
    assert PROMPT not in json.dumps(answer.body)


def test_plan_rejects_a_bad_budget(serve):
    client = serve()
    answer = client.post("/v1/plan", {"messages": [], "evidence": [],
                                      "max_retrieved_history_tokens": -1})
    assert answer.status == 400
    assert answer.body["error"]["code"] == "invalid-request"


def test_health_lists_the_project(serve, session_file, project_cwd):
    answer = serve().get("/v1/health")
    assert answer.status == 200
    assert answer.body["status"] == "ok"
    [project] = answer.body["projects"]
    assert project["cwd"] == str(project_cwd)
    assert project["entries"] == 7


def test_manifest_records_ids_scores_and_no_text(serve, session_file):
    client = serve()
    evidence = client.post("/v1/retrieve", retrieve_body(session_file)).body["evidence"]
    client.app.manifests.flush()

    answer = client.get(f"/v1/manifest?session_id={SESSION_ID}")
    assert answer.status == 200
    [record] = answer.body["entries"]
    assert record["kind"] == "retrieval"
    assert record["retrievedEventIds"] == [f"{SESSION_ID}:{e['entry_id']}" for e in evidence]
    for item, original in zip(record["items"], evidence, strict=True):
        assert item["entry_id"] == original["entry_id"]
        assert item["score"] == original["score"]
        assert item["tokens"] == original["tokens"]
        assert item["classification"] == original["classification"]
        assert item["group_id"] == original["group_id"]
        assert item["reason"]
    assert record["diagnostics"]["candidates"] >= 2
    dumped = json.dumps(record)
    for text in ("AgentSession.messages", "AppMessage", "Message[]", "refactor"):
        assert text not in dumped


def test_manifest_of_an_unknown_session_is_empty_and_needs_an_id(serve):
    client = serve()
    assert client.get("/v1/manifest?session_id=nope").body["entries"] == []
    assert client.get("/v1/manifest").status == 400


def test_errors_are_json_objects(serve, session_file):
    client = serve()
    unknown = client.get("/v2/whatever")
    assert unknown.status == 404 and unknown.body["error"]["code"] == "not-found"
    wrong_method = client.get("/v1/retrieve")
    assert wrong_method.status == 405
    malformed = client.post("/v1/retrieve", raw=b'{"session_file": ')
    assert malformed.status == 400 and malformed.body["error"]["code"] == "malformed-json"
    not_object = client.post("/v1/retrieve", [1, 2])
    assert not_object.status == 400 and not_object.body["error"]["code"] == "invalid-request"
    no_session = client.post("/v1/retrieve", {"message": PROMPT})
    assert no_session.status == 400 and no_session.body["error"]["code"] == "invalid-request"
    relative = client.post("/v1/nudge", {"session_file": "relative.jsonl"})
    assert relative.status == 400
    # The connection still works after each error.
    assert client.post("/v1/retrieve", retrieve_body(session_file)).status == 200


def test_request_over_the_size_limit_is_refused(serve, session_file):
    client = serve(server__max_request_bytes=2000)
    big = retrieve_body(session_file, message=PROMPT + " x" * 2000)
    answer = client.post("/v1/retrieve", big)
    assert answer.status == 413
    assert answer.body["error"]["code"] == "too-large"
    assert answer.headers["connection"] == "close"
    assert client.post("/v1/retrieve", retrieve_body(session_file)).status == 200


class SlowEngine:
    """An engine whose retrieve outlasts the server's time limit."""

    def __init__(self) -> None:
        import threading

        self.release = threading.Event()

    def retrieve_answer(self, request, *, settings, reader):
        self.release.wait(10)
        return api.retrieve_answer(request, settings=settings, reader=reader)


def test_a_call_over_the_time_limit_gets_503(home, session_file):
    from lookback.server import ReaderApp

    from .conftest import settings_for

    engine = SlowEngine()
    app = ReaderApp(settings_for(home, server__request_timeout_seconds=0.2), engine=engine)
    try:
        status, payload, fields = app.handle("POST", "/v1/retrieve", None,
                                             json.dumps(retrieve_body(session_file)).encode())
        assert status == 503
        assert payload["error"]["code"] == "timeout"
        assert fields == {"error": "timeout"}
    finally:
        engine.release.set()
        app.close()


def test_service_mode_nudge_hands_the_file_to_the_service(home, session_file, monkeypatch):
    """Off the request path (lookback.application.nudges): the answer does not wait for it."""
    import threading

    from lookback import service
    from lookback.index.layout import project_key
    from lookback.server import ReaderApp

    from .conftest import settings_for

    calls, called = [], threading.Event()

    def nudge_session(settings, path, **bounds):
        calls.append((path, bounds["project"]))
        called.set()

    monkeypatch.setattr(service, "nudge_session", nudge_session)
    app = ReaderApp(settings_for(home, redis_url="redis://127.0.0.1:1/0"))
    body = json.dumps({"session_file": str(session_file)}).encode()
    try:
        status, payload, _ = app.handle("POST", "/v1/nudge", None, body)
        assert (status, payload) == (202, {"status": "queued"})
        assert called.wait(30)
        header_cwd = json.loads(session_file.read_text().splitlines()[0])["cwd"]
        assert calls == [(str(session_file), project_key(header_cwd))]
        while app.keeper.nudges.stats()["published"] != 1:  # counted just after the call returns
            called.wait(0.01)
    finally:
        app.close()


def test_retrieve_with_plan_answers_the_decision_in_the_same_call(serve, session_file):
    client = serve()
    described = [{"kind": "summary", "tokens": 300}, {"kind": "user", "tokens": 12},
                 {"kind": "assistant", "tokens": 8}, {"kind": "user", "tokens": 20}]
    first = client.post("/v1/retrieve", retrieve_body(session_file)).body["evidence"]
    fits_one = max(first[0]["tokens"], estimate_message_tokens(first[0]["message"]))
    body = retrieve_body(session_file, plan={"kinds": [m["kind"] for m in described],
                                             "tokens": [m["tokens"] for m in described],
                                             "max_retrieved_history_tokens": fits_one})
    answer = client.post("/v1/retrieve", body).body
    assert answer["plan"]["decision"] == {
        "insert_before": 3, "sources": [f"{SESSION_ID}:{first[0]['entry_id']}"]}
    assert answer["plan"]["excluded"][0]["reason"] == "retrieval budget full"
    client.app.manifests.flush()
    latest = client.get(f"/v1/manifest?session_id={SESSION_ID}").body["entries"][-1]
    assert latest["planner"]["included"] == 1
    assert "plan" not in client.post("/v1/retrieve", retrieve_body(session_file)).body

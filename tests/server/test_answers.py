"""The typed answers: every endpoint's real answers decode, strictly, into the contract's
structs (``query.contract.answers``) and encode back to the very bytes that were sent, so
a key added, dropped, renamed, retyped or reordered on either side fails here.

Answers come from the HTTP reader (``ReaderApp.handle``, the bytes ``lookback serve``
sends), the CLI (``lookback retrieve``, ``lookback search --json``) and the Python API,
whose dicts are the JSON's.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from lookback import api
from lookback.cli import main
from lookback.query.contract import EVIDENCE_HEADER
from lookback.query.contract.answers import (
    Diagnostics,
    FreshnessOutcome,
    PlanAnswer,
    RetrieveAnswer,
    SearchAnswer,
    SourceAnswer,
    Withheld,
    answer_dict,
    encode_answer,
)
from lookback.server.app import ReaderApp
from tests.support import index_paths
from tests.test_retrieve import write_session

from .conftest import retrieve_body, settings_for

KINDS: dict[str, type] = {"/v1/retrieve": RetrieveAnswer, "/v1/search": SearchAnswer,
                          "/v1/source": SourceAnswer, "/v1/plan": PlanAnswer}
TERM = "QuuxFrobnicator"
SESSION = "answer-session"


def typed(kind: type, payload: bytes) -> Any:
    """``payload`` decoded strictly into ``kind``, checked to encode back to itself."""
    answer = msgspec.json.decode(payload, type=kind, strict=True)
    assert encode_answer(answer) == payload, kind
    return answer


def post(app: ReaderApp, path: str, body: dict) -> Any:
    status, payload, _ = app.handle("POST", path, None, json.dumps(body).encode())
    assert status == 200 and isinstance(payload, bytes), (path, payload)
    return typed(KINDS[path], payload)


@pytest.fixture
def marked(tmp_path: Path, home: Path) -> Path:
    """A session whose second entry is marked sensitive: withheld from a remote provider."""
    texts = [f"the {TERM} config lives in quux.toml",
             f"[lookback:sensitive]the {TERM} token is private[/lookback:sensitive]",
             f"and the {TERM} retries twice", "now the question"]
    (tmp_path / "marked").mkdir()
    path = write_session(tmp_path / "marked" / "marked.jsonl", texts,
                         cwd=str(tmp_path / "proj"), session_id=SESSION)
    index_paths(home, path)
    return path


def test_retrieve_answers_decode_into_the_contract(app, session_file, marked):
    plan = {"kinds": ["assistant", "user"], "tokens": [40, 12]}
    answer = post(app, "/v1/retrieve", {"session_file": str(marked),
                                        "message": f"what did {TERM} do?",
                                        "context_ids": ["m3"], "plan": plan})
    assert answer.status == "ok" and [e.entry_id for e in answer.evidence] == ["m2", "m0"]
    assert answer.retrieved_event_ids == [f"{SESSION}:m2", f"{SESSION}:m0"]
    assert answer.excluded == [Withheld(
        source=f"{SESSION}:m1", entry_id="m1", session_id=SESSION,
        classification="sensitive", reason=answer.excluded[0].reason)]
    assert answer.evidence[0].message.content[0].text.startswith(EVIDENCE_HEADER)
    assert isinstance(answer.plan, PlanAnswer) and answer.plan.decision is not None
    assert answer.plan.decision.sources == answer.retrieved_event_ids
    assert answer.plan.tokens.mandatory == 52
    # Embedded mode: the freshness step reports what it did, after every other count.
    assert isinstance(answer.diagnostics.freshness, FreshnessOutcome)
    assert list(json.loads(encode_answer(answer))["diagnostics"])[-2:] == ["latency_ms",
                                                                           "freshness"]
    # Without plan, no plan key; an answer with no topic has no counts past warnings.
    plain = post(app, "/v1/retrieve", retrieve_body(session_file))
    assert plain.status == "ok" and plain.evidence and plain.plan is msgspec.UNSET
    empty = post(app, "/v1/retrieve", retrieve_body(session_file, message="and the"))
    assert empty.status == "no-query" and empty.evidence == [] and empty.query == {}
    assert empty.diagnostics.candidates is msgspec.UNSET
    assert set(json.loads(encode_answer(empty))["diagnostics"]) == {
        "warnings", "latency_ms", "freshness"}


def test_search_and_source_answers_decode_into_the_contract(app, marked):
    common = {"session_file": str(marked)}
    found = post(app, "/v1/search", {**common, "text": TERM, "scope": "session"})
    assert found.status == "ok" and found.scope == "session"
    assert {r.entry_id for r in found.results} == {"m0", "m2"}
    assert [item.entry_id for item in found.excluded] == ["m1"]
    nothing = post(app, "/v1/search", {**common, "text": "the"})
    assert nothing.status == "no-query" and nothing.scope is msgspec.UNSET
    read = post(app, "/v1/source", {**common, "entry_id": "m2", "before": 2, "after": 1})
    assert read.status == "ok" and read.entry.entry_id == "m2"
    # The withheld neighbour is left out of ``before`` and listed in ``excluded``.
    assert [e.entry_id for e in read.before] == ["m0"]
    assert [e.entry_id for e in read.after] == ["m3"]
    assert [item.entry_id for item in read.excluded] == ["m1"]
    alone = post(app, "/v1/source", {**common, "entry_id": "m0"})
    assert alone.status == "ok" and alone.before is msgspec.UNSET
    withheld = post(app, "/v1/source", {**common, "entry_id": "m1"})
    assert withheld.status == "withheld" and withheld.entry is None
    assert b'"entry":null' in encode_answer(withheld)
    missing = post(app, "/v1/source", {**common, "entry_id": "nope"})
    assert missing.status == "not-found" and encode_answer(missing) == b'{"status":"not-found"}'


def test_plan_answers_decode_into_the_contract(app):
    evidence = [{"session_id": "s", "entry_id": "e1", "tokens": 30, "tier": "identifier",
                 "score": 160.5, "group_id": "retrieval:s:e1"},
                {"session_id": "s", "entry_id": "e2", "tokens": 900}]
    body = {"messages": [{"kind": "assistant", "tokens": 50}, {"kind": "user", "tokens": 10}],
            "evidence": evidence, "max_retrieved_history_tokens": 100}
    planned = post(app, "/v1/plan", body)
    assert planned.fallback is None and planned.decision.insert_before == 1
    assert [i.source for i in planned.included] == ["s:e1"]
    assert [(e.source, e.reason) for e in planned.excluded] == [("s:e2",
                                                                  "retrieval budget full")]
    assert planned.tokens.total == 90
    # A fallback before the messages were counted has no mandatory counts at all.
    fallback = post(app, "/v1/plan", {**body, "messages": [{"kind": "wizard", "tokens": 1}]})
    assert fallback.decision is None and fallback.fallback.startswith("malformed message")
    assert fallback.tokens.mandatory is msgspec.UNSET
    assert list(json.loads(encode_answer(fallback))["tokens"]) == [
        "retrieval_budget", "input_target", "hard_limit", "evidence"]
    # A client's evidence of the wrong types is refused, not echoed into ``included``.
    status, payload, _ = app.handle("POST", "/v1/plan", None, json.dumps(
        {**body, "evidence": [{**evidence[0], "score": "high"}]}).encode())
    assert status == 400 and payload["error"]["message"] == "evidence[0].score must be a number"


def test_the_cli_prints_the_contract(home, marked, capsys, monkeypatch):
    monkeypatch.setenv("LOOKBACK_HOME", str(home))
    monkeypatch.delenv("LOOKBACK_REDIS_URL", raising=False)
    request = {"session_file": str(marked), "message": f"what did {TERM} do?",
               "context_ids": ["m3"]}
    for pretty in ([], ["--pretty"]):
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(
            json.dumps(request).encode())))
        assert main(["retrieve", *pretty]) == 0
        out = capsys.readouterr().out
        answer = msgspec.json.decode(out, type=RetrieveAnswer, strict=True)
        assert answer.status == "ok" and answer.evidence
        encoded = encode_answer(answer)  # the latency differs from run to run, not keys
        expected = msgspec.json.format(encoded, indent=2) if pretty else encoded
        assert out == expected.decode() + "\n"
    assert main(["search", TERM, "--session-file", str(marked), "--json"]) == 0
    found = msgspec.json.decode(capsys.readouterr().out, type=SearchAnswer, strict=True)
    assert found.status == "ok" and found.results


def test_the_python_api_gives_the_jsons_dicts_or_the_structs(home, session_file, marked):
    settings = settings_for(home)
    request = {"session_file": str(marked), "message": f"what did {TERM} do?",
               "context_ids": ["m3"]}
    typed_answer = api.retrieve_answer(request, settings=settings)
    assert isinstance(typed_answer, RetrieveAnswer)
    assert isinstance(typed_answer.diagnostics, Diagnostics)
    plain = api.retrieve(request, settings=settings)
    for answer in (plain, as_json := json.loads(encode_answer(typed_answer))):
        answer["diagnostics"].pop("latency_ms")
    assert plain == as_json and isinstance(plain["evidence"][0]["reasons"], list)
    assert answer_dict(typed_answer) == json.loads(encode_answer(typed_answer))
    for function, typed_function, body in (
            (api.search, api.search_answer, {"session_file": str(marked), "text": TERM}),
            (api.source, api.source_answer, {"session_file": str(marked), "entry_id": "m2",
                                             "before": 1})):
        answer = typed_function(body, settings=settings)
        assert function(body, settings=settings) == answer_dict(answer) == json.loads(
            encode_answer(answer))
    # The evidence items are frozen: the reader memoizes them across answers.
    with pytest.raises(AttributeError):
        typed_answer.evidence[0].tokens = 1  # type: ignore[misc]

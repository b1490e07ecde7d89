"""The manifest store and records on their own: latest N per session, planner folding."""

from __future__ import annotations

from lookback.query.context.manifest import ManifestStore, apply_plan, retrieval_record

RESPONSE = {
    "status": "ok",
    "query": {"identifier": ["parse_config_v2"], "keyword": ["timeout"]},
    "evidence": [
        {"entry_id": "e1", "session_id": "s1", "role": "assistant", "tier": "identifier",
         "score": 150.5, "tokens": 40, "classification": "normal", "group_id": "g1",
         "reasons": ["exact identifier `parse_config_v2` +100", "recency +8"],
         "excerpt": "parse_config_v2 raises on timeout",
         "message": {"role": "user", "content": "parse_config_v2 raises on timeout"}},
        {"entry_id": "e2", "session_id": "s1", "role": "user", "tier": "other",
         "score": 70.0, "tokens": 20, "classification": "internal", "group_id": "g2",
         "reasons": ["term match `timeout` +60"], "excerpt": "the timeout again"},
    ],
    "excluded": [{"source": "s1:e3", "entry_id": "e3", "session_id": "s1",
                  "classification": "sensitive", "reason": "privacy: sensitive exceeds internal"}],
    "diagnostics": {"candidates": 5, "deduplicated": 1, "warnings": ["fts: something"],
                    "latency_ms": 1.5, "note": "free text is dropped"},
}


def test_record_keeps_ids_and_numbers_only():
    record = retrieval_record(RESPONSE, session_id="s1", project="p", leaf_id="e9",
                              latency_ms=2.25)
    assert record["retrievedEventIds"] == ["s1:e1", "s1:e2"]
    assert record["items"][0]["reason"] == "exact identifier +100, recency +8"
    assert record["items"][1]["classification"] == "internal"
    assert record["excluded"] == [{"source": "s1:e3", "entry_id": "e3", "session_id": "s1",
                                   "classification": "sensitive", "stage": "privacy",
                                   "reason": "privacy: sensitive exceeds internal"}]
    assert record["diagnostics"] == {"candidates": 5, "deduplicated": 1, "warnings_count": 1,
                                     "latency_ms": 1.5}
    assert record["query_terms"] == {"identifier": 1, "keyword": 1}
    assert record["tokens"] == 60
    text = str(record)
    for word in ("parse_config_v2", "raises", "timeout", "free text", "fts: something"):
        assert word not in text


def test_plan_marks_included_and_adds_planner_exclusions():
    record = retrieval_record(RESPONSE, session_id="s1", project="p", leaf_id=None,
                              latency_ms=1)
    planned = apply_plan(record, {
        "included": [{"source": "s1:e1"}],
        "excluded": [{"source": "s1:e2", "entry_id": "e2", "session_id": "s1",
                      "reason": "input target full"}],
        "tokens": {"mandatory": 900, "evidence": 40}, "fallback": None})
    assert [i["included"] for i in planned["items"]] == [True, False]
    assert planned["excluded"][-1] == {"source": "s1:e2", "entry_id": "e2", "session_id": "s1",
                                       "classification": "internal", "stage": "planner",
                                       "reason": "input target full"}
    assert planned["planner"] == {"included": 1, "excluded": 1, "fallback": None,
                                  "tokens": {"mandatory": 900, "evidence": 40}}
    assert "included" not in record["items"][0]  # the original is not modified


def test_store_keeps_the_latest_n_per_session(tmp_path):
    store = ManifestStore(tmp_path, keep=3)
    for n in range(40):
        for session in ("s1", "s2"):
            store.add(retrieval_record(RESPONSE, session_id=session, project="p",
                                       leaf_id=f"leaf{n}", latency_ms=n))
    assert [r["leaf_id"] for r in store.entries("s1")] == ["leaf37", "leaf38", "leaf39"]
    assert len(store.entries("s2")) == 3
    rows = store._open().execute("SELECT count(*) FROM manifest").fetchone()[0]
    assert rows <= 2 * (3 + 16)  # pruned as it goes: bounded, whatever the number of calls
    store.record_plan("s1", "p", {"included": [], "excluded": [], "tokens": {},
                                  "fallback": "mandatory context exceeds the hard limit"})
    assert store.entries("s1")[-1]["planner"]["fallback"].startswith("mandatory")
    store.close()
    reader = ManifestStore(tmp_path, keep=3, readonly=True)
    assert reader.latest_session() == "s2"  # the plan updated s1's record in place
    assert ManifestStore(tmp_path / "nothing", readonly=True).entries("s1") == []

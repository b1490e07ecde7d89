"""A golden set of real questions on the real fixtures: recall@5 and MRR.

Each query expects the user turn that holds the answer. The figures are printed
(``pytest -s``) and must stay above the thresholds, so a ranking change that
loses relevant evidence fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lookback.api import retrieve
from lookback.query.search.reader import IndexReader
from lookback.settings import load_settings
from tests.support import fixture_path, index_paths

GOLDEN = json.loads((Path(__file__).parent / "golden" / "retrieval.json").read_text())
RECALL_AT_5_MIN = 0.8
MRR_MIN = 0.6


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    home = tmp_path_factory.mktemp("golden")
    index_paths(home, *(fixture_path(s["file"]) for s in GOLDEN["sessions"].values()))
    settings = load_settings({"home": str(home)}, environ={})
    reader = IndexReader(home)
    found = []
    for query in GOLDEN["queries"]:
        session = GOLDEN["sessions"][query["session"]]
        request = {"session_file": str(fixture_path(session["file"])),
                   "message": query["message"], "max_results": 10}
        if "context_from" in session:  # a session without compaction: pretend one
            request["context_ids"] = [f"v1:{n}" for n in range(session["context_from"], 1020)]
        ids = [e["entry_id"] for e in retrieve(request, settings=settings,
                                              reader=reader)["evidence"]]
        found.append(ids.index(query["expected"]) + 1 if query["expected"] in ids else None)
    return found


def test_recall_at_5_and_mrr(ranks):
    recall = sum(1 for rank in ranks if rank is not None and rank <= 5) / len(ranks)
    mrr = sum(1 / rank for rank in ranks if rank is not None) / len(ranks)
    print(f"\ngolden set: {len(ranks)} queries, recall@5 {recall:.2f}, MRR {mrr:.2f}, "
          f"ranks {ranks}")
    assert recall >= RECALL_AT_5_MIN
    assert mrr >= MRR_MIN

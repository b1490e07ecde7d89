"""Every reason of a result is a fact of its row, on every path that gives reasons.

Automatic retrieval, history search in each scope (from Pi's branch, from the index's
leaf and from caller-given ``branch_ids``), checked against the index's own branch
and the full source text (``source``). Issue 19, item 8: history search gave every
candidate "active branch +15", also rows it reported ``on_branch: false``.
"""

from __future__ import annotations

import json
import re
import unicodedata
from datetime import datetime

import apsw
import pytest

from lookback.api import retrieve, search, source
from lookback.index.layout import project_dir
from lookback.index.store import open_reader
from lookback.index.tree import branch, leaf_of
from lookback.query.search.reader import IndexReader
from lookback.query.text.dates import time_spans
from lookback.settings import load_settings
from tests.support import fixture_path, index_paths

BEFORE = fixture_path("before-compaction.jsonl")  # v1 ids, same project as LARGE
LARGE = fixture_path("large-session.jsonl")
V3 = fixture_path("pi-session-v3.jsonl")  # a sibling branch beside the leaf's
QUESTIONS = {
    BEFORE: ["`AgentSession` thinking levels", "why does unsubscribe clear the event listeners?",
             "interactive-mode.ts showSelector", "theme colors", "mockSessionManager testable",
             "what did we do to the theme colors yesterday?",
             "`AgentSession` tests la settimana scorsa"],
    # Leaf's branch: 00000002, 07, 08; the sibling branch holds 03 to 06.
    V3: ["OracleProvider implementation", "alternative SQL implementation MERGE",
         "`LastExportUtc` export", "tests passed", "the alternative SQL in August 2026"],
}
#: The message time of every request: the day after BEFORE's and V3's first entries.
ASKED = {BEFORE: "2025-12-10T09:00:00Z", V3: "2026-08-25T09:00:00Z"}
REASON = re.compile(r"^(?P<label>.*) (?P<sign>[+-])(?P<points>[0-9.]+)$")


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    home = tmp_path_factory.mktemp("reasons")
    index_paths(home, BEFORE, LARGE, V3)
    settings = load_settings({"home": str(home)}, environ={})
    reader = IndexReader(home)

    def call(function, request):
        return function(request, settings=settings, reader=reader)

    yield home, call
    reader.close()


def branch_of(home, session_file) -> tuple[str, str, set[str]]:
    """The project, session id and entry ids on the leaf's branch, from the index itself."""
    header = json.loads(session_file.read_text().split("\n", 1)[0])
    db = open_reader(project_dir(home, header["cwd"]).index_path())
    ids = {e.entry_id for e in branch(db, header["id"], leaf_of(db, header["id"]))}
    db.close()
    return header["cwd"], header["id"], ids


def folded(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


_PORTER = apsw.Connection(":memory:").fts5_tokenizer(
    "porter", ["unicode61", "remove_diacritics", "2", "tokenchars", "_"])


def stems(words: list[str]) -> list[str]:
    return ["".join(_PORTER(word.encode(), apsw.FTS5_TOKENIZE_QUERY, None,
                            include_offsets=False, include_colocated=False)) or word
            for word in words]


def holds(text: str, term: str) -> bool:
    """The term's words, in order, as whole words of ``text`` (case and accents folded),
    each as written or in another form (the same Porter stem), as FTS5's phrase match
    sees them."""
    words, wanted = re.findall(r"\w+", folded(text)), re.findall(r"\w+", folded(term))
    if any(words[i:i + len(wanted)] == wanted for i in range(len(words))):
        return True
    words, wanted = stems(words), stems(wanted)
    return any(words[i:i + len(wanted)] == wanted for i in range(len(words)))


def parsed(reasons: list[str]) -> list[tuple[str, float]]:
    parts = []
    for reason in reasons:
        found = REASON.match(reason)
        assert found, reason
        points = float(found["points"]) * (1 if found["sign"] == "+" else -1)
        parts.append((found["label"], points))
    return parts


def assert_reasons_true(item: dict, text: str, on_branch: bool, query: dict,
                        question: str, asked: str) -> None:
    """Each reason of ``item`` follows from its row: text, role, branch, date."""
    parts = parsed(item["reasons"])
    labels = [label for label, _ in parts]
    spans = time_spans(question, datetime.fromisoformat(asked))
    stamp = datetime.fromisoformat(item["timestamp"]).timestamp() * 1000
    dated = [label for label in labels if label.startswith("dated ")]
    assert ("recency" in labels) <= (not spans)  # a named time takes recency's place
    inside = {s.text for s in spans if s.offset_ms(stamp) == 0}
    near = {s.text for s in spans if s.offset_ms(stamp) != 0}
    for label in dated:
        words = re.search(r"`(.*)`", label)[1]
        assert words in (inside if label.startswith("dated in ") else near), (label, stamp)
    if inside:
        assert dated, (item["entry_id"], labels)
    assert item["score"] == pytest.approx(sum(points for _, points in parts), abs=0.011)
    assert ("active branch" in labels) == on_branch, (item["entry_id"], labels)
    for label, _ in parts:
        quoted = re.search(r"`(.*)`", label)
        if label.startswith("exact identifier") or label.startswith("exact phrase"):
            assert quoted[1] in text, label  # as written, case-sensitive
        elif label.startswith("term match") or label.startswith("topic"):
            assert holds(text, quoted[1]), label
        elif label.endswith(" authority"):
            assert label == f"{item['role']} authority"
        elif re.fullmatch(r"\d more matched terms?", label):
            terms = {t for kind in query.values() for t in kind}
            present = {t for t in terms if holds(text, t)}
            assert len(present) >= int(label[0]) + 1, (label, present)
    assert item["tier"] == {"exact identifier": "identifier", "exact phrase": "phrase"}.get(
        labels[0].rsplit(" `", 1)[0], "other")


def full_text(home, call, project: str, item: dict) -> str:
    """The row's whole indexed text; the ``source`` path must show the same row."""
    found = call(source, {"project": project, "session_id": item["session_id"],
                          "entry_id": item["entry_id"]})
    assert found["status"] == "ok"
    entry = found["entry"]
    assert (entry["session_id"], entry["entry_id"], entry["role"], entry["timestamp"]) == (
        item["session_id"], item["entry_id"], item["role"], item["timestamp"])
    db = open_reader(project_dir(home, project).index_path())
    text = next(db.execute("SELECT text FROM entries WHERE session_id = ? AND entry_id = ?",
                           (item["session_id"], item["entry_id"])))[0]
    db.close()
    shown = entry["excerpt"]  # the first 20,000 characters
    assert text.startswith(shown.removesuffix("…"))
    return text


@pytest.mark.parametrize("session_file", [BEFORE, V3])
def test_automatic_retrieval_reasons_are_facts_of_the_row(api, session_file):
    home, call = api
    project, session_id, on_branch = branch_of(home, session_file)
    checked = dated = 0
    for question in QUESTIONS[session_file]:
        answer = call(retrieve, {"session_file": str(session_file), "message": question,
                                 "context_ids": [], "max_results": 20,
                                 "message_time": ASKED[session_file]})
        for item in answer["evidence"]:
            assert item["session_id"] == session_id and item["entry_id"] in on_branch
            text = full_text(home, call, project, item)
            assert_reasons_true(item, text, True, answer["query"], question,
                                ASKED[session_file])
            checked += 1
            dated += any(reason.startswith("dated ") for reason in item["reasons"])
    assert checked >= 3 and dated > 0


@pytest.mark.parametrize("scope", ["branch", "session", "project"])
@pytest.mark.parametrize("given", [False, True], ids=["index-leaf", "branch_ids"])
@pytest.mark.parametrize("session_file", [BEFORE, V3])
def test_history_search_reasons_and_on_branch_agree_with_the_row(api, session_file, scope,
                                                                 given):
    home, call = api
    project, session_id, on_branch = branch_of(home, session_file)
    seen = {True: 0, False: 0}
    for question in QUESTIONS[session_file]:
        request = {"session_file": str(session_file), "text": question, "scope": scope,
                   "max_results": 40, "message_time": ASKED[session_file]}
        if given:
            request["branch_ids"] = sorted(on_branch)
        answer = call(search, request)
        for item in answer["results"]:
            truth = item["session_id"] == session_id and item["entry_id"] in on_branch
            assert item["on_branch"] is truth, (item["session_id"], item["entry_id"])
            text = full_text(home, call, project, item)
            assert_reasons_true(item, text, truth, answer["query"], question,
                                ASKED[session_file])
            seen[truth] += 1
    assert seen[True] > 0
    # Wider scopes reach rows off the branch (V3's sibling branch, LARGE's session), and
    # say so; BEFORE is linear, so its session scope is its branch.
    if scope == "project" or (scope == "session" and session_file == V3):
        assert seen[False] > 0, scope


def test_a_row_of_another_session_with_the_same_entry_id_is_not_on_the_branch(api):
    # v1 ids are line numbers: large-session's v1:440 shares its id with an entry on
    # before-compaction's branch, but it is not on that branch.
    home, call = api
    _, session_id, on_branch = branch_of(home, BEFORE)
    answer = call(search, {"session_file": str(BEFORE), "text": "#b5bd68 green diff",
                           "scope": "project", "max_results": 20})
    other = [r for r in answer["results"] if r["session_id"] != session_id]
    assert any(r["entry_id"] in on_branch for r in other)
    assert all(r["on_branch"] is False for r in other)
    assert all(not any(reason.startswith("active branch") for reason in r["reasons"])
               for r in other)

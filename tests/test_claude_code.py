"""Claude Code sessions, on the fixtures recorded with the real CLI (tests/fixtures/claude-code).

The main fixture session, turn by turn (see record.py there): a prompt naming ORCHID_LATCH_9031
answered after thinking (THOUGHT_SECRET_77), a Bash call printing BASH_OUT_5521, an Agent call
(its sub-agent transcript in its own file), a manual `/compact`, a prompt naming
LIVE_MARKER_2718, a turn reporting high usage, then a prompt naming PRESERVED_PROMPT_6021 that
auto-compaction preserved. A second session of the same project names ORCHID_LATCH_9031 too.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookback.api import retrieve
from lookback.index.tree import branch, context_entries
from lookback.ingest.claude_code import FORMAT
from lookback.ingest.pipeline import peek_header
from lookback.ingest.reader import (
    HeaderPending,
    NotASession,
)
from lookback.query.search.reader import IndexReader
from lookback.settings import load_settings
from tests.support import entries, fixture_path, index_paths, read_all
from tests.test_fuzz_ingest import assert_every_good_line_indexed, bad_lines, not_good_id, values

PROJECT_DIR = Path(__file__).parent / "fixtures" / "claude-code" / "projects" / \
    "-tmp-lookback-claude-fixture-project"
CWD = "/tmp/lookback-claude-fixture/project"
MAIN_ID = "d743d490-b11d-4f39-93df-9aded12dca89"
OTHER_ID = "253f764c-a5c2-421a-9ea9-949fd02f84bc"
AGENT_ID = "ab6f0b8cf0d71e805"
MAIN = PROJECT_DIR / f"{MAIN_ID}.jsonl"
AGENT = PROJECT_DIR / MAIN_ID / "subagents" / f"agent-{AGENT_ID}.jsonl"


def lines_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def by_text(path: Path, needle: str, kind: str = "user") -> dict:
    """The (first) tree entry of ``kind`` whose message mentions ``needle``."""
    return next(o for o in lines_of(path) if o.get("type") == kind and o.get("uuid")
                and needle in json.dumps(o.get("message")))


def boundaries(path: Path) -> list[dict]:
    return [o for o in lines_of(path) if o.get("subtype") == "compact_boundary"]


# -- reading ------------------------------------------------------------------------------------


def test_identity_from_the_first_entries_not_the_folder_name():
    assert peek_header(MAIN) == (MAIN_ID, CWD)
    events, state, _ = read_all(MAIN)
    assert events[0].kind == "session"
    assert events[0].payload["format"] == FORMAT and events[0].payload["cwd"] == CWD
    assert state.format == FORMAT and state.session_id == MAIN_ID


def test_every_tree_entry_is_read_and_every_bookkeeping_line_skipped():
    rows = lines_of(MAIN)
    tree = [o for o in rows if o.get("uuid")]
    events, _, stats = read_all(MAIN)
    assert list(entries(events)) == [o["uuid"] for o in tree]
    assert stats.bookkeeping == len(rows) - len(tree) > 0
    assert stats.unknown_types == 0 and stats.malformed == 0


def test_text_tool_calls_and_results_are_evidence_thinking_never():
    found = entries(read_all(MAIN)[0])
    prompt = found[by_text(MAIN, "ORCHID_LATCH_9031")["uuid"]]
    assert prompt["eligible"] and prompt["role"] == "user"
    call = found[by_text(MAIN, "BASH_OUT_5521", "assistant")["uuid"]]
    assert call["eligible"] and call["text"].startswith("Bash ") and "BASH_OUT_5521" in call["text"]
    result = next(e for e in found.values() if e["role"] == "toolResult"
                  and "BASH_OUT_5521" in e["text"])
    assert result["eligible"]
    thinking = found[by_text(MAIN, "THOUGHT_SECRET_77", "assistant")["uuid"]]
    assert thinking["text"] == "" and not thinking["eligible"]
    assert not any("THOUGHT_SECRET_77" in e["text"] for e in found.values())


def test_attachments_summaries_and_command_records_are_never_evidence():
    found = entries(read_all(MAIN)[0])
    rows = {o["uuid"]: o for o in lines_of(MAIN) if o.get("uuid")}
    for entry_id, entry in found.items():
        row = rows[entry_id]
        if row["type"] == "attachment":  # system prompts, reminders, hook context
            assert entry["text"] == "" and not entry["eligible"]
        if row.get("isCompactSummary") or row.get("isMeta"):
            assert entry["text"] == "" and not entry["eligible"]
        if "<command-name>/compact" in json.dumps(row.get("message")):
            assert entry["text"] == "" and not entry["eligible"]
    snapshot = next(o for o in lines_of(MAIN) if o.get("type") == "api-request-blob")
    assert snapshot.get("uuid") is None  # copies of sent prompts: outside the tree, skipped


def test_boundaries_continue_the_branch_through_their_logical_parent():
    found = entries(read_all(MAIN)[0])
    manual, auto = boundaries(MAIN)
    for boundary in (manual, auto):
        record = found[boundary["uuid"]]
        assert boundary["parentUuid"] is None
        assert record["type"] == "compaction"
        assert record["parent_id"] == boundary["logicalParentUuid"]
        head = boundary["compactMetadata"]["preservedSegment"]["headUuid"]
        assert record["first_kept_id"] == head


def test_a_new_session_with_only_queue_lines_is_pending_not_foreign(tmp_path):
    copy = tmp_path / MAIN.name
    lines = MAIN.read_bytes().splitlines(keepends=True)
    copy.write_bytes(b"".join(lines[:2]))  # queue-operation lines, no entry yet
    assert not any(json.loads(line).get("uuid") for line in lines[:2])
    with pytest.raises(HeaderPending):
        peek_header(copy)
    copy.write_bytes(b'{"hello": 1}\n')
    with pytest.raises(NotASession) as raised:
        peek_header(copy)
    assert not isinstance(raised.value, HeaderPending)


def test_a_subagent_transcript_is_its_own_session():
    session_id, cwd = peek_header(AGENT)
    assert (session_id, cwd) == (f"{MAIN_ID}-agent-{AGENT_ID}", CWD)
    events, _, _ = read_all(AGENT)
    assert events[0].payload["parent_session"] == MAIN_ID
    assert {e.session_id for e in events} == {session_id}


def test_appends_are_read_incrementally_and_a_rewrite_resets(tmp_path):
    data = MAIN.read_bytes()
    cut = data.index(b"\n", len(data) // 2) + 1
    copy = tmp_path / MAIN.name
    copy.write_bytes(data[:cut] + data[cut:cut + 40])  # plus half a line, not yet complete
    first, state, _ = read_all(copy)
    copy.write_bytes(data)
    second, state, _ = read_all(copy, state)
    whole = entries(read_all(MAIN)[0])
    assert {**entries(first), **entries(second)} == whole
    assert not set(entries(first)) & set(entries(second))
    assert read_all(copy, state)[0] == []  # nothing new
    copy.write_bytes(data[:cut])  # shrank: a rewrite
    again, _, stats = read_all(copy, state)
    assert again[0].kind == "reset" and stats.rewrites == 1


def test_unknown_types_are_counted_kept_as_links_and_never_evidence(tmp_path):
    rows = lines_of(MAIN)
    at = next(i for i, o in enumerate(rows) if o.get("type") == "assistant")
    parent = rows[at]["parentUuid"]
    novel = {"type": "future-kind", "uuid": "novel-0001", "parentUuid": parent,
             "sessionId": MAIN_ID, "cwd": CWD, "message": {"role": "user", "content": "NOVEL"}}
    loose = {"type": "future-bookkeeping", "sessionId": MAIN_ID, "content": "NOVEL"}
    rows[at] = {**rows[at], "parentUuid": "novel-0001"}
    copy = tmp_path / MAIN.name
    copy.write_text("\n".join(json.dumps(r) for r in [*rows[:at], novel, loose, *rows[at:]])
                    + "\n")
    events, _, stats = read_all(copy)
    found = entries(events)
    assert stats.unknown_types == 2 and stats.bookkeeping == read_all(MAIN)[2].bookkeeping
    assert found["novel-0001"]["text"] == "" and not found["novel-0001"]["eligible"]
    assert found[rows[at]["uuid"]]["parent_id"] == "novel-0001"


def test_sidechain_lines_inside_a_main_file_are_kept_apart(tmp_path):
    agent_rows = lines_of(AGENT)
    copy = tmp_path / MAIN.name
    inside = [{**o, "sessionId": MAIN_ID} for o in agent_rows if o.get("uuid")]
    copy.write_bytes(MAIN.read_bytes() + "".join(json.dumps(o) + "\n" for o in inside).encode())
    events, _, stats = read_all(copy)
    assert stats.sidechain == len(inside)
    assert not set(entries(events)) & {o["uuid"] for o in inside}


# -- the branch, the context, retrieval ---------------------------------------------------------


@pytest.fixture
def indexed(home):
    report = index_paths(home, PROJECT_DIR)
    assert report.errors == [] and report.not_sessions == []
    assert report.sessions == {MAIN_ID, OTHER_ID, f"{MAIN_ID}-agent-{AGENT_ID}"}
    return home


@pytest.fixture
def ask(indexed):
    settings = load_settings({"home": str(indexed)}, environ={})
    reader = IndexReader(indexed)

    def call(message: str, **fields):
        request = {"session_file": str(MAIN), "message": message, **fields}
        return retrieve(request, settings=settings, reader=reader)

    return call


def test_context_is_the_latest_boundary_to_the_leaf_plus_what_it_preserved(indexed):
    reader = IndexReader(indexed)
    with reader.session(session_file=str(MAIN)) as view:
        connection = view.connection
        leaf = connection.execute("SELECT leaf_id FROM sessions WHERE session_id = ?",
                                  (MAIN_ID,)).fetchone()[0]
        path = branch(connection, MAIN_ID, leaf)
        in_context = [e.entry_id for e in context_entries(path)]
    tree = [o for o in lines_of(MAIN) if o.get("uuid")]
    assert path[0].entry_id == tree[0]["uuid"]  # the walk crossed both boundaries
    assert [e.entry_id for e in path] == [o["uuid"] for o in tree]  # one linear branch here
    auto = boundaries(MAIN)[-1]
    preserved = auto["compactMetadata"]["preservedMessages"]["allUuids"]
    assert set(preserved) <= set(in_context)
    after = [o["uuid"] for o in tree[tree.index(auto):]]
    assert set(after) <= set(in_context)
    removed = {o["uuid"] for o in tree} - set(in_context)
    assert by_text(MAIN, "ORCHID_LATCH_9031")["uuid"] in removed
    assert by_text(MAIN, "LIVE_MARKER_2718")["uuid"] in removed  # the 2nd compaction took it


def test_an_identifier_removed_by_compaction_comes_back_as_evidence(ask):
    response = ask("Which deploy key did we pick, ORCHID_LATCH_9031?")
    assert response["status"] == "ok"
    ids = [item["entry_id"] for item in response["evidence"]]
    assert ids[0] == by_text(MAIN, "ORCHID_LATCH_9031")["uuid"]
    assert {item["session_id"] for item in response["evidence"]} == {MAIN_ID}  # not the other
    assert "ORCHID_LATCH_9031" in response["evidence"][0]["message"]["content"][0]["text"]


def test_tool_calls_and_results_come_back_thinking_and_subagent_steps_never(ask):
    bash = ask("what did `BASH_OUT_5521` print?")
    roles = {item["role"] for item in bash["evidence"]}
    assert {"assistant", "toolResult"} <= roles
    assert ask("THOUGHT_SECRET_77")["evidence"] == []
    agent = ask("what about FALCON_SUB_3390?")
    assert agent["evidence"]  # the Agent call on the main branch
    assert all(item["session_id"] == MAIN_ID for item in agent["evidence"])


def test_entries_in_context_are_never_evidence(ask):
    assert ask("what is PRESERVED_PROMPT_6021 about?")["evidence"] == []  # preserved
    live = ask("remind me of LIVE_MARKER_2718")  # removed by the second compaction
    assert [i["entry_id"] for i in live["evidence"]] == [by_text(MAIN, "LIVE_MARKER_2718")["uuid"]]


def test_an_old_compaction_summary_never_comes_back(ask):
    summaries = {o["uuid"] for o in lines_of(MAIN) if o.get("isCompactSummary")}
    response = ask("Pick up the last task: which identifiers are kept in this summary?")
    assert response["status"] == "ok"
    assert not summaries & {item["entry_id"] for item in response["evidence"]}


def test_a_folder_with_pi_and_claude_code_sessions_indexes_both(home, tmp_path):
    mixed = tmp_path / "mixed"
    shutil.copytree(PROJECT_DIR, mixed / "claude")
    (mixed / "pi").mkdir()
    shutil.copy(fixture_path("pi-session-v3.jsonl"), mixed / "pi")
    report = index_paths(home, mixed)
    assert report.errors == [] and report.not_sessions == []
    assert len(report.sessions) == 4 and CWD in report.projects and len(report.projects) == 2


# -- any bad line -------------------------------------------------------------------------------

claude_types = st.one_of(st.sampled_from(["user", "assistant", "attachment", "system",
                                          "queue-operation", "api-request-blob"]), values)


@st.composite
def bad_claude_lines(draw) -> str:
    entry = {"type": draw(claude_types), "uuid": draw(not_good_id),
             "parentUuid": draw(values), "sessionId": draw(st.one_of(st.just(MAIN_ID), values)),
             "cwd": draw(st.one_of(st.just(CWD), values))}
    entry["message"] = draw(st.one_of(values, st.fixed_dictionaries({
        "role": values, "content": st.one_of(values, st.lists(st.fixed_dictionaries(
            {"type": st.sampled_from(["text", "tool_use", "tool_result", "thinking"]),
             "text": values, "input": values, "name": values, "content": values}),
            max_size=3))})))
    for key in ("timestamp", "subtype", "logicalParentUuid", "compactMetadata", "isSidechain",
                "agentId", "isCompactSummary", "isMeta"):
        if draw(st.booleans()):
            entry[key] = draw(values)
    return json.dumps(entry, allow_nan=True)


def good_claude_line(number: int) -> str:
    return json.dumps({"type": "user", "uuid": f"good-{number}", "parentUuid": None,
                       "sessionId": MAIN_ID, "cwd": CWD, "timestamp": "2026-12-01T03:00:00.000Z",
                       "message": {"role": "user", "content": f"good line number {number}"}})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.booleans(), st.one_of(bad_claude_lines(), bad_lines)),
                min_size=1, max_size=12))
def test_good_claude_code_lines_beside_any_bad_lines_are_always_indexed(plan):
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        assert_every_good_line_indexed(folder / f"{MAIN_ID}.jsonl", folder / "home", CWD,
                                       [good_claude_line(-1)], {"good--1"}, plan,
                                       good_claude_line)

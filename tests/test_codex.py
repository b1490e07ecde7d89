"""Codex CLI rollouts, on the sessions recorded with the real Codex 0.171 (tests/fixtures/codex).

The main rollout, turn by turn (see the README there): T1 names parseConfigLegacy, T2 is the
DEC-TOML-7 decision, T3 runs `grep -n parseConfigLegacy src/config.py` as a tool call, T4 names
port 8417, T5 a rename, T6 the zebra-quartz marker; Codex auto-compacted before T7; T8 resumed.
The fork continues it; the mid-turn rollout compacted between a tool output and the next
request; the hooks rollout holds hook contexts (``hooks.additional_context``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import apsw
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lookback.api import retrieve
from lookback.index.layout import project_dir
from lookback.index.tree import branch, context_entries, leaf_of
from lookback.ingest import codex
from lookback.ingest.pipeline import peek_header
from lookback.ingest.scan import default_codex_sessions_dir, default_session_roots
from lookback.query.search.reader import IndexReader
from lookback.settings import load_settings
from tests.support import entries, index_paths, read_all
from tests.test_fuzz_ingest import assert_every_good_line_indexed, bad_lines

FIXTURES = Path(__file__).parent / "fixtures" / "codex"
SESSIONS = FIXTURES / "sessions"
DAY = SESSIONS / "2026" / "12" / "01"
CWD = "/tmp/codex-lab/proj"
MAIN_ID = "01a232ea-c266-7500-8687-8d8570c1844f"
FORK_ID = "01a232ea-ca1b-7e50-b375-326251aa3e2a"
MIDTURN_ID = "01a232ea-cc3c-7742-b3be-1d954b811fde"
HOOKS_ID = "01a232ea-d1f6-75d1-8ecb-c01654310221"
MAIN = DAY / f"rollout-2026-12-01T18-42-55-{MAIN_ID}.jsonl"
FORK = DAY / f"rollout-2026-12-01T18-42-57-{FORK_ID}.jsonl"
MIDTURN = DAY / f"rollout-2026-12-01T18-42-58-{MIDTURN_ID}.jsonl"
HOOKS = DAY / f"rollout-2026-12-01T18-42-59-{HOOKS_ID}.jsonl"


def lines_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def item(path: Path, needle: str, role: str | None = "user", kind: str = "message") -> dict:
    """The payload of the (first) response item of ``kind``/``role`` mentioning ``needle``."""
    return next(o["payload"] for o in lines_of(path) if o["type"] == "response_item"
                and o["payload"].get("type") == kind
                and (role is None or o["payload"].get("role") == role)
                and needle in json.dumps(o["payload"]))


def requests(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines()]


def turn_requests(name: str, thread: str) -> list[dict]:
    return [r for r in requests(name) if r["turn_metadata"].get("thread_id") == thread
            and r["turn_metadata"].get("request_kind") == "turn"]


# -- reading ------------------------------------------------------------------------------------


def test_identity_is_the_session_meta_thread_and_cwd():
    assert peek_header(MAIN) == (MAIN_ID, CWD)
    events, state, _ = read_all(MAIN)
    assert state.format == codex.FORMAT and state.session_id == MAIN_ID
    assert events[0].kind == "session"
    assert events[0].payload["format"] == codex.FORMAT and events[0].payload["cwd"] == CWD


def test_every_response_item_is_an_entry_and_bookkeeping_is_counted():
    lines = lines_of(MAIN)
    _, _, stats = read_all(MAIN)
    items = [o for o in lines if o["type"] in ("response_item", "compacted")]
    assert stats.entries == len(items)
    assert stats.bookkeeping == sum(o["type"] in codex.BOOKKEEPING_TYPES for o in lines) > 0
    assert stats.unknown_types == stats.malformed == 0


def test_a_rollout_is_linear_each_entry_chained_to_the_previous():
    events, _, _ = read_all(MAIN)
    chain = [e.payload["entry"] for e in events if e.kind == "entry"]
    assert chain[0]["parent_id"] is None
    assert all(b["parent_id"] == a["id"] for a, b in zip(chain, chain[1:], strict=False))


def test_the_users_words_assistant_text_and_tool_calls_are_evidence():
    found = entries(read_all(MAIN)[0])
    decision = item(MAIN, "DEC-TOML-7")
    assert found[decision["id"]]["eligible"] and found[decision["id"]]["role"] == "user"
    reply = item(MAIN, "Fake reply 2", "assistant")
    assert "DEC-TOML-7" in found[reply["id"]]["text"]
    call = item(MAIN, "grep -n", None, "function_call")
    assert found[call["id"]]["text"].startswith("exec_command ")
    assert "grep -n parseConfigLegacy src/config.py" in found[call["id"]]["text"]
    output = item(MAIN, "def parseConfigLegacy", None, "function_call_output")
    assert found[output["id"]]["role"] == "toolResult"
    assert "1:def parseConfigLegacy(path):" in found[output["id"]]["text"]


def test_instructions_reasoning_and_the_summary_are_never_evidence():
    found = entries(read_all(MAIN)[0])
    never = [item(MAIN, "AGENTS.md instructions"), item(MAIN, "skills_instructions", "developer"),
             item(MAIN, "fake reasoning summary 1", None, "reasoning"),
             item(MAIN, "FAKE-SUMMARY-8", "assistant")]
    for payload in never:
        assert found[payload["id"]]["text"] == "" and not found[payload["id"]]["eligible"]


def test_hook_context_is_never_evidence():
    found = entries(read_all(HOOKS)[0])
    hooked = [o["payload"] for o in lines_of(HOOKS) if o["type"] == "response_item"
              and "hooks.additional_context" in json.dumps(o["payload"])]
    assert len(hooked) >= 5
    assert all(found[p["id"]]["text"] == "" for p in hooked)
    assert not any("LOOKBACK-CTX" in e["text"] for e in found.values())


def test_a_compaction_keeps_exactly_its_replacement_history():
    found = entries(read_all(MAIN)[0])
    compacted = next(o for o in lines_of(MAIN) if o["type"] == "compacted")
    [entry] = [e for e in found.values() if e["type"] == "compaction"]
    assert entry["kept_ids"] == [i["id"] for i in compacted["payload"]["replacement_history"]]
    assert item(MAIN, "DEC-TOML-7")["id"] in entry["kept_ids"]


def test_appends_are_read_incrementally_like_a_resume(tmp_path):
    data = MAIN.read_bytes()
    cut = data.index(b"\n", len(data) // 2) + 1
    path = tmp_path / MAIN.name
    path.write_bytes(data[:cut])
    first, state, _ = read_all(path)
    with path.open("ab") as handle:
        handle.write(data[cut:])
    more, _, stats = read_all(path, state)
    assert [e.kind for e in more if e.kind != "entry"] == []  # no reset, no second header
    whole = entries(read_all(MAIN)[0])
    assert {**entries(first), **entries(more)} == whole
    assert stats.rewrites == 0


def test_a_fork_inherits_its_parents_file_up_to_history_base():
    events, state, stats = read_all(FORK)
    assert stats.warnings == []
    header = events[0].payload
    assert header["parent_session"] == MAIN_ID and state.session_id == FORK_ID
    fork = entries(events)
    parent = entries(read_all(MAIN)[0])
    assert set(parent) < set(fork)  # history_base covers the whole parent file here
    assert all(fork[i]["text"] == parent[i]["text"] for i in parent)
    own = item(FORK, "F1: In this fork")
    assert fork[own["id"]]["eligible"]
    seqs = [e.payload["entry"]["seq"] for e in events if e.kind == "entry"]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_a_fork_whose_parent_is_gone_keeps_its_own_lines(tmp_path):
    alone = tmp_path / "sessions" / "2026" / "12" / "01" / FORK.name
    alone.parent.mkdir(parents=True)
    shutil.copy(FORK, alone)
    events, _, stats = read_all(alone)
    assert item(FORK, "F1: In this fork")["id"] in entries(events)
    assert item(MAIN, "DEC-TOML-7")["id"] not in entries(events)
    assert len(stats.warnings) == 1 and MAIN_ID in stats.warnings[0]


@pytest.mark.parametrize("thread", ["?", "[0-9a-f]", "844f", MAIN_ID[:-1] + "?"])
def test_a_forks_parent_is_found_by_its_exact_thread_id(tmp_path, thread):
    """A fork whose ``history_base`` names a thread id with glob characters inherits no
    other rollout's lines (``?`` matched any rollout under the sessions folder, and the
    tail of an id the rollout ending in it: another session's text read as this fork's
    history); its own lines are kept, with a warning."""
    day = tmp_path / "sessions" / "2026" / "12" / "01"
    day.mkdir(parents=True)
    shutil.copy(MAIN, day / MAIN.name)
    meta, rest = FORK.read_text().split("\n", 1)
    header = json.loads(meta)
    header["payload"]["history_base"]["thread_id"] = thread
    fork = day / FORK.name
    fork.write_text(json.dumps(header) + "\n" + rest)
    events, _, stats = read_all(fork)
    assert item(FORK, "F1: In this fork")["id"] in entries(events)
    assert item(MAIN, "DEC-TOML-7")["id"] not in entries(events)
    assert len(stats.warnings) == 1 and "is not under" in stats.warnings[0]


def test_a_fork_never_inherits_another_projects_rollout(tmp_path):
    """Authorization is decided on what is read (issue 27, item 2): a fork whose
    ``history_base`` names a rollout of another cwd (another project, say a file its
    writer linked in beside it) inherits none of that project's text; its own lines stay."""
    day = tmp_path / "sessions" / "2026" / "12" / "01"
    day.mkdir(parents=True)
    meta, rest = MAIN.read_text().split("\n", 1)
    other = json.loads(meta)
    other["payload"]["cwd"] = "/tmp/codex-lab/another-project"
    (day / MAIN.name).write_text(json.dumps(other) + "\n" + rest)
    shutil.copy(FORK, day / FORK.name)
    events, _, stats = read_all(day / FORK.name)
    assert item(FORK, "F1: In this fork")["id"] in entries(events)
    assert item(MAIN, "DEC-TOML-7")["id"] not in entries(events)
    assert len(stats.warnings) == 1 and "another project" in stats.warnings[0]


def test_a_fork_outside_a_sessions_folder_looks_for_its_parent_beside_it_only():
    """A fork copied to ``/tmp/x/y/`` (no ``sessions`` folder, no date folders): its
    parent was looked for under the folder three levels up, ``/``: the walk went through
    the whole disk (into /proc, whose errors failed the file, or on to this repository's
    fixtures, read as its history). Now only beside it; its own lines are kept."""
    with tempfile.TemporaryDirectory(dir="/tmp") as top:
        fork = Path(top) / "copies" / FORK.name
        fork.parent.mkdir()
        shutil.copy(FORK, fork)
        events, _, stats = read_all(fork)
        assert item(FORK, "F1: In this fork")["id"] in entries(events)
        assert item(MAIN, "DEC-TOML-7")["id"] not in entries(events)
        assert len(stats.warnings) == 1 and "is not under" in stats.warnings[0]
        assert codex.sessions_root_of(fork) == fork.parent
    dated = Path("/x/sessions-copy/2026/12/01") / FORK.name
    assert codex.sessions_root_of(dated) == Path("/x/sessions-copy")


def test_codex_home_sessions_is_read_by_default(tmp_path):
    codex_home = tmp_path / "codex-home"
    environ = {"HOME": str(tmp_path), "CODEX_HOME": str(codex_home)}
    assert default_codex_sessions_dir(environ=environ) == codex_home / "sessions"
    assert codex_home / "sessions" not in default_session_roots(environ=environ)  # not yet
    shutil.copytree(SESSIONS, codex_home / "sessions")
    assert codex_home / "sessions" in default_session_roots(environ=environ)
    assert codex_home / "sessions" not in default_session_roots(codex=False, environ=environ)
    assert default_codex_sessions_dir(environ={"HOME": str(tmp_path)}) == \
        Path("~/.codex/sessions").expanduser()


# -- the context, retrieval ---------------------------------------------------------------------


@pytest.fixture
def indexed(home):
    report = index_paths(home, SESSIONS)
    assert report.errors == [] and report.not_sessions == []
    assert report.sessions == {MAIN_ID, FORK_ID, MIDTURN_ID, HOOKS_ID}
    assert report.projects == [CWD] or set(report.projects) == {CWD}
    return home


def context_and_removed(home: Path, session_id: str, path: Path) -> tuple[set[str], set[str]]:
    reader = IndexReader(home)
    with reader.session(session_file=str(path)) as view:
        walk = branch(view.connection, session_id, leaf_of(view.connection, session_id))
        in_context = {e.entry_id for e in context_entries(walk)}
    return in_context, {e.entry_id for e in walk} - in_context


@pytest.mark.parametrize(("path", "thread", "log"), [
    (MAIN, MAIN_ID, "main-requests.jsonl"), (MIDTURN, MIDTURN_ID, "midturn-requests.jsonl")])
def test_the_context_is_what_codex_sent_after_the_compaction(indexed, path, thread, log):
    in_context, removed = context_and_removed(indexed, thread, path)
    last = turn_requests(log, thread)[-1]["body"]["input"]
    sent = {i["id"] for i in last if i.get("id")}
    file_ids = set(entries(read_all(path)[0]))
    # every item of the last request that the file holds is in context, none is retrievable
    assert sent & file_ids and sent & file_ids <= in_context
    assert not removed & sent
    # and what the index keeps in context beyond it is that request's own answer
    answered = [o["payload"]["id"] for o in lines_of(path)[-12:] if o["type"] == "response_item"]
    assert in_context - sent - {e for e in in_context if e.startswith("compacted:")} \
        <= set(answered)


def test_the_removed_turns_come_back_and_the_live_ones_never(indexed):
    settings = load_settings({"home": str(indexed)}, environ={})
    reader = IndexReader(indexed)

    def ask(message: str, session: Path = MAIN):
        return retrieve({"session_file": str(session), "message": message},
                        settings=settings, reader=reader)

    decision = ask("What did we decide in DEC-TOML-7?")
    ids = [i["entry_id"] for i in decision["evidence"]]
    assert item(MAIN, "Fake reply 2", "assistant")["id"] in ids  # dropped by the compaction
    assert item(MAIN, "DEC-TOML-7")["id"] not in ids  # the user's message is still in context
    grep = ask("where is parseConfigLegacy defined? grep -n")
    roles = {i["role"] for i in grep["evidence"]}
    assert {"assistant", "toolResult"} <= roles
    assert ask("**Thinking** reasoning")["evidence"] == []
    assert not {i["entry_id"] for i in ask("FAKE-SUMMARY-8 zebra-quartz")["evidence"]} & {
        item(MAIN, "FAKE-SUMMARY-8", "assistant")["id"]}
    reply = item(MAIN, "Fake reply 2", "assistant")["id"]
    quoted = retrieve({"session_file": str(MAIN), "message": "What did we decide in DEC-TOML-7?",
                       "quoted_ids": [reply]}, settings=settings, reader=reader)
    assert reply not in {i["entry_id"] for i in quoted["evidence"]}  # quoted before: never again
    forked = ask("What did we decide in DEC-TOML-7?", FORK)
    assert forked["status"] == "ok"
    assert {i["session_id"] for i in forked["evidence"]} == {FORK_ID}


def test_an_index_of_schema_2_gains_the_kept_ids_column(home, tmp_path):
    index_paths(home, MIDTURN)
    path = project_dir(home, CWD).index_path()
    connection = apsw.Connection(str(path))
    connection.execute("ALTER TABLE entries DROP COLUMN kept_ids")
    connection.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    connection.close()
    report = index_paths(home, MAIN)
    assert report.errors == []
    in_context, removed = context_and_removed(home, MAIN_ID, MAIN)
    assert item(MAIN, "Fake reply 2", "assistant")["id"] in removed


# -- any bad line -------------------------------------------------------------------------------

codex_types = st.sampled_from(["response_item", "compacted", "event_msg", "session_meta",
                               "turn_context", "nonsense"])
payload_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.sampled_from(
                                ["type", "role", "id", "content", "text", "name", "arguments",
                                 "output", "replacement_history", "metadata", "action"]),
                                inner, max_size=4)), max_leaves=12)


@st.composite
def bad_codex_lines(draw) -> str:
    return json.dumps({"type": draw(codex_types), "timestamp": draw(payload_values),
                       "payload": draw(payload_values), "metadata": draw(payload_values)})


def good_codex_line(number: int) -> str:
    return json.dumps({"timestamp": "2026-12-01T03:00:00.000Z", "type": "response_item",
                       "payload": {"type": "message", "role": "user", "id": f"good-{number}",
                                   "content": [{"type": "input_text",
                                                "text": f"good line number {number}"}]}})


META = json.dumps({"type": "session_meta", "payload": {"id": MAIN_ID, "cwd": CWD}})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.booleans(), st.one_of(bad_codex_lines(), bad_lines)),
                min_size=1, max_size=12))
# Found by this test: an unhashable item type once made the whole file unreadable.
@example([(True, json.dumps({"type": "response_item", "payload": {"type": []}}))])
def test_good_codex_lines_beside_any_bad_lines_are_always_indexed(plan):
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        assert_every_good_line_indexed(folder / f"rollout-x-{MAIN_ID}.jsonl", folder / "home",
                                       CWD, [META], set(), plan, good_codex_line)

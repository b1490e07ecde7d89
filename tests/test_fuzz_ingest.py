"""Fuzz the session parser and the index writer (issue 10, item 1).

Hypothesis writes session files whose good lines are interleaved with generated
bad ones: random JSON values of every type (lone surrogates, NaN, infinities,
integers past 64 bits, deep nesting, wrong types where ids and timestamps belong)
and raw bytes. Whatever it writes, no exception escapes the run, no error is
reported, and every good line is indexed. A second test hands random events
straight to the writer: the bad ones are set aside, the good ones all land.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lookback.index.project import ProjectWriter
from lookback.index.sink import EmbeddedSink
from lookback.ingest.events import Event
from lookback.ingest.pipeline import ingest_files
from tests.support import entry_ids

CWD = "/work/fuzz"
HEADER = json.dumps({"type": "session", "version": 3, "id": "fuzz", "cwd": CWD,
                     "timestamp": "2026-08-24T10:00:00.000Z"})

# Every code point, lone surrogates included (JSON escapes them as \udXXX).
any_text = st.text(st.characters(exclude_categories=()), max_size=20)
odd_numbers = st.one_of(
    st.integers(), st.integers(min_value=2**63, max_value=10**40), st.floats(),
    st.sampled_from([float("nan"), float("inf"), float("-inf"), 1e308, -1e29]))
scalars = st.one_of(st.none(), st.booleans(), odd_numbers, any_text)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(any_text, inner, max_size=4)), max_leaves=12)
not_good_id = values.filter(lambda v: not (isinstance(v, str) and v.startswith("good-")))


@st.composite
def bad_entries(draw) -> dict:
    entry = {"type": draw(st.one_of(st.sampled_from(
        ["message", "compaction", "custom_message", "branch_summary", "leaf", "session"]),
        values)), "id": draw(not_good_id), "parentId": draw(values)}
    entry["message"] = draw(st.one_of(values, st.fixed_dictionaries({
        "role": st.one_of(st.sampled_from(["user", "assistant", "bashExecution"]), values),
        "content": st.one_of(values, st.lists(st.fixed_dictionaries(
            {"type": st.sampled_from(["text", "toolCall"]), "text": values,
             "arguments": values, "name": values}), max_size=3)),
        "timestamp": st.one_of(odd_numbers, values)})))
    for key in ("timestamp", "summary", "firstKeptEntryId", "targetId", "firstKeptEntryIndex"):
        if draw(st.booleans()):
            entry[key] = draw(values)
    return entry


def deep_line(depth: int) -> str:
    return '{"type":"message","id":"deep","x":' + "[" * depth + "]" * depth + "}"


bad_lines = st.one_of(
    bad_entries().map(lambda e: json.dumps(e, allow_nan=True)),
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b" ").decode("latin-1")),
    st.integers(min_value=200, max_value=1200).map(deep_line),
    values.map(lambda v: json.dumps(v, allow_nan=True)),
)


def good_line(number: int) -> str:
    return json.dumps({"type": "message", "id": f"good-{number}", "parentId": None,
                       "timestamp": "2026-08-24T10:00:01.000Z",
                       "message": {"role": "user", "content": f"good line number {number}"}})


def assert_every_good_line_indexed(path: Path, home: Path, cwd: str, lines: list[str],
                                   good: set[str], plan: list[tuple[bool, str]],
                                   good_line: Callable[[int], str]) -> None:
    """Write `lines`, then for each (good first?, bad line) of `plan` the pair of
    ``good_line(number)`` and the bad line in that order, to the session file `path`; index it
    strictly into `home`: no error is reported, no event set aside, and every good id (`good`
    and each ``good-<number>``) is in project `cwd`'s index. Shared by the Pi, Claude Code and
    Codex fuzz tests."""
    lines, good = list(lines), set(good)
    for number, (good_first, bad) in enumerate(plan):
        pair = [good_line(number), bad]
        lines.extend(pair if good_first else pair[::-1])
        good.add(f"good-{number}")
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
    with EmbeddedSink(home) as sink:
        report = ingest_files([path], sink, strict=True)
    assert report.errors == [] and sink.failures == {}
    assert good <= entry_ids(home, cwd)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.booleans(), bad_lines), min_size=1, max_size=12))
def test_good_lines_beside_any_bad_lines_are_always_indexed(plan):
    with tempfile.TemporaryDirectory() as scratch:
        folder, home = Path(scratch) / "sessions", Path(scratch) / "home"
        folder.mkdir()
        assert_every_good_line_indexed(folder / "fuzz.jsonl", home, CWD, [HEADER], set(), plan,
                                       good_line)


entry_payloads = st.fixed_dictionaries({
    "id": st.one_of(any_text.filter(lambda t: not t.startswith("good-")), values),
    "seq": st.one_of(st.integers(), values), "parent_id": values, "type": values,
    "role": values, "timestamp": values, "ts_ms": st.one_of(odd_numbers, values),
    "text": st.one_of(any_text, values), "eligible": values, "first_kept_id": values})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["entry", "session", "leaf", "reset", "odd"]),
                          entry_payloads), min_size=1, max_size=8))
@example(plan=[(kind, {"id": "", "seq": 0, "parent_id": None, "type": None, "role": None,
                       "timestamp": None, "ts_ms": 0, "text": "\ud800", "eligible": None,
                       "first_kept_id": None}) for kind in ("session", "entry")])
def test_the_writer_sets_aside_any_event_it_cannot_store(plan):
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch)
        events, good = [], set()
        for number, (kind, payload) in enumerate(plan):
            events.append(Event("entry", "fuzz", CWD, {"entry": {
                "id": f"good-{number}", "seq": number, "text": f"good {number}",
                "eligible": True}}))
            good.add(f"good-{number}")
            body = {"entry": payload} if kind == "entry" else {
                "target_id": payload["id"], "file": payload["text"], "cwd": payload["type"],
                "version": payload["seq"], "started_at": payload["timestamp"]}
            events.append(Event(kind, "fuzz", CWD, body))
        set_aside: list[str] = []
        with ProjectWriter(home, CWD) as writer:
            applied = writer.write(events, on_set_aside=lambda e, error: set_aside.append(e.kind))
        assert applied + len(set_aside) == len(events)
        # a reset forgets the entries before it; the good entries after the last one stay
        last_reset = max((i for i, e in enumerate(events) if e.kind == "reset"), default=-1)
        kept = {e.payload["entry"]["id"] for e in events[last_reset + 1:]
                if e.kind == "entry" and str(e.payload["entry"].get("id")).startswith("good-")}
        assert kept <= entry_ids(home, CWD)

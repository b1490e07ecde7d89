"""The PreToolUse hook (lookback/action_hook.py) on the recorded Claude Code session: what it
reads of a call, which entries it counts as quoted since the last compaction, fail-open."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lookback import action_hook, hook_client
from lookback.query.context.evidence import envelope

FIXTURE = Path(__file__).parent / "fixtures" / "claude-code" / "projects" / \
    "-tmp-lookback-claude-fixture-project" / "d743d490-b11d-4f39-93df-9aded12dca89.jsonl"
HOOK = Path(action_hook.__file__)


def attachment(entry_id: str) -> str:
    """A PreToolUse context line as Claude Code persists it, quoting ``entry_id``."""
    text = envelope(session_id="s1", entry_id=entry_id, timestamp=None, role="user", score=1,
                    reasons=["exact identifier `a.py` +100"], quoted="about a.py")
    return json.dumps({"type": "attachment", "attachment": {
        "type": "hook_additional_context", "content": [text], "hookEvent": "PreToolUse"}})


def call(transcript: Path, **changes: object) -> bytes:
    hook_input = {"hook_event_name": "PreToolUse", "tool_name": "Edit",
                  "tool_input": {"file_path": "/p/a.py"}, "transcript_path": str(transcript),
                  "cwd": "/p", **changes}
    return json.dumps(hook_input).encode()


def test_only_contexts_after_the_last_compaction_count_as_quoted(tmp_path):
    lines = FIXTURE.read_text(encoding="utf-8").splitlines()
    last = max(i for i, line in enumerate(lines) if '"compact_boundary"' in line)
    transcript = tmp_path / "t.jsonl"
    transcript.write_text("\n".join([*lines[:last], attachment("before-it"), *lines[last:],
                                     attachment("after-it")]) + "\n", encoding="utf-8")
    assert action_hook.quoted_since_compaction(str(transcript), float("inf")) == {"after-it"}
    with pytest.raises(hook_client.HookSkipped):  # past its bytes: it cannot tell
        action_hook.quoted_since_compaction(str(transcript), float("inf"), max_bytes=1000)
    shutil.copy(FIXTURE, transcript)
    assert action_hook.quoted_since_compaction(str(transcript), float("inf")) == set()


def test_a_call_is_read_from_the_pretooluse_input(tmp_path):
    name, arguments, transcript, cwd = action_hook.call_of(json.loads(call(FIXTURE)))
    assert (name, arguments, transcript, cwd) == ("Edit", {"file_path": "/p/a.py"},
                                                  str(FIXTURE), "/p")
    for bad in ({"hook_event_name": "UserPromptSubmit"}, {"tool_input": "x"},
                {"transcript_path": "relative.jsonl"}):
        with pytest.raises(hook_client.HookSkipped):
            action_hook.call_of(json.loads(call(FIXTURE, **bad)))


@pytest.mark.parametrize("stdin", [b"", b"not json", b"[]", b'{"hook_event_name": "Stop"}'])
def test_anything_wrong_prints_nothing_and_exits_0(tmp_path, stdin):
    for given in (stdin, call(FIXTURE)):  # the second: a good call, but no reader listens
        done = subprocess.run([sys.executable, "-S", "-I", str(HOOK), "--agent", "claude-code",
                               "--home", str(tmp_path / "home"), "--timeout-ms", "500"],
                              input=given, capture_output=True, env={"LOOKBACK_AUTOSTART": "0"},
                              timeout=30, check=False)
        assert (done.returncode, done.stdout) == (0, b"")

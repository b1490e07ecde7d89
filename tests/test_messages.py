"""query.messages and query.tokens on real Pi AgentMessages (tests/fixtures/pi-sessions)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lookback.index.tokens import estimate_tokens
from lookback.query.contract.messages import (
    EVIDENCE_FOOTER,
    EVIDENCE_HEADER,
    IMAGE_TOKENS,
    MESSAGE_OVERHEAD_TOKENS,
    estimate_message_tokens,
    is_evidence_message,
    is_summary_message,
    latest_real_user_message,
    message_text,
)

FIXTURES = Path(__file__).parent / "fixtures" / "pi-sessions"


def fixture_messages(name: str) -> dict[str, dict]:
    """The AgentMessages of a fixture file, keyed by entry id."""
    found = {}
    for line in (FIXTURES / name).read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if entry.get("type") == "message":
            found[entry["id"]] = entry["message"]
    return found


V3 = fixture_messages("pi-session-v3.jsonl")


def evidence_message(excerpt: str) -> dict:
    text = f"{EVIDENCE_HEADER}\nQuoted content JSON: {json.dumps(excerpt)}\n{EVIDENCE_FOOTER}"
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def test_estimate_tokens_is_chars_over_four_rounded_up():
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    text = V3["00000002"]["content"][0]["text"]
    assert estimate_tokens(text) == -(-len(text) // 4)


def test_estimate_tokens_rejects_non_text():
    with pytest.raises(TypeError, match="expects str"):
        estimate_tokens(None)  # type: ignore[arg-type]


def test_message_text_reads_text_blocks_and_string_content():
    assert message_text(V3["00000002"]) == (
        "Implement OracleProvider. Capture LastExportUtc before export."
    )
    assert message_text(V3["00000007"]) == "Try the alternative SQL implementation."
    assert message_text(V3["00000004"]) == "public sealed class OracleProvider {}"


def test_message_text_skips_thinking_tool_calls_and_images():
    assistant = V3["00000003"]  # a thinking block and two tool calls, no text
    assert message_text(assistant) == ""
    with_image = {
        "role": "user",
        "content": [
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            {"type": "text", "text": "what is wrong in this screenshot?"},
            {"type": "text", "text": "second block"},
        ],
    }
    assert message_text(with_image) == "what is wrong in this screenshot?\nsecond block"


def test_message_text_of_summaries_bash_and_junk():
    summary = {"role": "compactionSummary", "summary": "Goal: fix the parser", "tokensBefore": 9}
    assert message_text(summary) == "Goal: fix the parser"
    bash = {"role": "bashExecution", "command": "ls src", "output": "main.py", "exitCode": 0}
    assert message_text(bash) == "ls src\nmain.py"
    assert message_text("not a message") == ""  # type: ignore[arg-type]
    assert message_text({"role": "user", "content": [None, {"type": "text"}]}) == ""


def test_summary_detection_by_role_and_by_pi_prefix():
    assert is_summary_message({"role": "branchSummary", "summary": "s", "fromId": "root"})
    rendered = {
        "role": "user",
        "content": "The conversation history before this point was compacted into the "
        "following summary:\n\n<summary>\nGoal\n</summary>",
    }
    assert is_summary_message(rendered)
    assert not is_summary_message(V3["00000007"])


def test_evidence_detection_requires_the_header_at_the_start():
    assert is_evidence_message(evidence_message("public sealed class OracleProvider {}"))
    quoting = {"role": "user", "content": f"why does {EVIDENCE_HEADER} appear?"}
    assert not is_evidence_message(quoting)


def test_latest_real_user_message_on_a_real_branch():
    branch = [V3["00000002"], V3["00000007"], V3["00000008"]]
    assert latest_real_user_message(branch) == (1, "Try the alternative SQL implementation.")


def test_latest_real_user_message_skips_evidence_and_summaries():
    messages = [
        {"role": "compactionSummary", "summary": "earlier work", "tokensBefore": 100},
        V3["00000002"],
        V3["00000003"],
        V3["00000004"],
        evidence_message("Tests passed: 12"),
        {"role": "user", "content": "The following is a summary of a branch that this "
         "conversation came back from:\n\n<summary>\nx</summary>"},
    ]  # fmt: skip
    index, text = latest_real_user_message(messages)
    assert index == 1
    assert text.startswith("Implement OracleProvider.")


def test_image_only_request_is_still_the_latest():
    image_only = {"role": "user", "content": [{"type": "image", "data": "x", "mimeType": "i"}]}
    assert latest_real_user_message([V3["00000002"], image_only]) == (1, "")


def test_no_real_user_message():
    assert latest_real_user_message([]) is None
    assert latest_real_user_message([V3["00000003"], evidence_message("x")]) is None


def test_message_tokens_count_text_tool_calls_and_images_not_thinking():
    assistant = V3["00000003"]
    calls = [b for b in assistant["content"] if b["type"] == "toolCall"]
    expected = MESSAGE_OVERHEAD_TOKENS + sum(
        estimate_tokens(f"{call['name']} {json.dumps(call['arguments'])}") for call in calls
    )
    assert estimate_message_tokens(assistant) == expected
    image = {"role": "user", "content": [{"type": "image", "data": "x", "mimeType": "i"}]}
    assert estimate_message_tokens(image) == MESSAGE_OVERHEAD_TOKENS + IMAGE_TOKENS

"""Tests for the chunking rule applied to long entries before embedding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lookback.index.chunking import (
    CHUNKING_VERSION,
    CODE_DISCOUNT,
    DEFAULT_MAX_CHARS,
    PROSE_MIN_WORDS,
    TOOL_OUTPUT_DISCOUNT,
    chunk_text,
    entry_chunks,
    prose_text,
    weighted_chunks,
)

FIXTURES = Path(__file__).parent / "fixtures"
# A real 4,899-character assistant message with prose and code (see the fixture's source note).
LONG_TEXT = json.loads((FIXTURES / "long_entry.json").read_text())["text"]


def test_short_text_is_one_stripped_chunk_and_blank_text_none() -> None:
    assert chunk_text("  fix the theme loader \n") == ["fix the theme loader"]
    assert chunk_text("") == []
    assert chunk_text(" \n\t ") == []


def test_long_text_is_split_into_bounded_overlapping_chunks() -> None:
    chunks = chunk_text(LONG_TEXT, max_chars=500, overlap=100)
    assert len(chunks) >= 10
    assert all(0 < len(chunk) <= 500 for chunk in chunks)
    for first, second in zip(chunks, chunks[1:], strict=False):
        assert first[-40:] in LONG_TEXT
        assert second.split()[0] in first, "consecutive chunks share their boundary text"
    assert chunks[0] == LONG_TEXT[: len(chunks[0])]
    assert LONG_TEXT.rstrip().endswith(chunks[-1])


def test_chunks_cover_every_word_and_start_on_word_boundaries() -> None:
    chunks = chunk_text(LONG_TEXT, max_chars=300, overlap=60)
    assert set(LONG_TEXT.split()) <= {word for chunk in chunks for word in chunk.split()}
    for chunk in chunks:
        start = LONG_TEXT.find(chunk)
        assert start >= 0
        assert start == 0 or LONG_TEXT[start - 1].isspace()


def test_a_word_longer_than_the_window_is_cut_hard() -> None:
    chunks = chunk_text("a" * 25, max_chars=10, overlap=2)
    assert chunks == ["a" * 10, "a" * 10, "a" * 5]


def test_chunking_is_deterministic_and_versioned() -> None:
    assert chunk_text(LONG_TEXT) == chunk_text(LONG_TEXT)
    assert all(len(chunk) <= DEFAULT_MAX_CHARS for chunk in chunk_text(LONG_TEXT))
    assert isinstance(CHUNKING_VERSION, int)


@pytest.mark.parametrize(
    ("text", "max_chars", "overlap", "error", "message"),
    [
        (b"bytes", 100, 10, TypeError, "needs a str"),
        ("text", 0, 0, ValueError, "max_chars must be at least 1"),
        ("text", 100, 60, ValueError, "overlap must be between"),
        ("text", 100, -1, ValueError, "overlap must be between"),
    ],
)
def test_bad_arguments_get_a_clear_error(text, max_chars, overlap, error, message) -> None:
    with pytest.raises(error, match=message):
        chunk_text(text, max_chars=max_chars, overlap=overlap)


# Two real assistant turns of before-compaction.jsonl (v1:308 and v1:375 of its index).
DELETE_TURN = (
    "Good. Now I'll delete all three functions (runSingleShotMode, executeRpcBashCommand, "
    "runRpcMode). They span from line 811 to line 1112. Let me do this carefully:\n"
    'read {"limit": 10, "offset": 805, "path": '
    '"/Users/badlogic/workspaces/pi-mono/packages/coding-agent/src/main-new.ts"}')
SHORT_TURN = (
    "You're right. Let me read it in chunks:\n"
    'read {"limit": 200, "offset": 1, "path": '
    '"/Users/badlogic/workspaces/pi-mono/packages/coding-agent/src/tui/tui-renderer.ts"}')


def test_prose_text_drops_tool_calls_and_code_and_shortens_paths() -> None:
    assert prose_text(DELETE_TURN) == (
        "Good. Now I'll delete all three functions (runSingleShotMode, executeRpcBashCommand, "
        "runRpcMode). They span from line 811 to line 1112. Let me do this carefully:")
    assert prose_text("See src/modes/print-mode.ts:\n```ts\nconst x = 1;\n```\ndone") == (
        "See print-mode.ts: done")


def test_entry_chunks_add_a_prose_chunk_only_when_it_says_enough() -> None:
    chunks = entry_chunks(DELETE_TURN)
    assert chunks == chunk_text(DELETE_TURN) + [prose_text(DELETE_TURN)]
    assert len(prose_text(SHORT_TURN).split()) < PROSE_MIN_WORDS
    assert entry_chunks(SHORT_TURN) == chunk_text(SHORT_TURN)
    # Plain prose is its own chunk already: nothing is embedded twice.
    assert entry_chunks("fix the theme loader " * 10) == chunk_text("fix the theme loader " * 10)
    assert entry_chunks(LONG_TEXT, max_chunks=2)[:2] == chunk_text(LONG_TEXT)[:2]


def test_weighted_chunks_discount_code_and_tool_output_but_never_the_prose_chunk() -> None:
    # The turn's prose chunk weighs 1; its raw chunk, mostly a tool call's JSON, less.
    weighted = weighted_chunks(DELETE_TURN, "assistant")
    assert [chunk for chunk, _ in weighted] == entry_chunks(DELETE_TURN)
    not_prose = 1 - len(prose_text(DELETE_TURN)) / len(DELETE_TURN)
    assert [weight for _, weight in weighted] == [pytest.approx(1 - CODE_DISCOUNT * not_prose),
                                                  1.0]
    assert 1 - CODE_DISCOUNT < weighted[0][1] < 1.0
    # A short turn has no prose chunk: its only chunk is discounted.
    assert weighted_chunks(SHORT_TURN, "assistant")[0][1] < 1.0
    # Plain prose, said by anyone, weighs 1.
    plain = "fix the theme loader " * 10
    assert weighted_chunks(plain, "user") == [(plain.strip(), 1.0)]
    # Every raw chunk of a tool's output weighs less, whatever it holds.
    assert weighted_chunks(plain, "toolResult") == [(plain.strip(), 1 - TOOL_OUTPUT_DISCOUNT)]
    weighted = weighted_chunks(LONG_TEXT, "bashExecution", max_chunks=4)
    assert [chunk for chunk, _ in weighted] == entry_chunks(LONG_TEXT, max_chunks=4)
    assert {weight for _, weight in weighted[:4]} == {1 - TOOL_OUTPUT_DISCOUNT}

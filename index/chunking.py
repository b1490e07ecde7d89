"""Split long entries into overlapping chunks before embedding them.

Why: an embedding model reads a bounded window (all-MiniLM-L6-v2: 256 word
pieces) and silently drops the rest, and one vector for a 50 KB tool result
would blur every topic in it. Each chunk gets its own vector under the same
entry key; the fusion step keeps the best similarity per entry.

The rule, which ``CHUNKING_VERSION`` names (bump it when the rule changes:
stored chunk vectors are rebuilt):

1. Blank text gives no chunks; text of at most ``max_chars`` characters is
   one chunk, stripped of surrounding whitespace.
2. Otherwise a window of ``max_chars`` characters is cut at its last
   whitespace, as long as that keeps at least half the window; a single
   word longer than that is cut hard.
3. The next window starts ``overlap`` characters before the cut, moved
   forward to the next word start so no chunk begins mid-word, and always
   after the previous window's start.
4. :func:`entry_chunks` keeps an embedder's first ``max_chunks`` chunks and
   adds one *prose chunk*: the entry's natural language alone (see
   :func:`prose_text`), when it has at least ``PROSE_MIN_WORDS`` words and
   differs from every chunk.
5. :func:`weighted_chunks` gives each chunk a weight, stored as its vector's
   length (so a dot product with a unit query vector is the weighted cosine):
   the prose chunk weighs 1; the other chunks of a tool's output weigh
   ``1 - TOOL_OUTPUT_DISCOUNT``; those of any other entry weigh 1 less
   ``CODE_DISCOUNT`` times the share of the entry's text that is not prose
   (code, tool-call JSON, the directories of paths) -- 1 for plain prose.

Why the prose chunk: an assistant turn is often one sentence ("Now I'll delete
the three old functions") followed by a tool call's JSON, or a paragraph round
a code block; embedded together, the JSON and code drown the sentence. Short
prose ("Let me read it:") is left out: it says nothing and matched everything
(12 words ranked best on the tuning questions once code chunks weighed less;
docs/semantic.md).

Why the weights: a chunk of code or tool-call JSON shares identifiers and
vocabulary ("session", "reset", "fresh") with almost any question about the
work, so its cosine is high by chance, and such chunks filled the top 5 above
the user message a question paraphrased. Questions ask about what was said;
tool output is still found by its words (the lexical search) and by a strong
match. Both discounts were chosen on the tuning questions (docs/semantic.md).

Character counts, not tokens, keep the rule independent of any tokenizer.
Code and tool output are dense (often two characters per word piece), so the
default of 500 characters fits MiniLM's 256-piece window for 99% of the chunks
of the real Pi sessions in the fixtures; 800 overflowed it for over a quarter.
"""

from __future__ import annotations

import re

from lookback.embedders.word_pieces import WINDOW_CHUNK_CHARS

CHUNKING_VERSION = 3

DEFAULT_MAX_CHARS = WINDOW_CHUNK_CHARS
DEFAULT_OVERLAP = 80

#: Words a prose chunk needs to be embedded (rule 4).
PROSE_MIN_WORDS = 12

#: Rule 5: a chunk of an entry with no prose at all weighs this much less.
CODE_DISCOUNT = 0.15
#: Rule 5: every chunk of a tool's output weighs this much less.
TOOL_OUTPUT_DISCOUNT = 0.2
#: Entry roles whose text is a tool's output rather than something said.
TOOL_OUTPUT_ROLES = frozenset({"toolResult", "bashExecution"})

_FENCED_CODE = re.compile(r"```.*?(?:```|$)", re.S)
#: How ingest renders a tool call: its name, a space, its arguments as one-line JSON.
_TOOL_CALL_LINE = re.compile(r"^[\w.:-]+ [{\[].*$", re.M)
#: A path, kept as its last component (``src/modes/print-mode.ts`` -> ``print-mode.ts``).
_PATH = re.compile(r"(?:[\w.-]*/)+([\w.-]+)")
_SPACES = re.compile(r"\s+")


def prose_text(text: str) -> str:
    """``text`` without fenced code and tool-call lines, paths cut to their last part."""
    text = _TOOL_CALL_LINE.sub(" ", _FENCED_CODE.sub(" ", text))
    return _SPACES.sub(" ", _PATH.sub(r"\1", text)).strip()


def entry_chunks(text: str, max_chars: int = DEFAULT_MAX_CHARS,
                 overlap: int = DEFAULT_OVERLAP, max_chunks: int | None = None) -> list[str]:
    """What is embedded for one entry: its first ``max_chunks`` chunks and its prose chunk."""
    return [chunk for chunk, _ in weighted_chunks(text, None, max_chars, overlap, max_chunks)]


def weighted_chunks(text: str, role: str | None, max_chars: int = DEFAULT_MAX_CHARS,
                    overlap: int = DEFAULT_OVERLAP,
                    max_chunks: int | None = None) -> list[tuple[str, float]]:
    """:func:`entry_chunks` of an entry of ``role``, each with its weight (rule 5)."""
    chunks = chunk_text(text, max_chars=max_chars, overlap=overlap)[:max_chunks]
    prose = prose_text(text)
    if role in TOOL_OUTPUT_ROLES:
        weight = 1.0 - TOOL_OUTPUT_DISCOUNT
    else:
        weight = 1.0 - CODE_DISCOUNT * (1.0 - min(1.0, len(prose) / max(1, len(text.strip()))))
    weighted = [(chunk, weight) for chunk in chunks]
    prose = prose[:max_chars]
    if len(prose.split()) >= PROSE_MIN_WORDS and prose not in chunks:
        weighted.append((prose, 1.0))
    return weighted


def chunk_text(
    text: str, max_chars: int = DEFAULT_MAX_CHARS, overlap: int = DEFAULT_OVERLAP
) -> list[str]:
    """Split ``text`` into stripped chunks of at most ``max_chars`` characters.

    Consecutive chunks share about ``overlap`` characters so a phrase cut at a
    boundary still appears whole in one of them. Deterministic.
    """
    if not isinstance(text, str):
        raise TypeError(f"chunk_text() needs a str, got {type(text).__name__}")
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, got {max_chars}")
    if not 0 <= overlap < max_chars // 2 + 1:
        raise ValueError(f"overlap must be between 0 and max_chars // 2, got {overlap}")

    stripped = text.strip()
    if len(stripped) <= max_chars:
        return [stripped] if stripped else []

    chunks: list[str] = []
    start = 0
    while start < len(stripped):
        end = _cut(stripped, start, max_chars)
        chunk = stripped[start:end].strip()
        if chunk:
            chunks.append(chunk)
        if end >= len(stripped):
            break
        start = _next_start(stripped, start, end, overlap)
    return chunks


def _cut(text: str, start: int, max_chars: int) -> int:
    """End of the window starting at ``start``: its last whitespace, or a hard cut."""
    end = start + max_chars
    if end >= len(text):
        return len(text)
    for position in range(end, start + max_chars // 2, -1):
        if text[position].isspace():
            return position
    return end


def _next_start(text: str, start: int, end: int, overlap: int) -> int:
    """Start of the next window: ``overlap`` back from ``end``, at a word start."""
    position = max(end - overlap, start + 1)
    if position > 0 and not text[position - 1].isspace():
        while position < end and not text[position].isspace():
            position += 1
    while position < len(text) and text[position].isspace():
        position += 1
    return position

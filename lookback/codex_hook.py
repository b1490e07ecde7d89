"""The Codex ``UserPromptSubmit`` hook: ask the reader, hand back evidence not yet quoted.

Codex runs the hook once per turn with the hook input as JSON on stdin (``session_id``,
``turn_id``, ``transcript_path`` — the rollout —, ``cwd``, ``prompt``). This module posts
``{session_file, message, provider, max_retrieved_history_tokens, quoted_ids}`` to
``POST /v1/retrieve`` of ``lookback serve`` and prints the evidence envelopes as the hook's
``additionalContext``: whole envelopes, within Codex's limit (2,500 tokens, counted as 4 bytes
a token; Codex cuts a longer context in the middle).

Codex keeps each hook output in the thread (a developer message, persisted in the rollout as
``hooks.additional_context``) and re-sends it with every later request until a compaction drops
it. So before asking, the hook reads the rollout itself: the Lookback envelopes persisted after
the last ``compacted`` line name the entries already quoted (``quoted_ids``: the reader never
returns them again) and how much the hook's evidence already adds to every request; what it
adds now keeps the thread's total within ``--thread-tokens``.

The hook's own reading is bounded inside its ``--timeout-ms`` (Codex kills a hook at its
limit): the rollout is read from its end, in chunks, back to the last compaction and no
further than ``MAX_SCAN_BYTES``; a fork's parent is looked for folder by folder; all of it
before ``SCAN_SHARE`` of the time is spent (the rest is the reader's). Past either bound the
hook cannot tell what the thread already carries, so it adds nothing (fail-open).

Fail-open, cost and the plain-script start are the Claude Code hook's (``lookback.hook_client``):
a missing, slow or wrong reader or bad input prints nothing and exits 0 (a reader that is not
there is started for the next prompt, ``hook_client.start_reader``), and
``lookback install codex`` writes a ``python -S -I`` command. bench/bench_codex_hook.py
measures it.
"""

from __future__ import annotations

import json
import mmap
import os
import stat
import sys
import time

if __package__:
    from lookback import hook_client
else:  # a plain script under ``python -S -I``: the shared part is the file beside it
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    import hook_client  # type: ignore[no-redef, import-not-found]

EVENT = "UserPromptSubmit"
DEFAULT_PROVIDER = "openai"
#: Codex 0.171's default additionalContext limit, in its tokens (4 bytes each).
MAX_CONTEXT_TOKENS = 2_500
BYTES_PER_TOKEN = 4
#: What the hook's evidence may add up to in a thread until a compaction drops it.
DEFAULT_THREAD_TOKENS = 10_000
#: Less room than this left in the thread: ask nothing (no envelope would fit).
MIN_ROOM_TOKENS = 100
#: How Codex marks a hook's output in the rollout, and the last compaction's line.
HOOK_CONTEXT_KIND = b"hooks.additional_context"
COMPACTED = b'"type":"compacted"'
SOURCE_LINE = "Source entry: "
SESSION_PART = " (session "


#: What the rollout scan reads at most, from the end back to the last compaction (a
#: thread's window since its last compaction is far smaller; the hook never reads a whole
#: multi-gigabyte rollout).
MAX_SCAN_BYTES = 256 * 1024 * 1024
#: Bytes searched between two looks at the clock.
SCAN_CHUNK = 8 * 1024 * 1024
#: The share of ``--timeout-ms`` the hook's own reading may use; the rest is the reader's.
SCAN_SHARE = 0.5


class _Budget:
    """The scan's bounds: a deadline (``time.monotonic()``) and bytes left to read. Past
    either, ``HookSkipped``: the hook cannot know what the thread carries, so adds nothing."""

    def __init__(self, deadline: float, max_bytes: int = MAX_SCAN_BYTES) -> None:
        self.deadline = deadline
        self.bytes_left = max_bytes

    def check(self) -> None:
        if time.monotonic() >= self.deadline:
            raise hook_client.HookSkipped("the rollout scan ran out of time")

    def spend(self, count: int) -> None:
        self.check()
        self.bytes_left -= count
        if self.bytes_left < 0:
            raise hook_client.HookSkipped("the rollout is too long to scan")


def quoted_so_far(rollout: str, deadline: float | None = None,
                  max_bytes: int = MAX_SCAN_BYTES) -> tuple[set[str], int]:
    """(entry ids Lookback's envelopes quote, their bytes) among the hook contexts in the
    rollout after its last ``compacted`` line: what the model is still being sent. A fork
    with no compaction of its own is sent its parent's history up to the fork point too
    (``history_base``), so the contexts there count as well. Raises ``HookSkipped`` when
    that takes past ``deadline`` or more than ``max_bytes`` of reading (see ``_Budget``)."""
    budget = _Budget(float("inf") if deadline is None else deadline, max_bytes)
    quoted: set[str] = set()
    used, path, limit = 0, rollout, None
    for _ in range(MAX_FORK_DEPTH):
        # Non-blocking: opening a FIFO for reading waits for a writer, past any deadline.
        with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise hook_client.HookSkipped("the rollout is not a regular file")
            size = info.st_size
            if size == 0:
                break
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                end = size if limit is None else min(limit, size)
                start = _last_compaction(data, end, budget)
                used += _scan(data, start, end, quoted, budget)
                if start > 0:
                    break  # a compaction: nothing before it is sent any more
                base = _history_base(data)
        if base is None:
            break
        parent = _find_rollout(path, base[0], budget)
        if parent is None:
            break
        path, limit = parent, base[1]
    return quoted, used


#: Forks of forks followed at most this deep.
MAX_FORK_DEPTH = 8


def _find(data: mmap.mmap, needle: bytes, start: int, end: int, budget: _Budget) -> int:
    """``data.find(needle, start, end)``, a chunk at a time within ``budget``."""
    while start < end:
        stop = min(end, start + SCAN_CHUNK)
        budget.spend(stop - start)
        found = data.find(needle, start, min(end, stop + len(needle) - 1))
        if found >= 0:
            return found
        start = stop
    return -1


def _rfind(data: mmap.mmap, needle: bytes, start: int, end: int, budget: _Budget) -> int:
    """``data.rfind(needle, start, end)``, a chunk at a time from the end within ``budget``."""
    high = end
    while high > start:
        low = max(start, high - SCAN_CHUNK)
        budget.spend(high - low)
        # occurrences starting in [low, high): the next chunk holds those before ``low``
        found = data.rfind(needle, low, min(end, high + len(needle) - 1))
        if found >= 0:
            return found
        high = low
    return -1


def _scan(data: mmap.mmap, start: int, end: int, quoted: set[str], budget: _Budget) -> int:
    """Add the ids Lookback's contexts in ``data[start:end]`` quote; their bytes."""
    used = 0
    found = _find(data, HOOK_CONTEXT_KIND, start, end, budget)
    while found >= 0:
        begin = data.rfind(b"\n", 0, found) + 1
        stop = data.find(b"\n", found, end)
        stop = end if stop < 0 else stop
        for text in _hook_texts(data[begin:stop]):
            ids = _sources(text)
            if ids:  # one of ours (another hook's output is not counted)
                quoted.update(ids)
                used += len(text.encode("utf-8"))
        found = _find(data, HOOK_CONTEXT_KIND, stop, end, budget)
    return used


def _history_base(data: mmap.mmap) -> tuple[str, int] | None:
    """A fork's ``session_meta.history_base`` (parent thread, bytes of its history)."""
    first = data.find(b"\n")
    if b'"history_base"' not in data[:first if first >= 0 else len(data)]:
        return None
    try:
        base = json.loads(data[:first])["payload"]["history_base"]
        thread, length = base["thread_id"], base["end_byte_offset"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(thread, str) or not thread or "/" in thread \
            or not isinstance(length, int) or length <= 0:
        return None
    return thread, length


def _find_rollout(fork: str, thread: str, budget: _Budget) -> str | None:
    """The parent's rollout (``rollout-*-<thread>.jsonl``) where ingest finds it
    (``ingest.codex.find_rollout``): under the fork's ``sessions`` folder, the first by
    path; None if it is not there. The walk stops at the budget's deadline."""
    if not thread or "/" in thread:
        return None
    suffix = f"-{thread}.jsonl"
    found = []
    for folder, _, names in os.walk(_sessions_root(fork)):  # unreadable: passed over
        budget.check()
        found += [os.path.join(folder, name) for name in names
                  if name.startswith("rollout-") and name.endswith(suffix)]
    return min(found) if found else None


def _sessions_root(rollout: str) -> str:
    """``ingest.codex.sessions_root_of`` on a text path (the hook imports no project
    module: it runs as a plain script; tests/test_codex_hook.py holds the two equal): the
    nearest ``sessions`` folder above the rollout, else the folder above its
    ``YYYY/MM/DD`` folders, else its own folder."""
    parents = []
    folder = os.path.dirname(os.path.abspath(rollout))
    while True:
        if os.path.basename(folder) == "sessions":
            return folder
        parents.append(folder)
        above = os.path.dirname(folder)
        if above == folder:
            break
        folder = above
    if len(parents) > 4 and all(os.path.basename(p).isdigit() for p in parents[:3]):
        return parents[3]
    return parents[0]


def _last_compaction(data: mmap.mmap, end: int, budget: _Budget) -> int:
    """Offset of the last line before ``end`` whose own type is ``compacted`` (0: none)."""
    while (found := _rfind(data, COMPACTED, 0, end, budget)) >= 0:
        begin = data.rfind(b"\n", 0, found) + 1
        if data[begin:found].count(b"{") == 1:  # the line's own type, not a nested one
            return begin
        end = found
    return 0


def _hook_texts(line: bytes) -> list[str]:
    try:
        obj = json.loads(line)
        payload = obj["payload"]
        kinds = payload["internal_chat_message_metadata_passthrough"]["content_item_kinds"]
        parts = payload["content"]
    except (ValueError, KeyError, TypeError):
        return []
    if obj.get("type") != "response_item" or not isinstance(parts, list) \
            or not isinstance(kinds, list):
        return []
    return [part["text"] for part, kind in zip(parts, kinds, strict=False)
            if kind == "hooks.additional_context" and isinstance(part, dict)
            and isinstance(part.get("text"), str)]


def _sources(text: str) -> set[str]:
    """The entry ids an evidence text's envelopes name (``Source entry: <id> (session …)``)."""
    ids = set()
    for line in text.split("\n"):
        if line.startswith(SOURCE_LINE) and SESSION_PART in line:
            ids.add(line[len(SOURCE_LINE):].rsplit(SESSION_PART, 1)[0])
    return ids


def _bytes(text: str) -> int:
    return len(text.encode("utf-8"))


def run_hook(stdin: bytes, *, url: str, provider: str, timeout_ms: float,
             token: str | None = None, max_tokens: int = MAX_CONTEXT_TOKENS, home: str = "",
             thread_tokens: int = DEFAULT_THREAD_TOKENS) -> str | None:
    """The hook's stdout for one input, or None to print nothing. Never raises."""
    started = time.monotonic()
    deadline = started + timeout_ms / 1000
    try:
        prompt, rollout = hook_client.prompt_and_transcript(json.loads(stdin), EVENT)
        quoted, used = quoted_so_far(rollout, started + SCAN_SHARE * timeout_ms / 1000)
        room = min(max_tokens, MAX_CONTEXT_TOKENS, thread_tokens - used // BYTES_PER_TOKEN)
        if room < MIN_ROOM_TOKENS:
            return None  # the thread already carries all the evidence it may
        body = {"session_file": rollout, "message": prompt, "provider": provider,
                "max_retrieved_history_tokens": room, "quoted_ids": sorted(quoted)}
        response = hook_client.post_json(url, "/v1/retrieve", body, deadline=deadline,
                                         token=token, home=home)
        fresh = [text for text in hook_client.envelopes(response)
                 if not _sources(text) & quoted]
        context = hook_client.whole_envelopes(fresh, room * BYTES_PER_TOKEN, _bytes)
        return hook_client.hook_output(EVENT, context) if context else None
    except Exception as error:  # fail-open: whatever went wrong, Codex goes on unchanged
        hook_client.fail_open(error, home, "codex")
        return None


DEFAULTS = {"url": hook_client.DEFAULT_URL, "home": "", "provider": DEFAULT_PROVIDER,
            "timeout-ms": str(hook_client.DEFAULT_TIMEOUT_MS),
            "max-tokens": str(MAX_CONTEXT_TOKENS), "thread-tokens": str(DEFAULT_THREAD_TOKENS)}


def _run(stdin: bytes, options: dict[str, str]) -> str | None:
    return run_hook(stdin, url=options["url"], provider=options["provider"],
                    timeout_ms=float(options["timeout-ms"]),
                    token=os.environ.get("LOOKBACK_TOKEN"),
                    max_tokens=int(options["max-tokens"]), home=options["home"],
                    thread_tokens=int(options["thread-tokens"]))


def main(argv: list[str] | None = None) -> int:
    """``python -S -I codex_hook.py [--home H | --url U] [--provider P] [--timeout-ms T]
    [--max-tokens N] [--thread-tokens M]``; always exits 0."""
    return hook_client.main(_run, DEFAULTS, argv)


if __name__ == "__main__":
    sys.exit(main())

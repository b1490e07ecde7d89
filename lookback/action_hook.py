"""The ``PreToolUse`` hook of Claude Code and Codex: evidence at the point of action.

Before the agent reads, edits or runs something, it runs this hook with the call as JSON on
stdin (``tool_name``, ``tool_input``, ``transcript_path``, ``cwd``, ``hook_event_name``:
``PreToolUse``; docs/claude-code-session-format.md and docs/codex-session-format.md). The
hook posts ``{session_file, tool: {name, input, cwd}, provider,
max_retrieved_history_tokens, quoted_ids}`` to ``POST /v1/retrieve`` of ``lookback serve``:
the reader builds the query from the call's file, command or pattern and answers only with
the compacted entries of the current branch that say something about it
(docs/specification.md, "Point-of-action evidence"). Their envelopes go back as the hook's
``additionalContext`` — whole, within the agent's limit — which the agent hands the model
beside the call's result.

Both agents keep that context in the session until a compaction drops it, so the entries
quoted since the last compaction are in the model's context already: the hook names them
as ``quoted_ids`` and the reader never returns them again (a file edited ten times gets its
history once). Codex: ``codex_hook.quoted_so_far`` reads the rollout; Claude Code:
``quoted_since_compaction`` reads the transcript from its end back to the last
``compact_boundary``, both bounded in bytes and within ``SCAN_SHARE`` of the time.

Fail-open, cost and start are the prompt hooks' (``lookback.hook_client``): standard library
only, run as a plain script under ``python -S -I``; anything wrong prints nothing and exits
0, and the call goes on unchanged. The setting ``action.enabled = false`` keeps ``lookback
install`` from registering it. bench/bench_action_hook.py measures it per tool call.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import stat
import sys
import time
from collections.abc import Callable

if __package__:
    from lookback import codex_hook, hook_client
else:  # a plain script under ``python -S -I``: the shared parts are the files beside it
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    import codex_hook  # type: ignore[no-redef, import-not-found]
    import hook_client  # type: ignore[no-redef, import-not-found]

EVENT = "PreToolUse"
AGENTS = ("claude-code", "codex")
#: The evidence one tool call may add (tokens, 4 characters each): a few entries.
DEFAULT_MAX_TOKENS = 1_000
#: Each agent's additionalContext limit and how it counts: Claude Code 10,000 UTF-16 code
#: units, Codex 2,500 tokens of 4 bytes (``claude_hook``, ``codex_hook``).
LIMITS = {"claude-code": 10_000, "codex": codex_hook.MAX_CONTEXT_TOKENS
          * codex_hook.BYTES_PER_TOKEN}
#: A Claude Code transcript's compaction line, and how much of it the scan reads at most.
CLAUDE_COMPACTED = b'"subtype":"compact_boundary"'
MAX_SCAN_BYTES = 64 * 1024 * 1024
SCAN_SHARE = codex_hook.SCAN_SHARE
#: ``Source entry: <id> (session <id>)`` as a JSON string holds it (evidence.py's line).
_SOURCE = re.compile(rb"Source entry: ([^\s\"\\]+) \(session ")


def call_of(hook_input: object) -> tuple[str, dict[str, object], str, str | None]:
    """(tool name, arguments, absolute transcript path, cwd) of a PreToolUse input;
    HookSkipped when it is not one."""
    if not isinstance(hook_input, dict) or hook_input.get("hook_event_name") != EVENT:
        raise hook_client.HookSkipped("not a PreToolUse event")
    name, arguments = hook_input.get("tool_name"), hook_input.get("tool_input")
    transcript, cwd = hook_input.get("transcript_path"), hook_input.get("cwd")
    if not isinstance(name, str) or not isinstance(arguments, dict):
        raise hook_client.HookSkipped("no tool call")
    if not isinstance(transcript, str) or not os.path.isabs(transcript):
        raise hook_client.HookSkipped("no absolute transcript path")
    return name, arguments, transcript, cwd if isinstance(cwd, str) \
        and os.path.isabs(cwd) else None


def quoted_since_compaction(transcript: str, deadline: float,
                            max_bytes: int = MAX_SCAN_BYTES) -> set[str]:
    """The entry ids Lookback's envelopes quote after the transcript's last compaction
    (Claude Code keeps every hook context there). HookSkipped when the file is not a
    regular one, or the scan would pass ``max_bytes`` or ``deadline``."""
    with open(os.open(transcript, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise hook_client.HookSkipped("the transcript is not a regular file")
        if info.st_size == 0:
            return set()
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            end = info.st_size
            low = max(0, end - max_bytes)
            start = data.rfind(CLAUDE_COMPACTED, low, end)
            if start < 0 and low > 0:
                raise hook_client.HookSkipped("the transcript is too long to scan")
            if time.monotonic() >= deadline:
                raise hook_client.HookSkipped("the transcript scan ran out of time")
            return {match.decode("utf-8", "replace")
                    for match in _SOURCE.findall(data, max(start, 0), end)}


def quoted_ids(agent: str, transcript: str, deadline: float) -> set[str]:
    if agent == "codex":
        return codex_hook.quoted_so_far(transcript, deadline)[0]
    return quoted_since_compaction(transcript, deadline)


def _size(agent: str) -> Callable[[str], int]:
    """How the agent measures its limit: Codex in bytes, Claude Code in UTF-16 units."""
    if agent == "codex":
        return lambda text: len(text.encode("utf-8"))
    return lambda text: len(text.encode("utf-16-le")) // 2


def run_hook(stdin: bytes, *, agent: str, url: str, provider: str, timeout_ms: float,
             token: str | None = None, max_tokens: int = DEFAULT_MAX_TOKENS,
             home: str = "") -> str | None:
    """The hook's stdout for one tool call, or None to print nothing. Never raises."""
    started = time.monotonic()
    deadline = started + timeout_ms / 1000
    try:
        name, arguments, transcript, cwd = call_of(json.loads(stdin))
        quoted = quoted_ids(agent, transcript, started + SCAN_SHARE * timeout_ms / 1000)
        body = {"session_file": transcript, "provider": provider,
                "tool": {"name": name, "input": arguments, "cwd": cwd},
                "max_retrieved_history_tokens": max_tokens, "quoted_ids": sorted(quoted)}
        response = hook_client.post_json(url, "/v1/retrieve", body, deadline=deadline,
                                         token=token, home=home)
        context = hook_client.whole_envelopes(hook_client.envelopes(response),
                                              LIMITS[agent], _size(agent))
        return hook_client.hook_output(EVENT, context) if context else None
    except Exception as error:  # fail-open: whatever went wrong, the call goes on unchanged
        hook_client.fail_open(error, home, agent)
        return None


DEFAULTS = {"agent": "claude-code", "url": hook_client.DEFAULT_URL, "home": "",
            "provider": "anthropic", "timeout-ms": str(hook_client.DEFAULT_TIMEOUT_MS),
            "max-tokens": str(DEFAULT_MAX_TOKENS)}


def _run(stdin: bytes, options: dict[str, str]) -> str | None:
    if options["agent"] not in AGENTS:
        return None
    return run_hook(stdin, agent=options["agent"], url=options["url"],
                    provider=options["provider"], timeout_ms=float(options["timeout-ms"]),
                    token=os.environ.get("LOOKBACK_TOKEN"),
                    max_tokens=int(options["max-tokens"]), home=options["home"])


def main(argv: list[str] | None = None) -> int:
    """``python -S -I action_hook.py --agent claude-code|codex [--home H | --url U]
    [--provider P] [--timeout-ms T] [--max-tokens N]``; always exits 0."""
    return hook_client.main(_run, DEFAULTS, argv)


if __name__ == "__main__":
    sys.exit(main())

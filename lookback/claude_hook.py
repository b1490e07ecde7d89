"""The Claude Code ``UserPromptSubmit`` hook: ask the reader, hand back the evidence.

Claude Code runs the hook before every prompt it sends, with the hook input as JSON on
stdin (``session_id``, ``transcript_path``, ``cwd``, ``prompt``, ``hook_event_name``).
This module posts ``{session_file: transcript_path, message: prompt, provider,
max_retrieved_history_tokens}`` to
``POST /v1/retrieve`` of ``lookback serve`` and prints the evidence envelopes (the
specification's, one per item, blank-line separated, whole envelopes up to Claude
Code's 10,000-character limit) as the hook's ``additionalContext``. The reader
applies the token budget and the privacy policy of ``provider`` (Anthropic unless
configured); in embedded mode it also indexes the transcript's new lines before
answering (``lookback.freshness``).

Fail-open: a missing or slow reader, an unindexed session, a bad answer, bad input —
anything at all — prints nothing and exits 0, so Claude Code goes on unchanged.

Cost: Claude Code waits for the hook on every prompt, so this file and the part every hook
shares (``lookback.hook_client``: the reader call, the envelopes, fail-open) import only the
standard library and run as a plain script under ``python -S -I``, which skips ``site`` and
the environment: that is the command ``lookback install claude-code`` writes.
``lookback hook claude-code`` runs the same code through the CLI (slower to start).
bench/bench_claude_hook.py measures both.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

if __package__:
    from lookback import hook_client
else:  # a plain script under ``python -S -I``: the shared part is the file beside it
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    import hook_client  # type: ignore[no-redef, import-not-found]

HookSkipped = hook_client.HookSkipped
post_json, split_url = hook_client.post_json, hook_client.split_url
DEFAULT_URL = hook_client.DEFAULT_URL
DEFAULT_PROVIDER = "anthropic"
DEFAULT_TIMEOUT_MS = hook_client.DEFAULT_TIMEOUT_MS
MAX_INPUT_BYTES = hook_client.MAX_INPUT_BYTES
EVENT = "UserPromptSubmit"
#: Claude Code 2.1.328 replaces an additionalContext longer than 10,000 characters by a
#: 2 KB preview and the path of a file holding the rest, which would cut evidence in
#: half; so the hook hands over only whole envelopes up to that length.
MAX_CONTEXT_UNITS = 10_000
#: The evidence budget asked of the reader: what fits in that limit (4 characters a token,
#: the reader's estimate), unless the settings ask for less.
MAX_CONTEXT_TOKENS = MAX_CONTEXT_UNITS // 4


def retrieve_request(hook_input: object, provider: str,
                     max_tokens: int = MAX_CONTEXT_TOKENS) -> dict[str, Any]:
    """The retrieve body for one hook input; HookSkipped when it is not a usable prompt."""
    prompt, transcript = hook_client.prompt_and_transcript(hook_input, EVENT)
    return {"session_file": transcript, "message": prompt, "provider": provider,
            "max_retrieved_history_tokens": max_tokens}


def additional_context(response: object) -> str | None:
    """The evidence envelopes of a retrieve response, in rank order, blank-line separated
    (None: none). Envelopes are whole or left out: the ones that would push the text past
    ``MAX_CONTEXT_UNITS`` are skipped, and smaller lower-ranked ones may still fit."""
    return hook_client.whole_envelopes(hook_client.envelopes(response), MAX_CONTEXT_UNITS,
                                       _units)


def _units(text: str) -> int:
    """Length as Claude Code (JavaScript) counts it: UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def hook_output(context: str) -> str:
    """The JSON Claude Code reads from a UserPromptSubmit hook's stdout."""
    return hook_client.hook_output(EVENT, context)


def run_hook(stdin: bytes, *, url: str, provider: str, timeout_ms: float,
             token: str | None = None, max_tokens: int = MAX_CONTEXT_TOKENS,
             home: str = "") -> str | None:
    """The hook's stdout for one input, or None to print nothing. Never raises."""
    deadline = time.monotonic() + timeout_ms / 1000
    try:
        body = retrieve_request(json.loads(stdin), provider, max_tokens)
        context = additional_context(post_json(url, "/v1/retrieve", body, deadline=deadline,
                                               token=token, home=home))
        return hook_output(context) if context else None
    except Exception as error:  # fail-open: whatever went wrong, Claude Code goes on unchanged
        hook_client.fail_open(error, home, "claude-code")
        return None


DEFAULTS = {"url": DEFAULT_URL, "home": "", "provider": DEFAULT_PROVIDER,
            "timeout-ms": str(DEFAULT_TIMEOUT_MS), "max-tokens": str(MAX_CONTEXT_TOKENS)}


def _run(stdin: bytes, options: dict[str, str]) -> str | None:
    return run_hook(stdin, url=options["url"], provider=options["provider"],
                    timeout_ms=float(options["timeout-ms"]),
                    token=os.environ.get("LOOKBACK_TOKEN"),
                    max_tokens=int(options["max-tokens"]), home=options["home"])


def main(argv: list[str] | None = None) -> int:
    """``python -S -I claude_hook.py [--home H | --url U] [--provider P] [--timeout-ms T]
    [--max-tokens N]``; always exits 0."""
    return hook_client.main(_run, DEFAULTS, argv)


if __name__ == "__main__":
    sys.exit(main())

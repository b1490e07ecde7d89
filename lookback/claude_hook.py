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

Cost: Claude Code waits for the hook on every prompt, so this file imports only the
standard library (no ``lookback`` package, no ``http.client`` or ``urllib``, no IDNA
codec) and can run as a plain script under ``python -S -I``, which skips ``site`` and
the environment: that is the command ``lookback install claude-code`` writes.
``lookback hook claude-code`` runs the same code through the CLI (slower to start).
bench/bench_claude_hook.py measures both.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

DEFAULT_URL = "http://127.0.0.1:8765"
DEFAULT_PROVIDER = "anthropic"
DEFAULT_TIMEOUT_MS = 1500.0
#: Hook input is small (a prompt and three strings); a larger stdin is not read whole.
MAX_INPUT_BYTES = 4_000_000
#: The reader's answer is bounded by its token budget; this caps what is read regardless.
MAX_ANSWER_BYTES = 8_000_000
EVENT = "UserPromptSubmit"
SEPARATOR = "\n\n"
#: Claude Code 2.1.328 replaces an additionalContext longer than 10,000 characters by a
#: 2 KB preview and the path of a file holding the rest, which would cut evidence in
#: half; so the hook hands over only whole envelopes up to that length.
MAX_CONTEXT_UNITS = 10_000
#: The evidence budget asked of the reader: what fits in that limit (4 characters a token,
#: the reader's estimate), unless the settings ask for less.
MAX_CONTEXT_TOKENS = MAX_CONTEXT_UNITS // 4


class HookSkipped(Exception):
    """Nothing to add for this prompt (the reason is never printed: fail-open)."""


def retrieve_request(hook_input: object, provider: str,
                     max_tokens: int = MAX_CONTEXT_TOKENS) -> dict:
    """The retrieve body for one hook input; HookSkipped when it is not a usable prompt."""
    if not isinstance(hook_input, dict):
        raise HookSkipped("hook input is not an object")
    event = hook_input.get("hook_event_name")
    if event not in (None, EVENT):
        raise HookSkipped("not a UserPromptSubmit event")
    prompt, transcript = hook_input.get("prompt"), hook_input.get("transcript_path")
    if not isinstance(prompt, str) or not prompt.strip():
        raise HookSkipped("no prompt")
    if not isinstance(transcript, str) or not os.path.isabs(transcript):
        raise HookSkipped("no absolute transcript path")
    return {"session_file": transcript, "message": prompt, "provider": provider,
            "max_retrieved_history_tokens": max_tokens}


def additional_context(response: object) -> str | None:
    """The evidence envelopes of a retrieve response, in rank order, blank-line separated
    (None: none). Envelopes are whole or left out: the ones that would push the text past
    ``MAX_CONTEXT_UNITS`` are skipped, and smaller lower-ranked ones may still fit."""
    if not isinstance(response, dict) or response.get("status") != "ok":
        return None
    chosen: list[str] = []
    used = -len(SEPARATOR)
    for text in _envelopes(response.get("evidence")):
        size = _units(text) + len(SEPARATOR)
        if used + size <= MAX_CONTEXT_UNITS:
            chosen.append(text)
            used += size
    return SEPARATOR.join(chosen) if chosen else None


def _envelopes(evidence: object) -> list[str]:
    texts: list[str] = []
    for item in evidence if isinstance(evidence, list) else []:
        message = item.get("message") if isinstance(item, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.append("".join(block["text"] for block in content
                                 if isinstance(block, dict)
                                 and isinstance(block.get("text"), str)))
    return [text for text in texts if text]


def _units(text: str) -> int:
    """Length as Claude Code (JavaScript) counts it: UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def hook_output(context: str) -> str:
    """The JSON Claude Code reads from a UserPromptSubmit hook's stdout."""
    return json.dumps({"hookSpecificOutput": {"hookEventName": EVENT,
                                              "additionalContext": context}},
                      ensure_ascii=False)


def post_json(url: str, path: str, body: dict, *, deadline: float,
              token: str | None = None) -> object:
    """POST ``body`` as JSON and parse the JSON answer, all before ``deadline``
    (``time.monotonic()``). A plain HTTP/1.1 exchange on one socket."""
    host, port, base = split_url(url)
    payload = json.dumps(body, ensure_ascii=False).encode()
    head = [f"POST {base}{path} HTTP/1.1", f"Host: {host}:{port}",
            "Content-Type: application/json", f"Content-Length: {len(payload)}",
            "Connection: close"]
    if token:
        head.append(f"Authorization: Bearer {token}")
    request = ("\r\n".join(head) + "\r\n\r\n").encode() + payload
    with _connect(host, port, deadline) as connection:
        connection.sendall(request)
        answer = _read_all(connection, deadline)
    return _parse_http(answer)


def split_url(url: str) -> tuple[str, int, str]:
    """(host, port, path prefix) of ``http://host[:port][/prefix]`` (``urllib.parse``
    would cost an import on every prompt)."""
    if not url.startswith("http://"):
        raise HookSkipped("reader URL must be http://host:port")
    netloc, slash, prefix = url[len("http://"):].partition("/")
    host, port = netloc, "80"
    if netloc.startswith("["):  # [::1]:8765
        host, _, rest = netloc[1:].partition("]")
        port = rest.removeprefix(":") or port
    elif ":" in netloc:
        host, _, port = netloc.rpartition(":")
    if not host or not port.isdigit():
        raise HookSkipped("reader URL must be http://host:port")
    return host, int(port), (slash + prefix).rstrip("/")


def _connect(host: str, port: int, deadline: float) -> socket.socket:
    """A connected socket. The host goes to getaddrinfo as bytes: a str would be encoded
    with the IDNA codec, whose import (stringprep, unicodedata) costs more than the rest."""
    try:
        name: str | bytes = host.encode("ascii")
    except UnicodeEncodeError:
        name = host
    family, kind, proto, _, address = socket.getaddrinfo(name, port,
                                                         type=socket.SOCK_STREAM)[0]
    connection = socket.socket(family, kind, proto)
    try:
        connection.settimeout(_left(deadline))
        connection.connect(address)
    except BaseException:
        connection.close()
        raise
    return connection


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise HookSkipped("timed out")
    return left


def _read_all(connection: socket.socket, deadline: float) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        connection.settimeout(_left(deadline))
        chunk = connection.recv(65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise HookSkipped("answer too large")


def _parse_http(answer: bytes) -> object:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = lines[0].split(" ", 2)
    if len(status) < 2 or status[1] != "200":
        raise HookSkipped("reader answered with an error")
    headers = {k.strip().lower(): v.strip()
               for k, _, v in (line.partition(":") for line in lines[1:])}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = _unchunk(body)
    elif "content-length" in headers:
        body = body[:int(headers["content-length"])]
    return json.loads(body)


def _unchunk(data: bytes) -> bytes:
    out: list[bytes] = []
    position = 0
    while True:
        end = data.index(b"\r\n", position)
        size = int(data[position:end].split(b";")[0], 16)
        if size == 0:
            return b"".join(out)
        out.append(data[end + 2:end + 2 + size])
        position = end + 2 + size + 2


def run_hook(stdin: bytes, *, url: str, provider: str, timeout_ms: float,
             token: str | None = None, max_tokens: int = MAX_CONTEXT_TOKENS) -> str | None:
    """The hook's stdout for one input, or None to print nothing. Never raises."""
    deadline = time.monotonic() + timeout_ms / 1000
    try:
        body = retrieve_request(json.loads(stdin), provider, max_tokens)
        context = additional_context(post_json(url, "/v1/retrieve", body, deadline=deadline,
                                               token=token))
        return hook_output(context) if context else None
    except Exception:  # fail-open: whatever went wrong, Claude Code goes on unchanged
        return None


def main(argv: list[str] | None = None) -> int:
    """``python -S -I claude_hook.py [--url U] [--provider P] [--timeout-ms T]
    [--max-tokens N]``; always exits 0."""
    try:
        options = _options(sys.argv[1:] if argv is None else argv)
        if os.environ.get("LOOKBACK_DISABLED"):
            return 0
        stdin = sys.stdin.buffer.read(MAX_INPUT_BYTES)
        output = run_hook(stdin, url=options["url"], provider=options["provider"],
                          timeout_ms=float(options["timeout-ms"]),
                          token=os.environ.get("LOOKBACK_TOKEN"),
                          max_tokens=int(options["max-tokens"]))
        if output:
            sys.stdout.write(output)
            sys.stdout.flush()
    except Exception:  # fail-open, even on bad arguments
        pass
    return 0


def _options(argv: list[str]) -> dict[str, str]:
    options = {"url": DEFAULT_URL, "provider": DEFAULT_PROVIDER,
               "timeout-ms": str(DEFAULT_TIMEOUT_MS), "max-tokens": str(MAX_CONTEXT_TOKENS)}
    pairs = iter(argv)
    for flag in pairs:
        name = flag.removeprefix("--")
        if name not in options:
            raise HookSkipped(f"unknown option {flag}")
        options[name] = next(pairs)
    return options


if __name__ == "__main__":
    sys.exit(main())

"""What every agent hook of Lookback shares: ask the reader, fail open, hand back whole envelopes.

The Claude Code and Codex hooks (``lookback.claude_hook``, ``lookback.codex_hook``) run before
every prompt their agent sends, so this module imports only the standard library and can be
loaded by a hook running as a plain script under ``python -S -I`` (no ``site``: the
``lookback`` package is not importable there; the hook loads this file as its sibling,
``load_sibling``). It holds the HTTP exchange with ``lookback serve`` (one socket, a deadline,
no ``http.client``/``urllib``/IDNA imports), the evidence envelopes of a retrieve answer,
the choice of whole envelopes within an agent's limit, the ``hookSpecificOutput`` JSON, the
hook options and the fail-open ``main``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable

DEFAULT_URL = "http://127.0.0.1:8765"
DEFAULT_TIMEOUT_MS = 1500.0
#: Hook input is small (a prompt and a few strings); a larger stdin is not read whole.
MAX_INPUT_BYTES = 4_000_000
#: The reader's answer is bounded by its token budget; this caps what is read regardless.
MAX_ANSWER_BYTES = 8_000_000
SEPARATOR = "\n\n"


class HookSkipped(Exception):
    """Nothing to add for this prompt (the reason is never printed: fail-open)."""


def envelopes(response: object) -> list[str]:
    """The evidence envelopes of a retrieve response, in rank order ([] unless ``ok``)."""
    if not isinstance(response, dict) or response.get("status") != "ok":
        return []
    evidence = response.get("evidence")
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


def whole_envelopes(texts: list[str], limit: int, size: Callable[[str], int]) -> str | None:
    """``texts`` in order, blank-line separated, each whole or left out: one that would push
    the total ``size`` past ``limit`` is skipped, and smaller lower-ranked ones may still
    fit (None: none fits)."""
    chosen: list[str] = []
    used = -size(SEPARATOR)
    for text in texts:
        cost = size(text) + size(SEPARATOR)
        if used + cost <= limit:
            chosen.append(text)
            used += cost
    return SEPARATOR.join(chosen) if chosen else None


def hook_output(event: str, context: str) -> str:
    """The JSON an agent reads from a hook's stdout (Claude Code's and Codex's shape)."""
    return json.dumps({"hookSpecificOutput": {"hookEventName": event,
                                              "additionalContext": context}},
                      ensure_ascii=False)


def prompt_and_transcript(hook_input: object, event: str) -> tuple[str, str]:
    """The prompt and the absolute transcript path of a hook input; HookSkipped when it is
    not a usable prompt of ``event``."""
    if not isinstance(hook_input, dict):
        raise HookSkipped("hook input is not an object")
    if hook_input.get("hook_event_name") not in (None, event):
        raise HookSkipped(f"not a {event} event")
    prompt, transcript = hook_input.get("prompt"), hook_input.get("transcript_path")
    if not isinstance(prompt, str) or not prompt.strip():
        raise HookSkipped("no prompt")
    if not isinstance(transcript, str) or not os.path.isabs(transcript):
        raise HookSkipped("no absolute transcript path")
    return prompt, transcript


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


#: Reader hosts a hook may start a reader for: this machine only.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def start_reader(url: str, started_by: str) -> None:
    """No reader listens at ``url``: run ``lookback serve --ensure`` detached (it returns at
    once and starts at most one reader per machine; ``lookback.background``), so the next
    prompt finds one. Not for a remote reader, nor with ``LOOKBACK_AUTOSTART=0``; never
    raises (fail-open)."""
    try:
        host, port, _ = split_url(url)
        if os.environ.get("LOOKBACK_AUTOSTART") == "0" or host not in LOOPBACK_HOSTS:
            return
        import subprocess  # only on this path: a hook's usual run never pays for it

        subprocess.Popen([sys.executable, "-m", "lookback", "serve", "--ensure",
                          "--started-by", started_by, "--port", str(port)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    except Exception:
        pass


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


def parse_options(argv: list[str], defaults: dict[str, str]) -> dict[str, str]:
    """``--name value`` pairs over ``defaults``; HookSkipped for an unknown one."""
    options = dict(defaults)
    pairs = iter(argv)
    for flag in pairs:
        name = flag.removeprefix("--")
        if name not in options:
            raise HookSkipped(f"unknown option {flag}")
        options[name] = next(pairs)
    return options


def main(run: Callable[[bytes, dict[str, str]], str | None], defaults: dict[str, str],
         argv: list[str] | None = None) -> int:
    """A hook script's whole life: options, ``LOOKBACK_DISABLED``, stdin, ``run``, stdout;
    always exits 0 and prints nothing on any problem, bad arguments included."""
    try:
        options = parse_options(sys.argv[1:] if argv is None else argv, defaults)
        if os.environ.get("LOOKBACK_DISABLED"):
            return 0
        output = run(sys.stdin.buffer.read(MAX_INPUT_BYTES), options)
        if output:
            sys.stdout.write(output)
            sys.stdout.flush()
    except Exception:  # fail-open, even on bad arguments
        pass
    return 0

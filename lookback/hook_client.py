"""What every agent hook of Lookback shares: ask the reader, fail open, hand back whole envelopes.

The Claude Code and Codex hooks (``lookback.claude_hook``, ``lookback.codex_hook``) run before
every prompt their agent sends, so this module imports only the standard library and can be
loaded by a hook running as a plain script under ``python -S -I`` (no ``site``: the
``lookback`` package is not importable there; the hook loads this file as its sibling,
``load_sibling``). It holds the HTTP exchange with ``lookback serve`` (one socket, a deadline,
no ``http.client``/``urllib``/IDNA imports), the evidence envelopes of a retrieve answer,
the choice of whole envelopes within an agent's limit, the ``hookSpecificOutput`` JSON, the
hook options and the fail-open ``main``.

The reader is the user's own, on the Unix socket of the data home ``--home`` names
(``lookback.local_reader``): before the prompt is sent, the directory, the socket, the
reader's uid and its identity (``GET /v1/health?projects=0`` on the same connection) are
checked; anything else gets nothing. ``--url http://host:port`` names a team reader on
TCP instead (with ``LOOKBACK_TOKEN``), which is never started from here.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable

if __package__:
    from lookback import local_reader
else:  # a plain script under ``python -S -I``: the file beside it
    import local_reader  # type: ignore[no-redef, import-not-found]

NoReader, NotOurReader = local_reader.NoReader, local_reader.NotOurReader
#: No URL: the reader on the user's Unix socket of ``--home``.
DEFAULT_URL = ""
DEFAULT_TIMEOUT_MS = 1500.0
#: Hook input is small (a prompt and a few strings); a larger stdin is not read whole.
MAX_INPUT_BYTES = 4_000_000
#: The reader's answer is bounded by its token budget; this caps what is read regardless.
MAX_ANSWER_BYTES = 8_000_000
MAX_HEAD_BYTES = 65536
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


def post_json(url: str, path: str, body: dict[str, object], *, deadline: float,
              token: str | None = None, home: str = "") -> object:
    """POST ``body`` as JSON and parse the JSON answer, all before ``deadline``
    (``time.monotonic()``): to the TCP reader ``url``, or (no ``url``) to this user's
    reader of ``home``, verified first (``open_reader``). A plain HTTP/1.1 exchange."""
    payload = json.dumps(body, ensure_ascii=False).encode()
    return _exchange("POST", url, path, payload, deadline=deadline, token=token, home=home)


def get_json(url: str, path: str, *, deadline: float, token: str | None = None,
             home: str = "") -> object:
    """GET ``path`` of the reader (as ``post_json``)."""
    return _exchange("GET", url, path, None, deadline=deadline, token=token, home=home)


def _exchange(method: str, url: str, path: str, payload: bytes | None, *, deadline: float,
              token: str | None, home: str) -> object:
    """One request to the reader ``open_reader`` reaches, and its JSON answer."""
    with open_reader(url, home, deadline, token) as (connection, host, base):
        connection.sendall(_request(method, f"{base}{path}", host, token, payload))
        answer = _read_all(connection, deadline)
    return _parse_http(answer)


class open_reader:  # noqa: N801 (a context manager used like a function)
    """``with open_reader(url, home, deadline, token) as (connection, host, base)``: a
    connection to the reader, the Host header to send and the URL's path prefix.

    Without ``url``: this user's socket for ``home`` (the one its reader recorded, then the
    one this environment gives: ``local_reader.socket_candidates``), each checked by
    ``local_reader.connect`` (directory, owner, peer uid), then asked
    ``GET /v1/health?projects=0`` on the same connection, whose ``identity`` must be
    ``home``'s; ``NoReader`` or ``NotOurReader`` otherwise, before anything else is sent.
    ``unix:/path`` names the socket instead (checked the same way). ``http://host:port``:
    a TCP connection, as it is."""

    def __init__(self, url: str, home: str, deadline: float, token: str | None) -> None:
        self.url, self.home, self.deadline, self.token = url, home, deadline, token
        self.connection: socket.socket | None = None
        #: The socket reached (without ``url``: the first candidate that proved ours).
        self.path = ""

    def __enter__(self) -> tuple[socket.socket, str, str]:
        if self.url and not self.url.startswith(local_reader.UNIX_PREFIX):
            host, port, base = split_url(self.url)
            self.connection = _connect(host, port, self.deadline)
            return self.connection, f"{host}:{port}", base
        if not self.home:
            raise HookSkipped("no data home to find the reader by")
        paths = [self.url[len(local_reader.UNIX_PREFIX):]] if self.url \
            else local_reader.socket_candidates(self.home)
        refused: local_reader.NotOurReader | None = None
        for path in paths:  # the recorded socket first, then this environment's
            try:
                self.connection = self._verified(path)
            except NoReader:
                continue
            except NotOurReader as error:
                # A recorded socket that is not ours is a stale hint: looked past (nothing
                # was sent); only where this environment puts the reader is a refusal.
                refused = error if path == paths[-1] else None
                continue
            self.path = path
            return self.connection, "localhost", ""
        if refused is not None:
            raise refused
        raise NoReader(f"no reader at {' or '.join(paths)}")

    def _verified(self, path: str) -> socket.socket:
        connection = local_reader.connect(path, _left(self.deadline))
        try:
            # No token with it: the identity is answered without one, and nothing is
            # given to a process before it has proved to be this reader.
            connection.sendall(_request("GET", "/v1/health?projects=0", "localhost",
                                        None, None, keep_alive=True))
            local_reader.check_identity(_read_one(connection, self.deadline), self.home)
        except BaseException:
            connection.close()
            raise
        return connection

    def __exit__(self, *exc: object) -> None:
        if self.connection is not None:
            self.connection.close()


def _request(method: str, target: str, host: str, token: str | None,
             payload: bytes | None, *, keep_alive: bool = False) -> bytes:
    head = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    if payload is not None:
        head += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
    head.append("Connection: keep-alive" if keep_alive else "Connection: close")
    if token:
        head.append(f"Authorization: Bearer {token}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + (payload or b"")


def _read_one(connection: socket.socket, deadline: float) -> object:
    """One answer of a kept-alive connection (the reader always sends its length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD_BYTES:
            raise NotOurReader("what answers there is no reader")
        data += _recv(connection, deadline)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:]
                   if line.lower().startswith(b"content-length:")), None)
    if length is None or length > MAX_ANSWER_BYTES:
        raise NotOurReader("what answers there is no reader")
    while len(body) < length:
        body += _recv(connection, deadline)
    try:
        return _parse_http(head + b"\r\n\r\n" + body)
    except ValueError:  # not JSON (a 401 or 403 is a HookSkipped: the reader, no token)
        raise NotOurReader("what answers there is no reader") from None


def _recv(connection: socket.socket, deadline: float) -> bytes:
    connection.settimeout(_left(deadline))
    chunk = connection.recv(65536)
    if not chunk:
        raise NotOurReader("the reader closed the connection")
    return chunk


def start_reader(home: str, started_by: str) -> None:
    """No reader listens on the user's socket for ``home``: run ``lookback serve --ensure``
    detached (it returns at once and starts at most one reader per data home;
    ``lookback.background``), so the next prompt finds one. Not with
    ``LOOKBACK_AUTOSTART=0``; never raises (fail-open)."""
    try:
        if os.environ.get("LOOKBACK_AUTOSTART") == "0" or not home:
            return
        import subprocess  # only on this path: a hook's usual run never pays for it

        subprocess.Popen([sys.executable, "-m", "lookback", "--home", home, "serve",
                          "--ensure", "--started-by", started_by],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    except Exception:
        pass


def fail_open(error: Exception, home: str, started_by: str) -> None:
    """What a hook does when a prompt gets nothing because of ``error``: no reader, start
    one for the next prompt (``start_reader``); not this user's reader, say why
    (``not_ours``); anything else, nothing. Never raises."""
    if isinstance(error, NoReader):
        start_reader(home, started_by)
    elif isinstance(error, NotOurReader):
        not_ours(error)


def not_ours(error: Exception) -> None:
    """Say on stderr, once per prompt, why nothing was sent (the agent shows a hook's
    stderr in its debug view; the prompt goes on unchanged)."""
    try:
        sys.stderr.write(f"lookback: nothing sent: {error}\n")
    except Exception:
        pass


def split_url(url: str) -> tuple[str, int, str]:
    """(host, port, path prefix) of ``http://host[:port][/prefix]`` (``urllib.parse``
    would cost an import on every prompt)."""
    if not url.startswith("http://"):
        raise HookSkipped("reader URL must be http://host:port or unix:/path")
    netloc, slash, prefix = url[len("http://"):].partition("/")
    host, port = netloc, "80"
    if netloc.startswith("["):  # [::1]:8765
        host, _, rest = netloc[1:].partition("]")
        port = rest.removeprefix(":") or port
    elif ":" in netloc:
        host, _, port = netloc.rpartition(":")
    if not host or not port.isdigit():
        raise HookSkipped("reader URL must be http://host:port or unix:/path")
    return host, int(port), (slash + prefix).rstrip("/")


def http_url(host: str, port: int) -> str:
    """``http://host:port``, an IPv6 address in brackets: what ``split_url`` reads."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


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

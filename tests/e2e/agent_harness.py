"""What the Claude Code and Codex harnesses share: the pinned CLI's cache folder, a fake
streaming model API on 127.0.0.1 that records what the agent sent, a clean environment, and
one run of the real CLI.

Each agent's harness (`claude_harness`, `codex_harness`) adds only what is its own: the wire
format (how a request is recorded and answered, `FakeModelAPI.answer`), the command line and
where the sessions land.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple, Self

#: An HTTP answer: (status, content type, body).
Answer = tuple[int, str, bytes]
NOT_FOUND: Answer = (404, "application/json", b'{"error": "not found"}')


def cli_cache_dir(variable: str, folder: str) -> Path:
    """Where a pinned CLI is installed: `$<variable>` or ~/.cache/lookback-e2e/<folder>."""
    configured = os.environ.get(variable)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "lookback-e2e" / folder


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class FakeModelAPI:
    """A streaming model API on 127.0.0.1 for the `with` block; records every model request.

    A subclass says what a POST answers (`answer`, which calls `record` for the requests the
    test sees) and, if it needs to, a GET (`answer_get`); `base_path` is appended to `url`.
    """

    base_path = ""
    #: HTTP/1.1 keeps the connection open between requests (Codex expects it).
    protocol_version = "HTTP/1.0"
    #: Whether `take` restarts the request numbers (the recorded Claude Code fixtures number
    #: each run's replies from 1) or they count on across runs (Codex).
    numbers_per_run = False

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self._lock = threading.Lock()
        self._count = 0
        self._server: _Server | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, f"{type(self).__name__} is not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}{self.base_path}"

    def record(self, request: Any) -> int:
        """Keep `request`; its number (from 1), which the reply's ids carry."""
        with self._lock:
            self.requests.append(request)
            self._count += 1
            return self._count

    def take(self) -> list[Any]:
        """The model requests recorded so far, clearing the record."""
        with self._lock:
            taken, self.requests = self.requests, []
            if self.numbers_per_run:
                self._count = 0
        return taken

    def answer(self, path: str, headers: Mapping[str, str], raw: bytes) -> Answer:
        raise NotImplementedError

    def answer_get(self, path: str) -> Answer:
        return NOT_FOUND

    @classmethod
    def serving(cls) -> Iterator[Self]:
        """One started API for the caller's block: a test module's fixture is
        ``model = pytest.fixture(FakeX.serving, name="model")``."""
        with cls() as api:
            yield api

    def __enter__(self) -> Self:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = owner.protocol_version

            def do_POST(self) -> None:  # noqa: N802 (http.server naming)
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                self._send(*owner.answer(self.path, headers, raw))

            def do_GET(self) -> None:  # noqa: N802
                self._send(*owner.answer_get(self.path))

            def _send(self, status: int, kind: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = _Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()


def sse(events: Iterable[tuple[str, Any]]) -> bytes:
    """A server-sent event stream of (event name, data sent as JSON) pairs."""
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


class AgentRun(NamedTuple):
    returncode: int
    stdout: str
    stderr: str
    requests: list[Any]


def clean_environment(own: tuple[str, ...], values: Mapping[str, str],
                      env: Mapping[str, str] | None) -> dict[str, str]:
    """The machine's environment without any LOOKBACK_* variable or the agent's `own`
    prefixes, so nothing of its set-up leaks in; then `values` (the private homes, the fake
    model), LOOKBACK_AUTOSTART=0 (a "reader down" stays down: the hook starts none), and last
    the test's `env`."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LOOKBACK_", *own))}
    base.update(values, LOOKBACK_AUTOSTART="0")
    base.update(env or {})
    return base


def run_cli(command: list[str], cwd: Path, model: FakeModelAPI, env: dict[str, str],
              timeout: float, **options: Any) -> AgentRun:
    """One run of the real CLI in `cwd`; what the model received during it."""
    model.take()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False, **options)
    return AgentRun(done.returncode, done.stdout, done.stderr, model.take())

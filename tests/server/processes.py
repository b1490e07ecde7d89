"""A real ``lookback serve`` process for the reader tests, and condition waits."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .client import Client


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(condition: Callable[[], Any], what: str, seconds: float = 60.0) -> Any:
    """``condition()``'s first truthy value, polled (``seconds``: a bound, not a claim)."""
    deadline = time.monotonic() + seconds
    while not (found := condition()):
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)
    return found


class ServeProcess:
    """``lookback serve`` in its own process, on the home's Unix socket (the address from
    its first log line)."""

    def __init__(self, home: Path, environ: dict[str, str],
                 max_open_files: int | None = None) -> None:
        self.log = home.parent / "serve.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "lookback.cli", "--home", str(home), "serve", "--quiet"],
            env={**os.environ, **environ}, stdout=subprocess.DEVNULL,
            stderr=self.log.open("w"), preexec_fn=lambda: _child_setup(max_open_files))
        self.address: str = wait_until(self._socket, "the reader listening")
        self.client = Client(self.address)

    def _socket(self) -> str | None:
        assert self.process.poll() is None, self.log.read_text()
        for line in self.log.read_text().splitlines():
            if '"listening"' in line:
                return str(json.loads(line)["address"]).removeprefix("unix:")
        return None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _child_setup(max_open_files: int | None) -> None:
    """In the child before ``exec``: SIGINT back to its default (a suite run from a
    background job, ``pytest &`` without job control, inherits it ignored, and the reader
    would ignore the SIGINT its test sends), and the open-file limit when one is given."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if max_open_files is not None:
        _limit_files(max_open_files)


def _limit_files(count: int) -> None:
    """``ulimit -n count`` for the child (its soft limit; the hard one stays)."""
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (count, hard))

"""Two indexed projects (copies of the compacted e2e session under different cwds), a way to
start the real ``lookback mcp --http`` on a free port, the reader serving MCP in-process
(``lookback serve --mcp``), and calling tools in turn."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lookback.mcp_server import mount_in
from lookback.server import make_server
from tests.server.conftest import settings_for, write_session
from tests.support import index_paths

SESSION_ID = "0193f7a2-5c1e-7b3a-9d4e-2f6a8c0b1d3e"
#: The early turn the fixture's compaction removed from the model's context.
EARLY_USER_TEXT = "get messages(): Message[]; not AppMessage with our extension?"
TOKEN_A, TOKEN_B = "token-for-project-a", "token-for-project-b"
LOOKBACK = [sys.executable, "-m", "lookback.cli"]


@dataclass
class Projects:
    home: Path
    cwd_a: Path
    cwd_b: Path
    file_a: Path
    file_b: Path


def unique_session(source: Path, target: Path, session_id: str) -> Path:
    """A copy of ``source`` with another session id (project B's own session)."""
    lines = source.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    header["id"] = session_id
    target.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n", encoding="utf-8")
    return target


def make_projects(tmp_path: Path, home: Path) -> Projects:
    cwd_a, cwd_b = tmp_path / "alpha", tmp_path / "beta"
    cwd_a.mkdir()
    cwd_b.mkdir()
    file_a = write_session(tmp_path / "sessions-a", cwd_a)
    file_b = write_session(tmp_path / "sessions-b", cwd_b)
    unique_session(file_b, file_b, "0193f7a2-0000-7b3a-9d4e-2f6a8c0b1d3e")
    report = index_paths(home, file_a, file_b)
    assert report.read.entries == 14
    return Projects(home, cwd_a, cwd_b, file_a, file_b)


@pytest.fixture
def projects(tmp_path: Path, home: Path) -> Projects:
    return make_projects(tmp_path, home)


@pytest.fixture(scope="module")
def shared_projects(tmp_path_factory: pytest.TempPathFactory) -> Projects:
    """The same two projects, once per module, for tests that only read them."""
    root = tmp_path_factory.mktemp("mcp")
    (root / "home").mkdir()
    return make_projects(root, root / "home")


def write_config(home: Path, text: str) -> Path:
    config = home / "config.toml"
    config.write_text(text, encoding="utf-8")
    return config


def environment(home: Path, **extra: str) -> dict[str, str]:
    """The machine's environment without its Lookback settings, pointed at ``home``; the
    background tailer is off (nothing else writes these sessions)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("LOOKBACK_")}
    base.update(LOOKBACK_HOME=str(home), LOOKBACK_CONFIG=str(home / "config.toml"),
                LOOKBACK_FRESHNESS__TAIL="false", LOOKBACK_SESSIONS_DIR=str(home / "none"))
    base.update(extra)
    return base


@pytest.fixture(scope="module")
def mcp_http(shared_projects: Projects) -> Iterator[str]:
    """``lookback mcp --http`` with token A granted project A, token B project B."""
    projects = shared_projects
    write_config(projects.home, "[server.tokens]\n"
                 f'"{TOKEN_A}" = ["{projects.cwd_a}"]\n"{TOKEN_B}" = ["{projects.cwd_b}"]\n')
    with http_server(environment(projects.home)) as url:
        yield url


class http_server:  # noqa: N801 (a context manager used like a function)
    """Run ``lookback mcp --http --port 0``; the ``with`` value is its /mcp URL."""

    def __init__(self, env: dict[str, str], *flags: str) -> None:
        self.command = [*LOOKBACK, "mcp", "--http", "--port", "0", "--quiet", *flags]
        self.env = env

    def __enter__(self) -> str:
        self.process = subprocess.Popen(self.command, env=self.env, stderr=subprocess.PIPE,
                                        stdout=subprocess.DEVNULL, text=True,
                                        cwd=Path(__file__).resolve().parents[2])
        seen = []
        assert self.process.stderr is not None
        for line in self.process.stderr:  # the listening line comes once it is bound
            seen.append(line)
            if '"listening"' in line:
                return json.loads(line)["url"]
        self.process.wait()
        raise AssertionError(f"lookback mcp --http exited: {''.join(seen)[-2000:]}")

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        try:
            code = self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError("lookback mcp --http did not stop on SIGTERM") from None
        assert code == 0, f"lookback mcp --http exited {code} on SIGTERM"


@contextmanager
def reader_with_mcp(projects: Projects) -> Iterator[str]:
    """``lookback serve --mcp`` in-process over ``projects``, token A granted project A and
    token B project B (no background tailer); the ``with`` value is its base URL."""
    tokens = {TOKEN_A: [str(projects.cwd_a)], TOKEN_B: [str(projects.cwd_b)]}
    settings = settings_for(projects.home, server__tokens=tokens, freshness__tail=False)
    server = make_server(settings, "127.0.0.1", 0)
    mounted = mount_in(server)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        mounted.close()
        server.app.close()
        thread.join(timeout=5)


async def call_each(client: Any, requests: tuple[tuple[str, dict], ...]) -> list[tuple[bool, str]]:
    """Call each (tool, arguments) in turn on an open MCP client: (is error, text) of each."""
    found = []
    for name, arguments in requests:
        result = await client.call_tool(name, arguments)
        found.append((bool(result.is_error), "".join(c.text for c in result.content)))
    return found

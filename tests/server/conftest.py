"""Fixtures for the reader-service tests: an indexed copy of the compacted e2e session,
settings pointing at it, a ``ReaderApp`` and a live ``lookback serve`` on the home's Unix
socket (under the run's own runtime folder, ``tests/conftest.py``)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lookback import local_reader
from lookback.server import ReaderApp, make_server
from lookback.settings import Settings, load_settings
from tests.support import index_paths, new_folder

from .client import Client

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "pi-e2e" / "compacted-session.jsonl"
SESSION_ID = "0193f7a2-5c1e-7b3a-9d4e-2f6a8c0b1d3e"
# Asks about the early turn the compaction removed (a1000001/a1000002 are out of context).
PROMPT = "Does `AgentSession.messages` still return `AppMessage[]` after the refactor?"
EARLY_USER_TEXT = "get messages(): Message[]; not AppMessage with our extension?"


def write_session(folder: Path, cwd: Path, source: Path = FIXTURE) -> Path:
    """A copy of ``source`` whose header ``cwd`` is ``cwd``."""
    lines = source.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    header["cwd"] = str(cwd)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / source.name
    target.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n", encoding="utf-8")
    return target


def settings_for(home: Path, **values: Any) -> Settings:
    """Settings for ``home``; ``values`` are dotted keys (``server__tokens=...``)."""
    environ = {"LOOKBACK_HOME": str(home), "LOOKBACK_CONFIG": str(home / "none.toml")}
    (home / "none.toml").write_text("")
    overrides: dict[str, Any] = {}
    for dotted, value in values.items():
        section, _, key = dotted.partition("__")
        if key:
            overrides.setdefault(section, {})[key] = value
        else:
            overrides[section] = value
    return load_settings(overrides, environ)


@pytest.fixture
def project_cwd(tmp_path: Path) -> Path:
    return new_folder(tmp_path / "project")


@pytest.fixture
def session_file(tmp_path: Path, project_cwd: Path, home: Path) -> Path:
    """The compacted session, indexed into ``home``."""
    path = write_session(tmp_path / "sessions", project_cwd)
    report = index_paths(home, path)
    assert report.read.entries == 7
    return path


def retrieve_body(session_file: Path, message: str = PROMPT, **extra: Any) -> dict:
    return {"session_file": str(session_file), "message": message, **extra}


@pytest.fixture
def app(home: Path, session_file: Path) -> Iterator[ReaderApp]:
    reader_app = ReaderApp(settings_for(home))
    yield reader_app
    reader_app.close()


def start_server(settings: Settings, socket_path: str | None = None
                 ) -> tuple[Any, threading.Thread]:
    server = make_server(settings, socket_path=socket_path)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


def stop_server(server: Any, thread: threading.Thread) -> None:
    server.shutdown()
    server.server_close()
    server.app.close()
    thread.join(timeout=5)


@pytest.fixture
def serve(home: Path, session_file: Path):
    """``serve(**settings)`` starts a live server on the home's socket and returns a
    ``Client``."""
    started: list[tuple[Any, threading.Thread]] = []

    def start(**values: Any) -> Client:
        settings = settings_for(home, **values)
        # The first on the home's own socket, any other beside it (one home, one socket).
        path = local_reader.socket_path(home)
        server, thread = start_server(settings, path.replace(".sock", f"-{len(started)}.sock")
                                      if started else None)
        started.append((server, thread))
        return Client(server.server_address, server.app)

    yield start
    for server, thread in started:
        stop_server(server, thread)

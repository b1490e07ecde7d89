"""Helpers for the data-control tests (docs/data-controls.md): a Pi session with a compaction
(its early turns out of the model's context, so retrieval returns them), and every path that
returns session text, asked at once."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lookback import api, claude_hook, codex_hook
from lookback.mcp import HistoryTools
from lookback.settings import Settings
from tests.server.client import Client
from tests.server.conftest import settings_for, start_server, stop_server

LOOKBACK = [sys.executable, "-m", "lookback.cli"]


def pi_session(path: Path, texts: list[str], *, cwd: str, session_id: str,
               kept_from: int | None = None) -> Path:
    """A Pi v3 session of ``texts`` (ids ``m0``…, user and assistant in turn); with
    ``kept_from``, a compaction after them keeps ``m<kept_from>`` on, so the earlier
    turns are out of context, and two more turns follow it."""
    lines: list[dict[str, Any]] = [{"type": "session", "version": 3, "id": session_id,
                                    "cwd": cwd, "timestamp": "2026-01-01T00:00:00Z"}]

    def message(entry_id: str, parent: str | None, number: int, text: str) -> dict[str, Any]:
        return {"type": "message", "id": entry_id, "parentId": parent,
                "timestamp": f"2026-01-01T00:00:{number:02d}Z",
                "message": {"role": "user" if number % 2 == 0 else "assistant",
                            "content": [{"type": "text", "text": text}],
                            "timestamp": 1767225600000 + number * 1000}}

    parent = None
    for number, text in enumerate(texts):
        lines.append(message(f"m{number}", parent, number, text))
        parent = f"m{number}"
    if kept_from is not None:
        lines.append({"type": "compaction", "id": "c1", "parentId": parent,
                      "timestamp": "2026-01-01T00:01:00Z", "firstKeptEntryId": f"m{kept_from}",
                      "summary": "The user and the assistant worked on the project.",
                      "tokensBefore": 1000})
        lines.append(message("after1", "c1", 60, "what should we look at next today?"))
        lines.append(message("after2", "after1", 61, "let us look at the open questions."))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def lookback(home: Path, *args: str, stdin: str | None = None,
             **environ: str) -> subprocess.CompletedProcess:
    """The ``lookback`` command, as a user runs it, on ``home`` (``environ``: more
    variables, such as settings): no settings file but an empty one."""
    if not (home / "none.toml").exists():
        (home / "none.toml").write_text("")
    return subprocess.run([*LOOKBACK, "--home", str(home), *args], capture_output=True,
                          text=True, timeout=180, input=stdin,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(home.parent),
                               "LOOKBACK_CONFIG": str(home / "none.toml"), **environ})


@dataclass
class Reader:
    """A live ``lookback serve`` (in process) and its MCP tools."""

    settings: Settings
    client: Client
    url: str  # its address: ``unix:`` and its socket
    home: str  # the data home a hook checks it by
    tools: HistoryTools


@contextmanager
def live_reader(home: Path, **values: Any) -> Iterator[Reader]:
    settings = settings_for(home, freshness__tail=False, **values)
    server, thread = start_server(settings)
    try:
        path = server.server_address
        yield Reader(settings, Client(path, server.app), f"unix:{path}", str(home),
                     HistoryTools(server.app))
    finally:
        stop_server(server, thread)


def every_answer(home: Path, session_file: Path, query: str, entry_ids: list[str],
                 environ: dict[str, str] | None = None, **settings: Any) -> dict[str, str]:
    """What every path that returns session text answers about ``query`` (retrieval,
    search over the project, and reading each of ``entry_ids`` with its neighbours), by
    path: the Python API, HTTP, the CLI, the MCP tools, the Claude Code and Codex hooks.
    ``settings`` are the reader's, ``environ`` the CLI's (the same settings as variables)."""
    found: dict[str, str] = {}
    with live_reader(home, **settings) as reader:
        retrieve = {"session_file": str(session_file), "message": query}
        search = {"text": query, "session_file": str(session_file), "scope": "project"}
        sources = [{"session_file": str(session_file), "entry_id": entry_id, "before": 5,
                    "after": 5} for entry_id in entry_ids]
        found["api"] = json.dumps([api.retrieve(retrieve, settings=reader.settings),
                                   api.search(search, settings=reader.settings),
                                   *(api.source(s, settings=reader.settings) for s in sources)])
        found["http"] = json.dumps([reader.client.post("/v1/retrieve", retrieve).body,
                                    reader.client.post("/v1/search", search).body,
                                    *(reader.client.post("/v1/source", s).body
                                      for s in sources)])
        found["mcp"] = "\n".join([
            reader.tools.search(None, query=query, scope="project",
                                session_file=str(session_file)),
            *(reader.tools.read(None, entry_id=s["entry_id"], session_file=str(session_file))
              for s in sources)])
        hook = json.dumps({"session_id": "s", "transcript_path": str(session_file),
                           "cwd": str(home), "prompt": query,
                           "hook_event_name": "UserPromptSubmit"}).encode()
        found["hook"] = claude_hook.run_hook(hook, url=reader.url, home=reader.home,
                                             provider="anthropic", timeout_ms=5000) or ""
        codex = json.dumps({"session_id": "s", "turn_id": "t", "transcript_path":
                            str(session_file), "cwd": str(home), "prompt": query,
                            "hook_event_name": "UserPromptSubmit"}).encode()
        found["codex-hook"] = codex_hook.run_hook(codex, url=reader.url, home=reader.home,
                                                  provider="openai", timeout_ms=5000) or ""
    done = lookback(home, "search", query, "--session-file", str(session_file),
                    "--scope", "project", "--json", **(environ or {}))
    found["cli"] = done.stdout + done.stderr
    return found


def holding(answers: dict[str, str], text: str) -> list[str]:
    """The paths whose answers hold ``text`` (case folded)."""
    return sorted(path for path, answer in answers.items() if text.casefold() in answer.casefold())


def folder_bytes(folder: Path) -> bytes:
    """Every byte of every file under ``folder``, case folded (ASCII). Read by another
    process: closing a file this process opened would drop the POSIX locks its SQLite
    connections hold on it, and they would miss later commits."""
    files = [str(path) for path in sorted(folder.rglob("*")) if path.is_file()]
    return subprocess.run(["cat", *files], capture_output=True, check=True).stdout.lower()


DAMAGE_PROJECTIONS = """
import sys, apsw
path = sys.argv[1]
connection = apsw.Connection(path)
pages = [row[0] for row in connection.execute(
    "SELECT pageno FROM dbstat WHERE name LIKE 'entries_fts%' OR name = 'entries'")]
size = connection.execute("PRAGMA page_size").fetchone()[0]
connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
connection.close()
with open(path, "r+b") as handle:
    for page in pages:
        handle.seek((page - 1) * size + 8)
        handle.write(b"\\x5a" * 64)
"""


def damage_projections(index: Path) -> None:
    """Overwrite the entries' and full-text pages of ``index``, not its event log (as
    tests/test_repair.py does), in another process (see ``folder_bytes``)."""
    subprocess.run([sys.executable, "-c", DAMAGE_PROJECTIONS, str(index)], check=True)

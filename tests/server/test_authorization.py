"""A token reads and writes only the projects it was granted, whatever the files it names
do between the request's authorization and its read or write (issue 20, items 1 and 2).

The races are reproduced deterministically: the engine the app calls is wrapped so the
test acts (repoints a symlink, rewrites a header) exactly between authorization and the
engine's read, instead of hoping a timer lands there.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lookback import api
from lookback.server import ReaderApp
from tests.support import index_paths

from .conftest import FIXTURE, PROMPT, settings_for

TOKEN_A = "token-a-00000001"
TOKEN_B = "token-b-00000002"
EARLY_TEXT = "get messages(): Message[]; not AppMessage with our extension?"


def marked_session(folder: Path, cwd: Path, session_id: str, marker: str) -> Path:
    """The compacted fixture as session ``session_id`` of ``cwd``, its early user turn
    carrying ``marker`` (so whose evidence an answer carries is visible)."""
    lines = FIXTURE.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    header.update(cwd=str(cwd), id=session_id)
    body = [line.replace(EARLY_TEXT, f"{EARLY_TEXT} {marker}") for line in lines[1:]]
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{session_id}.jsonl"
    target.write_text("\n".join([json.dumps(header), *body]) + "\n", encoding="utf-8")
    return target


@pytest.fixture
def two_projects(tmp_path: Path, home: Path) -> SimpleNamespace:
    cwd_a, cwd_b = tmp_path / "projA", tmp_path / "projB"
    a = marked_session(tmp_path / "sessions-a", cwd_a, "sess-a", "alphamarker")
    b = marked_session(tmp_path / "sessions-b", cwd_b, "sess-b", "bravomarker")
    index_paths(home, a, b)
    link = tmp_path / "mine" / "link.jsonl"
    link.parent.mkdir()
    link.symlink_to(a)
    tokens = {TOKEN_A: [str(cwd_a)], TOKEN_B: [str(cwd_b)]}
    return SimpleNamespace(a=a, b=b, cwd_a=cwd_a, cwd_b=cwd_b, link=link, tokens=tokens)


class HookedEngine:
    """``lookback.api`` with ``before()`` run at the start of every engine call: the
    point between the app's authorization and the engine's read."""

    def __init__(self, before: Any) -> None:
        self.before = before

    def __getattr__(self, name: str) -> Any:
        return getattr(api, name)

    def retrieve(self, body: dict, **kwargs: Any) -> dict:
        self.before()
        return api.retrieve(body, **kwargs)

    def search(self, body: dict, **kwargs: Any) -> dict:
        self.before()
        return api.search(body, **kwargs)

    def source(self, body: dict, **kwargs: Any) -> dict:
        self.before()
        return api.source(body, **kwargs)


def repoint(link: Path, target: Path) -> None:
    link.unlink()
    link.symlink_to(target)


def call(app: ReaderApp, path: str, body: dict, token: str) -> tuple[int, Any]:
    status, payload, _ = app.handle("POST", path, f"Bearer {token}", json.dumps(body).encode())
    return status, json.loads(payload) if isinstance(payload, bytes) else payload


@pytest.fixture
def make_app(home: Path):
    made: list[ReaderApp] = []

    def make(tokens: dict, engine: Any = None, **values: Any) -> ReaderApp:
        reader_app = ReaderApp(settings_for(home, server__tokens=tokens, **values),
                               engine=engine)
        made.append(reader_app)
        return reader_app

    yield make
    for reader_app in made:
        reader_app.close()


# -- item 1: a symlink swapped between authorization and read ---------------------------

@pytest.mark.parametrize("path, extra", [
    ("/v1/retrieve", {"message": PROMPT}),
    ("/v1/search", {"text": "AppMessage extension", "scope": "project"}),
    ("/v1/search", {"text": "AppMessage extension", "scope": "session"}),
    ("/v1/source", {"entry_id": "a1000001"}),
])
def test_a_symlink_swapped_after_authorization_reads_the_authorized_session(
        two_projects, make_app, path, extra):
    p = two_projects
    app = make_app(p.tokens, HookedEngine(lambda: repoint(p.link, p.b)))
    status, answer = call(app, path, {"session_file": str(p.link), **extra}, TOKEN_A)
    assert status == 200
    text = json.dumps(answer)
    assert "bravomarker" not in text  # B's evidence never reaches token A
    assert "alphamarker" in text  # ...and A's own session was answered


def test_the_answer_cache_is_keyed_by_the_resolved_session(two_projects, make_app, home,
                                                          tmp_path):
    p = two_projects
    other = marked_session(tmp_path / "sessions-a", p.cwd_a, "sess-a2", "charliemarker")
    index_paths(home, other)
    app = make_app(p.tokens)
    body = {"session_file": str(p.link), "message": PROMPT}
    first = call(app, "/v1/retrieve", body, TOKEN_A)[1]
    assert "alphamarker" in json.dumps(first)
    repoint(p.link, other)  # the same request body, another session of the same project
    second = call(app, "/v1/retrieve", body, TOKEN_A)[1]
    assert "charliemarker" in json.dumps(second)
    assert "alphamarker" not in json.dumps(second)

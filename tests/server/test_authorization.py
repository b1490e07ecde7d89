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
from lookback.index.layout import project_key
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

    def retrieve_answer(self, body: Any, **kwargs: Any) -> api.RetrieveAnswer:
        self.before()
        return api.retrieve_answer(body, **kwargs)

    def search_answer(self, body: Any, **kwargs: Any) -> api.SearchAnswer:
        self.before()
        return api.search_answer(body, **kwargs)

    def source_answer(self, body: Any, **kwargs: Any) -> api.SourceAnswer:
        self.before()
        return api.source_answer(body, **kwargs)


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


# -- item 2: a file whose header is rewritten to name another project --------------------

INJECTED = "`AgentSession.messages` returns `AppMessage[]` injectedmarker"


def rewrite_in_place(path: Path, cwd: Path, session_id: str, parent: str) -> None:
    """Same inode, new content: a header naming ``cwd``'s project and an entry hung on
    ``parent`` (the last entry of that project's session)."""
    header = {"type": "session", "version": 3, "id": session_id,
              "timestamp": "2025-12-08T22:41:05.306Z", "cwd": str(cwd)}
    entry = {"type": "message", "id": "evil0001", "parentId": parent,
             "timestamp": "2025-12-08T23:09:00.000Z",
             "message": {"role": "user", "content": [{"type": "text", "text": INJECTED}],
                         "timestamp": 1765235340000}}
    inode = path.stat().st_ino
    with path.open("r+", encoding="utf-8") as handle:
        handle.truncate(0)
        handle.write(json.dumps(header) + "\n" + json.dumps(entry) + "\n")
    assert path.stat().st_ino == inode


def wait_for_jobs(app: ReaderApp, count: int) -> None:
    import time

    deadline = time.monotonic() + 60
    while app.keeper.engine.jobs_run < count:  # a condition, not a sleep that should suffice
        assert time.monotonic() < deadline, "the freshness thread never ran the job"
        time.sleep(0.01)


@pytest.mark.parametrize("how", ["nudge", "retrieve"])
def test_a_token_cannot_write_into_another_project(two_projects, make_app, tmp_path, how):
    p = two_projects
    app = make_app(p.tokens)
    evil = marked_session(tmp_path / "x", p.cwd_a, "sess-evil", "evilmarker")
    status, _ = call(app, "/v1/retrieve", {"session_file": str(evil), "message": PROMPT},
                     TOKEN_A)  # authorized for A: its header is A's, and it is indexed
    assert status == 200
    rewrite_in_place(evil, p.cwd_b, "sess-b", parent="a1000007")
    before = app.keeper.engine.jobs_run
    if how == "nudge":
        status, _ = call(app, "/v1/nudge", {"session_file": str(evil)}, TOKEN_A)
        assert status in (202, 403)
        wait_for_jobs(app, before + 1)
    else:
        status, _ = call(app, "/v1/retrieve", {"session_file": str(evil), "message": PROMPT},
                         TOKEN_A)
        assert status in (200, 403)
        wait_for_jobs(app, before + 1)
    # B's own answers carry nothing of A's text.
    question = {"project": project_key(str(p.cwd_b)), "session_id": "sess-b",
                "message": INJECTED}
    retrieved = call(app, "/v1/retrieve", question, TOKEN_B)[1]
    searched = call(app, "/v1/search", {**question, "text": "injectedmarker",
                                        "scope": "project"}, TOKEN_B)[1]
    assert retrieved["status"] == "ok"
    assert searched["status"] in ("ok", "no-query") and not searched["results"]
    shown = json.dumps(retrieved["evidence"]) + json.dumps(searched["results"])
    assert "evil0001" not in shown and "injectedmarker" not in shown
    assert app.keeper.engine.refused >= 1  # counted, not written


# -- issue 27 item 2: the tailer writes a file a token asked about only into that token's
# project, whatever the file's header says when it is read again -----------------------

def in_index(home: Path, cwd: Path, marker: str) -> bool:
    """Whether ``marker`` is anywhere in the text indexed for ``cwd``'s project."""
    from lookback.index.layout import project_dir
    from lookback.index.store import open_reader

    path = project_dir(home, str(cwd)).index_path()
    if path is None:
        return False
    connection = open_reader(path)
    try:
        return connection.execute("SELECT count(*) FROM entries WHERE instr(text, ?) > 0",
                                  (marker,)).fetchone()[0] > 0
    finally:
        connection.close()


@pytest.mark.parametrize("where", ["outside-roots", "inside-roots"])
def test_the_tailer_never_writes_a_tokens_file_into_another_project(two_projects, make_app,
                                                                    home, tmp_path, where):
    import time

    from lookback.ingest.watch import file_stamp

    p = two_projects
    roots = tmp_path / "roots"
    roots.mkdir()
    app = make_app(p.tokens, sessions_dirs=[str(roots)])
    app.keeper.engine.start_tailer()  # as `lookback serve` does
    folder = roots / "x" if where == "inside-roots" else tmp_path / "x"
    evil = marked_session(folder, p.cwd_a, "sess-evil", "evilmarker")
    status, answer = call(app, "/v1/retrieve", {"session_file": str(evil), "message": PROMPT},
                          TOKEN_A)  # asked once about its own file: indexed into A
    assert status == 200 and in_index(home, p.cwd_a, "evilmarker")
    rewrite_in_place(evil, p.cwd_b, "sess-b", parent="a1000007")
    status, answer = call(app, "/v1/nudge", {"session_file": str(evil)}, TOKEN_A)
    assert (status, answer["status"]) == (202, "queued")
    stamp = file_stamp(evil)
    deadline = time.monotonic() + 60
    # Until the rewritten file is either written into B, or refused and set aside for
    # good (its stamp marked, so no later pass of the tailer takes it up again).
    while not (in_index(home, p.cwd_b, "injectedmarker")
               or (app.keeper.engine.refused and app.keeper.engine.watcher.seen(evil) == stamp)):
        assert time.monotonic() < deadline, "the rewritten file was neither written nor refused"
        time.sleep(0.01)
    assert not in_index(home, p.cwd_b, "injectedmarker")
    question = {"project": project_key(str(p.cwd_b)), "session_id": "sess-b",
                "message": INJECTED}
    retrieved = call(app, "/v1/retrieve", question, TOKEN_B)[1]
    searched = call(app, "/v1/search", {**question, "text": "injectedmarker",
                                        "scope": "project"}, TOKEN_B)[1]
    assert retrieved["status"] == "ok" and searched["status"] == "ok"
    shown = json.dumps(retrieved["evidence"]) + json.dumps(searched["results"])
    assert "evil0001" not in shown and "injectedmarker" not in shown
    # Nothing of either project was lost: A keeps what it had indexed of the file, B its own.
    assert in_index(home, p.cwd_a, "evilmarker") and in_index(home, p.cwd_b, "bravomarker")
    # Said, not silent: the asker's next answer and the reader's health.
    again = call(app, "/v1/retrieve", {"session_file": str(evil), "message": PROMPT}, TOKEN_A)
    assert again[0] in (200, 403)
    if again[0] == 200:
        assert again[1]["diagnostics"]["freshness"]["state"] == "refused"
    health = app.handle("GET", "/v1/health", f"Bearer {TOKEN_A}", b"")[1]
    assert health["server"]["freshness"]["refused"] >= 1

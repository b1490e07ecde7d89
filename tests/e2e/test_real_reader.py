"""The real chain: `lookback index` → `lookback serve` → the Pi extension in the real Pi CLI.

The prepared session's early turn (a1000001/a1000002) was compacted away; the prompt asks about
it. With the real reader running, the model request must carry that turn as evidence messages
right before the prompt, in the specification's envelope. With the reader stopped, Pi must still
answer, with exactly the messages it sends without the extension (fail-open).
"""

from __future__ import annotations

import dataclasses
import http.server
import json
import os
import socketserver
import subprocess
import threading
from pathlib import Path

from lookback import local_reader

from . import harness

PROMPT = "Does `AgentSession.messages` still return `AppMessage[]` after the refactor?"
LOOKBACK = str(harness.REPO_ROOT / ".venv" / "bin" / "lookback")
ENVELOPE_LINES = (
    harness.EVIDENCE_HEADER,
    "Source entry: ",
    "Date: ",
    "Original role: ",
    "Retrieval score: ",
    "Reason: ",
    "The JSON string below is historical session data",
    "Quoted content JSON: ",
    harness.EVIDENCE_FOOTER,
)


def lookback_env(home: Path) -> dict[str, str]:
    return {"LOOKBACK_HOME": str(home), "LOOKBACK_CONFIG": str(home / "config.toml")}


def index_session(home: Path, session_file: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("")
    done = subprocess.run([LOOKBACK, "index", str(session_file)], env=lookback_env(home),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "indexed 7 new entries" in done.stdout


def assert_envelope(text: str) -> None:
    """The envelope of docs/specification.md, line by line, with the excerpt as one JSON string."""
    lines = text.split("\n")
    assert len(lines) == len(ENVELOPE_LINES), lines
    for line, expected in zip(lines, ENVELOPE_LINES, strict=True):
        assert line.startswith(expected), (line, expected)
    json.loads(lines[-2][len("Quoted content JSON: "):])  # a single, valid JSON string


def test_real_reader_puts_compacted_turns_before_the_prompt(
    run_pi, pi_runner: harness.PiRunner, session_file, tmp_path, project_dir
):
    home = tmp_path / "home"
    index_session(home, session_file)
    _, entries = harness.read_session(session_file)
    early_user = harness.entry_with_text(entries, "user", "not AppMessage with our extension?")
    early_answer = harness.entry_with_text(entries, "assistant", "now returns `AppMessage[]`")

    url = local_reader.address(home)  # this user's reader, on its Unix socket
    serve = [LOOKBACK, "serve"]
    with harness.reader_process(serve, url, lookback_env(home)):
        run = run_pi(session_file, PROMPT, harness.local_pi_env(home))
        manifest_cmd = run_pi(session_file, "/context manifest", harness.local_pi_env(home))
        session_id = harness.read_session(session_file)[0]["id"]
        _, manifest = harness.reader_get(url, f"/v1/manifest?session_id={session_id}")

    assert run.returncode == 0, run.stderr
    assert harness.FAKE_REPLY in run.stdout
    assert len(run.requests) == 1
    inserted = harness.evidence_before_prompt(run.requests[0], PROMPT)
    assert len(inserted) == 2
    for text in inserted:
        assert_envelope(text)
    by_source = {text.split("\n")[1]: text for text in inserted}
    answer_text = next(t for s, t in by_source.items() if early_answer["id"] in s)
    user_text = next(t for s, t in by_source.items() if early_user["id"] in s)
    assert "Original role: assistant" in answer_text
    assert json.dumps(harness.message_text(early_answer["message"]),
                      ensure_ascii=False) in answer_text
    assert "Original role: user" in user_text
    assert json.dumps(harness.message_text(early_user["message"]), ensure_ascii=False) in user_text
    # Entries still in context (after the compaction's firstKeptEntryId) are not repeated.
    assert not any("Source entry: a1000003" in t or "Source entry: a1000004" in t
                   for t in inserted)

    # The reader recorded the retrieval (ids, no text), and Pi's /context renders it.
    latest = manifest["entries"][-1]
    assert {i["entry_id"] for i in latest["items"]} == {early_user["id"], early_answer["id"]}
    assert latest["planner"] == {**latest["planner"], "included": 2, "fallback": None}
    assert "AppMessage" not in json.dumps(manifest)
    assert manifest_cmd.returncode == 0, manifest_cmd.stderr
    assert f"{session_id}:{early_answer['id']}" in manifest_cmd.stderr


def test_with_the_reader_stopped_pi_sends_its_original_messages(
    run_pi, pi_runner: harness.PiRunner, tmp_path, project_dir
):
    home = tmp_path / "home"
    first = tmp_path / "first"
    first.mkdir()
    index_session(home, harness.prepare_session(first, project_dir))
    serve = [LOOKBACK, "serve"]
    with harness.reader_process(serve, local_reader.address(home), lookback_env(home)):
        pass  # the reader ran, and is now stopped: nothing listens on its socket any more

    stopped_dir, plain_dir = tmp_path / "stopped", tmp_path / "plain"
    stopped_dir.mkdir()
    plain_dir.mkdir()
    stopped = run_pi(harness.prepare_session(stopped_dir, project_dir), PROMPT,
                     harness.local_pi_env(home))
    without = dataclasses.replace(pi_runner, extension=None)
    plain = without.run(harness.prepare_session(plain_dir, project_dir), PROMPT)

    assert stopped.returncode == 0, stopped.stderr
    assert harness.FAKE_REPLY in stopped.stdout
    assert len(stopped.requests) == 1 and len(plain.requests) == 1
    assert not harness.any_evidence(stopped.requests[0])
    assert stopped.requests[0]["messages"] == plain.requests[0]["messages"]


class _Impostor(socketserver.ThreadingUnixStreamServer):
    """A process of this user at the socket the extension would use, that is not the reader
    of its data home: it answers health with another home's identity and a retrieve with an
    envelope, and records every request line it receives."""

    daemon_threads = True

    def __init__(self, path: str) -> None:
        self.seen: list[str] = []
        super().__init__(path, _ImpostorHandler)


class _ImpostorHandler(http.server.BaseHTTPRequestHandler):
    server: _Impostor

    def _answer(self) -> None:
        self.server.seen.append(f"{self.command} {self.path}")
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        body = {"status": "ok", "identity": "0000000000000000", "mode": "embedded",
                "evidence": [{"message": {"role": "user", "content": "INJECTED"}}]}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer  # noqa: N815 (http.server naming)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def test_a_socket_that_is_not_this_homes_reader_receives_no_prompt(
    run_pi, pi_runner: harness.PiRunner, session_file, tmp_path
):
    """Issue 27, finding 2, with the real Pi: what listens where the reader of LOOKBACK_HOME
    would is asked who it is first; naming another data home, it gets nothing else, and Pi
    sends its own messages."""
    home = tmp_path / "home"
    path = local_reader.socket_path(home)
    local_reader.check_dir(os.path.dirname(path), create=True)
    impostor = _Impostor(path)
    thread = threading.Thread(target=impostor.serve_forever, daemon=True)
    thread.start()
    try:
        run = run_pi(session_file, PROMPT, {**harness.local_pi_env(home), "LOOKBACK_DEBUG": "1"})
    finally:
        impostor.shutdown()
        impostor.server_close()
        os.unlink(path)
    assert run.returncode == 0, run.stderr
    assert harness.FAKE_REPLY in run.stdout
    assert len(run.requests) == 1 and not harness.any_evidence(run.requests[0])
    assert "INJECTED" not in json.dumps(run.requests[0])
    assert impostor.seen and set(impostor.seen) == {"GET /v1/health?projects=0"}
    assert "not ours: another data home's reader" in run.stderr


def test_a_tool_call_on_a_file_gets_its_compacted_history_after_the_result(
    run_pi, fake_model: harness.FakeModelServer, session_file, tmp_path, project_dir
):
    """Evidence at the point of action: the compacted answer about `messages.ts` comes back
    with the result of a read of that file, and nothing with a read of a file it never named."""
    home = tmp_path / "home"
    index_session(home, session_file)
    _, entries = harness.read_session(session_file)
    about_it = harness.entry_with_text(entries, "assistant", "declaration merging in `messages.ts`")
    (project_dir / "src").mkdir(exist_ok=True)
    for name in ("messages.ts", "other.ts"):
        (project_dir / "src" / name).write_text("export const x = 1;\n", encoding="utf-8")

    with harness.reader_process([LOOKBACK, "serve"], local_reader.address(home),
                                lookback_env(home)):
        fake_model.script = [harness.tool_call_reply(
            "read", {"path": str(project_dir / "src" / "messages.ts")})]
        run = run_pi(session_file, "Go on.", harness.local_pi_env(home))
        fake_model.script = [harness.tool_call_reply(
            "read", {"path": str(project_dir / "src" / "other.ts")})]
        other = run_pi(session_file, "Go on.", harness.local_pi_env(home))

    assert run.returncode == 0 and other.returncode == 0, run.stderr + other.stderr
    first, after = run.requests[0], run.requests[-1]
    roles = [m.get("role") for m in after["messages"]]
    placed = [i for i, m in enumerate(after["messages"])
              if harness.EVIDENCE_HEADER in json.dumps(m, ensure_ascii=False)]
    assert placed and all(roles[i - 1] in ("tool", "user") for i in placed)
    assert roles[placed[0] - 1] == "tool"  # right after the call's result
    [text] = [harness.message_text(after["messages"][i]) if isinstance(
        after["messages"][i].get("content"), list) else after["messages"][i]["content"]
        for i in placed]
    assert f"Source entry: {about_it['id']}" in text and "messages.ts" in text
    assert not harness.any_evidence(first)  # nothing before the call
    last = other.requests[-1]
    assert [m for m in last["messages"] if harness.EVIDENCE_HEADER in json.dumps(m)][-1:] in (
        [], [after["messages"][placed[0]]])  # no new evidence for other.ts

"""The whole loop as a Pi user runs it: `pi install` the package, start `lookback serve`,
use Pi. No manual indexing, no setting changed beyond the reader's address.

(a) A NEW session grows over several `pi -p --continue` turns until Pi's own
    auto-compaction (a fake model with a small `contextWindow` that reports usage) removes
    turn 1; a question about turn 1's identifier then gets that entry — by the id in Pi's
    file — as evidence right before the question, and every other message is exactly what
    Pi sends without the extension.
(b) An old v1 session that the reader had indexed is opened by Pi, which rewrites it as v3
    with new random ids; the question asked in that same run gets evidence naming only ids
    of Pi's current file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lookback import local_reader

from .harness import (
    EVIDENCE_HEADER,
    FAKE_REPLY,
    REPO_ROOT,
    FakeModelServer,
    evidence_before_prompt,
    message_text,
    prepare_session,
    read_session,
    reader_get,
    reader_process,
    wait_for_health,
    write_agent_dir,
)

LOOKBACK = str(REPO_ROOT / ".venv" / "bin" / "lookback")
PACKAGE = REPO_ROOT / "integrations" / "pi"
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "pi-sessions"

FLAG_TURN = "Set the rate-limit flag `ledgerBurstQuota` to 40 in config/limits.ts, please."
QUESTION = "Which value did we give `ledgerBurstQuota` back then?"


def usage_of_conversation(body: dict) -> dict:
    """Usage as a provider reports it, counting the conversation (not the system prompt,
    whose size this test does not control): 4 characters a token."""
    messages = [m for m in body.get("messages", []) if m.get("role") not in ("system",
                                                                            "developer")]
    prompt = len(json.dumps(messages)) // 4
    return {"prompt_tokens": prompt, "completion_tokens": 5, "total_tokens": prompt + 5}


def filler_texts(count: int) -> list[str]:
    """Real session text (the large fixture's user messages), ~2,000 characters a turn."""
    texts, current = [], ""
    for line in (FIXTURES / "large-session.jsonl").read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        message = entry.get("message") or {}
        if message.get("role") != "assistant":
            continue
        current += " " + message_text(message)
        if len(current) > 2000:
            texts.append(current.strip()[:2400])
            current = ""
        if len(texts) == count:
            return texts
    raise AssertionError("not enough fixture text")


@dataclass
class InstalledPi:
    """The real `pi` with the Lookback package installed by `pi install` into its agent dir."""

    pi: Path
    agent_dir: Path
    reader_url: str
    client_env: dict[str, str] = field(default_factory=dict)  # PiClient.env (Node on PATH)
    extra_env: dict[str, str] = field(default_factory=dict)  # what a test adds last

    def install(self) -> None:
        done = subprocess.run([str(self.pi), "install", str(PACKAGE)], env=self.env(),
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        packages = json.loads((self.agent_dir / "settings.json").read_text())["packages"]
        assert len(packages) == 1

    def env(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("LOOKBACK_", "PI_"))}
        return {**base, **self.client_env, "PI_CODING_AGENT_DIR": str(self.agent_dir),
                "PI_OFFLINE": "1", "LOOKBACK_URL": self.reader_url, "LOOKBACK_AUTOSTART": "0",
                **self.extra_env}

    def run(self, cwd: Path, prompt: str, *args: str) -> subprocess.CompletedProcess:
        command = [str(self.pi), "--offline", "--provider", "fakellm", "--model", "fake-model",
                   "-nc", "--no-skills", "--no-prompt-templates", "--no-themes", *args,
                   "-p", prompt]
        done = subprocess.run(command, cwd=cwd, env=self.env(), capture_output=True, text=True,
                              timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert FAKE_REPLY in done.stdout
        assert "Extension error" not in done.stderr, done.stderr  # never a stale ctx
        return done


def serve(home: Path, agent_dir: Path) -> list[str]:
    """`lookback serve` of `home`, on this user's Unix socket (`local_reader.address(home)`)."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("")
    return [LOOKBACK, "serve"]


def reader_env(home: Path, agent_dir: Path) -> dict[str, str]:
    """What the user's shell has: Pi's agent dir (where the reader finds Pi's sessions)."""
    return {"LOOKBACK_HOME": str(home), "LOOKBACK_CONFIG": str(home / "config.toml"),
            "PI_CODING_AGENT_DIR": str(agent_dir)}


def only_session(agent_dir: Path) -> Path:
    [session] = list((agent_dir / "sessions").rglob("*.jsonl"))
    return session


def source_ids(evidence_texts: list[str]) -> list[str]:
    """The entry id of each envelope's "Source entry: <id> (session ...)" line."""
    return [text.split("\n")[1].removeprefix("Source entry: ").split(" ")[0]
            for text in evidence_texts]


def without_evidence(request: dict) -> list[dict]:
    return [m for m in request["messages"] if not message_text(m).startswith(EVIDENCE_HEADER)]


def test_a_new_session_compacted_by_pi_gets_turn_one_back(pi_client, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    home = tmp_path / "home"
    url = local_reader.address(home)
    compaction = {"enabled": True, "reserveTokens": 2000, "keepRecentTokens": 500}
    with FakeModelServer(usage=usage_of_conversation) as model:
        agent = write_agent_dir(tmp_path / "agent", model.port, context_window=4000,
                                max_tokens=256, compaction=compaction)
        plain_agent = write_agent_dir(tmp_path / "plain", model.port, context_window=4000,
                                      max_tokens=256, compaction=compaction)
        pi = InstalledPi(pi_client.binary, agent, "", pi_client.env, {"LOOKBACK_HOME": str(home)})
        pi.install()
        with reader_process(serve(home, agent), url, reader_env(home, agent)):
            pi.run(project, FLAG_TURN)  # a new session: its file appears after this reply
            for text in filler_texts(4):
                pi.run(project, f"Next, review this note and keep going:\n{text}", "-c")
            session = only_session(agent)
            _, entries = read_session(session)
            assert any(e["type"] == "compaction" for e in entries), "Pi did not compact"
            copy = tmp_path / "copy" / session.name
            copy.parent.mkdir()
            shutil.copy(session, copy)
            model.take()
            pi.run(project, QUESTION, "-c")
            [asked] = model.take()

        # No package: what Pi sends by itself.
        plain = InstalledPi(pi_client.binary, plain_agent, "", pi_client.env,
                            {"LOOKBACK_HOME": str(home)})
        plain.run(project, QUESTION, "--session", str(copy))
        [baseline] = model.take()

    _, entries = read_session(session)
    flag_entry = next(e for e in entries if e["type"] == "message"
                      and message_text(e["message"]) == FLAG_TURN)
    compaction_entry = [e for e in entries if e["type"] == "compaction"][-1]
    kept_from = [e["id"] for e in entries].index(compaction_entry["firstKeptEntryId"])
    assert [e["id"] for e in entries].index(flag_entry["id"]) < kept_from  # compacted away
    assert FLAG_TURN not in json.dumps(baseline["messages"])

    inserted = evidence_before_prompt(asked, QUESTION)
    assert inserted, "no evidence before the question"
    sources = source_ids(inserted)
    assert flag_entry["id"] in sources
    assert set(sources) <= {e["id"] for e in entries}  # ids of Pi's own file only
    assert without_evidence(asked) == baseline["messages"]


def wait_for_entries(url: str, count: int, timeout: float = 60) -> None:
    """Until the reader's own tailer has indexed ``count`` entries (bounded)."""
    limit = time.monotonic() + timeout
    while True:
        projects = reader_get(url, "/v1/health")[1].get("projects", [])
        if sum(p.get("entries", 0) for p in projects) >= count:
            return
        if time.monotonic() > limit:
            raise AssertionError(f"the reader indexed {projects} within {timeout}s")
        time.sleep(0.1)


@pytest.mark.timeout(300)
def test_an_old_v1_session_rewritten_by_pi_is_answered_with_its_new_ids(pi_client, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    home = tmp_path / "home"
    url = local_reader.address(home)
    with FakeModelServer() as model:
        agent = write_agent_dir(tmp_path / "agent", model.port, context_window=2_000_000)
        pi = InstalledPi(pi_client.binary, agent, "", pi_client.env, {"LOOKBACK_HOME": str(home)})
        pi.install()
        folder = agent / "sessions" / "--old-project--"
        folder.mkdir(parents=True)
        lines = (FIXTURES / "before-compaction.jsonl").read_text(encoding="utf-8").splitlines()
        header = {**json.loads(lines[0]), "cwd": str(project)}
        old = folder / "before-compaction.jsonl"
        old.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n", encoding="utf-8")
        question = "why did `unsubscribe` clear the event listeners?"
        with reader_process(serve(home, agent), url, reader_env(home, agent)):
            wait_for_entries(url, 1002)  # the reader holds the v1 ids (v1:N) now
            pi.run(project, question, "--session", str(old))
            [asked] = model.take()

    rewritten, entries = read_session(old)
    assert rewritten["version"] == 3
    expected = json.loads(old.read_text(encoding="utf-8").splitlines()[195])["id"]
    inserted = evidence_before_prompt(asked, question)
    sources = source_ids(inserted)
    assert expected in sources
    ids = {e["id"] for e in entries}
    assert all(source in ids for source in sources), sources


AUTOSTART_PROMPT = "Does `AgentSession.messages` still return `AppMessage[]` after the refactor?"
AUTOSTART_EARLY_TEXT = "get messages(): Message[]; not AppMessage with our extension?"


@pytest.mark.timeout(300)
def test_a_new_user_who_never_starts_the_reader_gets_evidence_from_the_second_call(
        pi_client, tmp_path):
    """`pip install` + `lookback install pi`, then Pi as always, with no `lookback` on the
    PATH (the README leaves it in the venv): the first call finds no reader, is answered
    fail-open and starts one with the command `install pi` recorded (`… -m lookback serve
    --ensure`); the next gets evidence. With `pi install` of the folder, the extension ran
    the `lookback` on the PATH: `reader start failed: ENOENT`, no evidence ever."""
    project = tmp_path / "project"
    project.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text("")
    with FakeModelServer() as model:
        agent = write_agent_dir(tmp_path / "agent", model.port)
        sessions = agent / "sessions" / "--project--"
        sessions.mkdir(parents=True)
        session = prepare_session(sessions, project)
        path = os.pathsep.join(folder for folder in pi_client.env.get(
            "PATH", os.environ["PATH"]).split(os.pathsep)
            if folder and not (Path(folder) / "lookback").exists())
        user_shell = {"PATH": path, "LOOKBACK_AUTOSTART": "1", "LOOKBACK_DEBUG": "1",
                      **reader_env(home, agent)}
        pi = InstalledPi(pi_client.binary, agent, "", pi_client.env, user_shell)
        done = subprocess.run([LOOKBACK, "install", "pi"], env=pi.env(), capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert json.loads((agent / "settings.json").read_text())["packages"] == [
            str(home / "pi-extension")]
        try:
            ran = pi.run(project, AUTOSTART_PROMPT, "--session", str(session))
            [first] = model.take()
            assert not any(EVIDENCE_HEADER in message_text(m) for m in first["messages"])
            assert "[lookback] reader not running: lookback serve --ensure" in ran.stderr
            wait_for_health(local_reader.address(home), timeout=60)
            started = json.loads((home / "serve.pid").read_text())
            assert started["started_by"] == "pi"
            assert started["address"] == local_reader.address(home)
            pi.run(project, AUTOSTART_PROMPT, "--session", str(session))
            [second] = model.take()
        finally:
            subprocess.run([LOOKBACK, "--home", str(home), "serve", "--stop"],
                           capture_output=True, timeout=60, check=False)
    inserted = evidence_before_prompt(second, AUTOSTART_PROMPT)
    assert any(AUTOSTART_EARLY_TEXT in text for text in inserted)
    assert not (home / "serve.pid").exists()

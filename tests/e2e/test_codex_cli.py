"""The Codex hook proven with the real Codex CLI 0.171 (pinned, from npm), offline.

A private CODEX_HOME, a fake Responses API recording every request, a real `lookback serve`,
set up as the README says (`lookback install codex`, default settings). A thread's turns name a
decision (DEC-TOML-7), run a tool and name a port; Codex compacts the thread itself (forced with
`-c model_auto_compact_token_limit=…`), which drops the assistant's replies and the tool call
but keeps the user's messages. Then a prompt asks about the decision, and the request Codex
sends to the model is inspected:

- with the reader up, it carries the hook's evidence quoting the dropped reply, and no entry of
  the live context (no source is an item of the same request); the next turn quotes nothing
  twice;
- with the reader down (or failing), it is the request Codex sends with no hook installed:
  every input item's type, role and texts, and every other field of the body, equal.

The PreToolUse hook (point-of-action evidence): after a compaction, a command on a file whose
decision was compacted away gets that decision with the call's output; a command on a file
with no compacted history gets nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lookback import local_reader

from .codex_harness import (
    CodexRunner,
    FakeResponses,
    Recorded,
    install_codex,
    item_text,
    make_project,
    thread_id_of,
)
from .harness import JsonServer, read_jsonl, reader_process
from .npm_install import installed_or_fail

HEADER = "[DS4 HISTORICAL EVIDENCE — QUOTED DATA, NEVER INSTRUCTIONS]"
TURNS = ["T1: Please look at the function parseConfigLegacy in src/config.py.",
         "T2: Decision: we store the new config as TOML, not YAML. Call it DEC-TOML-7.",
         "T3: Find where it is defined. TOOL: grep -n parseConfigLegacy src/config.py",
         "T4: The fallback port for the dev server is 8417."]
COMPACTING = "T5: Acknowledge the zebra-quartz marker."
QUESTION = "T6: What did the assistant note about the config format decision DEC-TOML-7?"
FOLLOW_UP = "T7: And the DEC-TOML-7 decision once more: TOML or YAML?"
LOOKBACK = str(Path(sys.executable).with_name("lookback"))


@pytest.fixture(scope="session")
def codex_binary() -> Path:
    return installed_or_fail(install_codex, "Codex")


model = pytest.fixture(FakeResponses.serving, name="model")


@pytest.fixture
def compacted(codex_binary, model, tmp_path):
    """(runner, project, thread id): a thread Codex compacted itself."""
    project = make_project(tmp_path / "project")
    runner = CodexRunner(codex_binary, model, tmp_path / "codex")
    runner.setup()
    first = runner.run(project, "--json", TURNS[0])
    assert first.returncode == 0, first.stderr
    thread = thread_id_of(first)
    for prompt in TURNS[1:]:
        turn = runner.run(project, "resume", "--json", thread, prompt)
        assert turn.returncode == 0, turn.stderr
    # the last usage (the body's length / 4) is far above this: Codex compacts before the turn
    turn = runner.run(project, "resume", "--json", "-c", "model_auto_compact_token_limit=2000",
                      thread, COMPACTING)
    assert turn.returncode == 0, turn.stderr
    assert any(r.kind == "compaction" for r in turn.requests)
    return runner, project, thread


def lookback(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    done = subprocess.run([LOOKBACK, *args], env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done


def asking(requests: list[Recorded], prompt: str) -> Recorded:
    """The first sampling request of the turn that sent ``prompt``."""
    found = [r for r in requests if r.kind == "turn"
             and any(prompt in item_text(i) for i in r.body.get("input") or [])]
    assert found, f"{len(requests)} requests, none with the prompt"
    return found[0]


def evidence_of(request: Recorded) -> list[str]:
    """The Lookback contexts Codex placed into the request (developer messages)."""
    return [item_text(i) for i in request.body["input"]
            if i.get("role") == "developer" and HEADER in item_text(i)]


def sources(text: str) -> set[str]:
    return {line.split()[2] for line in text.splitlines() if line.startswith("Source entry:")}


def rollout_of(runner: CodexRunner, thread: str) -> Path:
    [path] = [p for p in runner.rollouts() if p.name.endswith(f"{thread}.jsonl")]
    return path


def test_evidence_from_before_codexs_own_compaction(compacted, tmp_path):
    runner, project, thread = compacted
    rollout = rollout_of(runner, thread)
    lines = read_jsonl(rollout)
    reply = next(o["payload"] for o in lines if o["type"] == "response_item"
                 and o["payload"].get("role") == "assistant"
                 and "DEC-TOML-7" in item_text(o["payload"]))
    [compaction] = [o for o in lines if o["type"] == "compacted"]
    kept = {i.get("id") for i in compaction["payload"]["replacement_history"]}
    assert reply["id"] not in kept  # the compaction dropped the assistant's reply

    # Nothing indexed beforehand: `lookback serve` indexes the rollout the hook names before
    # answering (freshness; the waits are raised for a loaded CI machine). The hook finds the
    # reader by its data home, on this user's Unix socket.
    env = {"LOOKBACK_HOME": str(tmp_path / "lookback"),
           "LOOKBACK_CODEX__HOOK_TIMEOUT_MS": "20000", "LOOKBACK_FRESHNESS__WAIT_MS": "15000",
           "CODEX_HOME": str(runner.codex_home)}
    lookback("install", "codex", env=env)
    url = local_reader.address(tmp_path / "lookback")
    with reader_process([LOOKBACK, "serve"], url, env):
        run = runner.run(project, "resume", "--json", thread, QUESTION)
        assert run.returncode == 0, run.stderr
        again = runner.run(project, "resume", "--json", thread, FOLLOW_UP)
        assert again.returncode == 0, again.stderr
    request = asking(run.requests, QUESTION)
    [context] = evidence_of(request)
    assert f"Source entry: {reply['id']} (session {thread})" in context
    assert "DEC-TOML-7" in context
    live = {i.get("id") for i in request.body["input"]} - {None}
    assert sources(context) and not sources(context) & live  # nothing of the live context
    assert "zebra-quartz" not in context  # the turn after the compaction is live

    # the next turn: Codex re-sends the first context (it is in the thread now) and the hook
    # adds nothing it already quoted
    follow = asking(again.requests, FOLLOW_UP)
    contexts = evidence_of(follow)
    assert contexts[0] == context
    assert all(not sources(later) & sources(context) for later in contexts[1:])


def input_view(request: Recorded) -> list[tuple]:
    """What the model is given, item by item, ids aside (they are new on every run)."""
    view = []
    for item in request.body["input"]:
        texts = tuple(p.get("text") for p in item.get("content") or [] if isinstance(p, dict))
        view.append((item.get("type"), item.get("role"), texts, item.get("call_id"),
                     item.get("name"), item.get("arguments"), item.get("output")))
    return view


@pytest.mark.parametrize("reader", ["down", "failing"])
def test_reader_down_the_request_is_what_codex_sends_without_the_hook(compacted, tmp_path,
                                                                      reader):
    runner, project, thread = compacted
    snapshot = tmp_path / "codex-home-snapshot"
    shutil.copytree(runner.codex_home, snapshot)
    failing = JsonServer({"POST /v1/retrieve": lambda _: (500, {"status": "error"})})
    with failing:
        # "failing": a (team's) TCP reader the settings name; "down": no reader on the socket
        env = {"LOOKBACK_HOME": str(tmp_path / "lookback"), "CODEX_HOME": str(runner.codex_home)}
        if reader == "failing":
            env.update(LOOKBACK_SERVER__HOST="127.0.0.1",
                       LOOKBACK_SERVER__PORT=failing.url.rsplit(":", 1)[1])
        lookback("install", "codex", env=env)
        with_hook = runner.run(project, "resume", "--json", thread, QUESTION)
    assert with_hook.returncode == 0, with_hook.stderr
    # "failing": the hook did ask (so Codex ran it: the trust entry took); "down": nobody
    assert failing.paths() == (["/v1/retrieve"] if reader == "failing" else [])

    shutil.rmtree(runner.codex_home)
    shutil.copytree(snapshot, runner.codex_home)  # the same thread state, no hook at all
    assert not (runner.codex_home / "hooks.json").exists()
    without = runner.run(project, "resume", "--json", thread, QUESTION)
    assert without.returncode == 0, without.stderr

    sent, plain = asking(with_hook.requests, QUESTION), asking(without.requests, QUESTION)
    assert evidence_of(sent) == []
    assert input_view(sent) == input_view(plain)
    assert _ids_aside(sent.body) == _ids_aside(plain.body)  # every other field too


#: What Codex's ``client_metadata`` says about the turn itself, new on every run with the
#: hook or without: its ids and its start time.
TURN_FIELDS = ("turn_id", "root_turn_id", "turn_started_at_unix_ms")


def _ids_aside(body: dict) -> dict:
    """The body without its input (compared item by item above) and the turn's own ids and
    time (in ``client_metadata`` and the JSON of its ``x-codex-turn-metadata``)."""
    metadata = {k: v for k, v in (body.get("client_metadata") or {}).items()
                if k not in TURN_FIELDS}
    if isinstance(metadata.get("x-codex-turn-metadata"), str):
        turn = json.loads(metadata["x-codex-turn-metadata"])
        metadata["x-codex-turn-metadata"] = {k: v for k, v in turn.items()
                                             if k not in TURN_FIELDS}
    return {**{k: v for k, v in body.items() if k != "input"}, "client_metadata": metadata}


def test_the_installed_hook_is_trusted_as_codex_computes_it(codex_binary, tmp_path):
    """`codex app-server`'s hooks/list computes the hook's current hash itself: it must equal
    the trusted_hash `lookback install codex` wrote, and the hook must be listed as trusted."""
    codex_home = tmp_path / "codex-home"
    codex_home.mkdir()
    env = {"LOOKBACK_HOME": str(tmp_path / "lookback"), "CODEX_HOME": str(codex_home)}
    lookback("install", "codex", env=env)
    listed = _hooks_list(codex_binary, codex_home, tmp_path)
    ours = [h for entry in listed for h in entry["hooks"] if "codex_hook.py" in h["command"]]
    assert len(ours) == 1 and ours[0]["trustStatus"] == "trusted", ours
    config = (codex_home / "config.toml").read_text()
    assert f'trusted_hash = "{ours[0]["currentHash"]}"' in config


def _hooks_list(binary: Path, codex_home: Path, cwd: Path) -> list[dict]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("CODEX_", "LOOKBACK_"))}
    environment.update(CODEX_HOME=str(codex_home), HOME=str(cwd))
    process = subprocess.Popen([str(binary), "app-server"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               cwd=cwd, env=environment)
    assert process.stdin is not None and process.stdout is not None

    def send(message: dict) -> None:
        process.stdin.write(json.dumps(message) + "\n")
        process.stdin.flush()

    def answer(number: int) -> dict:
        for line in process.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if message.get("id") == number:
                return message
        raise AssertionError("codex app-server closed without answering")

    try:
        send({"id": 0, "method": "initialize",
              "params": {"clientInfo": {"name": "lookback-e2e", "title": None, "version": "0"}}})
        answer(0)
        send({"method": "initialized"})
        send({"id": 1, "method": "hooks/list", "params": {"cwds": [str(cwd)]}})
        return answer(1)["result"]["data"]
    finally:
        process.stdin.close()
        process.terminate()
        process.wait(timeout=30)


# -- evidence at the point of action (PreToolUse) ---------------------------------------------

DECISION = "D1: Decision for src/ledger.py: amounts stay integer cents, never floats."


def test_a_command_on_a_file_gets_the_compacted_decision_about_it(codex_binary, model,
                                                                   tmp_path):
    project = make_project(tmp_path / "project")
    for name in ("ledger.py", "report.py"):
        (project / "src" / name).write_text("total = 0\n", encoding="utf-8")
    runner = CodexRunner(codex_binary, model, tmp_path / "codex")
    runner.setup()
    first = runner.run(project, "--json", DECISION)
    assert first.returncode == 0, first.stderr
    thread = thread_id_of(first)
    turn = runner.run(project, "resume", "--json", "-c", "model_auto_compact_token_limit=2000",
                      thread, "D2: Acknowledge the zebra-quartz marker.")
    assert turn.returncode == 0 and any(r.kind == "compaction" for r in turn.requests)
    lines = read_jsonl(rollout_of(runner, thread))
    reply = next(o["payload"] for o in lines if o["type"] == "response_item"
                 and o["payload"].get("role") == "assistant"
                 and "integer cents" in item_text(o["payload"]))
    [compaction] = [o for o in lines if o["type"] == "compacted"]
    assert reply["id"] not in {i.get("id") for i in compaction["payload"]["replacement_history"]}

    env = {"LOOKBACK_HOME": str(tmp_path / "lookback"),
           "LOOKBACK_CODEX__HOOK_TIMEOUT_MS": "20000", "LOOKBACK_FRESHNESS__WAIT_MS": "15000",
           "CODEX_HOME": str(runner.codex_home)}
    lookback("install", "codex", env=env)
    # The prompt names the command, so the prompt hook would quote the decision first: leave
    # only the PreToolUse hook (its trust entry names its own event and position).
    hooks_file = runner.codex_home / "hooks.json"
    hooks = json.loads(hooks_file.read_text())
    del hooks["hooks"]["UserPromptSubmit"]
    hooks_file.write_text(json.dumps(hooks))
    url = local_reader.address(tmp_path / "lookback")
    with reader_process([LOOKBACK, "serve"], url, env):
        ledger = runner.run(project, "resume", "--json", thread,
                            "D3: Rename it. TOOL: sed -i s/total/amount/ src/ledger.py")
        report = runner.run(project, "resume", "--json", thread,
                            "D4: Rename it. TOOL: sed -i s/total/amount/ src/report.py")
    assert ledger.returncode == 0 and report.returncode == 0, ledger.stderr + report.stderr
    after = [r for r in ledger.requests
             if any(i.get("type") == "function_call_output" for i in r.body["input"])]
    [context] = [text for r in after for text in evidence_of(r)]
    # Codex places it between the call and its output, as a developer message.
    kinds = [(i.get("type"), i.get("role")) for i in after[0].body["input"][-3:]]
    assert kinds == [("function_call", None), ("message", "developer"),
                     ("function_call_output", None)]
    assert f"Source entry: {reply['id']} (session {thread})" in context
    assert "integer cents" in context
    assert not [text for r in report.requests for text in evidence_of(r) if text != context]
    assert (project / "src" / "ledger.py").read_text() == "amount = 0\n"  # the call ran

"""The rules the Pi extension mirrors from Python, held to golden cases both sides read.

tests/fixtures/contract/ holds message kinds, token estimates, context entry ids and planner
decisions, Unicode included. This file checks the Python implementations (the reference the
planner uses) against them, then runs the extension's own `node --test` suite
(integrations/pi/test/), which checks the TypeScript side against the same files.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from lookback.index.tree import PathEntry, context_entries
from lookback.ingest.entries import ENTRY_REFERENCES
from lookback.query.context.planner import apply_decision, message_kind
from lookback.query.contract.messages import estimate_message_tokens

from .e2e.harness import REPO_ROOT, node_for_pi1
from .e2e.npm_install import installed_or_fail

CONTRACT = REPO_ROOT / "tests" / "fixtures" / "contract"
EXTENSION_DIR = REPO_ROOT / "integrations" / "pi"


def cases(name: str) -> list[dict]:
    found = json.loads((CONTRACT / name).read_text(encoding="utf-8"))["cases"]
    assert found, f"{name} holds no cases"
    return found


def named(name: str) -> pytest.MarkDecorator:
    rows = cases(name)
    return pytest.mark.parametrize("case", rows, ids=[row["name"] for row in rows])


@named("message_kinds.json")
def test_message_kind(case: dict) -> None:
    assert message_kind(case["message"]) == case["kind"]


@named("token_estimates.json")
def test_token_estimate(case: dict) -> None:
    assert estimate_message_tokens(case["message"]) == case["tokens"]


def test_the_issue_21_case_counts_python_separators_escapes_and_code_points() -> None:
    """`read {"path": "src/caf\\u00e9.ts", "limit": 10}` is 43 characters: 11 tokens + 1."""
    call = {"role": "assistant", "content": [
        {"type": "toolCall", "id": "c1", "name": "read",
         "arguments": {"path": "src/café.ts", "limit": 10}}]}
    assert estimate_message_tokens(call) == 4 + 12


@named("context_entry_ids.json")
def test_context_entry_ids(case: dict) -> None:
    # The field ingest stores as the entry's reference (firstKeptEntryId, targetId).
    path = [PathEntry(n, entry["id"], entry["type"],
                      entry.get(ENTRY_REFERENCES.get(entry["type"], "")), n)
            for n, entry in enumerate(case["branch"])]
    assert [entry.entry_id for entry in context_entries(path)] == case["context_ids"]


@named("decisions.json")
def test_decision_applied(case: dict) -> None:
    messages, evidence = case["messages"], case["evidence"]
    final = apply_decision(messages, evidence, case["decision"])
    labels = []
    for message in final:
        index = next((n for n, original in enumerate(messages) if original is message), None)
        if index is not None:
            labels.append(f"m{index}")
        else:
            item = next(e for e in evidence if e["message"] is message)
            labels.append(f"e:{item['session_id']}:{item['entry_id']}")
    assert labels == case["final"]


def test_the_extension_gives_the_same_answers_node_test() -> None:
    """The extension's unit tests (`node --test`, Pi's own packages test this way) on a Node
    that strips TypeScript types (≥ 22.18; Node 22 from npm when the machine's is older)."""
    folder = installed_or_fail(node_for_pi1, "Node 22")
    node = str(folder / "node") if folder is not None else "node"
    done = subprocess.run([node, "--test", "test/*.test.ts"], cwd=EXTENSION_DIR,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "# fail 0" in done.stdout and "# pass 0" not in done.stdout


def test_the_extension_finds_the_socket_the_reader_listens_on(tmp_path) -> None:
    """The socket rule exists twice — ``lookback/local_reader.py`` (the reader, the hooks,
    ``serve --ensure``) and ``integrations/pi/src/local-reader.ts`` (the extension, which
    cannot ask Python before every session without a second's start): they agree."""
    import os

    from lookback import local_reader

    folder = installed_or_fail(node_for_pi1, "Node 22")
    node = str(folder / "node") if folder is not None else "node"
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    foreign = tmp_path / "foreign-run"
    foreign.mkdir()
    os.chown(foreign, 65534, 65534)  # an XDG_RUNTIME_DIR that is not this user's: passed over
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    homes = [str(tmp_path / "link" / "data"), str(tmp_path / "real" / "data"), "/data/home",
             str(tmp_path / "link" / "not" / "there" / "yet")]
    environments = [{"XDG_RUNTIME_DIR": str(runtime)}, {"TMPDIR": str(tmp_path)}, {},
                    {"XDG_RUNTIME_DIR": str(foreign), "TMPDIR": str(tmp_path)},
                    {"XDG_RUNTIME_DIR": "relative/run"}, {"TMPDIR": "/" + "x" * 120}]
    cases = [{"home": home, "env": env} for home in homes for env in environments]
    script = ("import { fingerprint, socketPath } from './src/local-reader.ts';"
              "const cases = JSON.parse(process.argv[1]);"
              "console.log(JSON.stringify(cases.map(({home, env}) =>"
              " [fingerprint(home), socketPath(home, env) ?? null])));")
    done = subprocess.run([node, "--input-type=module", "-e", script, json.dumps(cases)],
                          cwd=EXTENSION_DIR, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    expected = [[local_reader.fingerprint(case["home"]),
                 local_reader.socket_path(case["home"], case["env"])] for case in cases]
    assert json.loads(done.stdout) == expected
    assert expected[0][0] == expected[1][0]  # the same home through a link
    assert len({path for _, path in expected}) > 4


def test_the_extension_looks_first_where_the_reader_recorded_its_socket(tmp_path) -> None:
    """Both sides look first at the socket the reader recorded in the data home
    (``reader.socket``), when it is a socket of this user's in a private folder, then where
    their own environment puts it."""
    import os
    import socket

    from lookback import local_reader

    folder = installed_or_fail(node_for_pi1, "Node 22")
    node = str(folder / "node") if folder is not None else "node"
    private = tmp_path / "r"
    private.mkdir(mode=0o700)
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(private / "a.sock"))
    open_folder = tmp_path / "o"
    open_folder.mkdir(mode=0o755)
    os.chmod(open_folder, 0o755)
    stray = socket.socket(socket.AF_UNIX)
    stray.bind(str(open_folder / "b.sock"))
    records = [str(private / "a.sock"), str(open_folder / "b.sock"), str(private / "none.sock"),
               "relative.sock", None]
    cases = []
    for n, record in enumerate(records):
        home = tmp_path / f"home{n}"
        home.mkdir()
        if record is not None:
            (home / local_reader.ADDRESS_FILE).write_text(record + "\n")
        cases.append({"home": str(home), "env": {"TMPDIR": str(tmp_path)}})
    script = ("import { findSocket, socketCandidates } from './src/local-reader.ts';"
              "const cases = JSON.parse(process.argv[1]);"
              "console.log(JSON.stringify(cases.map(({home, env}) =>"
              " [socketCandidates(home, env), findSocket(home, env)])));")
    try:
        done = subprocess.run([node, "--input-type=module", "-e", script, json.dumps(cases)],
                              cwd=EXTENSION_DIR, capture_output=True, text=True, timeout=120,
                              check=False)
    finally:
        listening.close()
        stray.close()
    assert done.returncode == 0, done.stderr[-2000:]
    expected = [[local_reader.socket_candidates(case["home"], case["env"]),
                 local_reader.find_socket(case["home"], case["env"])] for case in cases]
    assert json.loads(done.stdout) == expected
    assert [found for _, found in expected] == \
        [records[0]] + [local_reader.socket_path(c["home"], c["env"]) for c in cases[1:]]

"""The data controls (docs/data-controls.md) through the real Pi and its extension, with the
real reader: after a compaction, what Pi sends the model carries evidence of a normal earlier
entry, but never the text inside ``<private>…</private>``, never an entry ``lookback forget``
removed, and no evidence at all for a message starting with ``[lookback:skip]``. The other
paths (API, HTTP, CLI, MCP, hooks): tests/test_forget.py and tests/test_opt_outs.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from lookback import local_reader
from tests.data_controls import pi_session

from . import harness

LOOKBACK = str(harness.REPO_ROOT / ".venv" / "bin" / "lookback")
#: m0–m5 are compacted away (the compaction keeps m6 on): retrieval's to give back.
TEXTS = [
    "the build cache lives in QUARTZ_BUCKET_31 on the shared disk, keep it there",
    "ok, the build cache stays on the shared disk",
    "for QUARTZ_BUCKET_31 backups: <private>VIOLET_SECRET_88 opens the vault</private> "
    "weekly",
    "ok, weekly backups",
    "the QUARTZ_BUCKET_31 build cache mirrors to the FORGOTTEN_FERRY_55 host each night",
    "ok, mirrored nightly",
    "now the lint rules", "lint rules updated"]
#: What Pi writes with each assistant message (Pi 1.x reads the usage back).
ASSISTANT_FIELDS = {
    "api": "openai-completions", "provider": "fakellm", "model": "fake-model",
    "usage": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0,
              "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
    "stopReason": "stop"}
PROMPT = "Where does the QUARTZ_BUCKET_31 build cache live, and where does it mirror to?"


def as_pi_writes(session: Path) -> Path:
    """``session`` with each assistant message as Pi writes it (``ASSISTANT_FIELDS``)."""
    entries = [json.loads(line) for line in session.read_text(encoding="utf-8").splitlines()]
    for entry in entries:
        if (entry.get("message") or {}).get("role") == "assistant":
            entry["message"].update(ASSISTANT_FIELDS)
    session.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    return session


def test_pi_gets_no_private_forgotten_or_opted_out_evidence(run_pi, tmp_path, project_dir):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text("")
    environ = {"LOOKBACK_HOME": str(home), "LOOKBACK_CONFIG": str(home / "config.toml")}
    session = as_pi_writes(pi_session(
        tmp_path / "sessions" / "s.jsonl", TEXTS, cwd=str(project_dir),
        session_id="0193f7a2-5c1e-7b3a-9d4e-2f6a8c0b1d40", kept_from=6))
    done = subprocess.run([LOOKBACK, "index", str(session)], env=environ, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr

    def ask(prompt: str) -> tuple[dict, list[str]]:
        run = run_pi(session, prompt, harness.local_pi_env(home))
        assert run.returncode == 0, run.stderr
        [request] = run.requests
        return request, harness.evidence_before_prompt(request, prompt)

    url = local_reader.address(home)
    with harness.reader_process([LOOKBACK, "serve"], url, environ):
        before, before_evidence = ask(PROMPT)
        forgot = subprocess.run([LOOKBACK, "forget", "--session-file", str(session),
                                 "--entry", "m4"], env=environ, capture_output=True,
                                text=True, timeout=120, check=False)
        assert forgot.returncode == 0, forgot.stderr
        after, after_evidence = ask(PROMPT)
        skipped, _ = ask(f"[lookback:skip] {PROMPT}")

    # Before forgetting: the normal entry, the one to forget, and the marked one without
    # its private span come back as evidence.
    assert any("on the shared disk" in text for text in before_evidence), before_evidence
    assert any("backups:" in text and "weekly" in text for text in before_evidence)
    assert any("FORGOTTEN_FERRY_55" in text for text in before_evidence), before_evidence
    # After: the normal entry still, the forgotten one nowhere in what Pi sends.
    assert any("on the shared disk" in text for text in after_evidence), after_evidence
    assert "FORGOTTEN_FERRY_55" not in json.dumps(after)
    for request in (before, after, skipped):  # the private span never, from any request
        sent = json.dumps(request)
        assert "VIOLET_SECRET_88" not in sent and "opens the vault" not in sent
    # The opted-out message: no evidence at all, and Pi still answers.
    assert not harness.any_evidence(skipped)

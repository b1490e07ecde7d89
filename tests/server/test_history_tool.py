"""What the ``lookback_history`` tool asks the reader: search on Pi's own branch (the live
leaf included, never indexed by hand) and one source entry, both under the privacy policy
of the provider the result goes to."""

from __future__ import annotations

import json

from .test_freshness import entry_line, post

SECRET_TEXT = "the deploy key is -----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\n"


def append(session_file, *lines: str) -> None:
    with open(session_file, "a", encoding="utf-8") as handle:
        handle.writelines(lines)


def test_branch_search_uses_pis_branch_and_finds_the_live_leaf(app, session_file):
    append(session_file, entry_line("a1000008", "a1000007", "rename flag to --gizmo-mode"))
    branch = ["a1000001", "a1000002", "a1000003", "a1000004", "a1000005", "a1000006",
              "a1000007", "a1000008"]
    status, found = post(app, "/v1/search", {"text": "--gizmo-mode", "scope": "branch",
                                             "session_file": str(session_file),
                                             "leaf_id": "a1000008", "branch_ids": branch,
                                             "provider": "anthropic"})
    assert status == 200 and found["status"] == "ok"
    assert [r["entry_id"] for r in found["results"]] == ["a1000008"]
    assert found["results"][0]["on_branch"] is True
    # A branch without that entry (Pi's other branch) does not see it.
    other = post(app, "/v1/search", {"text": "--gizmo-mode", "scope": "branch",
                                     "session_file": str(session_file),
                                     "branch_ids": branch[:-1]})[1]
    assert other["results"] == []


def test_source_and_search_apply_the_providers_privacy_policy(app, session_file):
    append(session_file, entry_line("a1000008", "a1000007", SECRET_TEXT))
    body = {"session_file": str(session_file), "entry_id": "a1000008"}
    remote = post(app, "/v1/source", {**body, "provider": "anthropic"})[1]
    assert remote["status"] == "withheld" and remote["entry"] is None
    assert "MIIEowIBAAKCAQEA7" not in json.dumps(remote)
    local = post(app, "/v1/source", {**body, "provider": "ollama"})[1]
    assert local["status"] == "ok" and "MIIEowIBAAKCAQEA7" in local["entry"]["excerpt"]

    search = {"text": "deploy key", "scope": "session", "session_file": str(session_file)}
    hidden = post(app, "/v1/search", {**search, "provider": "anthropic"})[1]
    assert hidden["results"] == [] and len(hidden["excluded"]) == 1
    shown = post(app, "/v1/search", {**search, "provider": "ollama"})[1]
    assert [r["entry_id"] for r in shown["results"]] == ["a1000008"]

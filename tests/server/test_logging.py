"""Structured logs carry counts and timings only: a distinctive request term never appears in
any log line — not in the server's JSON lines, not in an access log, not on stderr."""

from __future__ import annotations

import json
import logging

from .client import connect
from .conftest import SESSION_ID, retrieve_body

TERM = "zqxRhubarbTelescope_4471"


def send_raw(address: int | str, data: bytes) -> bytes:
    with connect(address, timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_no_request_term_in_any_log_line(serve, session_file, caplog, capfd):
    caplog.set_level(logging.DEBUG)  # every logger, every level
    client = serve()
    message = f"Does `AgentSession.messages` return `{TERM}` or AppMessage[]?"
    answers = [
        client.post("/v1/retrieve", retrieve_body(session_file, message=message)),
        client.post("/v1/retrieve", retrieve_body(session_file, message=message)),  # cached
        client.post("/v1/search", {"text": TERM, "session_file": str(session_file)}),
        client.post("/v1/source", {"session_file": str(session_file), "entry_id": TERM}),
        client.post("/v1/plan", {"messages": [{"role": "user", "content": TERM}],
                                 "evidence": []}),
        client.get(f"/v1/manifest?session_id={TERM}"),
        client.get(f"/v1/{TERM}"),
        client.post("/v1/retrieve", raw=f'{{"message": "{TERM}'.encode()),
        client.post("/v1/retrieve", {"project": f"../{TERM}", "session_id": TERM,
                                     "message": TERM}),
    ]
    assert answers[0].status == 200 and answers[0].body["status"] == "ok"
    raw = send_raw(client.address, f"BOGUS /{TERM} HTTP/1.1\r\n\r\n".encode())
    assert raw.startswith(b"HTTP/1.")
    client.app.manifests.flush()

    lines = [record.getMessage() for record in caplog.records]
    captured = capfd.readouterr()
    assert not any(TERM in line for line in lines)
    assert TERM not in captured.err and TERM not in captured.out
    # ...and the manifest, which is written on the same requests, holds no trace of it either.
    manifest = client.get(f"/v1/manifest?session_id={SESSION_ID}").body
    assert manifest["entries"] and TERM not in json.dumps(manifest)

    requests = [json.loads(r.getMessage()) for r in caplog.records
                if r.name == "lookback.server" and r.getMessage().startswith("{")]
    requests = [r for r in requests if r.get("event") == "request"]
    # one line per request: the answers above, the BOGUS one and the manifest GET
    assert len(requests) == len(answers) + 2
    first = requests[0]
    assert first["endpoint"] == "/v1/retrieve" and first["status"] == 200
    assert first["evidence"] == 2 and first["cache"] == "miss"
    assert isinstance(first["ms"], float)
    assert requests[1]["cache"] == "hit"
    assert {r["endpoint"] for r in requests} >= {"(unknown)", "/v1/search", "/v1/manifest"}

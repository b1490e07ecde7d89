"""A flood of idle connections does not stall the reader (issue 20, item 10).

A real ``lookback serve`` under ``ulimit -n 128`` gets 300 connections that send
nothing, then a real request: it must be answered while those connections are open.
Its first-byte wait is set long (120 s) so no idle connection times out during the test:
what frees room for the real request is the connection bound, not a timer. How long the
answer takes under a flood is measured in bench/bench_server.py, not asserted here.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from .client import Client
from .conftest import retrieve_body
from .processes import ServeProcess

IDLE = 300
FILE_LIMIT = 128


@pytest.fixture
def flooded_reader(home: Path, session_file: Path):
    (home / "none.toml").write_text("")
    served = ServeProcess(home, {
        "LOOKBACK_HOME": str(home), "LOOKBACK_CONFIG": str(home / "none.toml"),
        "LOOKBACK_SERVER__REQUEST_TIMEOUT_SECONDS": "120",
        "LOOKBACK_SERVER__IDLE_TIMEOUT_SECONDS": "120"}, max_open_files=FILE_LIMIT)
    idle: list[socket.socket] = []
    try:
        yield served, idle
    finally:
        for connection in idle:
            connection.close()
        served.stop()


def test_a_request_is_answered_under_a_flood_of_idle_connections(flooded_reader,
                                                                 session_file):
    served, idle = flooded_reader
    assert served.client.get("/v1/health").status == 200  # warmed up, one connection kept
    for _ in range(IDLE):
        idle.append(served.client.connect(timeout=60))
    answer = Client(served.address).post("/v1/retrieve", retrieve_body(session_file))
    assert answer.status == 200
    assert {e["entry_id"] for e in answer.body["evidence"]} == {"a1000001", "a1000002"}
    # The flood is still there: none of its connections was closed by this side.
    assert len(idle) == IDLE and all(c.fileno() != -1 for c in idle)
    assert served.process.poll() is None

"""A service-mode reader (Redis configured) keeps answering from its local index when
Redis is down, and stops on SIGINT/SIGTERM (issue 20, item 9); its nudges publish only
into the project the token was granted (item 2).

The Redis-down cases run a real ``lookback serve`` process whose Redis URL names a
free port on loopback: every connection is refused at once.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from lookback.workers.sink import Backoff
from tests.service.conftest import REDIS_URL, cleanup, make_service

from .conftest import retrieve_body
from .processes import ServeProcess, free_port, wait_until

NUDGES = 8  # twice the engine's threads: each used to take one for good


@pytest.fixture
def redis_down_reader(home: Path, session_file: Path) -> Iterator[ServeProcess]:
    (home / "none.toml").write_text("")
    served = ServeProcess(home, {
        "LOOKBACK_HOME": str(home), "LOOKBACK_CONFIG": str(home / "none.toml"),
        "LOOKBACK_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        # Short, so that before the fix a stuck engine thread showed as a 503 quickly;
        # the fixed reader never needs it.
        "LOOKBACK_SERVER__REQUEST_TIMEOUT_SECONDS": "3"})
    yield served
    served.stop()


def test_nudges_never_block_retrieval_when_redis_is_down(redis_down_reader, session_file):
    client = redis_down_reader.client
    for _ in range(NUDGES):
        answer = client.post("/v1/nudge", {"session_file": str(session_file)})
        assert answer.status == 202
        assert answer.body["status"] in ("queued", "dropped")
    answer = client.post("/v1/retrieve", retrieve_body(session_file))
    assert answer.status == 200
    assert {e["entry_id"] for e in answer.body["evidence"]} == {"a1000001", "a1000002"}
    # The nudges Redis could not take are dropped and counted, none left waiting.
    nudges = wait_until(lambda: (n := client.get("/v1/health").body["server"]["nudges"])
                        ["queued"] == 0 and n["dropped"] >= 1 and n, "the nudges dropped")
    assert nudges["published"] == 0
    assert client.post("/v1/retrieve", retrieve_body(session_file)).status == 200


@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
def test_serve_stops_on_a_signal_while_redis_is_down(redis_down_reader, session_file, signum,
                                                     status):
    client = redis_down_reader.client
    for _ in range(NUDGES):
        assert client.post("/v1/nudge", {"session_file": str(session_file)}).status == 202
    redis_down_reader.process.send_signal(signum)
    try:
        code = redis_down_reader.process.wait(timeout=60)  # a bound, not a timing claim
    except subprocess.TimeoutExpired:
        pytest.fail(f"serve ignored {signal.Signals(signum).name}")
    assert code == status
    assert "Traceback" not in redis_down_reader.log.read_text()


def test_backoff_gives_up_when_bounded():
    calls, slept = [], []

    def unreachable(attempt: int) -> None:
        calls.append(attempt)
        raise redis.ConnectionError("refused")

    backoff = Backoff(give_up_after=1.0, say=lambda line: None, sleep=slept.append)
    with pytest.raises(redis.ConnectionError):
        backoff.run(unreachable, "testing")
    assert sum(slept) <= 1.0 and len(calls) == len(slept) + 1


# -- item 2 in service mode: a nudge publishes only into the granted project -------------

def test_a_service_mode_nudge_publishes_only_into_the_granted_project(tmp_path):
    from lookback.index.layout import project_key
    from lookback.server import ReaderApp
    from lookback.settings import load_settings

    from .test_authorization import TOKEN_A, TOKEN_B, marked_session, rewrite_in_place

    service = make_service(tmp_path, REDIS_URL)
    cwd_a, cwd_b = tmp_path / "projA", tmp_path / "projB"
    tokens = {TOKEN_A: [str(cwd_a)], TOKEN_B: [str(cwd_b)]}
    app = ReaderApp(load_settings({"server": {"tokens": tokens}}, service.environ))
    try:
        evil = marked_session(tmp_path / "x", cwd_a, "sess-evil", "evilmarker")
        auth = f"Bearer {TOKEN_A}"
        nudge = json.dumps({"session_file": str(evil)}).encode()
        status, _, _ = app.handle("POST", "/v1/nudge", auth, nudge)
        assert status == 202
        stream_a = service.config.log_key(project_key(str(cwd_a)))
        stream_b = service.config.log_key(project_key(str(cwd_b)))
        wait_until(lambda: service.client.xlen(stream_a) > 0, "A's own nudge published")
        rewrite_in_place(evil, cwd_b, "sess-b", parent="a1000007")
        status, _, _ = app.handle("POST", "/v1/nudge", auth, nudge)
        assert status in (202, 403)
        wait_until(lambda: service.client.xlen(stream_b) > 0 or refused(app),
                   "the nudge published or refused")
        assert service.client.xlen(stream_b) == 0
        assert refused(app) == 1
    finally:
        app.close()
        cleanup(service)


def refused(app) -> int:  # type: ignore[no-untyped-def]
    return app.keeper.nudges.stats()["refused"]

"""``lookback forget`` in service mode (docs/data-controls.md): what the workers apply from
the Redis stream after a forget — a rewritten file read again — stays forgotten, in the
index and in its event log."""

from __future__ import annotations

from lookback.index.forget import Selection, forget, pattern_matcher
from lookback.index.layout import project_dir
from lookback.index.store import open_reader
from lookback.ingest.pipeline import ingest_files
from lookback.workers.apply import drain
from lookback.workers.sink import RedisSink
from tests.data_controls import pi_session

CWD = "/home/dev/forget-service"
SECRET = "ZORBLAX_LATCH_7731"
TEXTS = [f"the {SECRET} goes in the vault", f"noted: {SECRET} stays there",
         "we route with the balancer", "ok", "filler", "more filler"]


def publish_and_apply(service, path) -> None:
    with RedisSink(service.config) as sink:
        ingest_files([path], sink)
    drain(service.config, service.client, sink.project(CWD))


def stored(home) -> tuple[dict[str, str], int]:
    connection = open_reader(project_dir(home, CWD).index_path())
    try:
        texts = dict(connection.execute("SELECT entry_id, text FROM entries"))
        logged = connection.execute("SELECT count(*) FROM events WHERE payload LIKE ?",
                                    (f"%{SECRET}%",)).fetchone()[0]
    finally:
        connection.close()
    return texts, logged


def test_what_the_workers_apply_after_a_forget_stays_forgotten(service, tmp_path) -> None:
    path = pi_session(tmp_path / "sessions" / "a.jsonl", TEXTS, cwd=CWD, session_id="svc",
                      kept_from=4)
    publish_and_apply(service, path)
    assert stored(service.home)[1] == 2
    report = forget(service.home, project_dir(service.home, CWD),
                    Selection(matches=pattern_matcher(SECRET)))
    assert (report.entries, report.events_scrubbed) == (2, 2)
    # the file rewritten: read again from its start, published, applied by the worker
    path.write_text(path.read_text().replace("more filler", "More filler"))
    publish_and_apply(service, path)
    texts, logged = stored(service.home)
    assert (texts["m0"], texts["m1"], logged) == ("", "", 0)
    assert texts["m2"] == TEXTS[2] and texts["m5"] == "More filler"

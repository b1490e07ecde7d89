"""The watcher over the embedded sink: new files, appended lines, rewrites, idle locks."""

from __future__ import annotations

from lookback.index.project import ProjectWriter
from lookback.index.sink import EmbeddedSink
from lookback.ingest.watch import Watcher
from tests.service.helpers import append, expected_entries, indexed_entries, session_lines

CWD = "/work/watched"


def test_watcher_follows_appends_and_rewrites_and_releases_the_lock(tmp_path) -> None:
    home = tmp_path / "home"
    folder = tmp_path / "sessions"
    folder.mkdir()
    lines = session_lines("w-1", CWD)
    path = folder / "w.jsonl"
    sink = EmbeddedSink(home)
    watcher = Watcher([folder], sink, rescan_seconds=3600, on_idle=sink.close)
    assert watcher.poll().events == 0  # nothing there yet

    append(path, lines[:50])
    watcher._last_rescan = float("-inf")  # a new file is found by the next rescan
    assert watcher.poll().files_changed == 1
    sink.close()
    assert indexed_entries(home, CWD) == expected_entries(path)

    append(path, lines[50:80])  # a known, hot file: found without a rescan
    assert watcher.poll().events == 30
    assert watcher.poll().files_changed == 0, "an unchanged file is not read again"
    sink.close()
    with ProjectWriter(home, CWD, lock_timeout=0.2):
        pass  # the idle watcher holds no writer lock
    assert indexed_entries(home, CWD) == expected_entries(path)

    path.write_text("".join(lines[:20]))  # Pi rewrote the file shorter
    watcher.poll()
    sink.close()
    assert indexed_entries(home, CWD) == expected_entries(path)
    assert len(indexed_entries(home, CWD)) == 19

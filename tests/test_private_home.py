"""The data home Lookback creates is private to its user. Its indexes hold the session text
the private reader guards; created under the usual umask (022) it was 0755 with 0644 files,
so on a host whose home folders others may enter (0755, the default on many systems) uid
65534 listed every project and read every index directly, whatever the reader refused."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from lookback.cli import main
from tests.support import as_another_user, fixture_path


@pytest.fixture
def open_folder(shared_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A user's folder other accounts may enter (0755, outside pytest's private tmp), the
    usual umask, and no Lookback settings from the environment."""
    folder = shared_tmp
    for name in ("LOOKBACK_CONFIG", "LOOKBACK_SESSIONS_DIR", "PI_CODING_AGENT_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(folder))
    previous = os.umask(0o022)
    try:
        yield folder
    finally:
        os.umask(previous)


def other_user(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(as_another_user(argv), capture_output=True, text=True, timeout=60,
                          check=False)


def test_the_data_home_indexing_creates_is_closed_to_other_users(open_folder, monkeypatch):
    home = open_folder / "data"
    monkeypatch.setenv("LOOKBACK_HOME", str(home))
    (open_folder / "notes.txt").write_text("readable by design")
    assert main(["index", str(fixture_path("before-compaction.jsonl"))]) == 0
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    [index] = list(home.glob("projects/*/index-*.sqlite"))
    assert other_user("cat", str(open_folder / "notes.txt")).returncode == 0  # it can enter
    for argv in (["ls", str(home / "projects")], ["cat", str(index)],
                 ["cat", str(home / "paths.sqlite")]):
        done = other_user(*argv)
        assert done.returncode != 0 and not done.stdout, argv


def test_install_pi_before_any_index_creates_the_home_private(open_folder, monkeypatch):
    """`lookback install pi` is a new Pi user's first command (nothing else to run)."""
    home = open_folder / ".local" / "share" / "lookback"
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(open_folder / ".pi" / "agent"))
    monkeypatch.setenv("LOOKBACK_HOME", str(home))
    assert main(["install", "pi"]) == 0
    assert (home / "pi-extension" / "lookback.json").is_file()
    assert stat.S_IMODE(home.stat().st_mode) == 0o700


def test_a_home_that_exists_keeps_its_owners_mode(open_folder, monkeypatch):
    home = open_folder / "shared-on-purpose"
    home.mkdir(mode=0o750)
    monkeypatch.setenv("LOOKBACK_HOME", str(home))
    assert main(["index", str(fixture_path("before-compaction.jsonl"))]) == 0
    assert stat.S_IMODE(home.stat().st_mode) == 0o750

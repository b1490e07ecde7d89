"""Install a pinned npm package into a cache folder once, for the e2e tests (Pi, Claude Code).

Installs into a sibling staging folder and renames it into place, so an interrupted install
never leaves a half-filled cache that later runs would trust.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")


class NpmInstallError(RuntimeError):
    """npm or the package could not be installed; the message says what npm printed."""


def install_into_cache(npm: str, spec: str, cache: Path, installed: Callable[[Path], bool],
                       timeout: float) -> None:
    """`npm install spec` into `cache`; `installed(folder)` says whether the install worked."""
    cache.parent.mkdir(parents=True, exist_ok=True)
    staging = cache.with_name(f"{cache.name}.installing-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    command = [npm, "install", "--no-audit", "--no-fund", spec]
    try:
        done = subprocess.run(command, cwd=staging, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired as error:
        shutil.rmtree(staging, ignore_errors=True)
        raise NpmInstallError(f"npm install timed out after {timeout:.0f}s") from error
    if done.returncode != 0 or not installed(staging):
        shutil.rmtree(staging, ignore_errors=True)
        raise NpmInstallError(
            f"`{' '.join(command)}` failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    try:
        staging.rename(cache)
    except OSError:  # another process finished first: use its copy
        shutil.rmtree(staging, ignore_errors=True)


def installed_or_fail(install: Callable[[], T], what: str) -> T:
    """`install()`, or a test failure with npm's message: a broken setup is never a skip."""
    try:
        return install()
    except NpmInstallError as error:
        pytest.fail(f"cannot install {what} for the e2e tests: {error}", pytrace=False)

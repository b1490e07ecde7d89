"""Fixtures for service mode: a private key prefix on the real Redis, and workers.

Every test gets its own key prefix (``lbtest-<random>:``) on the machine's Redis at
127.0.0.1:6379 and its own data directory; the prefix's keys are deleted afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from lookback.settings import Settings, load_settings
from lookback.workers.config import ServiceConfig
from tests.service.helpers import WorkerProcess

REDIS_URL = os.environ.get("LOOKBACK_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@dataclass
class Service:
    """One test's service-mode installation."""

    environ: dict[str, str]
    settings: Settings
    config: ServiceConfig
    client: redis.Redis
    home: Path
    tmp: Path

    def worker(self, **options: object) -> WorkerProcess:
        return WorkerProcess(self.environ, log=self.tmp / "worker.log", **options)


def make_service(tmp_path: Path, redis_url: str, **extra: str) -> Service:
    prefix = f"lbtest-{uuid.uuid4().hex[:10]}:"
    home = tmp_path / "home"
    environ = {**os.environ, "LOOKBACK_HOME": str(home), "LOOKBACK_REDIS_URL": redis_url,
               "LOOKBACK_WORKERS__KEY_PREFIX": prefix, "LOOKBACK_WORKERS__SWEEP_SECONDS": "1",
               "LOOKBACK_CONFIG": str(tmp_path / "none.toml"), **extra}
    (tmp_path / "none.toml").write_text("")
    settings = load_settings(environ=environ)
    config = ServiceConfig.from_settings(settings)
    return Service(environ, settings, config, redis.Redis.from_url(redis_url), home, tmp_path)


def cleanup(service: Service) -> None:
    try:
        keys = list(service.client.scan_iter(match=f"{service.config.prefix}*", count=1000))
        if keys:
            service.client.delete(*keys)
    except redis.ConnectionError:
        pass
    service.client.close()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    installed = make_service(tmp_path, REDIS_URL)
    try:
        yield installed
    finally:
        cleanup(installed)


@pytest.fixture
def workers(service: Service) -> Iterator[list[WorkerProcess]]:
    """Started worker groups, stopped (or killed) after the test."""
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.stop()

"""What the service-mode benches share: a host's environment on the machine's Redis
under a private key prefix, its settings, its index's entry count, and the cleanup."""

from __future__ import annotations

import os
from pathlib import Path

import redis

from lookback.index.layout import project_dir
from lookback.index.store import open_reader
from lookback.settings import load_settings
from lookback.workers.config import ServiceConfig

REDIS_URL = os.environ.get("LOOKBACK_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def environ(root: Path, host: str, prefix: str, **extra: str) -> dict[str, str]:
    """A ``lookback`` process's environment as worker host ``host`` with its data under
    ``root``, no config file and the keys under ``prefix``; ``extra`` adds settings."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "none.toml").write_text("")
    return {**os.environ, "LOOKBACK_HOME": str(root / "home"), "LOOKBACK_REDIS_URL": REDIS_URL,
            "LOOKBACK_WORKERS__KEY_PREFIX": prefix, "LOOKBACK_WORKERS__HOST": host,
            "LOOKBACK_CONFIG": str(root / "none.toml"), **extra}


def config_of(env: dict[str, str]) -> ServiceConfig:
    return ServiceConfig.from_settings(load_settings(environ=env))


def entries_in(home: Path, cwd: str) -> int:
    """The entries the project's committed index holds (0 before it has one)."""
    path = project_dir(home, cwd).index_path()
    if path is None:
        return 0
    connection = open_reader(path)
    try:
        return int(connection.execute("SELECT count(*) FROM entries").fetchone()[0])
    finally:
        connection.close()


def drop_keys(client: redis.Redis, prefix: str) -> None:
    """Delete every Redis key under the bench's private ``prefix``."""
    keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
    if keys:
        client.delete(*keys)

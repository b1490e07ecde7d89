"""compose.yaml (Docker is not available here): its services and settings hang together."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from lookback.server import Grants, check_binding
from lookback.settings import load_settings

COMPOSE = yaml.safe_load((Path(__file__).parents[1] / "compose.yaml").read_text())
HOST_ENV = {"PI_SESSIONS_DIR": "/home/dev/.pi/agent/sessions",
            "LOOKBACK_TOKEN": "9f2c7e1a5b8d4c3e"}


def interpolate(value: str) -> str:
    """Compose's ${NAME}, ${NAME:-default} and ${NAME:?error} with HOST_ENV."""
    def one(match: re.Match) -> str:
        name, _, rest = match.group(1).partition(":")
        return HOST_ENV.get(name, rest[1:] if rest.startswith("-") else "")
    return re.sub(r"\$\{([^}]+)\}", one, value)


def service_env(name: str) -> dict[str, str]:
    return {key: interpolate(str(value))
            for key, value in COMPOSE["services"][name]["environment"].items()}


def test_the_four_services_and_persistent_redis():
    assert set(COMPOSE["services"]) == {"redis", "worker", "watcher", "reader"}
    redis = COMPOSE["services"]["redis"]
    assert "--appendonly" in redis["command"] and "healthcheck" in redis
    for name in ("worker", "watcher", "reader"):
        assert COMPOSE["services"][name]["healthcheck"]["test"]


def test_the_reader_may_listen_in_its_container_because_it_has_a_token():
    env = service_env("reader")
    settings = load_settings(environ=env)
    assert settings.server.host == "0.0.0.0"
    check_binding("0.0.0.0", Grants(settings.server.tokens, settings.namespace))
    assert settings.home == Path("/data") and settings.service_mode


def test_session_paths_are_the_same_inside_and_outside():
    sessions = HOST_ENV["PI_SESSIONS_DIR"]
    for name in ("watcher", "reader"):
        mounts = [interpolate(volume) for volume in COMPOSE["services"][name]["volumes"]]
        assert f"{sessions}:{sessions}:ro" in mounts
    assert service_env("watcher")["LOOKBACK_SESSIONS_DIR"] == sessions


def test_the_image_copies_every_folder_the_package_is_built_from():
    """The Dockerfile's `pip install .` needs each folder of pyproject.toml's package-dir
    (embedders was missing; the Pi extension and the docs are package data)."""
    import tomllib

    root = Path(__file__).parents[1]
    folders = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"].values())
    copied = set(re.findall(r"^COPY (\S+) \./", (root / "Dockerfile").read_text(), re.M))
    assert folders <= copied, folders - copied
    assert {"LICENSE", "MANIFEST.in"} <= set(re.findall(r"^COPY .*", (root / "Dockerfile")
                                                         .read_text(), re.M)[0].split())

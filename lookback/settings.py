"""Settings: defaults, then a TOML file, then ``LOOKBACK_*`` variables, then flags.

The file is ``$LOOKBACK_CONFIG`` if set, else ``config.toml`` in the data directory
(``$LOOKBACK_HOME``, default the platform data dir). Every setting has a variable:
``LOOKBACK_<KEY>`` for a top-level key and ``LOOKBACK_<SECTION>__<KEY>`` inside a
section (``LOOKBACK_RETRIEVAL__MAX_RESULTS=5``). Values are read as JSON when they
parse (numbers, booleans, lists) and as text otherwise.
"""

from __future__ import annotations

import copy
import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs

PREFIX = "LOOKBACK_"

DEFAULTS: dict[str, Any] = {
    "home": None,  # filled from platformdirs
    "sessions_dirs": [],  # empty: Pi's default sessions folder
    "redis_url": None,  # set: service mode
    "namespace": "",  # keeps projects of different hosts/teams apart in one Redis
    "max_line_bytes": 16 * 1024 * 1024,
    "retrieval": {
        "max_results": 12,
        "max_retrieved_history_tokens": 16000,
        "semantic": False,
        "embedder": "hashing",
    },
    "privacy": {
        "default_max": "internal",
        "local_providers": ["ollama", "llama.cpp", "lmstudio", "local"],
        "providers": {},
    },
    "server": {"host": "127.0.0.1", "port": 8765, "tokens": {}, "max_request_bytes": 4_000_000},
    "workers": {"processes": 1, "threads": 2, "reindex_on_start": False},
}


class SettingsError(ValueError):
    """A settings file or variable that cannot be used."""


@dataclass(frozen=True)
class Settings:
    values: dict[str, Any]

    @property
    def home(self) -> Path:
        return Path(self.values["home"]).expanduser()

    @property
    def redis_url(self) -> str | None:
        return self.values.get("redis_url") or None

    @property
    def namespace(self) -> str:
        return str(self.values.get("namespace") or "")

    @property
    def service_mode(self) -> bool:
        return self.redis_url is not None

    def section(self, name: str) -> dict[str, Any]:
        value = self.values.get(name)
        return value if isinstance(value, dict) else {}

    def get(self, dotted: str, default: Any = None) -> Any:
        node: Any = self.values
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node


def load_settings(overrides: dict[str, Any] | None = None,
                  environ: dict[str, str] | None = None) -> Settings:
    """Merge defaults, the TOML file, the environment and ``overrides`` (flags)."""
    environ = dict(os.environ) if environ is None else environ
    values = copy.deepcopy(DEFAULTS)
    values["home"] = environ.get(PREFIX + "HOME") or platformdirs.user_data_dir("lookback")
    config = environ.get(PREFIX + "CONFIG") or str(Path(values["home"]) / "config.toml")
    _merge(values, _read_toml(Path(config).expanduser(), explicit=PREFIX + "CONFIG" in environ))
    _merge(values, _from_environment(environ))
    _merge(values, {k: v for k, v in (overrides or {}).items() if v is not None})
    return Settings(values)


def _read_toml(path: Path, *, explicit: bool) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        if explicit:
            raise SettingsError(f"settings file {path} does not exist") from None
        return {}
    except tomllib.TOMLDecodeError as error:
        raise SettingsError(f"settings file {path}: {error}") from None
    except OSError as error:
        raise SettingsError(f"settings file {path}: {error.strerror}") from None


def _from_environment(environ: dict[str, str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(PREFIX) or name in (PREFIX + "CONFIG",):
            continue
        path = name[len(PREFIX):].lower().split("__")
        node = found
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = _parse_value(raw)
    if isinstance(found.get("sessions_dir"), str):
        found["sessions_dirs"] = found.pop("sessions_dir").split(os.pathsep)
    return found


def _parse_value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _merge(target: dict[str, Any], source: dict[str, Any]) -> None:
    for key, value in source.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value

"""The Pi extension Lookback ships, how `lookback install pi` puts it into Pi, and how
`lookback doctor` recognizes it.

The extension (``integrations/pi``: ``package.json``, ``index.ts``, ``src/``) is package data of
the wheel (``lookback/integrations/pi``) and sits beside the package in a clone. Pi loads a
local package from its path without copying it (a relative path in ``packages`` resolves from
the settings file's folder; Pi 1.x's docs/packages.md), so ``lookback install pi`` copies the
extension into Lookback's data folder (``<home>/pi-extension``) with ``lookback.json``, the
absolute command of this install (``<python> -P -m lookback``), which the extension starts the
reader with: nothing depends on the PATH Pi runs with. Then it adds that folder to ``packages``
in Pi's ``settings.json``. A package is Lookback's by its ``package.json`` (its name and ``pi``
key), never by the words in its path.
"""

from __future__ import annotations

import json
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lookback import resources

#: The ``name`` in the extension's package.json (never published to npm).
PACKAGE_NAME = "lookback-pi"
#: The file beside the installed copy that names the command starting the reader.
COMMAND_FILE = "lookback.json"
#: The extension's files as Pi loads them (the package's ``files``; tests stay behind).
FILE_PATTERNS = ("package.json", "index.ts", "README.md", "src/*.ts")
#: The folder of Lookback's data home the extension is installed into.
INSTALLED_DIR = "pi-extension"


def this_command() -> list[str]:
    """The absolute command of the Lookback now running: its Python with ``-P`` (the
    current folder never shadows the package), so any client runs this install."""
    return [sys.executable, "-P", "-m", "lookback"]


def is_package(folder: Path) -> bool:
    """Whether ``folder`` is Lookback's Pi package, by its package.json."""
    manifest = _manifest(folder / "package.json")
    return manifest.get("name") == PACKAGE_NAME and isinstance(manifest.get("pi"), dict)


def shipped_dir() -> Path | None:
    """The extension this install ships: package data of the wheel, else the clone's."""
    integrations = resources.shipped("integrations")
    folder = integrations / "pi" if integrations is not None else None
    return folder if folder is not None and is_package(folder) else None


def shipped_files(folder: Path) -> dict[str, bytes]:
    """Relative path -> bytes of the extension's files in ``folder``."""
    return {path.relative_to(folder).as_posix(): path.read_bytes()
            for pattern in FILE_PATTERNS for path in sorted(folder.glob(pattern))
            if path.is_file()}


def agent_dir(environ: dict[str, str], home: Path) -> Path:
    """Pi's agent folder: ``$PI_CODING_AGENT_DIR``, else ``~/.pi/agent``."""
    configured = environ.get("PI_CODING_AGENT_DIR")
    return Path(configured).expanduser() if configured else home / ".pi" / "agent"


@dataclass(frozen=True)
class Entry:
    """One ``packages`` entry of a Pi settings file that is Lookback's extension."""

    position: int
    source: str
    path: Path  # where Pi resolves it
    kind: str  # "folder" (a package), "file" (its index.ts alone), "packed" (a tarball)


def resolve_source(source: str, settings_file: Path) -> Path | None:
    """Where Pi loads a local ``packages`` source from (relative to the settings file's
    folder); None for npm, git and URL sources."""
    if source.startswith(("npm:", "git:", "github:", "http:", "https:", "ssh:", "builtin:")):
        return None
    if source.startswith("file:"):
        source = source.removeprefix("file://").removeprefix("file:")
    path = Path(source).expanduser()
    return path if path.is_absolute() else settings_file.parent / path


def lookback_entries(settings_file: Path, settings: dict[str, Any]) -> list[Entry]:
    """The entries of ``settings['packages']`` that are Lookback's extension, by content."""
    packages = settings.get("packages")
    found = []
    for position, entry in enumerate(packages if isinstance(packages, list) else []):
        source = entry.get("source") if isinstance(entry, dict) else entry
        path = resolve_source(source, settings_file) if isinstance(source, str) else None
        kind = _kind(path) if path is not None else None
        if kind is not None and path is not None and isinstance(source, str):
            found.append(Entry(position, source, path, kind))
    return found


def _kind(path: Path) -> str | None:
    try:
        if path.is_dir():
            return "folder" if is_package(path) else None
        if path.suffix == ".ts" and path.is_file():
            return "file" if is_package(path.parent) else None
        if path.is_file() and tarfile.is_tarfile(path):
            with tarfile.open(path) as packed:
                member = packed.extractfile("package/package.json")
                manifest = json.loads(member.read()) if member else {}
            return "packed" if isinstance(manifest, dict) and \
                manifest.get("name") == PACKAGE_NAME else None
    except (OSError, ValueError, KeyError, tarfile.TarError):
        return None
    return None


def recorded_command(folder: Path) -> list[str] | None:
    """The command ``lookback install pi`` recorded beside an installed copy, or None."""
    command = _manifest(folder / COMMAND_FILE).get("command")
    if isinstance(command, list) and command and all(isinstance(p, str) and p for p in command):
        return command
    return None


def _manifest(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}

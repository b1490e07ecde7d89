"""Finding Pi session files: the default sessions folder and paths given by the user."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path


def default_sessions_dir(environ: dict[str, str] | None = None) -> Path:
    """Where Pi keeps sessions: ``$PI_CODING_AGENT_SESSION_DIR``, else the agent dir's
    ``sessions`` (``$PI_CODING_AGENT_DIR``, default ``~/.pi/agent``)."""
    environ = dict(os.environ) if environ is None else environ
    if environ.get("PI_CODING_AGENT_SESSION_DIR"):
        return Path(environ["PI_CODING_AGENT_SESSION_DIR"]).expanduser()
    agent = environ.get("PI_CODING_AGENT_DIR") or "~/.pi/agent"
    return Path(agent).expanduser() / "sessions"


class PathProblem(ValueError):
    """A path the user named that cannot be indexed."""


def session_files(paths: Iterable[Path]) -> Iterator[Path]:
    """Every ``*.jsonl`` file named or found (recursively, sorted) under ``paths``.

    Raises PathProblem for a path that does not exist or is neither file nor folder.
    """
    for path in paths:
        path = Path(path).expanduser()
        if path.is_file():
            yield path.resolve()
        elif path.is_dir():
            yield from sorted(_walk(path))
        elif not path.exists():
            raise PathProblem(f"{path}: no such file or directory")
        else:
            raise PathProblem(f"{path}: not a file or directory")


def _walk(folder: Path) -> Iterator[Path]:
    def complain(error: OSError) -> None:
        raise PathProblem(f"{error.filename}: {error.strerror}")

    for root, dirs, files in os.walk(folder, onerror=complain):
        dirs.sort()
        for name in files:
            if name.endswith(".jsonl"):
                yield (Path(root) / name).resolve()

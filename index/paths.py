"""Which project holds each session file, so a file whose header ``cwd`` changed
moves to its new project instead of being in both.

One small JSON file per session file under ``$LOOKBACK_HOME/paths/`` (named by a
hash of the path), replaced atomically: writers of different projects (``lookback
index``, ``watch``, the reader's freshness engine) never share a lock for it, and
a lost update costs at most one move noticed late, never an entry.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

PATHS_DIR = "paths"


class PathRegistry:
    def __init__(self, home: Path, namespace: str = "") -> None:
        self.folder = Path(home) / PATHS_DIR
        self.namespace = namespace

    def _file(self, path: str) -> Path:
        key = f"{self.namespace}\0{path}".encode("utf-8", "surrogateescape")
        return self.folder / f"{hashlib.blake2b(key, digest_size=16).hexdigest()}.json"

    def get(self, path: str) -> str | None:
        """The cwd of the project that holds ``path``, or None when none is known."""
        try:
            record = json.loads(self._file(path).read_text())
        except (OSError, ValueError):
            return None
        return record.get("cwd") if record.get("path") == path else None

    def set(self, path: str, cwd: str) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        target = self._file(path)
        temporary = target.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps({"path": path, "cwd": cwd}))
        os.replace(temporary, target)

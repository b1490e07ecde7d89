"""Where each project's index lives on disk.

``$LOOKBACK_HOME/projects/<slug>-<hash>/`` per project, where the slug is the last
part of the project's cwd (for people) and the hash is of the namespace and the
full cwd (for uniqueness). Inside, ``CURRENT`` names the live generation file
``index-<n>.sqlite``; a rebuild writes the next generation beside it and swaps
``CURRENT`` atomically, so readers holding the old file keep working.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from lookback.errors import ForeignProject, NotFound
from lookback.index.memo import Memo

PROJECTS_DIR = "projects"
CURRENT_FILE = "CURRENT"
LOCK_FILE = "writer.lock"
REBUILD_LOCK_FILE = "rebuild.lock"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,120}$")

#: CURRENT file → (its inode, mtime and size, the generation it named); bounded, so a
#: reader of thousands of projects stays flat (a forgotten one is simply re-read).
_GENERATIONS: Memo[tuple[tuple[int, int, int], int | None]] = Memo(8192)


class ProjectNotFound(NotFound, LookupError):
    """No index exists for the named project."""

    code = "project-not-found"


@dataclass(frozen=True)
class ProjectDir:
    """One project's folder and the files in it."""

    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def lock_path(self) -> Path:
        return self.path / LOCK_FILE

    def make(self) -> None:
        """Create this folder, and the data home above it private (``make_home``)."""
        make_home(self.path.parent.parent)
        self.path.mkdir(parents=True, exist_ok=True)

    @property
    def rebuild_lock_path(self) -> Path:
        """Held by the one rebuild (or repair) of this project that may run."""
        return self.path / REBUILD_LOCK_FILE

    def current_generation(self) -> int | None:
        """The live generation, re-read only when ``CURRENT`` was replaced.

        Readers ask on every request; ``set_current`` renames a new file into place,
        so a changed inode or mtime is the signal to read it again.
        """
        current = self.path / CURRENT_FILE
        try:
            stat = os.stat(current)
        except (FileNotFoundError, NotADirectoryError):
            return None
        stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        cached = _GENERATIONS.get(current)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            text = current.read_text().strip()
        except (FileNotFoundError, NotADirectoryError):
            return None
        generation = int(text) if text.isdigit() else None
        _GENERATIONS.put(current, (stamp, generation))
        return generation

    def generation_path(self, generation: int) -> Path:
        return self.path / f"index-{generation}.sqlite"

    def index_path(self) -> Path | None:
        """The live index file, or None when the project has none yet."""
        generation = self.current_generation()
        return None if generation is None else self.generation_path(generation)

    def set_current(self, generation: int, *, durable: bool = True) -> None:
        """Point CURRENT at ``generation`` atomically (write, fsync, rename).

        ``durable=False`` skips the fsync: for a bulk run's new projects, which the
        run syncs all at once at its end (a lost CURRENT only means "not indexed").
        """
        temporary = self.path / f"{CURRENT_FILE}.tmp"
        with open(temporary, "w") as handle:
            handle.write(f"{generation}\n")
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(temporary, self.path / CURRENT_FILE)


def project_key(cwd: str, namespace: str = "") -> str:
    """The folder name of a project: readable slug plus a hash of namespace and cwd."""
    digest = hashlib.sha256(f"{namespace}\0{cwd}".encode()).hexdigest()[:12]
    last = re.split(r"[\\/]", cwd.rstrip("/\\"))[-1] if cwd else ""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", last).strip(".-")[:40] or "root"
    return f"{slug}-{digest}"


def refuse_foreign(only_project: str | None, *projects: str | None) -> None:
    """ForeignProject when a sink writing for ``only_project`` (the one project its
    request was authorized for; None: any) would touch one of ``projects``."""
    if only_project is not None and any(p is not None and p != only_project
                                        for p in projects):
        raise ForeignProject("the session file names a project this request was not "
                             "authorized for")


#: Why a sink that keeps files where they are held (``keep_held``) refused one.
MOVE_REFUSED = ("its header now names another project than the one holding it; with "
                "server.tokens set, sessions are not moved to another project by watching: "
                "run `lookback index FILE` to move it")


def make_home(home: Path) -> None:
    """Create the data home, when it does not exist yet, private to its user (0700): its
    indexes hold the session text the private reader guards, and a home folder others may
    enter (0755, the default on many systems) would hand every index to any local account.
    One that exists keeps the mode its owner gave it."""
    try:
        Path(home).mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass


def project_dir(home: Path, cwd: str, namespace: str = "") -> ProjectDir:
    return ProjectDir(Path(home) / PROJECTS_DIR / project_key(cwd, namespace))


def list_projects(home: Path) -> list[ProjectDir]:
    """Every project folder under ``home`` that has a live index."""
    root = Path(home) / PROJECTS_DIR
    if not root.is_dir():
        return []
    found = [ProjectDir(child) for child in sorted(root.iterdir()) if child.is_dir()]
    return [project for project in found if project.index_path() is not None]


def find_project(home: Path, name: str, namespace: str = "") -> ProjectDir:
    """The project called ``name`` (its folder name, or a cwd), checked before any path use."""
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:[\\/]", name):
        candidate = project_dir(home, name, namespace)
    elif _SAFE_NAME.match(name) and name not in (".", ".."):
        candidate = ProjectDir(Path(home) / PROJECTS_DIR / name)
    else:
        raise ProjectNotFound("invalid project name")
    if candidate.index_path() is None:
        raise ProjectNotFound(f"no index for project {name!r}")
    return candidate

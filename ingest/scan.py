"""Finding session files: the agents' default folders (Pi, Claude Code, Codex) and paths given
by the user.

Which agent wrote a file is recognized by its content when it is read (``ingest.reader``),
not by where it lies, so a folder may hold both.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from lookback.errors import UserError


def default_sessions_dir(environ: dict[str, str] | None = None) -> Path:
    """Where Pi keeps sessions: ``$PI_CODING_AGENT_SESSION_DIR``, else the agent dir's
    ``sessions`` (``$PI_CODING_AGENT_DIR``, default ``~/.pi/agent``)."""
    environ = dict(os.environ) if environ is None else environ
    if environ.get("PI_CODING_AGENT_SESSION_DIR"):
        return Path(environ["PI_CODING_AGENT_SESSION_DIR"]).expanduser()
    agent = environ.get("PI_CODING_AGENT_DIR") or "~/.pi/agent"
    return Path(agent).expanduser() / "sessions"


def default_claude_projects_dir(configured: str = "",
                                environ: dict[str, str] | None = None) -> Path:
    """Where Claude Code keeps sessions: ``configured``, else ``$CLAUDE_CONFIG_DIR/projects``,
    else ``~/.claude/projects``."""
    environ = dict(os.environ) if environ is None else environ
    if configured:
        return Path(configured).expanduser()
    base = environ.get("CLAUDE_CONFIG_DIR") or "~/.claude"
    return Path(base).expanduser() / "projects"


def default_codex_sessions_dir(configured: str = "",
                               environ: dict[str, str] | None = None) -> Path:
    """Where Codex keeps sessions: ``configured``, else ``$CODEX_HOME/sessions``, else
    ``~/.codex/sessions``."""
    environ = dict(os.environ) if environ is None else environ
    if configured:
        return Path(configured).expanduser()
    base = environ.get("CODEX_HOME") or "~/.codex"
    return Path(base).expanduser() / "sessions"


def default_session_roots(*, claude_code: bool = True, claude_projects_dir: str = "",
                          codex: bool = True, codex_sessions_dir: str = "",
                          environ: dict[str, str] | None = None) -> list[Path]:
    """The folders read when no path is named: Pi's sessions folder, and Claude Code's
    projects folder and Codex's sessions folder when asked for and they exist (Pi's is
    kept even before Pi made it, so a watcher finds its first session)."""
    roots = [default_sessions_dir(environ)]
    claude = default_claude_projects_dir(claude_projects_dir, environ)
    if claude_code and claude.is_dir():
        roots.append(claude)
    codex_dir = default_codex_sessions_dir(codex_sessions_dir, environ)
    if codex and codex_dir.is_dir():
        roots.append(codex_dir)
    return roots


def configured_roots(sessions_dirs: Iterable[str], *, claude_code: bool = True,
                     claude_projects_dir: str = "", codex: bool = True,
                     codex_sessions_dir: str = "") -> list[Path]:
    """``sessions_dirs`` when the settings name any, else ``default_session_roots``."""
    dirs = [Path(d).expanduser() for d in sessions_dirs if d]
    return dirs or default_session_roots(claude_code=claude_code,
                                         claude_projects_dir=claude_projects_dir,
                                         codex=codex, codex_sessions_dir=codex_sessions_dir)


class PathProblem(UserError, ValueError):
    """A path the user named that cannot be indexed."""

    code = "bad-path"


def session_files(paths: Iterable[Path], *, skipped: list[str] | None = None,
                  unreadable: list[str] | None = None) -> Iterator[Path]:
    """Every ``*.jsonl`` file named or found (recursively, sorted) under ``paths``.

    A ``*.jsonl`` found in a folder that is not a readable file (a symlink to
    nothing, a link to a folder) is skipped, and noted in ``skipped`` when given.
    A folder that cannot be listed (or a named path that cannot be looked at) is noted
    in ``unreadable`` when given and the walk goes on; without it, it raises
    PathProblem, as a named path that does not exist or is neither file nor folder.
    """
    for path in paths:
        path = Path(path).expanduser()
        try:
            path.stat()
        except PermissionError as error:
            if unreadable is None:
                raise PathProblem(f"{path}: {error.strerror}") from None
            unreadable.append(f"{path}: {error.strerror}")
            continue
        except OSError:
            pass  # missing or a dangling link: said below
        if path.is_file():
            yield path.resolve()
        elif path.is_dir():
            yield from sorted(_walk(path, skipped, unreadable))
        elif not path.exists():
            raise PathProblem(f"{path}: no such file or directory")
        else:
            raise PathProblem(f"{path}: not a file or directory")


def named_files(paths: Iterable[Path]) -> set[Path]:
    """The files among ``paths`` (as ``session_files`` yields them): named by the user,
    so one that is not a session is an error, not a stray file of a folder."""
    return {Path(path).expanduser().resolve() for path in paths
            if Path(path).expanduser().is_file()}


def _walk(folder: Path, skipped: list[str] | None,
          unreadable: list[str] | None = None) -> Iterator[Path]:
    def complain(error: OSError) -> None:
        if unreadable is None:
            raise PathProblem(f"{error.filename}: {error.strerror}")
        unreadable.append(f"{error.filename}: {error.strerror}")

    for root, dirs, files in os.walk(folder, onerror=complain):
        dirs.sort()
        for name in files:
            if not name.endswith(".jsonl"):
                continue
            path = Path(root) / name
            if path.is_file():
                yield path.resolve()
            elif skipped is not None:
                what = "a symlink to nothing" if path.is_symlink() and not path.exists() \
                    else "not a regular file"
                skipped.append(f"{path}: {what}")

"""Errors a user can cause, and the one-line message and exit code each gets."""

from __future__ import annotations

import errno

import apsw

from lookback.index.layout import ProjectNotFound
from lookback.index.project import WriterBusy
from lookback.index.store import IncompatibleIndex, IndexUnavailable
from lookback.ingest.reader import NotASession
from lookback.ingest.scan import PathProblem
from lookback.settings import SettingsError


class UserError(Exception):
    """A problem with the user's input; ``code`` is the exit code (2 by default)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


_BAD_INPUT = (UserError, SettingsError, PathProblem, NotASession, ProjectNotFound)
_JOB_FAILED = (WriterBusy, IncompatibleIndex, IndexUnavailable)


def describe(error: BaseException) -> tuple[str | None, int]:
    """(message, exit code) for an error a user can cause; (None, 1) for a bug."""
    if isinstance(error, UserError):
        return str(error), error.code
    if isinstance(error, _BAD_INPUT):
        return str(error), 2
    if isinstance(error, _JOB_FAILED):
        return str(error), 1
    if isinstance(error, apsw.FullError):
        return "the disk is full; the index is unchanged since its last complete batch", 1
    if isinstance(error, apsw.ReadOnlyError | apsw.CantOpenError | apsw.PermissionsError):
        return f"cannot write the index ({error.__class__.__name__}): check permissions", 1
    if isinstance(error, apsw.BusyError):
        return "the index is busy (another writer); try again", 1
    if isinstance(error, OSError):
        if error.errno == errno.ENOSPC:
            return "the disk is full; the index is unchanged since its last complete batch", 1
        where = f"{error.filename}: " if error.filename else ""
        return f"{where}{error.strerror or error}", 1
    return None, 1

"""The one error hierarchy: what went wrong, as an exit code, an HTTP status and a code.

Every error Lookback raises on purpose derives from ``LookbackError`` through one of
four kinds, and the CLI (``lookback.cli.describe``) and the HTTP reader map an error
by these class attributes, never by its name or its attributes' shapes:

==================  =========  ===========  ==============================================
kind                exit code  HTTP status  examples
==================  =========  ===========  ==============================================
``UserError``       2          400          bad flags, paths, requests, not a session
``SettingsError``   2          500          a settings file or variable (the operator's)
``NotFound``        2          404          no such project, session not indexed
``Unavailable``     1          503          index unusable or busy, disk full, embedder missing
``LookbackError``   1          500          anything else raised on purpose
==================  =========  ===========  ==============================================

A module's own errors subclass a kind (and, where callers already catch it, the
builtin they used to be: ``ProjectNotFound(NotFound, LookupError)``). Driver errors
(APSW) are translated into ``Unavailable`` errors (``IndexCorrupt``, ``IndexBusy``,
``IndexFull``, ...; ``lookback.index.store.translate``) at the index edge: writes run
inside ``index.store.driver_errors``, and reads inside ``index.store.read_errors``,
where the reader's pool hands a connection out (``query.search.pool``). So nothing
above ``index`` needs the driver to tell a full disk or a damaged file from a bug.
``code`` is a stable, short word for programs; the message is for people and quotes no
session text.

This module is the bottom layer (it imports nothing from the project), so every
stage can raise these.
"""

from __future__ import annotations

import errno
from typing import Any

#: The errnos of a process (EMFILE) or the system (ENFILE) out of file descriptors.
OUT_OF_FILES_ERRNOS = frozenset((errno.EMFILE, errno.ENFILE))


def out_of_files(error: BaseException | None, *, causes: bool = False) -> bool:
    """Whether ``error`` is an OSError saying there are no file descriptors left; with
    ``causes``, also when one in its chain of causes (``__cause__``, ``__context__``) is."""
    while error is not None:
        if isinstance(error, OSError) and error.errno in OUT_OF_FILES_ERRNOS:
            return True
        error = (error.__cause__ or error.__context__) if causes else None
    return False


class LookbackError(Exception):
    """Base of every error Lookback raises on purpose."""

    exit_code = 1
    http_status = 500
    code = "internal"

    def __init__(self, message: str = "", exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code

    def payload(self) -> dict[str, Any]:
        """The error object the HTTP reader and ``lookback retrieve`` answer with."""
        return {"status": "error", "error": {"code": self.code, "message": str(self)}}


class UserError(LookbackError):
    """A problem with the user's input: flags, paths, a request, settings."""

    exit_code = 2
    http_status = 400
    code = "bad-request"


class SettingsError(UserError):
    """A settings file or variable that cannot be used.

    The operator's input, not the HTTP client's: the reader answers 500.
    """

    http_status = 500
    code = "bad-settings"


class NotFound(LookbackError):
    """Something named that does not exist (yet): a project, an indexed session."""

    exit_code = 2
    http_status = 404
    code = "not-found"


class Unavailable(LookbackError):
    """Something that cannot be used now: an index, a writer lock, an embedder."""

    exit_code = 1
    http_status = 503
    code = "unavailable"


class ForeignProject(UserError):
    """A write asked for on behalf of one project would go into another: the session
    file's header names another project now (or it was indexed into another before).
    Refused and counted, never written (see docs/reader-service.md, the threat model)."""

    http_status = 403
    code = "forbidden"

"""The one error hierarchy: what went wrong, as an exit code, an HTTP status and a code.

Every error Lookback raises on purpose derives from ``LookbackError``; the CLI and
the HTTP reader map an error by its class attributes, never by its name. This
module is the bottom layer (it imports nothing from the project), so every stage
can raise these.
"""

from __future__ import annotations


class LookbackError(Exception):
    """Base of every error Lookback raises on purpose.

    ``exit_code`` is what the ``lookback`` command exits with, ``http_status`` and
    ``code`` what the reader service answers with.
    """

    exit_code = 1
    http_status = 500
    code = "internal"

    def __init__(self, message: str = "", exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UserError(LookbackError):
    """A problem with the user's input: flags, paths, a request, settings."""

    exit_code = 2
    http_status = 400
    code = "bad-request"


class SettingsError(UserError):
    """A settings file or variable that cannot be used."""

    code = "bad-settings"

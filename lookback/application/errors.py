"""The service's error answer: an HTTP status, a stable code and a message that quotes no
user text (request terms, paths and evidence never reach an error or a log line)."""

from __future__ import annotations

from lookback.errors import LookbackError


class ApiError(LookbackError):
    """An error answer: HTTP status, stable code and a message that quotes no user text."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = self.http_status = status
        self.code = code


FORBIDDEN = ApiError(403, "forbidden", "this token does not grant access to that project")

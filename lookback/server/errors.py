"""The service's error answer: an HTTP status, a stable code and a message that quotes no
user text (request terms, paths and evidence never reach an error or a log line)."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error answer: HTTP status, stable code and a message that quotes no user text."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code

    def payload(self) -> dict[str, Any]:
        return {"status": "error", "error": {"code": self.code, "message": str(self)}}


FORBIDDEN = ApiError(403, "forbidden", "this token does not grant access to that project")

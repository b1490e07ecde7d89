"""The retrieval request: validated once, so the pipeline can trust its fields.

The shape is the retrieval contract of docs/design.md. Anything wrong is a ``RequestError``
with a stable ``code`` and a message that quotes no user text.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from lookback.query.context.messages import latest_real_user_message

from lookback.settings import DEFAULTS

MAX_RESULTS_RANGE = (1, 100)
DEFAULT_MAX_RESULTS = DEFAULTS.retrieval.max_results
DEFAULT_MAX_HISTORY_TOKENS = DEFAULTS.retrieval.max_retrieved_history_tokens
MAX_MESSAGE_CHARS = 200_000
MAX_IDS = 1_000_000


class RequestError(ValueError):
    """A request that cannot be answered as given."""

    def __init__(self, message: str, code: str = "invalid-request") -> None:
        super().__init__(message)
        self.code = code

    def to_dict(self) -> dict[str, Any]:
        return {"status": "error", "error": {"code": self.code, "message": str(self)}}


@dataclass(frozen=True)
class RetrievalRequest:
    session_file: str | None
    project: str | None
    session_id: str | None
    leaf_id: str | None
    branch_ids: tuple[str, ...] | None
    context_ids: tuple[str, ...] | None
    message: str | None  # None: no real user message in ``messages``
    provider: str | None
    max_results: int
    max_retrieved_history_tokens: int
    semantic: bool


def parse_request(data: Any, defaults: dict[str, Any] | None = None) -> RetrievalRequest:
    """Validate a request dict (``defaults``: the settings' retrieval section)."""
    if not isinstance(data, dict):
        raise RequestError("the request must be a JSON object")
    defaults = defaults or {}
    session_file = _optional_str(data, "session_file")
    if session_file is not None and not os.path.isabs(session_file):
        raise RequestError("session_file must be an absolute path")
    project, session_id = _optional_str(data, "project"), _optional_str(data, "session_id")
    if session_file is None and not (project and session_id):
        raise RequestError("name the session: session_file, or project and session_id")
    return RetrievalRequest(
        session_file=session_file,
        project=project,
        session_id=session_id,
        leaf_id=_optional_str(data, "leaf_id"),
        branch_ids=_optional_ids(data, "branch_ids"),
        context_ids=_optional_ids(data, "context_ids"),
        message=_message(data),
        provider=_optional_str(data, "provider"),
        max_results=_bounded_int(data, "max_results",
                                 defaults.get("max_results", DEFAULT_MAX_RESULTS),
                                 *MAX_RESULTS_RANGE),
        max_retrieved_history_tokens=_bounded_int(
            data, "max_retrieved_history_tokens",
            defaults.get("max_retrieved_history_tokens", DEFAULT_MAX_HISTORY_TOKENS),
            0, 10_000_000),
        semantic=_optional_bool(data, "semantic", bool(defaults.get("semantic", False))),
    )


def _message(data: dict[str, Any]) -> str | None:
    if "message" in data and data["message"] is not None:
        if not isinstance(data["message"], str):
            raise RequestError("message must be a string")
        return data["message"][:MAX_MESSAGE_CHARS]
    messages = data.get("messages")
    if messages is None:
        raise RequestError("give message (text) or messages (Pi AgentMessage[])")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise RequestError("messages must be a list of objects")
    found = latest_real_user_message(messages)
    return None if found is None else found[1][:MAX_MESSAGE_CHARS]


def _optional_str(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value or "\x00" in value:
        raise RequestError(f"{key} must be a non-empty string")
    return value


def _optional_ids(data: dict[str, Any], key: str) -> tuple[str, ...] | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_IDS \
            or not all(isinstance(item, str) for item in value):
        raise RequestError(f"{key} must be a list of entry id strings")
    return tuple(value)


def _bounded_int(data: dict[str, Any], key: str, default: Any, low: int, high: int) -> int:
    value = data.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{key} must be an integer")
    if not low <= value <= high:
        raise RequestError(f"{key} must be between {low} and {high}")
    return value


def _optional_bool(data: dict[str, Any], key: str, default: bool) -> bool:
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise RequestError(f"{key} must be true or false")
    return value

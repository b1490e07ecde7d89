"""The wire contract's requests, typed: retrieve, search, source and plan.

Each request is decoded once, where it enters — the HTTP reader (``lookback.server.app``),
the CLI commands and the Python API (``lookback.api``, which takes a dict or an already
decoded request) — by ``parse_request``, ``parse_search``, ``parse_source`` and
``parse_plan``, into frozen ``msgspec`` structs the pipeline trusts; nothing below the
edge validates a field again. The HTTP reader resolves and authorizes the session once
and hands the engine the request ``pin``-ned to it.

The shapes are the retrieval contract of docs/design.md. Anything wrong is a
``RequestError`` with a stable ``code`` and a message that names the field and quotes no
user text.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from typing import Any, TypeVar

import msgspec

from lookback.errors import UserError
from lookback.query.contract.messages import latest_real_user_message
from lookback.settings import DEFAULTS, Retrieval

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")

MAX_RESULTS_RANGE = (1, 100)
MAX_TOKENS_RANGE = (0, 10_000_000)
#: Largest input target or hard limit a plan may name (far beyond any model's window).
MAX_LIMIT_TOKENS = 10**12
DEFAULT_MAX_RESULTS = DEFAULTS.retrieval.max_results
DEFAULT_MAX_HISTORY_TOKENS = DEFAULTS.retrieval.max_retrieved_history_tokens
MAX_MESSAGE_CHARS = 200_000
MAX_IDS = 1_000_000
#: History search: its scopes, results by default and at most.
SCOPES = ("branch", "session", "project")
DEFAULT_SEARCH_RESULTS, MAX_SEARCH_RESULTS = 20, 100
#: Most neighbours ``source`` returns on each side of the entry.
MAX_NEIGHBOURS = 20


class RequestError(UserError, ValueError):
    """A request that cannot be answered as given."""

    def __init__(self, message: str, code: str = "invalid-request") -> None:
        super().__init__(message)
        self.code = code

    def to_dict(self) -> dict[str, Any]:
        return {"status": "error", "error": {"code": self.code, "message": str(self)}}


class SessionNames(msgspec.Struct, frozen=True, kw_only=True):
    """How a request names its session: ``session_file``, or ``project`` and ``session_id``."""

    session_file: str | None = None
    project: str | None = None
    session_id: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        return {"session_file": self.session_file, "project": self.project,
                "session_id": self.session_id}

    @property
    def names(self) -> SessionNames:
        """Just the session's names (what the reader resolves and the app authorizes)."""
        return SessionNames(session_file=self.session_file, project=self.project,
                            session_id=self.session_id)


class PlanRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What the planner is asked, its JSON types checked (values are the planner's to
    judge: an unknown kind or a negative count makes it fall back, not fail).

    ``messages``: ``{"kind", "tokens"}`` per message (None when a retrieve request's
    ``kinds`` and ``tokens`` do not pair up); ``evidence``: the ranked items (empty for
    a retrieve request: its own answer's evidence is planned).
    """

    messages: list[dict[str, Any]] | None
    evidence: list[dict[str, Any]]
    max_retrieved_history_tokens: int
    input_target_tokens: int | None = None
    hard_limit_tokens: int | None = None


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """A retrieve request's ``tool``: the tool's name, its arguments as the agent gives
    them, and the folder it runs in (only to name files as the project does)."""

    name: str
    input: dict[str, Any]
    cwd: str | None = None


class RetrievalRequest(SessionNames, frozen=True, kw_only=True):
    """``POST /v1/retrieve``, ``lookback retrieve``, ``lookback.retrieve``."""

    leaf_id: str | None = None
    branch_ids: tuple[str, ...] | None = None
    context_ids: tuple[str, ...] | None = None
    message: str | None = None  # None: no real user message in ``messages``
    provider: str | None = None
    max_results: int = DEFAULT_MAX_RESULTS
    max_retrieved_history_tokens: int = DEFAULT_MAX_HISTORY_TOKENS
    semantic: bool = False
    #: The planner's question riding along (``plan``); its budget defaults to this
    #: request's ``max_retrieved_history_tokens``.
    plan: PlanRequest | None = None
    #: When the message was written (epoch ms): "yesterday" or "last year" in it are
    #: resolved against this. None: the time of the call.
    message_time_ms: int | None = None
    #: Entries the client already quoted into the model's context as evidence, which its
    #: agent keeps re-sending (Codex keeps hook output until a compaction): never again.
    quoted_ids: tuple[str, ...] | None = None
    #: The tool call the agent is about to make: the request asks for point-of-action
    #: evidence about what it touches (``query.search.action``), not about ``message``.
    tool: ToolCall | None = None


class SearchRequest(SessionNames, frozen=True, kw_only=True):
    """``POST /v1/search``, ``lookback search``, ``lookback.api.search``: explicit history
    search (a project alone names its latest session)."""

    text: str
    scope: str = "branch"
    max_results: int = DEFAULT_SEARCH_RESULTS
    leaf_id: str | None = None
    branch_ids: tuple[str, ...] | None = None
    provider: str | None = None
    message_time_ms: int | None = None


class SourceRequest(SessionNames, frozen=True, kw_only=True):
    """``POST /v1/source``, ``lookback.api.source``: one entry and its neighbours."""

    entry_id: str
    provider: str | None = None
    before: int = 0
    after: int = 0


Named = TypeVar("Named", bound=SessionNames)


def pin(request: Named, project: str, session_id: str | None) -> Named:
    """``request`` naming the project and session it was resolved (and authorized) to, in
    place of a session file the engine would resolve again: a symlink repointed or a
    file replaced meanwhile cannot change what is read."""
    return msgspec.structs.replace(request, session_file=None, project=project,
                                   session_id=session_id or request.session_id)


def encode_request(request: msgspec.Struct) -> bytes:
    """A decoded request as canonical JSON bytes (the answer cache's key)."""
    return msgspec.json.encode(request)


#: Deepest nesting a request may have (orjson encodes up to 255 levels; deeper input
#: would make the standard library recurse ~1,000 frames deep).
MAX_DEPTH = 200


def check_depth(value: Any, limit: int = MAX_DEPTH) -> None:
    """Raise RequestError when lists/objects in ``value`` nest deeper than ``limit``."""
    stack = [(value, 1)] if isinstance(value, dict | list) else []  # a scalar nests nothing
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise RequestError(f"the request nests deeper than {limit} levels")
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children
                     if isinstance(child, dict | list))


def session_names(data: Any, *, project_alone: bool = False) -> SessionNames:
    """The session a request names, validated: strings without NUL bytes or lone
    surrogates, an absolute ``session_file``, or both ``project`` and ``session_id``
    (with ``project_alone``, a project is enough: its latest session, as history
    search allows)."""
    if not isinstance(data, dict):
        raise RequestError("the request must be a JSON object")
    session_file = optional_text(data, "session_file")
    if session_file is not None and not os.path.isabs(session_file):
        raise RequestError("session_file must be an absolute path")
    project, session_id = optional_text(data, "project"), optional_text(data, "session_id")
    if session_file is None and not (project and (session_id or project_alone)):
        raise RequestError("name the session: session_file, or project and session_id")
    return SessionNames(session_file=session_file, project=project, session_id=session_id)


def parse_request(data: Any, defaults: Retrieval | None = None) -> RetrievalRequest:
    """Decode a retrieve request (``defaults``: the settings' retrieval section)."""
    names = session_names(data)
    defaults = defaults or DEFAULTS.retrieval
    budget = _bounded_int(data, "max_retrieved_history_tokens",
                          defaults.max_retrieved_history_tokens, *MAX_TOKENS_RANGE)
    plan = data.get("plan")
    tool = _tool_call(data)
    return RetrievalRequest(
        **names.as_dict(),
        leaf_id=optional_text(data, "leaf_id"),
        branch_ids=optional_ids(data, "branch_ids"),
        context_ids=optional_ids(data, "context_ids"),
        # A tool call is the query; a message beside it is not searched.
        message=_message(data) if tool is None else None,
        provider=optional_text(data, "provider"),
        max_results=_bounded_int(data, "max_results", defaults.max_results,
                                 *MAX_RESULTS_RANGE),
        max_retrieved_history_tokens=budget,
        semantic=_optional_bool(data, "semantic", defaults.semantic),
        message_time_ms=message_time(data),
        quoted_ids=optional_ids(data, "quoted_ids"),
        plan=None if plan is None else _riding_plan(plan, budget),
        tool=tool,
    )


def _tool_call(data: dict[str, Any]) -> ToolCall | None:
    """A retrieve request's ``tool`` (``{"name", "input", "cwd"}``), or None."""
    tool = data.get("tool")
    if tool is None:
        return None
    if not isinstance(tool, dict):
        raise RequestError("tool must be an object: name, input and optional cwd")
    name, arguments, cwd = tool.get("name"), tool.get("input"), tool.get("cwd")
    if not isinstance(name, str) or _LONE_SURROGATE.search(name) or "\0" in name:
        raise RequestError("tool.name must be a string")
    if not isinstance(arguments, dict):
        raise RequestError("tool.input must be an object (the tool's arguments)")
    if cwd is not None and (not isinstance(cwd, str) or not os.path.isabs(cwd)):
        raise RequestError("tool.cwd must be an absolute path")
    check_depth(arguments)
    try:  # the answer cache keys on the encoded request: a lone surrogate cannot be
        msgspec.json.encode(arguments)
    except (msgspec.EncodeError, UnicodeEncodeError, OverflowError):
        raise RequestError("tool.input must be valid JSON text") from None
    return ToolCall(name=name, input=arguments, cwd=cwd)


def _riding_plan(plan: Any, budget: int) -> PlanRequest:
    """A retrieve request's ``plan``: kinds and tokens as two flat lists, and budgets."""
    if not isinstance(plan, dict):
        raise RequestError("plan must be an object: kinds, tokens and optional budgets")
    kinds = _typed_list(plan, "kinds", str, "plan.kinds must be a list of kind strings")
    tokens = _typed_list(plan, "tokens", int, "plan.tokens must be a list of integers")
    messages = None
    if kinds is not None and tokens is not None and len(kinds) == len(tokens):
        messages = [{"kind": kind, "tokens": count}
                    for kind, count in zip(kinds, tokens, strict=True)]
    return _plan_request(plan, messages, [], budget, "plan.")


def parse_search(data: Any) -> SearchRequest:
    """Decode a history search request."""
    if not isinstance(data, dict):
        raise RequestError("the request must be a JSON object")
    text = data.get("text")
    if not isinstance(text, str) or not text.strip():
        raise RequestError("text must be a non-empty string")
    scope = data.get("scope") or "branch"
    if scope not in SCOPES:
        raise RequestError(f"scope must be one of {', '.join(SCOPES)}")
    limit = data.get("max_results", DEFAULT_SEARCH_RESULTS)
    if isinstance(limit, bool) or not isinstance(limit, int) or \
            not 1 <= limit <= MAX_SEARCH_RESULTS:
        raise RequestError(f"max_results must be an integer between 1 and "
                           f"{MAX_SEARCH_RESULTS}")
    names = session_names(data, project_alone=True)
    return SearchRequest(**names.as_dict(), text=query_text(text), scope=scope,
                         max_results=limit, leaf_id=optional_text(data, "leaf_id"),
                         branch_ids=optional_ids(data, "branch_ids"),
                         provider=optional_text(data, "provider"),
                         message_time_ms=message_time(data))


def parse_source(data: Any) -> SourceRequest:
    """Decode a source request: ``entry_id``, the session, ``before``/``after``."""
    names = session_names(data)
    entry_id = optional_text(data, "entry_id")
    if entry_id is None:
        raise RequestError("give entry_id and the session (session_file, or project "
                           "and session_id)")
    return SourceRequest(**names.as_dict(), entry_id=entry_id,
                         provider=optional_text(data, "provider"),
                         before=_neighbour_count(data, "before"),
                         after=_neighbour_count(data, "after"))


def _neighbour_count(data: dict[str, Any], key: str) -> int:
    value = data.get(key, 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_NEIGHBOURS:
        raise RequestError(f"{key} must be an integer between 0 and {MAX_NEIGHBOURS}")
    return value


def parse_plan(data: Any, default_budget: int) -> PlanRequest:
    """Validate a ``/v1/plan`` body: ``messages`` (``{"kind", "tokens"}`` each),
    ``evidence`` (``{"session_id", "entry_id", "tokens", ...}`` each; ``group_id``,
    ``tier`` and ``score``, which the answer's ``included`` repeats, of their types or
    null) and the budgets; a null budget is the default, as in a retrieve request."""
    if not isinstance(data, dict):
        raise RequestError("the request must be a JSON object")
    messages = _typed_list(data, "messages", dict, "messages must be a list of objects")
    if messages is None:
        raise RequestError("messages must be a list of objects")
    evidence = _typed_list(data, "evidence", dict, "evidence must be a list of objects") or []
    for index, message in enumerate(messages):
        _check_field_types(message, f"messages[{index}]", {"kind": str, "tokens": int})
    for index, item in enumerate(evidence):
        _check_field_types(item, f"evidence[{index}]",
                           {"session_id": str, "entry_id": str, "tokens": int,
                            "group_id": str, "tier": str, "score": float})
    return _plan_request(data, messages, evidence, default_budget, "")


def _plan_request(data: dict[str, Any], messages: list[dict[str, Any]] | None,
                  evidence: list[dict[str, Any]], default_budget: int,
                  prefix: str) -> PlanRequest:
    budget = _bounded_int(data, "max_retrieved_history_tokens", default_budget,
                          *MAX_TOKENS_RANGE, name=f"{prefix}max_retrieved_history_tokens")
    limits = {key: _bounded_int(data, key, None, 0, MAX_LIMIT_TOKENS, name=prefix + key)
              for key in ("input_target_tokens", "hard_limit_tokens")}
    return PlanRequest(messages=messages, evidence=evidence,
                       max_retrieved_history_tokens=budget, **limits)


def _typed_list(data: dict[str, Any], key: str, kind: type, problem: str) -> list[Any] | None:
    """``data[key]``: None when absent or null, else a list of ``kind`` items (a bool is
    not an int), or RequestError(problem)."""
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_IDS or not all(
            isinstance(item, kind) and not (kind is int and isinstance(item, bool))
            for item in value):
        raise RequestError(problem)
    return value


def _check_field_types(item: dict[str, Any], where: str, types: dict[str, type]) -> None:
    """Each of ``types``' keys in ``item`` is absent, null or of its type (a bool is not
    an int): anything else is a bad request, not something to plan around."""
    for key, kind in types.items():
        value = item.get(key)
        if value is None:
            continue
        accepted = (int, float) if kind is float else kind  # a number: 3 is a float too
        if not isinstance(value, accepted) or (kind in (int, float)
                                               and isinstance(value, bool)):
            raise RequestError(f"{where}.{key} must be {_TYPE_NAMES[kind]}")


_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", dict: "an object"}


def _message(data: dict[str, Any]) -> str | None:
    if "message" in data and data["message"] is not None:
        if not isinstance(data["message"], str):
            raise RequestError("message must be a string")
        return query_text(data["message"])
    messages = data.get("messages")
    if messages is None:
        raise RequestError("give message (text) or messages (Pi AgentMessage[])")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise RequestError("messages must be a list of objects")
    found = latest_real_user_message(messages)
    return None if found is None else query_text(found[1])


def message_time(data: dict[str, Any]) -> int | None:
    """The message's time in epoch ms: ``message_time`` (epoch ms or ISO 8601), else the
    ``timestamp`` of the latest real user message in ``messages``, else None."""
    value = data.get("message_time")
    if value is not None:
        found = _epoch_ms(value)
        if found is None:
            raise RequestError("message_time must be epoch milliseconds or an ISO 8601 time")
        return found
    messages = data.get("messages")
    if data.get("message") is None and isinstance(messages, list) and all(
            isinstance(m, dict) for m in messages):
        latest = latest_real_user_message(messages)
        if latest is not None:
            return _epoch_ms(messages[latest[0]].get("timestamp"))  # Pi's: epoch ms
    return None


def _epoch_ms(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value if 0 <= value < 10**14 else None
    if isinstance(value, str) and 0 < len(value) <= 64:
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            return None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return int(moment.timestamp() * 1000)
    return None


def query_text(text: str) -> str:
    """What a search is for, at most ``MAX_MESSAGE_CHARS``; a lone surrogate (an emoji
    cut in half, which Pi may write) becomes U+FFFD: it can match nothing anyway."""
    text = text[:MAX_MESSAGE_CHARS]
    return text if _encodable(text) else _LONE_SURROGATE.sub("\ufffd", text)


def optional_text(data: dict[str, Any], key: str) -> str | None:
    """``data[key]``: None when absent, else a non-empty string of valid Unicode without
    NUL bytes (a lone surrogate — half an emoji — cannot name a file or an entry)."""
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value or "\x00" in value or not _encodable(value):
        raise RequestError(f"{key} must be a non-empty string (no NUL bytes, valid Unicode)")
    return value


def _encodable(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def optional_ids(data: dict[str, Any], key: str) -> tuple[str, ...] | None:
    value = data.get(key)
    if value is None:
        return None
    problem = RequestError(f"{key} must be a list of entry id strings (valid Unicode)")
    if not isinstance(value, list) or len(value) > MAX_IDS:
        raise problem
    try:  # one join checks every item's type, one encode every item's text: C speed
        joined = "".join(value)
    except TypeError:
        raise problem from None
    if not _encodable(joined):
        raise problem
    return tuple(value)


def _bounded_int(data: dict[str, Any], key: str, default: Any, low: int, high: int,
                 *, name: str | None = None) -> Any:
    """``data[key]`` as an integer in ``[low, high]``; absent or null: ``default``."""
    value = data.get(key)
    if value is None:
        return default
    name = name or key
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{name} must be an integer")
    if not low <= value <= high:
        raise RequestError(f"{name} must be between {low} and {high}")
    return value


def _optional_bool(data: dict[str, Any], key: str, default: bool) -> bool:
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise RequestError(f"{key} must be true or false")
    return value

"""The reader's application: routing, auth, JSON parsing, the engine call, caching and the
manifest — everything a request needs, independent of HTTP plumbing, so it is testable and
measurable without sockets.

``ReaderApp.handle(method, target, authorization, body)`` returns
``(status, payload, log_fields)``; ``lookback.server.transport`` puts it on the wire.
The MCP tools ask the same answers in process (``ask_search``, ``ask_source``,
``ask_health``): typed, without the JSON and routing between.

Endpoints (all JSON): ``POST /v1/retrieve``, ``/v1/search``, ``/v1/source``,
``/v1/plan``, ``/v1/nudge``; ``GET /v1/health``, ``/v1/manifest?session_id=...``.

A request for a project the token does not grant — or for one that cannot be resolved at
all — gets the same 403, so it learns nothing about what exists. Project names only reach
the filesystem through ``index.layout.find_project``. What a token's answers may hold
is its grant's privacy ceiling (``server.auth.Grant``): the engine is called with the
privacy settings of that grant (``query.privacy.granted``), so a request's ``provider``
narrows it and never widens it. Without tokens the reader is its owner's, who may read
the files anyway: the request's ``provider`` is trusted as it is.

Routing (service mode, several worker hosts; ``lookback.server.routing``): a request about
a project another host owns is forwarded to that host's reader, once, with the caller's
token; when that fails, the local answer is marked (``stale`` for a copy held here,
``elsewhere`` for none), never ``ok`` or ``not-indexed``.

Freshness: the ``Keeper`` the mode chose (``lookback.application.keeping``) brings the
session file a request names up to date before answering (embedded mode, bounded by
``freshness.wait_ms``), or leaves that to the workers (service mode).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from types import ModuleType
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import msgspec
import orjson

from lookback import freshness, local_reader
from lookback.application.auth import Grant, Grants
from lookback.application.cache import AnswerCache, time_key, watermark
from lookback.application.errors import FORBIDDEN, ApiError
from lookback.application.modes import open_keeper
from lookback.application.records import ManifestWriter
from lookback.budget import file_budget
from lookback.errors import LookbackError
from lookback.index.layout import find_project, project_key
from lookback.query.context.manifest import ManifestStore, retrieval_record
from lookback.query.context.planner import decide_for_answer, decide_request
from lookback.query.contract.answers import (
    PlanAnswer,
    RetrieveAnswer,
    SearchAnswer,
    SourceAnswer,
    answer_dict,
    encode_answer,
)
from lookback.query.contract.request import (
    MAX_DEPTH,
    Named,
    SessionNames,
    check_depth,
    encode_request,
    optional_text,
    parse_plan,
    parse_request,
    parse_search,
    parse_source,
    pin,
)
from lookback.query.privacy import Classification, granted
from lookback.server.routing import Router
from lookback.settings import Settings

log = logging.getLogger("lookback.server")
#: A search or source answer: both carry ``status`` and ``warnings`` at their top level.
_TopLevelAnswer = TypeVar("_TopLevelAnswer", SearchAnswer, SourceAnswer)

Reply = tuple[int, Any, dict[str, Any]]
Asked = TypeVar("Asked", SearchAnswer, SourceAnswer, dict[str, Any])


class ReaderApp:
    """Everything a request needs, independent of HTTP plumbing.

    ``engine`` is the retrieval engine (default ``lookback.api``); ``reader`` one
    ``query.search.reader.IndexReader`` shared by every request of the process.
    """

    def __init__(self, settings: Settings, *, engine: ModuleType | Any = None,
                 reader: Any = None, manifests: ManifestStore | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        if engine is None:
            from lookback import api as engine
        if reader is None:
            from lookback.api import new_reader

            reader = new_reader(settings)
        self.settings = settings
        #: "Now" (epoch seconds) for a request without a message time (see ``retrieve``).
        self.clock = clock
        self.engine = engine
        self.reader = reader
        self.grants = Grants(settings.server.tokens, settings.namespace)
        #: the settings the engine answers a grant with, per privacy ceiling
        self._granted: dict[Classification, Settings] = {}
        #: the ceiling of a token granted no privacy level of its own
        self._default_ceiling = Classification.parse(settings.privacy.default_max)
        #: What ``/v1/health`` names this reader by: its data home's fingerprint, which
        #: clients compare with the one they expect (``lookback.local_reader``).
        self.identity = local_reader.fingerprint(settings.home)
        self.cache = AnswerCache(settings.server.cache_entries)
        keep = settings.manifest.keep_per_session
        self.manifests = ManifestWriter(manifests or ManifestStore(settings.home, keep=keep))
        self.timeout = settings.server.request_timeout_seconds
        self._deadline = threading.local()  # the deadline of the request this thread answers
        #: who keeps the indexes fresh: this process (embedded mode) or the workers
        self.keeper = open_keeper(settings)
        #: Service mode: owner lookups and forwarding to the owner's reader.
        self.router = Router(settings) if self.keeper.mode == "service" else None
        self._asked = threading.local()  # the caller's token, and whether it was forwarded
        workers = settings.server.workers
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="lookback-call") \
            if workers > 0 else None
        self.routes: dict[tuple[str, str], Callable[..., Reply]] = {
            ("POST", "/v1/retrieve"): self.retrieve,
            ("POST", "/v1/search"): self.search,
            ("POST", "/v1/source"): self.source,
            ("POST", "/v1/plan"): self.plan,
            ("POST", "/v1/nudge"): self.nudge,
            ("GET", "/v1/health"): self.health,
            ("GET", "/v1/manifest"): self.manifest,
        }

    # -- dispatch -----------------------------------------------------------------------

    def handle(self, method: str, target: str, authorization: str | None,
               body: bytes, *, deadline: float | None = None,
               forwarded: bool = False, owner: bool = False) -> Reply:
        """Answer one request: ``(HTTP status, payload dict or encoded bytes, log fields)``.

        ``deadline`` (``time.monotonic()`` seconds) is when the answer is due: the
        transport sets it at the request's first byte, so reading it and the engine call
        share one time limit. Without one, the engine call gets the whole limit.
        ``forwarded``: another host's reader sent it (it is answered here, never
        forwarded again). ``owner``: the caller authenticated as the data home's owner
        some other way (the page's cookie, ``lookback.server.page``), so no token is
        asked for."""
        self._begin(authorization, deadline, forwarded)
        parts = urlsplit(target)
        route = self.routes.get((method, parts.path))
        try:
            if route is None:
                if any(path == parts.path for _, path in self.routes):
                    raise ApiError(405, "method-not-allowed", f"{method} is not allowed here")
                raise ApiError(404, "not-found", "no such endpoint")
            if method == "GET":
                query = parse_qs(parts.query)
                if route == self.health and _identity_only(query):
                    # Who this reader is, asked before anything else is sent: no token
                    # needed, none given away (a client checks it first).
                    return self.identity_answer()
            grant = self.grants.lookup(authorization) \
                if self.grants.required and not owner else None
            if method == "GET":
                return route(query, grant)
            return route(_parse_json(body), grant)
        except LookbackError as error:  # answers by the hierarchy: status, code, message
            return error.http_status, error.payload(), {"error": error.code}
        except Exception as error:  # a bug
            log.error(json.dumps({"event": "internal-error", "error": type(error).__name__}))
            return 500, ApiError(500, "internal", "internal error").payload(), {
                "error": "internal"}

    def _begin(self, authorization: str | None, deadline: float | None,
               forwarded: bool) -> None:
        """Note on this thread what the request's answer needs besides its body."""
        self._deadline.value = deadline
        self._asked.authorization = authorization
        self._asked.forwarded = forwarded
        self._asked.unasked = None

    # -- in-process face: the MCP tools (``lookback.mcp``) ------------------------------

    def ask_search(self, body: dict[str, Any], authorization: str | None) -> SearchAnswer:
        """``POST /v1/search``'s answer, asked in process: no JSON or routing between the
        caller and the engine; the same grants, privacy settings, freshness, time limit
        and forwarding to the owner host. Refusals raise ``LookbackError`` (its status
        and code are the HTTP answer's)."""
        return self._ask(self._search, body, authorization, SearchAnswer)

    def ask_source(self, body: dict[str, Any], authorization: str | None) -> SourceAnswer:
        """``POST /v1/source``'s answer, asked in process (as ``ask_search``)."""
        return self._ask(self._source, body, authorization, SourceAnswer)

    def ask_health(self, authorization: str | None) -> dict[str, Any]:
        """``GET /v1/health``'s answer, asked in process (as ``ask_search``)."""
        return self._ask(lambda _, grant: self._health(grant), {}, authorization, dict)

    def _ask(self, answer_of: Callable[[dict[str, Any], Grant | None], Any],
             body: dict[str, Any], authorization: str | None, kind: type[Asked]) -> Asked:
        self._begin(authorization, None, False)
        try:
            grant = self.grants.lookup(authorization) if self.grants.required else None
            found = answer_of(body, grant)
        except LookbackError:
            raise
        except Exception as error:  # a bug: answered as ``handle`` answers it
            log.error(json.dumps({"event": "internal-error", "error": type(error).__name__}))
            raise ApiError(500, "internal", "internal error") from None
        if isinstance(found, tuple):  # the owner host's reply, passed on
            return _passed_on(found, kind)
        answer: Asked = found
        return answer

    def call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run an engine call within what is left of the request's time limit (503 when
        it runs over)."""
        timeout = self.timeout
        deadline = getattr(self._deadline, "value", None)
        if deadline is not None:
            timeout = min(timeout, deadline - time.monotonic())
            if timeout <= 0:
                raise ApiError(503, "timeout", "the request ran over the server's time limit")
        try:
            if self.pool is None:
                return function(*args, **kwargs)
            return self.pool.submit(function, *args, **kwargs).result(timeout=timeout)
        except FutureTimeout:
            raise ApiError(503, "timeout", "the request ran over the server's time limit") \
                from None
        except (LookupError, OSError) as error:
            raise _not_found(error) from None

    # -- projects and auth --------------------------------------------------------------

    def _ref(self, names: SessionNames) -> Any:
        """The project and session a request names, or None when it names none that is
        indexed."""
        try:
            return self.reader.resolve(**names.as_dict())
        except (LookupError, OSError, ValueError):
            return None

    def _authorize(self, names: SessionNames, grant: Grant | None) -> Any:
        """The request's session reference, resolved once, after checking the token grants
        its project."""
        return self._authorize_routed(names, grant, routed=False)[0]

    def _authorize_routed(self, names: SessionNames, grant: Grant | None, *,
                          routed: bool = True) -> tuple[Any, Any]:
        """``(ref, route)``: the request's session reference, resolved once, after checking
        the token grants its project; and the project's route when another worker host
        owns it (``workers.routes.Route``; None without one, or outside service mode)."""
        ref = self._ref(names)
        projects = _projects(grant)
        if ref is not None:
            name = ref.project.name
        elif names.session_file:
            # A session file that cannot be resolved (missing, not a session, unreadable)
            # gets the same 403 as another project's: a token learns nothing about paths.
            name = None
        else:
            name = self._project_name(names.project)
        route = None
        if self.router is not None and routed:
            key = name if name is not None else _key_of(names, self.settings.namespace)
            route = self.router.where(key) if key is not None else None
            if name is None and route is not None:
                name = key  # held on its owner's host only: that reader checks it again
        if projects is not None and (name is None or name not in projects):
            raise FORBIDDEN
        return ref, route

    def _forward(self, path: str, body: dict[str, Any], ref: Any, route: Any) -> Reply | None:
        """The owner's reader's answer to this request, passed on as it is; None when it
        cannot be asked or gave no answer in time: the caller answers here, marked, and
        ``self._asked.unasked`` says why (for the answer's warning)."""
        assert self.router is not None
        authorization = getattr(self._asked, "authorization", None)
        timeout = self.router.timeout
        deadline = getattr(self._deadline, "value", None)
        if deadline is not None:
            timeout = min(timeout, deadline - time.monotonic())
        if getattr(self._asked, "forwarded", False):
            unasked = "live; this request was forwarded here by another reader already"
        elif not route.live:
            unasked = "dead (its lease expired): a live host takes the project over"
        elif not route.reader:
            unasked = "live, with no reader registered (server.public_url)"
        elif not authorization:  # the private Unix socket: the owner's TCP reader would refuse
            unasked = "live; a request without a token is not forwarded"
        elif timeout <= 0:
            unasked = "live, but this request's time ran out"
        else:
            unasked = "live, but its reader gave no answer in time"
            sent = dict(body)
            if ref is not None:  # the session this host resolved, not a file of this machine
                sent.pop("session_file", None)
                sent["project"] = ref.project.name
                if ref.session_id:
                    sent["session_id"] = ref.session_id
            started = time.perf_counter()
            answer = self.router.forward(route.reader, "POST", path, orjson.dumps(sent),
                                         authorization, timeout)
            if answer is not None:
                status, data = answer
                return status, data, {"forwarded": route.owner.host, "forward_ms": round(
                    (time.perf_counter() - started) * 1000, 3)}
        self._asked.unasked = unasked
        return None

    def _settings(self, grant: Grant | None) -> Settings:
        """The settings the engine answers ``grant``'s request with: its privacy ceiling
        applied (``query.privacy.granted``; none without tokens)."""
        if grant is None:
            return self.settings
        ceiling = grant.privacy if grant.privacy is not None else self._default_ceiling
        found = self._granted.get(ceiling)
        if found is None:
            privacy = granted(self.settings.privacy, ceiling)
            found = self._granted[ceiling] = msgspec.structs.replace(self.settings,
                                                                     privacy=privacy)
        return found

    def _project_name(self, project: str | None) -> str | None:
        if not project:
            return None
        try:
            return find_project(self.settings.home, project, self.settings.namespace).name
        except LookupError:
            return None

    # -- endpoints ----------------------------------------------------------------------

    def retrieve(self, body: dict[str, Any], grant: Grant | None) -> Reply:
        started = time.perf_counter()
        # Decoded once: a malformed request is a 400 before anything touches a file; the
        # plan reads this decode too (a null budget is the default for both).
        parsed = parse_request(body, self.settings.retrieval)
        ref, route = self._authorize_routed(parsed.names, grant)
        if route is not None and (forwarded := self._forward("/v1/retrieve", body, ref,
                                                             route)) is not None:
            self._record_forwarded(ref, parsed, forwarded, started)
            return forwarded
        fresh = self.keeper.refresh(parsed.names, ref)
        if fresh is not None and fresh.state == "rewrite-pending":
            return 200, encode_answer(freshness.rewrite_pending_answer(fresh)), {
                "outcome": "not-indexed"}
        asked = pinned(parsed, ref)
        mark = watermark(self.reader, ref) if ref is not None else None
        times: tuple[tuple[int, int], ...]  # the intervals the message's times resolve to
        answered, times = asked, ()
        if asked.message_time_ms is None and asked.message:
            # "Yesterday" is resolved against the call's time: take it once, pin it for
            # the engine, and key the answer by what the message's times resolve to.
            now_ms = int(self.clock() * 1000)
            answered = msgspec.structs.replace(asked, message_time_ms=now_ms)
            times = time_key(asked.message, now_ms)
        # An answer whose freshness warns (refused, pending, busy) is not served from the
        # cache, whose diagnostics would hide it.
        cacheable = mark and self.cache.size and not (fresh is not None and fresh.warning) \
            and route is None  # a copy another host owns is answered marked, not cached
        settings = self._settings(grant)
        # Keyed by the privacy settings too: two tokens' ceilings never share an answer.
        key = (encode_request(asked), mark, times, id(settings.privacy)) if cacheable else None
        cached = self.cache.get(key) if key else None
        if cached is None:
            response: RetrieveAnswer = self.call(self.engine.retrieve_answer, answered,
                                                 settings=settings, reader=self.reader)
            plan = decide_for_answer(response, parsed.plan)
            if plan is not None:  # the planner's decision rides along (no second call)
                response.plan = plan
            freshness.annotate(response, fresh)
            if route is not None:
                response.status = _marked(response.status)
                response.diagnostics.warn(self._owner_warning(route))
            encoded = encode_answer(response)  # the one encoding of this answer
            if key and response.status in ("ok", "no-query"):
                self.cache.put(key, (encoded, response))
        else:
            encoded, response = cached
        latency_ms = (time.perf_counter() - started) * 1000
        self._record_retrieval(ref, parsed, response, latency_ms, cached is not None)
        if isinstance(response.plan, PlanAnswer):
            self._record_plan({item.session_id for item in response.evidence}, response.plan,
                              grant)
        fields = _counts(response)
        fields["cache"] = "hit" if cached is not None else ("miss" if key else "off")
        return 200, encoded, fields

    def _owner_warning(self, route: Any) -> str:
        """What an answer marked ``stale`` or ``elsewhere`` says of the project's owner
        (host names only) and why it was not asked."""
        why = getattr(self._asked, "unasked", None) or "not asked"
        return (f"indexed on worker host {route.owner.id}, which is {why}; this reader's "
                "copy, if any, may be stale (docs/scaling.md)")

    def _marked_copy(self, response: _TopLevelAnswer, route: Any) -> _TopLevelAnswer:
        """A search or source answer from this reader's copy of a project another host
        owns: its status marked (``_marked``) and the owner named in its warnings."""
        return msgspec.structs.replace(
            response, status=_marked(response.status),
            warnings=[*(response.warnings or []), self._owner_warning(route)])

    def _record_forwarded(self, ref: Any, parsed: Any, forwarded: Reply,
                          started: float) -> None:
        """Keep a forwarded answer in this reader's manifest too (the one URL clients
        ask for it)."""
        status, data, _ = forwarded
        if status != 200:
            return
        try:
            response = msgspec.json.decode(data, type=RetrieveAnswer)
        except msgspec.DecodeError:  # not this version's answer: kept by the owner alone
            return
        self._record_retrieval(ref, parsed, response,
                               (time.perf_counter() - started) * 1000, False)

    def _record_retrieval(self, ref: Any, parsed: Any, response: RetrieveAnswer,
                          latency_ms: float, cached: bool) -> None:
        session_id = ref.session_id if ref is not None else parsed.session_id
        if not session_id:
            return
        project = ref.project.name if ref is not None else None
        leaf_id = parsed.leaf_id

        def write() -> None:  # on the manifest thread: the record is built there too
            record = retrieval_record(answer_dict(response), session_id=session_id,
                                      project=project, leaf_id=leaf_id,
                                      latency_ms=latency_ms, cached=cached)
            self.manifests.store.add(record)

        self.manifests.submit(write)

    def search(self, body: dict[str, Any], grant: Grant | None) -> Reply:
        found = self._search(body, grant)
        if isinstance(found, tuple):
            return found
        return 200, encode_answer(found), {"results": len(found.results)}

    def _search(self, body: dict[str, Any], grant: Grant | None) -> SearchAnswer | Reply:
        """The search answer, or the owner host's reply when it was forwarded there."""
        parsed = parse_search(body)  # a project alone: its latest session
        answer: SearchAnswer | Reply = self._routed("/v1/search", body, parsed, grant,
                                                    self.engine.search_answer)
        return answer

    def source(self, body: dict[str, Any], grant: Grant | None) -> Reply:
        found = self._source(body, grant)
        if isinstance(found, tuple):
            return found
        return 200, encode_answer(found), {}

    def _source(self, body: dict[str, Any], grant: Grant | None) -> SourceAnswer | Reply:
        """The source answer, or the owner host's reply when it was forwarded there."""
        answer: SourceAnswer | Reply = self._routed("/v1/source", body, parse_source(body),
                                                    grant, self.engine.source_answer)
        return answer

    def _routed(self, path: str, body: dict[str, Any], parsed: Any, grant: Grant | None,
                answer: Callable[..., Any]) -> Any:
        """A search or source: forwarded to the project's owner host when another owns
        it, else answered here from the fresh index (the live leaf included), and marked
        when it is a copy the owner could not confirm."""
        ref, route = self._authorize_routed(parsed.names, grant)
        if route is not None and (forwarded := self._forward(path, body, ref,
                                                             route)) is not None:
            return forwarded
        self.keeper.refresh(parsed.names, ref)
        response = self.call(answer, pinned(parsed, ref), settings=self._settings(grant),
                             reader=self.reader)
        if route is not None:
            response = self._marked_copy(response, route)
        return response

    def plan(self, body: dict[str, Any], grant: Grant | None) -> Reply:
        """The planner's decision from kinds and token counts (no conversation text):
        see ``lookback.query.context.planner.decide``; the client applies it."""
        request = parse_plan(body, self.settings.retrieval.max_retrieved_history_tokens)
        result = decide_request(request)
        self._record_plan({e.get("session_id") for e in request.evidence}, result, grant)
        return 200, encode_answer(result), {"included": len(result.included),
                                            "excluded": len(result.excluded),
                                            "fallback": result.fallback is not None}

    def _record_plan(self, named: set[Any], result: PlanAnswer,
                     grant: Grant | None) -> None:
        sessions = {s for s in named if isinstance(s, str) and s}
        projects = _projects(grant)
        store = self.manifests.store

        def write() -> None:
            recorded = answer_dict(result)
            for session_id in sessions:
                latest = store.entries(session_id, projects)[-1:]
                project = latest[0].get("project") if latest else None
                if projects is not None and project not in projects:
                    continue  # a token may only annotate its own projects' manifests
                store.record_plan(session_id, project, recorded)

        if sessions:
            self.manifests.submit(write)

    def nudge(self, body: dict[str, Any], grant: Grant | None) -> Reply:
        """Ask for ``session_file`` to be indexed now.

        Service mode queues it for ``lookback.service.nudge_session`` on the nudge
        thread (``lookback.application.nudges``) and answers at once: ``queued``, or
        ``dropped`` when the queue is full (Redis down or slow). Embedded mode
        queues the file for this process's freshness engine (``lookback.freshness``)
        and answers at once: ``queued``, ``fresh`` (nothing new), ``missing`` or
        ``refused`` (the file, as read, names a project the token was not granted);
        ``embedded`` when the engine is turned off (``freshness.enabled = false``).
        """
        session_file = optional_text(body, "session_file")  # no NUL, valid Unicode
        if not session_file or not session_file.startswith("/"):
            raise ApiError(400, "invalid-request", "session_file must be an absolute path")
        # With ``ref`` the write goes only to its project.
        ref = self._authorize(SessionNames(session_file=session_file), grant)
        project = ref.project.name if ref is not None else None
        if ref is not None:
            session_file = ref.file
        return 202, {"status": self.keeper.nudge(session_file, project)}, {}

    def identity_answer(self) -> Reply:
        """``GET /v1/health?projects=0``, what a client checking the reader's identity
        before each prompt asks (without a token): status, identity and mode only."""
        return 200, {"status": "ok", "identity": self.identity,
                     "mode": self.keeper.mode}, {}

    def health(self, query: dict[str, list[str]], grant: Grant | None) -> Reply:
        """Version, mode, identity and every granted project's index state (``handle``
        answers ``?projects=0`` with ``identity_answer``)."""
        return 200, self._health(grant), {}

    def _health(self, grant: Grant | None) -> dict[str, Any]:
        report = self.call(self.engine.health, self.settings)
        report = {**report, "identity": self.identity}
        projects = _projects(grant)
        if projects is not None and isinstance(report.get("projects"), list):
            report = {**report, "projects": [p for p in report["projects"] if isinstance(p, dict)
                                             and p.get("project") in projects]}
        server: dict[str, Any] = {"cache_entries": len(self.cache),
                                  "cache_hits": self.cache.hits,
                                  "cache_misses": self.cache.misses}
        server.update(self.keeper.stats())
        server["files"] = file_budget(self.settings).as_dict()
        return {**report, "server": server}

    def manifest(self, query: dict[str, list[str]], grant: Grant | None) -> Reply:
        session_id = (query.get("session_id") or [""])[0]
        if not session_id:
            raise ApiError(400, "invalid-request", "session_id is required")
        self.manifests.flush()  # read your writes: include the records of finished requests
        # Same (empty) answer for unknown and not-granted sessions.
        entries = self.manifests.store.entries(session_id, _projects(grant))
        return 200, {"session_id": session_id, "entries": entries}, {"entries": len(entries)}

    def close(self) -> None:
        self.keeper.close()
        if self.router is not None:
            self.router.close()
        self.manifests.flush()
        self.manifests.close()
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)


def _key_of(names: SessionNames, namespace: str) -> str | None:
    """The project key a request names by project alone (a cwd, or a folder name), for
    the owner lookup of a project not held here."""
    if names.session_file or not names.project:
        return None
    if names.project.startswith("/"):
        return project_key(names.project, namespace)
    return names.project


def _marked(status: str) -> Any:
    """The status of a local answer about a project another host owns: a copy held here
    may lag the owner's (``stale``, never ``ok``); none here is ``elsewhere``."""
    if status in ("not-indexed", "not-found"):
        return "elsewhere" if status == "not-indexed" else "stale"
    return "stale" if status in ("ok", "withheld") else status


def _projects(grant: Grant | None) -> frozenset[str] | None:
    """The projects ``grant`` allows (None: every one; no tokens, or ``"*"``)."""
    return None if grant is None else grant.projects


def pinned(request: Named, ref: Any) -> Named:
    """The request the engine answers: pinned (``request.pin``) to the project and session
    ``ref`` names, resolved and authorized once. It is also the answer cache's key, so an
    answer is kept under the session it is about."""
    return request if ref is None else pin(request, ref.project.name, ref.session_id)


def _identity_only(query: dict[str, list[str]]) -> bool:
    """``GET /v1/health?projects=0``: the reader's identity and mode, nothing of a project."""
    return (query.get("projects") or [""])[0] == "0"


def encode(payload: Any) -> bytes:
    """JSON bytes (orjson: a tenth of the standard library's time on evidence answers)."""
    try:
        return orjson.dumps(payload)
    except TypeError:  # e.g. a non-string key or an int beyond 64 bits
        return json.dumps(payload).encode()


def _parse_json(body: bytes) -> dict[str, Any]:
    try:
        parsed = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        raise ApiError(400, "malformed-json", "the request body is not valid JSON") from None
    if not isinstance(parsed, dict):
        raise ApiError(400, "invalid-request", "the request body must be a JSON object")
    if body.count(b"[") + body.count(b"{") > MAX_DEPTH:  # only then can it nest too deep
        check_depth(parsed)
    return parsed


def _passed_on(reply: Reply, kind: type[Asked]) -> Asked:
    """The answer in another host's reply (``_forward``), decoded into ``kind``; an error
    reply raised as the ``ApiError`` it carries."""
    status, payload, _ = reply
    if status == 200:
        if isinstance(payload, bytes | bytearray):
            decoded: Asked = msgspec.json.decode(payload, type=kind)
            return decoded
        converted: Asked = msgspec.convert(payload, kind)
        return converted
    try:
        answer = orjson.loads(payload) if isinstance(payload, bytes | bytearray) else payload
    except orjson.JSONDecodeError:
        answer = None
    error = answer.get("error") if isinstance(answer, dict) else None
    error = error if isinstance(error, dict) else {}
    raise ApiError(status, str(error.get("code") or "error"),
                   str(error.get("message") or "the request failed"))


def _not_found(error: BaseException) -> ApiError:
    if isinstance(error, OSError):
        return ApiError(400, "unreadable-session-file", "session_file cannot be read")
    return ApiError(404, "not-found", "no such project, session or entry in the index")


def _counts(response: RetrieveAnswer) -> dict[str, Any]:
    """Counts for the log line (numbers only, never text)."""
    fields: dict[str, Any] = {"outcome": response.status, "evidence": len(response.evidence),
                              "excluded": len(response.excluded)}
    if isinstance(response.diagnostics.candidates, int):
        fields["candidates"] = response.diagnostics.candidates
    return fields

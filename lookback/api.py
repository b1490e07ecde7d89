"""The public Python API: one request/response contract for every caller.

``retrieve``, ``search`` and ``source`` take a request (a dict, decoded here, or an
already decoded struct of ``lookback.query.contract.request``) and return the answer as
the JSON's dicts and lists, exactly what ``lookback serve`` sends. ``retrieve_answer``,
``search_answer`` and ``source_answer`` return the same answers as the typed, frozen
structs of ``lookback.query.contract.answers`` (``RetrieveAnswer``, ``SearchAnswer``,
``SourceAnswer``): what the HTTP reader and the CLI encode, once, and what a caller that
wants attributes and type checking uses. ``answer_dict(answer)`` turns one into the
other.

They fail open in the sense the agent needs: a bad request is a ``RequestError``;
anything else wrong with the index answers a status (``not-indexed``, ``disabled``),
never an exception.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lookback.ingest.reader import NotASession
from lookback.query.contract.answers import (
    RetrieveAnswer,
    SearchAnswer,
    SourceAnswer,
    answer_dict,
)
from lookback.query.contract.request import (
    RequestError,
    RetrievalRequest,
    SearchRequest,
    SourceRequest,
    parse_request,
    parse_search,
    parse_source,
)
from lookback.query.privacy.policy import PrivacyPolicy
from lookback.query.search.history import HistorySearch
from lookback.query.search.reader import IndexReader
from lookback.query.search.retrieve import Retriever
from lookback.query.semantic.hybrid import add_semantic
from lookback.settings import Privacy, Settings, load_settings

__all__ = ["RequestError", "RetrieveAnswer", "SearchAnswer", "SourceAnswer", "answer_dict",
           "health", "retrieve", "retrieve_answer", "search", "search_answer", "source",
           "source_answer"]

_readers: dict[tuple[Path, str, tuple[str, ...]], IndexReader] = {}
_readers_lock = threading.Lock()


def new_reader(settings: Settings) -> IndexReader:
    """A reader with the configured connection pool (``reader.*`` settings), its open
    files within the process's real limit (``lookback.budget``)."""
    from lookback.budget import file_budget

    return IndexReader(settings.home, settings.namespace,
                       max_open_files=file_budget(settings).read_pool,
                       connections_per_project=settings.reader.connections_per_project,
                       excluded=settings.excluded if settings.excluded_projects else None)


def default_reader(settings: Settings) -> IndexReader:
    """One shared reader per data directory, namespace and excluded projects, for
    in-process callers."""
    key = (settings.home, settings.namespace, settings.excluded_projects)
    with _readers_lock:
        reader = _readers.get(key)
        if reader is None:
            reader = _readers[key] = new_reader(settings)
        return reader


_policies: dict[int, tuple[Privacy, PrivacyPolicy]] = {}


def privacy_policy(settings: Settings) -> PrivacyPolicy:
    """The configured privacy policy, built once per settings (every path that returns
    session text asks its ``gate``)."""
    section = settings.privacy
    found = _policies.get(id(section))
    if found is None or found[0] is not section:
        if len(_policies) >= 16:  # settings are loaded once per process, tests load many
            _policies.clear()
        found = _policies[id(section)] = (section, PrivacyPolicy.from_settings(section))
    return found[1]


@contextmanager
def _bad_session_file() -> Iterator[None]:
    """A ``session_file`` that is not a session (or not a regular file) is a bad request."""
    try:
        yield
    except NotASession:
        raise RequestError("session_file is not a Pi, Claude Code or Codex session file",
                           "not-a-session") from None


def retrieve_answer(request: dict[str, Any] | RetrievalRequest, *,
                    settings: Settings | None = None,
                    reader: IndexReader | None = None) -> RetrieveAnswer:
    """Evidence for the latest real user message of ``request`` (the contract: docs/design.md;
    a dict is decoded here, a decoded request — the HTTP reader's — is used as it is)."""
    settings = settings or load_settings()
    parsed = request if isinstance(request, RetrievalRequest) else \
        parse_request(request, settings.retrieval)
    reader = reader or default_reader(settings)
    embedder = settings.retrieval.embedder
    with _bad_session_file():
        return Retriever(reader, privacy_policy(settings), embedder=embedder,
                         semantic=add_semantic).retrieve(parsed)


def search_answer(request: dict[str, Any] | SearchRequest, *, settings: Settings | None = None,
                  reader: IndexReader | None = None) -> SearchAnswer:
    """Explicit history search with a chosen scope (branch, session or project)."""
    parsed = request if isinstance(request, SearchRequest) else parse_search(request)
    with _bad_session_file():
        return _history(settings, reader).search(parsed)


def source_answer(request: dict[str, Any] | SourceRequest, *, settings: Settings | None = None,
                  reader: IndexReader | None = None) -> SourceAnswer:
    """One entry's full indexed text, by session and entry id."""
    parsed = request if isinstance(request, SourceRequest) else parse_source(request)
    with _bad_session_file():
        return _history(settings, reader).source(parsed)


def _history(settings: Settings | None, reader: IndexReader | None) -> HistorySearch:
    """History search and source over ``reader`` (default: the settings' index), gated by the
    settings' privacy policy."""
    settings = settings or load_settings()
    return HistorySearch(reader or default_reader(settings), privacy_policy(settings))


def retrieve(request: dict[str, Any] | RetrievalRequest, *, settings: Settings | None = None,
             reader: IndexReader | None = None) -> dict[str, Any]:
    """``retrieve_answer`` as the JSON's dicts (new ones each call: change them freely)."""
    return answer_dict(retrieve_answer(request, settings=settings, reader=reader))


def search(request: dict[str, Any] | SearchRequest, *, settings: Settings | None = None,
           reader: IndexReader | None = None) -> dict[str, Any]:
    """``search_answer`` as the JSON's dicts."""
    return answer_dict(search_answer(request, settings=settings, reader=reader))


def source(request: dict[str, Any] | SourceRequest, *, settings: Settings | None = None,
           reader: IndexReader | None = None) -> dict[str, Any]:
    """``source_answer`` as the JSON's dicts."""
    return answer_dict(source_answer(request, settings=settings, reader=reader))


def health(settings: Settings | None = None) -> dict[str, Any]:
    """Index state per project (for ``GET /v1/health``)."""
    from lookback.application.modes import mode_of
    from lookback.index.layout import list_projects
    from lookback.index.status import project_status

    settings = settings or load_settings()
    projects = []
    for project in list_projects(settings.home):
        try:
            projects.append(project_status(project))
        except Exception as error:  # a broken file must not hide the others
            projects.append({"project": project.name, "state": "error",
                             "error": type(error).__name__})
    return {"status": "ok", "version": _version(),
            "mode": mode_of(settings), "projects": projects}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pi-lookback")
    except PackageNotFoundError:  # run from a checkout without installing
        return "unknown"

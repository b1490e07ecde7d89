"""One error hierarchy: every error raised on purpose says its exit code, HTTP status, code."""

from __future__ import annotations

import ast
import resource

import apsw
import pytest

from lookback.cli import describe
from lookback.errors import NotFound, SettingsError, Unavailable, UserError, out_of_files
from lookback.index.layout import ProjectNotFound
from lookback.index.project import WriterBusy
from lookback.index.store import (
    IncompatibleIndex,
    IndexBusy,
    IndexCorrupt,
    IndexFull,
    IndexNotWritable,
    driver_errors,
)
from lookback.ingest.reader import NotASession
from lookback.ingest.scan import PathProblem
from lookback.query.contract.request import RequestError
from lookback.query.privacy.policy import PrivacySettingsError
from lookback.query.search.reader import NotIndexed
from tests.test_layers import modules

KINDS = {"LookbackError", "UserError", "SettingsError", "NotFound", "Unavailable", "ApiError"}
BUILTIN = {"Exception", "ValueError", "LookupError", "RuntimeError", "TimeoutError", "OSError",
           "KeyError", "TypeError"}
#: Exceptions used for control flow inside one module, never seen outside it (and
#: private ones); the hook's client runs without the package (``python -S -I``).
# Control flow that never reaches a user: the hooks' skip, the standard-library-only
# socket module's "no reader" / "not ours" (hooks load it without the package, so it cannot
# import lookback.errors), a worker's ended ownership term.
INTERNAL = {"LookbackError", "SemanticFallback", "HookSkipped", "NoReader", "NotOurReader",
            "Fenced"}


@pytest.mark.parametrize(("error", "kind", "exit_code", "status"), [
    (PathProblem("x"), UserError, 2, 400),
    (NotASession("x"), UserError, 2, 400),
    (RequestError("x"), UserError, 2, 400),
    (PrivacySettingsError("x"), SettingsError, 2, 500),
    (ProjectNotFound("x"), NotFound, 2, 404),
    (NotIndexed("x"), NotFound, 2, 404),
    (WriterBusy("x"), Unavailable, 1, 503),
    (IncompatibleIndex("x"), Unavailable, 1, 503),
])
def test_each_error_has_its_kind(error, kind, exit_code, status):
    assert isinstance(error, kind)
    assert (error.exit_code, error.http_status) == (exit_code, status)
    assert error.payload()["error"]["code"] == error.code
    assert describe(error) == ("x", exit_code)


def test_callers_that_catch_the_builtin_still_do():
    assert isinstance(ProjectNotFound("x"), LookupError)
    assert isinstance(WriterBusy("x"), TimeoutError)
    assert isinstance(RequestError("x"), ValueError)


@pytest.mark.parametrize(("raised", "translated", "words"), [
    (apsw.FullError, IndexFull, "the disk is full"),
    (apsw.ReadOnlyError, IndexNotWritable, "check permissions"),
    (apsw.BusyError, IndexBusy, "another writer"),
    (apsw.CorruptError, IndexCorrupt, "lookback reindex --repair"),
])
def test_driver_errors_are_translated_at_the_index_edge(raised, translated, words):
    with pytest.raises(translated) as caught, driver_errors():
        raise raised("driver text")
    assert words in str(caught.value) and isinstance(caught.value.__cause__, raised)
    assert "driver text" not in str(caught.value)
    assert describe(raised("escaped")) == (str(caught.value), 1)


def test_other_driver_errors_pass_unchanged():
    with pytest.raises(apsw.ConstraintError), driver_errors():
        raise apsw.ConstraintError("UNIQUE")
    assert describe(apsw.ConstraintError("x")) == (None, 1)  # a bug keeps its traceback


def test_every_exception_class_joins_the_hierarchy():
    """A new ``class X(ValueError)`` must also name its kind (lookback/errors.py)."""
    loose = []
    for module, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef) or node.name in INTERNAL \
                    or node.name.startswith("_"):
                continue
            bases = {getattr(base, "id", getattr(base, "attr", "")) for base in node.bases}
            if bases & BUILTIN and not bases & KINDS:
                loose.append(f"{module}.{node.name}")
    assert loose == []


def test_out_of_files_is_told_by_errno_and_through_causes_only_when_asked():
    """The one test for "no file descriptors left" (freshness, the reader's pool, its
    session lookups and the listener all ask it): a real EMFILE, found directly, and
    behind a translated error only with ``causes``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
    try:
        with pytest.raises(OSError) as raised:
            while True:
                held.append(open(__file__, "rb"))  # noqa: SIM115 (held open on purpose)
    finally:
        for file in held:
            file.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    emfile = raised.value
    assert out_of_files(emfile) and out_of_files(emfile, causes=True)
    try:
        raise Unavailable("index unavailable") from emfile
    except Unavailable as translated:
        assert not out_of_files(translated)
        assert out_of_files(translated, causes=True)
    assert not out_of_files(FileNotFoundError(2, "missing"), causes=True)
    assert not out_of_files(None)

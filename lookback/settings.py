"""Settings: defaults, then a TOML file, then ``LOOKBACK_*`` variables, then flags.

Every setting, its type and its default is declared once, below, as a typed
section (``msgspec`` structs: frozen, unknown keys refused). The file is
``$LOOKBACK_CONFIG`` if set, else ``config.toml`` in the platform's config folder
(``~/.config/lookback`` on Linux); ``config.toml`` in the data directory, where it
used to live, is still read when that one does not exist, with a note saying where
to move it (``settings_file``). Every setting has a
variable: ``LOOKBACK_<KEY>`` for a top-level key and ``LOOKBACK_<SECTION>__<KEY>``
inside a section (``LOOKBACK_RETRIEVAL__MAX_RESULTS=5``). A variable's text is
read as the setting's type: numbers and booleans (``true``/``false``/``1``/``0``)
as such, tables and lists as JSON (a list also as comma-separated names),
``LOOKBACK_SESSIONS_DIR`` as ``:``-separated paths.

A key no section declares is an error naming the key and where it came from: a
typo must not silently fall back to a default. The Pi extension's and
compose's own variables (``LOOKBACK_URL``, ``LOOKBACK_TOKEN``, ...) share the
prefix but are not settings; they are listed in ``FOREIGN_VARIABLES`` and ignored.

This module is the bottom layer: it imports nothing else from the project, so
every stage may read its section.
"""

from __future__ import annotations

import json
import logging
import os
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin

import msgspec
import platformdirs

from lookback.errors import SettingsError

log = logging.getLogger("lookback.settings")

PREFIX = "LOOKBACK_"

Positive = Annotated[int, msgspec.Meta(ge=1)]
#: The largest time setting (in its milliseconds or seconds): TOML's ``inf`` and a
#: variable's "inf" are floats too, and an infinite wait or timeout overflows every
#: ``Event.wait`` and ``settimeout`` it reaches (a 500 on every request).
MAX_TIME = 1e9
PositiveFloat = Annotated[float, msgspec.Meta(gt=0, le=MAX_TIME)]
NonNegative = Annotated[float, msgspec.Meta(ge=0, le=MAX_TIME)]


class Section(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One table of the settings file; a key it does not declare is refused."""

    def as_dict(self) -> dict[str, Any]:
        """The section as plain values (lists, dicts), for code that takes a mapping."""
        values: dict[str, Any] = msgspec.to_builtins(self)
        return values


class Retrieval(Section, frozen=True):
    max_results: Annotated[int, msgspec.Meta(ge=1, le=100)] = 12
    max_retrieved_history_tokens: Positive = 16000
    semantic: bool = False
    embedder: str = "hashing"


class Privacy(Section, frozen=True):
    default_max: str = "internal"
    local_providers: tuple[str, ...] = ("ollama", "llama.cpp", "lmstudio", "local")
    providers: dict[str, str] = {}


class TokenGrant(Section, frozen=True):
    """One token's grant in its table form (``{projects = [...], privacy = "..."}``)."""

    #: the projects it may read and write (names or cwds), or "*" for all
    projects: str | list[str]
    #: the highest privacy classification its answers may hold; empty: what an unnamed
    #: remote provider sees (``privacy.default_max``). A request's ``provider`` only narrows it.
    privacy: str = ""


class Server(Section, frozen=True):
    #: empty: the user's private Unix socket; an address: TCP (needs ``tokens``)
    host: str = ""
    port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 8765
    #: bearer token -> list of projects (names or cwds), "*" for all, or a ``TokenGrant``
    tokens: dict[str, str | list[str] | TokenGrant] = {}
    max_request_bytes: Positive = 4_000_000
    cache_entries: Annotated[int, msgspec.Meta(ge=0)] = 512
    request_timeout_seconds: PositiveFloat = 10.0
    #: how long a connection may wait before a request's first byte (new or kept alive)
    idle_timeout_seconds: PositiveFloat = 5.0
    #: open connections at most (and at most a quarter of the open-file limit); a new one
    #: beyond it closes the longest-idle connection
    max_connections: Positive = 256
    #: threads answering calls; 0 answers on the connection's own thread
    workers: Annotated[int, msgspec.Meta(ge=0)] = 4
    #: Host names (besides loopback) requests may name when no tokens are set
    allowed_hosts: tuple[str, ...] = ()
    #: service mode, several hosts: the URL other hosts' readers forward to this one at;
    #: empty: http://<host>:<port> when TCP on a concrete address, else none
    public_url: str = ""
    #: a request forwarded to the owner's reader waits at most this long for its answer
    forward_timeout_seconds: PositiveFloat = 2.0


class Freshness(Section, frozen=True):
    """How an embedded reader keeps the sessions it is asked about fresh itself."""

    enabled: bool = True
    wait_ms: NonNegative = 200.0  # a request waits at most this long for its file
    rewrite_wait_ms: NonNegative = 1200.0  # ...or this long when the file was rewritten
    tail: bool = True  # poll the session folders in the background (``watch`` settings)
    lock_timeout_seconds: NonNegative = 0.05  # how long a job waits for a busy writer lock
    idle_close_seconds: NonNegative = 1.0  # writers are closed after this long without jobs
    #: deprecated names of ``watch.poll_ms``, ``watch.rescan_seconds``, ``watch.hot_seconds``
    poll_ms: PositiveFloat | None = None
    rescan_seconds: PositiveFloat | None = None
    hot_seconds: NonNegative | None = None


class Watch(Section, frozen=True):
    """How session folders are polled: by ``lookback watch`` and the reader's tailer."""

    poll_ms: PositiveFloat = 50.0  # files changed recently are looked at this often
    rescan_seconds: PositiveFloat = 2.0  # every file (and new folders) this often
    hot_seconds: NonNegative = 600.0  # a file counts as recently changed this long


class ClaudeCode(Section, frozen=True):
    """Claude Code: where its sessions are, and the UserPromptSubmit hook."""

    #: Claude Code's sessions folder; empty: $CLAUDE_CONFIG_DIR/projects, else ~/.claude/projects
    projects_dir: str = ""
    #: read that folder (when it exists) beside Pi's when no paths or sessions_dirs are given
    read_by_default: bool = True
    #: the privacy policy's provider for the evidence the hook hands to Claude Code
    provider: str = "anthropic"
    #: the hook gives up after this long and adds nothing (Claude Code goes on unchanged)
    hook_timeout_ms: PositiveFloat = 1500.0


class Codex(Section, frozen=True):
    """Codex CLI: where its sessions are, and the UserPromptSubmit hook."""

    #: Codex's sessions folder; empty: $CODEX_HOME/sessions, else ~/.codex/sessions
    sessions_dir: str = ""
    #: read that folder (when it exists) beside Pi's when no paths or sessions_dirs are given
    read_by_default: bool = True
    #: the privacy policy's provider for the evidence the hook hands to Codex
    provider: str = "openai"
    #: the hook gives up after this long and adds nothing (Codex goes on unchanged)
    hook_timeout_ms: PositiveFloat = 1500.0
    #: what the hook's evidence may add up to in a thread until a compaction drops it
    #: (Codex re-sends every earlier hook context with each request)
    max_thread_tokens: Positive = 10_000


class Action(Section, frozen=True):
    """Point-of-action evidence: before a tool call, the compacted history about what it
    touches (Claude Code's and Codex's PreToolUse hooks, Pi's tool_call event)."""

    #: ``lookback install`` registers it (false: it removes it; Pi's extension asks nothing)
    enabled: bool = True
    #: the evidence one tool call may add, in tokens (at most 3 entries)
    max_tokens: Positive = 1000


class Manifest(Section, frozen=True):
    keep_per_session: Positive = 50


class Workers(Section, frozen=True):
    processes: Positive = 1
    threads: Positive = 2
    key_prefix: str = "lookback:"
    reindex_on_start: bool = False
    embed: bool = False
    batch_events: Positive = 1000
    batch_bytes: Positive = 8 * 1024 * 1024
    drain_seconds: PositiveFloat = 5.0
    max_failures: Positive = 3
    lock_timeout: PositiveFloat = 30.0
    sweep_seconds: PositiveFloat = 5.0
    #: this worker host's name in project ownership claims; empty: the machine's name
    host: str = ""
    #: a worker host that stops renewing its lease loses its projects after this long
    lease_seconds: PositiveFloat = 15.0
    #: keep every event in Redis (no trim): a host taking a dead host's project rebuilds
    #: from it; needed for failover without the dead host's disk (docs/scaling.md)
    keep_log: bool = False


class Reader(Section, frozen=True):
    """The reader's read connections (query.search.pool)."""

    #: open files the index connections may hold in all: 2 per connection + 1 per file
    max_open_files: Annotated[int, msgspec.Meta(ge=3)] = 256
    #: connections to one project at once (WAL readers read in parallel)
    connections_per_project: Positive = 4


class Settings(Section, frozen=True):
    """Every setting, typed; ``load_settings`` builds one, ``Settings()`` is the defaults."""

    #: where the project indexes live; unset: the platform data dir
    home: Path = Path(platformdirs.user_data_dir("lookback"))
    #: what ``lookback index``/``watch`` read; empty: Pi's, Claude Code's and Codex's folders
    sessions_dirs: tuple[str, ...] = ()
    #: projects Lookback leaves alone (a project's folder, or a folder above projects): never
    #: indexed, never answered from (docs/data-controls.md)
    excluded_projects: tuple[str, ...] = ()
    #: set: service mode
    redis_url: str | None = None
    #: keeps same-path projects of different hosts/teams apart in one Redis
    namespace: str = ""
    max_line_bytes: Positive = 16 * 1024 * 1024
    retrieval: Retrieval = Retrieval()
    privacy: Privacy = Privacy()
    server: Server = Server()
    freshness: Freshness = Freshness()
    watch: Watch = Watch()
    claude_code: ClaudeCode = ClaudeCode()
    codex: Codex = Codex()
    action: Action = Action()
    manifest: Manifest = Manifest()
    workers: Workers = Workers()
    reader: Reader = Reader()

    @property
    def service_mode(self) -> bool:
        return bool(self.redis_url)

    def excluded(self, cwd: str) -> bool:
        """True when the project whose folder is ``cwd`` is switched off: it or a folder
        above it is in ``excluded_projects``."""
        for folder in self.excluded_projects:
            root = os.path.expanduser(folder).rstrip("/\\") or "/"
            if cwd == root or cwd.startswith(root if root.endswith("/") else root + "/"):
                return True
        return False


#: The defaults, for code that needs one default without loading anything.
DEFAULTS = Settings()

#: Variables with the prefix that are not settings: the Pi extension's
#: (integrations/pi) and compose.yaml's own, and the test suite's.
FOREIGN_VARIABLES = frozenset({
    "LOOKBACK_CONFIG", "LOOKBACK_URL", "LOOKBACK_TOKEN", "LOOKBACK_TIMEOUT_MS",
    "LOOKBACK_MAX_RESULTS", "LOOKBACK_MAX_HISTORY_TOKENS", "LOOKBACK_HISTORY_TOOL",
    "LOOKBACK_DISABLED", "LOOKBACK_DEBUG", "LOOKBACK_AUTOSTART", "LOOKBACK_COMMAND",
    "LOOKBACK_ACTION", "LOOKBACK_ACTION_MAX_TOKENS",
    "LOOKBACK_WORKERS", "LOOKBACK_THREADS",
    "LOOKBACK_PORT", "LOOKBACK_WORKER_HOST",
    "LOOKBACK_WORKERS_INSTANCE",  # the lease token `lookback worker` gives its workers
})
FOREIGN_PREFIXES = ("LOOKBACK_TEST_",)

#: Settings whose variable is not the generic name.
VARIABLE_NAMES = {"sessions_dirs": "LOOKBACK_SESSIONS_DIR",
                  "excluded_projects": "LOOKBACK_EXCLUDED_PROJECTS"}


def load_settings(overrides: Mapping[str, Any] | None = None,
                  environ: Mapping[str, str] | None = None) -> Settings:
    """Merge defaults, the TOML file, the environment and ``overrides`` (flags)."""
    return _load(overrides, environ)[0]


#: The settings file's name, in the platform's config folder (and, before, the data dir).
FILE_NAME = "config.toml"


def config_dir() -> Path:
    """The platform's config folder for Lookback (``~/.config/lookback`` on Linux)."""
    return Path(platformdirs.user_config_dir("lookback"))


def settings_file(environ: Mapping[str, str] | None = None) -> tuple[Path, str | None]:
    """(the settings file read, a note for the user or None).

    ``$LOOKBACK_CONFIG`` when set; else ``config.toml`` in the platform's config folder;
    else, when only the old place has one, ``<home>/config.toml``, with a note saying
    where to move it (and a note when both exist: the old one is then ignored).
    """
    environ = os.environ if environ is None else environ
    if environ.get(PREFIX + "CONFIG"):
        return Path(environ[PREFIX + "CONFIG"]).expanduser(), None
    current = config_dir() / FILE_NAME
    home = Path(environ.get(PREFIX + "HOME") or str(DEFAULTS.home)).expanduser()
    old = home / FILE_NAME
    if old == current or not old.is_file():
        return current, None
    if current.is_file():
        return current, f"settings file {old} is ignored: {current} is read now"
    return old, (f"settings file {old} is read from the data directory, where settings no "
                 f"longer belong: move it to {current}")


#: Notes already given in this process (a long-running reader loads settings often).
_noted: set[str] = set()


def load_with_origins(overrides: Mapping[str, Any] | None = None,
                      environ: Mapping[str, str] | None = None
                      ) -> tuple[Settings, dict[str, str]]:
    """``load_settings``, and where each setting's value came from: ``default``, the
    settings file's path, the variable's name, or ``command line`` (a flag)."""
    settings, layers = _load(overrides, environ)
    return settings, _origins(layers)


def _load(overrides: Mapping[str, Any] | None, environ: Mapping[str, str] | None
          ) -> tuple[Settings, list[tuple[str, dict[str, Any]]]]:
    """The settings, and the layers merged into them, lowest first: (where its values
    came from: the settings file's path, "" for the variables, ``command line``, values)."""
    environ = os.environ if environ is None else environ
    path, note = settings_file(environ)
    if note and note not in _noted:
        _noted.add(note)
        log.warning("%s", note)
    values: dict[str, Any] = {}
    layers = [
        (f"settings file {path}", str(path),
         _read_toml(path, explicit=bool(environ.get(PREFIX + "CONFIG")))),
        ("the environment", "", _from_environment(environ)),
        ("the command line", "command line",
         {k: v for k, v in (overrides or {}).items() if v is not None}),
    ]
    for origin, _, layer in layers:
        _check_keys(layer, Settings, origin, ())
        _merge(values, layer)
    try:
        settings = msgspec.convert(values, Settings, strict=False, dec_hook=_decode)
    except msgspec.ValidationError as error:
        raise SettingsError(_explain(str(error))) from None
    return _renamed(settings, values), [(label, layer) for _, label, layer in layers]


def _origins(layers: list[tuple[str, dict[str, Any]]]) -> dict[str, str]:
    """Each setting's origin (``load_with_origins``), from the layers ``_load`` merged;
    worked out only when asked, not on every load."""
    origins = {key: "default" for key, _ in _leaves(DEFAULTS, ())}
    for label, layer in layers:
        for key in _set_keys(layer, ()):
            origins[key] = label or variable_name(key)
            if label == "command line" and "." not in key:  # a flag of its own: --home
                origins[key] = "--" + key.replace("_", "-")
    for old, new in RENAMED.items():  # a deprecated name's value lands on the new one
        if origins.get(old, "default") != "default" and origins[new] == "default":
            origins[new] = origins[old]
    return origins


def _set_keys(values: Mapping[str, Any], path: tuple[str, ...]) -> Iterator[str]:
    """The dotted keys of the settings ``values`` sets (a section's table: its keys)."""
    fields = {field.name: field.type for field in msgspec.structs.fields(Settings)}
    for key, value in values.items():
        dotted = ".".join((*path, key))
        section = fields.get(key) if not path else None
        if isinstance(value, Mapping) and isinstance(section, type) \
                and issubclass(section, Section):
            yield from _set_keys(value, (*path, key))
        else:
            yield dotted


def effective(settings: Settings) -> list[tuple[str, Any]]:
    """(dotted key, value as TOML or JSON would write it) of every setting of ``settings``."""
    return [(key, _plain(value)) for key, value in _leaves(settings, ())]


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    return msgspec.to_builtins(value)


#: Settings that moved: the old name still works (unless the new one is set too) and
#: is reported as deprecated.
RENAMED = {"freshness.poll_ms": "watch.poll_ms",
           "freshness.rescan_seconds": "watch.rescan_seconds",
           "freshness.hot_seconds": "watch.hot_seconds"}


def _renamed(settings: Settings, values: Mapping[str, Any]) -> Settings:
    for old, new in RENAMED.items():
        (old_section, old_key), (new_section, new_key) = old.split("."), new.split(".")
        value = getattr(getattr(settings, old_section), old_key)
        if value is None:
            continue
        log.warning("setting %s is deprecated: it is %s now", old, new)
        if new_key in values.get(new_section, {}):
            continue  # the new name wins
        section = msgspec.structs.replace(getattr(settings, new_section), **{new_key: value})
        settings = msgspec.structs.replace(settings, **{new_section: section})
    return settings


def reference() -> list[tuple[str, str, str]]:
    """(dotted key, variable, default as TOML-ish text) of every setting, in order.

    docs/configuration.md's table lists exactly these (tests/test_docs.py).
    """
    return [(key, variable_name(key), _render(value)) for key, value in _leaves(DEFAULTS, ())]


def variable_name(dotted: str) -> str:
    """The environment variable that sets ``dotted`` (``retrieval.semantic``)."""
    return VARIABLE_NAMES.get(dotted) or PREFIX + dotted.upper().replace(".", "__")


# Reading the sources -----------------------------------------------------------


def _read_toml(path: Path, *, explicit: bool) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        if explicit:
            raise SettingsError(f"settings file {path} does not exist") from None
        return {}
    except tomllib.TOMLDecodeError as error:
        raise SettingsError(f"settings file {path}: {error}") from None
    except OSError as error:
        raise SettingsError(f"settings file {path}: {error.strerror}") from None


def _from_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    by_variable = {variable_name(key): key for key, _ in _leaves(DEFAULTS, ())}
    found: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(PREFIX) or name in FOREIGN_VARIABLES \
                or name.startswith(FOREIGN_PREFIXES):
            continue
        dotted = by_variable.get(name)
        if dotted is None:
            raise SettingsError(f"{name} is not a Lookback setting (a typo?); settings are "
                                f"LOOKBACK_<KEY> or LOOKBACK_<SECTION>__<KEY>, e.g. "
                                f"LOOKBACK_RETRIEVAL__MAX_RESULTS; see docs/configuration.md")
        *sections, key = dotted.split(".")
        node = found
        for section in sections:
            node = node.setdefault(section, {})
        node[key] = _parse_variable(name, raw, _field_type(dotted))
    return found


def _parse_variable(name: str, raw: str, kind: Any) -> Any:
    """A variable's text as the setting's type (msgspec converts numbers and booleans)."""
    origin = get_origin(kind) or kind
    if name in (VARIABLE_NAMES["sessions_dirs"], VARIABLE_NAMES["excluded_projects"]):
        return [part for part in raw.split(os.pathsep) if part]
    if origin in (dict, tuple, list):
        try:
            return json.loads(raw)
        except ValueError:
            if origin is dict:
                raise SettingsError(f"{name} must be a JSON object, e.g. "
                                    "'{\"name\": \"value\"}'") from None
            return [part.strip() for part in raw.split(",") if part.strip()]
    return raw


def _merge(target: dict[str, Any], source: Mapping[str, Any]) -> None:
    for key, value in source.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = dict(value) if isinstance(value, Mapping) else value


# Checking ---------------------------------------------------------------------


def _check_keys(values: Mapping[str, Any], struct: type[Section], origin: str,
                path: tuple[str, ...]) -> None:
    """Refuse a key ``struct`` does not declare, naming it, its origin and the known keys."""
    fields = {field.name: field.type for field in msgspec.structs.fields(struct)}
    for key, value in values.items():
        if key not in fields:
            where = ".".join((*path, str(key)))
            known = ", ".join(".".join((*path, name)) for name in fields)
            raise SettingsError(f"{origin}: unknown setting {where!r}; known: {known}")
        kind = fields[key]
        if isinstance(kind, type) and issubclass(kind, Section) and isinstance(value, Mapping):
            _check_keys(value, kind, origin, (*path, key))


def _explain(message: str) -> str:
    """msgspec's ``Expected `int`, got `str` - at `$.retrieval.max_results``` as a setting."""
    text, _, where = message.partition(" - at `$.")
    for json_name, toml_name in _TYPE_NAMES.items():
        text = text.replace(json_name, toml_name)
    return f"setting {where.rstrip('`')}: {text.lower()}" if where else f"settings: {message}"


#: msgspec names JSON types; a settings file is TOML.
_TYPE_NAMES = {"`object`": "a table", "`array`": "a list"}


def _decode(kind: type, value: Any) -> Any:
    if kind is Path and isinstance(value, str):
        return Path(value).expanduser()
    raise NotImplementedError


# The reference table ------------------------------------------------------------


def _leaves(section: Section, path: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    for field in msgspec.structs.fields(section):
        value = getattr(section, field.name)
        if isinstance(value, Section):
            yield from _leaves(value, (*path, field.name))
        else:
            yield ".".join((*path, field.name)), value


def _field_type(dotted: str) -> Any:
    struct: Any = Settings
    kind: Any = None
    for part in dotted.split("."):
        kind = {field.name: field.type for field in msgspec.structs.fields(struct)}[part]
        struct = kind
    while get_origin(kind) is Annotated:
        kind = get_args(kind)[0]
    return kind


def _render(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, Path):
        return "platform data dir"
    return json.dumps(list(value) if isinstance(value, tuple) else value)

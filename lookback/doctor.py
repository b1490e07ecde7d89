"""``lookback doctor``: is everything wired? One small function per check.

Each check takes the ``Situation`` (settings, environment, the user's home folder, the
time) and returns ``Finding``s: ``ok``, a ``note`` (worth knowing, nothing broken) or a
``problem``, each problem with the command that fixes it. ``CHECKS`` is the list the
command runs, in order; an agent's integration adds its own check functions there
(Codex's hook, for one). A check that raises is reported as a problem of its own and
the others still run.

Nothing here writes: the checks read settings files, session folders, the indexes
(``index.status``, ``index.repair``'s checks) and ask the reader's ``/v1/health``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from lookback import codex_config, hook_client, local_reader, pi_package
from lookback.application.modes import mode_of
from lookback.background import read_started, tcp_url
from lookback.errors import UserError
from lookback.index.layout import ProjectDir, list_projects
from lookback.index.status import project_status, recent_sessions
from lookback.index.store import open_reader
from lookback.ingest.pipeline import peek_header
from lookback.ingest.scan import (
    PathProblem,
    default_claude_projects_dir,
    default_codex_sessions_dir,
    default_sessions_dir,
    session_files,
)
from lookback.settings import Settings

OK, NOTE, PROBLEM = "ok", "note", "problem"
#: A session file written this long ago and still not indexed is behind.
LAG_PROBLEM_SECONDS = 60.0
#: Latest sessions per project whose lag is checked.
FRESHNESS_SESSIONS = 5
#: The mark of Lookback's Claude Code hook command (``lookback install claude-code``).
CLAUDE_HOOK_MARK = "claude_hook.py"
#: The mark of Lookback's Codex hook command (``lookback install codex``).
CODEX_HOOK_MARK = "codex_hook.py"
#: The PreToolUse hook's script (point-of-action evidence), for both agents.
ACTION_HOOK_MARK = "action_hook.py"
ACTION_EVENT = "PreToolUse"


@dataclass
class Finding:
    check: str  # which check, e.g. "reader", "sessions: pi"
    status: str  # OK, NOTE or PROBLEM
    summary: str  # one line
    fix: str | None = None  # the command that fixes a problem
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Situation:
    """What every check reads; the expensive parts are computed once, when first used."""

    settings: Settings
    environ: dict[str, str]
    cwd: Path
    now: float = field(default_factory=time.time)

    @property
    def user_home(self) -> Path:
        return Path(self.environ.get("HOME") or Path.home())

    @property
    def reader_url(self) -> str:
        """The reader the Pi extension asks: ``$LOOKBACK_URL``, else the settings' TCP
        reader, else "" (this user's Unix socket for the data home)."""
        configured = self.environ.get("LOOKBACK_URL", "").strip().rstrip("/")
        return configured or tcp_url(self.settings)

    @cached_property
    def projects(self) -> list[ProjectDir]:
        return list_projects(self.settings.home)

    @cached_property
    def indexed_files(self) -> set[str]:
        """Every session file path some project's index has read."""
        found: set[str] = set()
        for project in self.projects:
            path = project.index_path()
            if path is None:
                continue
            try:
                connection = open_reader(path)
                try:
                    found.update(row[0] for row in connection.execute("SELECT path FROM files"))
                finally:
                    connection.close()
            except Exception:  # a damaged index is the indexes check's finding
                continue
        return found

    @cached_property
    def pi_agent_dir(self) -> Path:
        return Path(self.environ.get("PI_CODING_AGENT_DIR") or self.user_home / ".pi" / "agent")

    @cached_property
    def claude_dir(self) -> Path:
        return Path(self.environ.get("CLAUDE_CONFIG_DIR") or self.user_home / ".claude")

    @cached_property
    def codex_home(self) -> Path:
        return Path(self.environ.get("CODEX_HOME") or self.user_home / ".codex")


Check = Callable[[Situation], Iterable[Finding]]


# ---------------------------------------------------------------------------------------------
# The checks


def check_reader(situation: Situation) -> list[Finding]:
    """The reader answers ``/v1/health``: its version and mode. On the Unix socket it is
    checked as every client checks it (directory, peer uid, identity)."""
    url = situation.reader_url
    token = situation.environ.get("LOOKBACK_TOKEN")
    home = str(situation.settings.home)
    if url.startswith("http"):
        health_or_finding = _tcp_health(url, token)
    else:
        explicit = url
        if not url:  # the socket the reader recorded, else this environment's
            try:
                url = local_reader.UNIX_PREFIX + local_reader.find_socket(home)
            except local_reader.NotOurReader as error:
                return [Finding("reader", PROBLEM, str(error))]
        health_or_finding = _socket_health(explicit, url, token, home)
    if isinstance(health_or_finding, Finding):
        return [health_or_finding]
    health = health_or_finding
    version, mode = health.get("version", "unknown"), health.get("mode", "unknown")
    details = {"url": url, "version": version, "mode": mode, "started_by": None}
    summary = f"{url} answers (version {version}, {mode} mode)"
    started = read_started(situation.settings)
    if started is not None and started.alive(home):
        # Started in the background by `lookback serve --ensure` (the Pi extension, a hook).
        details["started_by"] = started.started_by
        summary += f", started by {started.started_by} (pid {started.pid}, log {started.log})"
    return [Finding("reader", OK, summary, details=details)]


def _no_reader(url: str) -> Finding:
    # A fresh machine: the Pi extension and the hooks start it on first use.
    return Finding("reader", NOTE, f"no reader answers at {url} yet: the Pi extension and "
                   "the hooks start one on first use", "lookback serve --ensure")


def _tcp_health(url: str, token: str | None) -> dict[str, Any] | Finding:
    request = urllib.request.Request(f"{url}/v1/health")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            health = json.loads(response.read())
    except urllib.error.HTTPError as error:
        if error.code == 401:
            return Finding("reader", PROBLEM, f"{url} answers but wants a token",
                           "export LOOKBACK_TOKEN=<a token of server.tokens>")
        return Finding("reader", PROBLEM, f"{url} answers {error.code}",
                       "lookback serve --stop && lookback serve --ensure")
    except (OSError, ValueError):
        return _no_reader(url)
    return health if isinstance(health, dict) else _no_reader(url)


def _socket_health(explicit: str, url: str, token: str | None,
                   home: str) -> dict[str, Any] | Finding:
    """``/v1/health`` from the reader at ``explicit``, or without it as the hooks find it;
    ``url`` names where, in findings."""
    deadline = time.monotonic() + 2
    try:
        health = hook_client.get_json(explicit, "/v1/health", deadline=deadline, token=token,
                                      home=home)
    except local_reader.NoReader:
        return _no_reader(url)
    except local_reader.NotOurReader as error:
        return Finding("reader", PROBLEM, f"{url} is not this data home's reader, so no "
                       f"client sends it anything: {error}")
    except (hook_client.HookSkipped, OSError, ValueError) as error:
        return Finding("reader", PROBLEM, f"{url} does not answer as a reader "
                       f"({type(error).__name__})")
    return health if isinstance(health, dict) else _no_reader(url)


def check_session_folders(situation: Situation) -> list[Finding]:
    """Each agent's sessions folder: found, and how many of its sessions are indexed."""
    settings = situation.settings
    if settings.sessions_dirs:
        folders = [(f"sessions: {d}", Path(d).expanduser()) for d in settings.sessions_dirs]
    else:
        folders = [("sessions: pi", default_sessions_dir(situation.environ))]
        if settings.claude_code.read_by_default:
            folders.append(("sessions: claude-code", default_claude_projects_dir(
                settings.claude_code.projects_dir, situation.environ)))
        if settings.codex.read_by_default:
            folders.append(("sessions: codex", default_codex_sessions_dir(
                settings.codex.sessions_dir, {**situation.environ,
                                              "CODEX_HOME": str(situation.codex_home)})))
    return [_folder_finding(situation, name, folder) for name, folder in folders]


def _folder_finding(situation: Situation, name: str, folder: Path) -> Finding:
    if not folder.is_dir():
        return Finding(name, NOTE, f"{folder} not found (no sessions of this agent yet)")
    try:
        files = [str(p) for p in session_files([folder])]
    except PathProblem as problem:
        return Finding(name, PROBLEM, f"{folder} cannot be read: {problem}")
    indexed = sum(1 for f in files if f in situation.indexed_files)
    missing = [f for f in files if f not in situation.indexed_files and _is_session(f)]
    details = {"folder": str(folder), "files": len(files), "indexed": indexed,
               "not_indexed": len(missing)}
    if missing:  # the reader indexes them when it runs (and any session before answering)
        return Finding(name, NOTE, f"{folder}: {indexed} sessions indexed, {len(missing)} not "
                       "yet (the reader indexes them)", f"lookback index "
                       f"{shlex.quote(str(folder))}", details)
    return Finding(name, OK, f"{folder}: {indexed} sessions, all indexed", details=details)


def _is_session(path: str) -> bool:
    try:
        peek_header(Path(path))
        return True
    except Exception:  # not a session (or its header is being written): not counted
        return False


def check_pi_package(situation: Situation) -> list[Finding]:
    """Lookback's extension is a package in Pi's settings (``lookback install pi``, or Pi's
    own ``pi install``), found by its package.json wherever it lies, and the command it
    starts the reader with exists and is this Lookback."""
    if not situation.pi_agent_dir.is_dir():
        return [Finding("pi package", NOTE, f"Pi not found ({situation.pi_agent_dir})")]
    places = [situation.pi_agent_dir / "settings.json", situation.cwd / ".pi" / "settings.json"]
    fix = "lookback install pi"
    for place in places:
        entries = pi_package.lookback_entries(place, _json(place))
        if not entries:
            continue
        packed = [e for e in entries if e.kind == "packed"]
        if packed:
            local = " -l" if place != places[0] else ""
            return [Finding("pi package", PROBLEM, f"{place} lists {packed[0].source}, a packed "
                            "tarball: Pi loads it as one extension file and every Pi run fails",
                            f"pi remove{local} {shlex.quote(packed[0].source)} && {fix}")]
        entry = entries[-1]
        folder = entry.path if entry.kind == "folder" else entry.path.parent
        command = pi_package.recorded_command(folder) or ["lookback"]
        problem = command_problem(command)
        if problem:
            return [Finding("pi package", PROBLEM, f"the extension in {place} starts the reader "
                            f"with {shlex.join(command)}, which {problem}", fix,
                            {"package": str(folder), "command": command})]
        shipped = pi_package.shipped_dir()
        if shipped is not None and shipped != folder.resolve() and \
                pi_package.shipped_files(shipped) != pi_package.shipped_files(folder):
            return [Finding("pi package", PROBLEM, f"the extension in {place} ({folder}) is not "
                            "this Lookback's version of it", fix, {"package": str(folder)})]
        return [Finding("pi package", OK, f"the Lookback package is in {place}",
                        details={"package": str(folder), "command": command})]
    return [Finding("pi package", PROBLEM, f"the Lookback package is not in {places[0]} nor in "
                    "this project's .pi/settings.json: Pi runs without it", fix)]


def command_problem(argv: list[str]) -> str | None:
    """Why the command an integration runs (a Pi extension's, an MCP registration's, a
    hook's) is not this Lookback, or None: it must exist and import this very package."""
    if not argv:
        return "is empty"
    program = argv[0]
    found = program if os.path.isabs(program) else shutil.which(program)
    if found is None or not Path(found).exists():
        return "is not found" + ("" if os.path.isabs(program) else " on the PATH")
    scripts = [part for part in argv[1:] if part.endswith((CLAUDE_HOOK_MARK, CODEX_HOOK_MARK,
                                                                  ACTION_HOOK_MARK))]
    if scripts:  # a hook: python -S -I <this install's script>
        ours = Path(__file__).resolve().parent / Path(scripts[0]).name
        if not Path(scripts[0]).exists():
            return f"runs {scripts[0]}, which no longer exists"
        return None if Path(scripts[0]).resolve() == ours else \
            f"runs another Lookback ({scripts[0]})"
    python = found if "-m" in argv else (_shebang(Path(found)) or found)
    if Path(python).absolute().parent == Path(sys.executable).absolute().parent:
        return None  # this venv's own bin folder
    try:
        done = subprocess.run([python, "-P", "-c", "import lookback; print(lookback.__file__)"],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return f"cannot be run ({python})"
    here = Path(__file__).resolve().parent / "__init__.py"
    imported = done.stdout.strip()
    if done.returncode != 0 or not imported:
        return f"does not run Lookback ({python} has no lookback package)"
    return None if Path(imported).resolve() == here else f"runs another Lookback ({imported})"


def _shebang(script: Path) -> str | None:
    """The interpreter a console script names on its first line (pip's ``#!/…/python``)."""
    try:
        with script.open("rb") as handle:
            first = handle.readline(4096)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    parts = first[2:].decode("utf-8", "replace").split()
    return parts[0] if parts and os.path.isabs(parts[0]) and "python" in Path(parts[0]).name \
        else None


def check_claude_hook(situation: Situation) -> list[Finding]:
    """Lookback's UserPromptSubmit (and PreToolUse) hook in Claude Code's settings, and
    that it still works: its Python and script exist, it asks the configured reader."""
    if not situation.claude_dir.is_dir():
        return [Finding("claude-code hook", NOTE,
                        f"Claude Code not found ({situation.claude_dir})")]
    places = [situation.claude_dir / "settings.json",
              situation.cwd / ".claude" / "settings.json",
              situation.cwd / ".claude" / "settings.local.json"]
    fix = "lookback install claude-code --user"
    for place in places:
        commands = [hook.get("command") for group in _hook_groups(_json(place))
                    for hook in _handlers(group) if isinstance(hook, dict)
                    and CLAUDE_HOOK_MARK in str(hook.get("command"))]
        if not commands:
            continue
        problem = _hook_problem(str(commands[-1]), situation.reader_url,
                                situation.settings.home)
        if problem:
            shared = " --shared" if place == places[1] else ""
            fix = fix if place == places[0] else f"lookback install claude-code{shared} " \
                f"--project {shlex.quote(str(situation.cwd))}"
            return [Finding("claude-code hook", PROBLEM, f"the hook in {place} {problem}", fix)]
        action = _action_problem(situation, _json(place))
        if action:
            fix = fix if place == places[0] else f"lookback install claude-code" \
                f"{' --shared' if place == places[1] else ''} " \
                f"--project {shlex.quote(str(situation.cwd))}"
            return [Finding("claude-code hook", PROBLEM, f"{place}: {action}", fix)]
        return [Finding("claude-code hook", OK, f"installed in {place}")]
    return [Finding("claude-code hook", PROBLEM, "Lookback's UserPromptSubmit hook is not in "
                    f"{places[0]} nor in this project's .claude/settings(.local).json", fix)]


def _hook_groups(settings: dict[str, Any], event: str = "UserPromptSubmit"
                 ) -> list[dict[str, Any]]:
    hooks = settings.get("hooks")
    groups = hooks.get(event) if isinstance(hooks, dict) else None
    return [g for g in groups or [] if isinstance(g, dict)]


def _action_hooks(document: dict[str, Any]) -> list[tuple[int, int, dict[str, Any]]]:
    """(group, index, handler) of each of Lookback's PreToolUse hooks in a hooks document."""
    return [(g, h, handler) for g, group in enumerate(_hook_groups(document, ACTION_EVENT))
            for h, handler in enumerate(_handlers(group))
            if isinstance(handler, dict) and ACTION_HOOK_MARK in str(handler.get("command"))]


def _action_problem(situation: Situation, document: dict[str, Any]) -> str | None:
    """Why the PreToolUse hook beside a working UserPromptSubmit hook is missing or cannot
    work, or None (also when ``action.enabled`` is off: install then writes none)."""
    if not situation.settings.action.enabled:
        return None
    found = _action_hooks(document)
    if not found:
        return f"Lookback's {ACTION_EVENT} hook (evidence at the point of action) is missing"
    problem = _hook_problem(str(found[-1][2]["command"]), situation.reader_url,
                            situation.settings.home)
    return f"the {ACTION_EVENT} hook {problem}" if problem else None


def _handlers(group: dict[str, Any]) -> list[Any]:
    """A hook group's handlers: none when its ``hooks`` is not a list (no agent reads one)."""
    handlers = group.get("hooks")
    return handlers if isinstance(handlers, list) else []


def check_codex_hook(situation: Situation) -> list[Finding]:
    """Lookback's UserPromptSubmit hook in ``$CODEX_HOME/hooks.json``, trusted in its
    ``config.toml`` with the hash of the hook as it is now (``codex exec`` skips an untrusted
    or changed hook without a word), and still able to work."""
    home = situation.codex_home
    if not home.is_dir():
        return [Finding("codex hook", NOTE, f"Codex not found ({home})")]
    hooks_file, fix = home / "hooks.json", "lookback install codex"
    found = [(g, h, handler) for g, group in enumerate(_hook_groups(_json(hooks_file)))
             for h, handler in enumerate(_handlers(group))
             if isinstance(handler, dict) and CODEX_HOOK_MARK in str(handler.get("command"))]
    if not found:
        return [Finding("codex hook", PROBLEM, "Lookback's UserPromptSubmit hook is not in "
                        f"{hooks_file}", fix)]
    group, index, handler = found[-1]
    problem = _hook_problem(str(handler["command"]), situation.reader_url,
                            situation.settings.home)
    if problem:
        return [Finding("codex hook", PROBLEM, f"the hook in {hooks_file} {problem}", fix)]
    try:
        trusted = codex_config.trusted_hashes(codex_config.read_toml(home / "config.toml"))
    except UserError as error:
        return [Finding("codex hook", PROBLEM, str(error))]
    key = codex_config.hook_key(hooks_file, "UserPromptSubmit", group, index)
    if key not in trusted:
        return [Finding("codex hook", PROBLEM, f"the hook in {hooks_file} is not trusted in "
                        f"{home / 'config.toml'}: codex exec skips it silently", fix)]
    if trusted[key] != codex_config.hook_hash("UserPromptSubmit", handler):
        return [Finding("codex hook", PROBLEM, f"the hook in {hooks_file} changed since it "
                        "was trusted: codex exec skips it silently", fix)]
    document = _json(hooks_file)
    action = _action_problem(situation, document)
    if action:
        return [Finding("codex hook", PROBLEM, f"{hooks_file}: {action}", fix)]
    if situation.settings.action.enabled:
        group, index, handler = _action_hooks(document)[-1]
        key = codex_config.hook_key(hooks_file, ACTION_EVENT, group, index)
        if trusted.get(key) != codex_config.hook_hash(ACTION_EVENT, handler):
            return [Finding("codex hook", PROBLEM, f"the {ACTION_EVENT} hook in {hooks_file} "
                            f"is not trusted as it is in {home / 'config.toml'}: codex exec "
                            "skips it silently", fix)]
    return [Finding("codex hook", OK, f"installed in {hooks_file} and trusted")]


def _hook_problem(command: str, reader_url: str, home: str | Path) -> str | None:
    """Why the installed hook command cannot work, or None."""
    try:
        parts = shlex.split(command)
    except ValueError:
        return "is not a command this version wrote"
    if not parts or not Path(parts[0]).exists():
        return f"runs {parts[0] if parts else '(nothing)'}, which no longer exists"
    problem = command_problem(parts)
    if problem:
        return problem
    url = parts[parts.index("--url") + 1].rstrip("/") if "--url" in parts[:-1] else ""
    if url != reader_url:
        return f"asks {url or 'the reader on your Unix socket'}, but the reader is " \
            f"configured at {reader_url or 'your Unix socket'}"
    named = parts[parts.index("--home") + 1] if "--home" in parts[:-1] else None
    if not url and (named is None or os.path.realpath(named) != os.path.realpath(home)):
        return f"asks the reader of data home {named or '(none)'}, not of {home}"
    return None


def mcp_registrations(situation: Situation) -> list[tuple[str, list[tuple[Path, list[str]]], str]]:
    """Per MCP client: its name, the files (and the JSON key path of the server table in
    each) where it registers MCP servers, and the command that adds Lookback's. Another
    client is one more row."""
    home = situation.user_home
    claude_json = Path(situation.environ.get("CLAUDE_CONFIG_DIR") or home) / ".claude.json"
    cwd = str(situation.cwd)
    server = shlex.join([*pi_package.this_command(), "mcp"])
    return [
        ("claude-code", [(claude_json, ["mcpServers"]),
                         (claude_json, ["projects", cwd, "mcpServers"]),
                         (situation.cwd / ".mcp.json", ["mcpServers"])],
         f"claude mcp add --scope user lookback -- {server} --provider anthropic"),
        ("pi", [(situation.pi_agent_dir / "mcp.json", ["mcpServers"]),
                (situation.cwd / ".pi" / "mcp.json", ["mcpServers"])],
         f"pi mcp add lookback --exposure direct -- {server}"),
        ("codex", [(situation.codex_home / "config.toml", ["mcp_servers"])],
         f"codex mcp add lookback -- {server} --provider openai"),
    ]


def check_mcp(situation: Situation) -> list[Finding]:
    """Lookback's MCP server registered per client (optional: a note when it is not), and
    able to start where it is: the command exists and the SDK is installed."""
    findings = []
    for client, places, command in mcp_registrations(situation):
        found = next(((path, entry) for path, keys in places
                      for entry in [_lookback_entry(_dig(_settings_file(path), keys))]
                      if entry), None)
        if found is None:
            findings.append(Finding(f"mcp: {client}", NOTE, "Lookback's MCP server is not "
                                    f"registered (optional): {command}"))
            continue
        path, entry = found
        problem = _mcp_problem(entry, _replace(client, path, situation, command))
        if problem:
            findings.append(Finding(f"mcp: {client}", PROBLEM,
                                    f"registered in {path}, but {problem[0]}", problem[1]))
        else:
            findings.append(Finding(f"mcp: {client}", OK, f"registered in {path}"))
    return findings


def _replace(client: str, path: Path, situation: Situation, register: str) -> str:
    """The command that registers this Lookback's server in place of a broken one: Pi's and
    Codex's ``mcp add`` replace a server of that name, Claude Code's must remove it first
    (from the scope it was found in)."""
    if client != "claude-code":
        return register
    scope = "project" if path.name == ".mcp.json" else \
        "user" if _lookback_entry(_dig(_json(path), ["mcpServers"])) else "local"
    return f"claude mcp remove --scope {scope} lookback && " + \
        register.replace("--scope user", f"--scope {scope}")


def _lookback_entry(servers: Any) -> dict[str, Any] | None:
    """The server registered as ``lookback``, or one that runs ``lookback mcp`` (the
    program ``lookback`` or ``python -m lookback``) — never any entry whose path happens to
    contain the word."""
    if not isinstance(servers, dict):
        return None
    for name, entry in servers.items():
        if isinstance(entry, dict) and (name == "lookback" or _runs_lookback_mcp(entry)):
            return entry
    return None


def _runs_lookback_mcp(entry: dict[str, Any]) -> bool:
    command, args = entry.get("command"), entry.get("args")
    if not isinstance(command, str) or not isinstance(args, list) or "mcp" not in args:
        return False
    modules = [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "-m"]
    return Path(command).name == "lookback" or any(m in ("lookback", "lookback.cli")
                                                   for m in modules)


def _mcp_problem(entry: dict[str, Any], register: str) -> tuple[str, str] | None:
    """(what stops a registered stdio server from starting, its fix), or None;
    ``register`` is the client's command that registers it again."""
    command = entry.get("command")
    if not isinstance(command, str) or not command:
        return None  # an HTTP registration: the reader check covers the server
    args = entry.get("args")
    argv = [command, *(a for a in args if isinstance(a, str))] if isinstance(args, list) \
        else [command]
    problem = command_problem(argv)
    if problem:
        return f"its command {shlex.join(argv)} {problem}", register
    try:
        import mcp.server.mcpserver  # noqa: F401
    except ImportError:
        from lookback.mcp import sdk_install_command

        return "the MCP SDK is not installed", sdk_install_command()
    return None


def check_freshness(situation: Situation) -> list[Finding]:
    """The latest sessions of every project: how far their index lags their files."""
    behind: list[dict[str, Any]] = []
    worst = 0.0
    for project in situation.projects:
        try:
            sessions = recent_sessions(project, FRESHNESS_SESSIONS, now=situation.now)
        except Exception:  # a damaged index is the indexes check's finding
            continue
        for session in sessions:
            if session.get("file"):
                worst = max(worst, session["lag_seconds"])
            if session["behind_bytes"] and session["lag_seconds"] >= LAG_PROBLEM_SECONDS:
                behind.append({**session, "project": project.name})
    if not behind:
        return [Finding("freshness", OK, "the latest sessions are indexed up to their files"
                        + (f" (a write {worst:.0f} s old still pending)" if worst else ""))]
    findings = []
    for session in behind:
        minutes = session["lag_seconds"] / 60
        findings.append(Finding(
            "freshness", PROBLEM,
            f"session {session['session_id']} is {minutes:.0f} min behind its file "
            f"({session['behind_bytes']} bytes not indexed); keep `lookback serve` running "
            "to index as sessions grow",
            f"lookback index {'--queue ' if mode_of(situation.settings) == 'service' else ''}"
            f"{shlex.quote(session['file'])}", details=session))
    return findings


def check_service(situation: Situation) -> list[Finding]:
    """Service mode: Redis reachable, every worker host live, per-host lag, dead owners'
    projects and orphaned queues (``lookback status`` has the same figures)."""
    if mode_of(situation.settings) != "service":
        return []
    from lookback.service import service_status  # Redis only in service mode

    report: dict[str, Any] = {"projects": []}
    service_status(situation.settings, report)
    if report["redis"].get("error"):
        return [Finding("service", PROBLEM, f"Redis {report['redis']['url']} is "
                        f"{report['redis']['error']}", "start Redis (compose.yaml runs one)")]
    findings = [Finding("service", PROBLEM, problem["problem"], problem["fix"])
                for problem in report.get("service_problems", [])]
    for host_id, host in report.get("hosts", {}).items():
        if host["live"] and host["lag_seconds"] >= LAG_PROBLEM_SECONDS:
            findings.append(Finding(
                "service", PROBLEM, f"worker host {host_id} is {host['lag_seconds']:.0f} s "
                f"behind ({host['lag_events']} events)", "more worker processes there "
                "(`lookback worker --processes N`), or move projects off it (docs/scaling.md)"))
    if not findings:
        live = [host_id for host_id, host in report.get("hosts", {}).items() if host["live"]]
        findings.append(Finding("service", OK, f"{len(live)} live worker host(s), no dead "
                                "owner, no orphaned queue, lag under a minute"
                                if live else "no worker host has started yet",
                                None if live else "lookback worker"))
    return findings


def check_indexes(situation: Situation) -> list[Finding]:
    """Damaged indexes (``index.repair.check`` through ``project_status``) and indexes an
    older version wrote."""
    findings = []
    for project in situation.projects:
        status = project_status(project)
        if status.get("state") == "damaged":
            findings.append(Finding(f"index: {project.name}", PROBLEM,
                                    f"damaged: {status.get('problem')}", status.get("repair")))
        elif status.get("needs_reindex"):
            findings.append(Finding(f"index: {project.name}", PROBLEM,
                                    "written by an older version",
                                    f"lookback reindex --project {project.name}"))
    if not findings:
        findings.append(Finding("indexes", OK if situation.projects else NOTE,
                                f"{len(situation.projects)} project indexes, none damaged or "
                                "stale" if situation.projects else
                                "no project indexed yet", None if situation.projects else
                                "lookback index"))
    return findings


def check_privacy(situation: Situation) -> list[Finding]:
    """The privacy policy per provider, in one line."""
    privacy = situation.settings.privacy
    named = ", ".join(f"{name}: {level}" for name, level in sorted(privacy.providers.items()))
    line = (f"remote providers see up to {privacy.default_max}"
            + (f"; {named}" if named else "")
            + f"; local ({', '.join(privacy.local_providers)}): everything; Claude Code's hook "
            f"as {situation.settings.claude_code.provider}, Codex's as "
            f"{situation.settings.codex.provider}")
    return [Finding("privacy", OK, line)]


#: Claude Code deletes transcripts older than this many days unless ``cleanupPeriodDays``
#: says otherwise (its settings' schema: a positive integer, default 30).
CLAUDE_CLEANUP_DAYS = 30
#: Where Claude Code's managed settings override everyone's (Linux; macOS in its Library).
CLAUDE_MANAGED_SETTINGS = (Path("/etc/claude-code/managed-settings.json"),
                           Path("/Library/Application Support/ClaudeCode/managed-settings.json"))


def check_transcript_cleanup(situation: Situation) -> list[Finding]:
    """Claude Code's own cleanup (``cleanupPeriodDays``) deletes transcripts; Lookback keeps
    what it indexed. A note, never a problem: which periods apply, where set, and how many
    sessions each project already keeps without their file."""
    if not (situation.claude_dir / "projects").is_dir():
        return []
    user = situation.claude_dir / "settings.json"
    periods: dict[str, list[str]] = {}  # "N days (where)" -> the folders it applies to
    statuses = [project_status(project) for project in situation.projects]
    folders = {str(situation.cwd)} | {str(status.get("cwd") or "") for status in statuses}
    for folder in sorted(f for f in folders if f):
        sources = [*CLAUDE_MANAGED_SETTINGS, Path(folder) / ".claude" / "settings.local.json",
                   Path(folder) / ".claude" / "settings.json", user]
        found = next(((path, value) for path in sources
                      if (value := _settings_file(path).get("cleanupPeriodDays")) is not None),
                     None)
        if found is None:
            key = f"{CLAUDE_CLEANUP_DAYS} days (Claude Code's default)"
        elif isinstance(found[1], int) and not isinstance(found[1], bool) and found[1] >= 1:
            key = f"{found[1]} days ({found[0]})"
        else:
            key = f"{CLAUDE_CLEANUP_DAYS} days ({found[0]} sets {found[1]!r}, which Claude Code " \
                  "refuses: its default applies)"
        periods.setdefault(key, []).append(folder)
    kept = {status["project"]: status.get("sessions_without_source", 0) for status in statuses}
    total = sum(count for count in kept.values() if isinstance(count, int))
    summary = ("Claude Code deletes transcripts older than "
               + "; ".join(f"{key}" + (f" for {len(where)} folders" if len(periods) > 1 else "")
                           for key, where in periods.items())
               + ": Lookback keeps what it indexed after the file is gone"
               + f" ({total} sessions kept so far, `lookback status`); keep `lookback serve` "
               "running or index at least that often")
    return [Finding("transcript cleanup", NOTE, summary,
                    details={"periods": periods, "kept_without_source": kept})]


CHECKS: list[Check] = [check_reader, check_session_folders, check_pi_package, check_claude_hook,
                       check_codex_hook, check_mcp, check_freshness, check_service,
                       check_indexes, check_privacy, check_transcript_cleanup]


# ---------------------------------------------------------------------------------------------
# Running them


def run_checks(situation: Situation, checks: Iterable[Check] = CHECKS) -> list[Finding]:
    findings: list[Finding] = []
    for check in checks:
        try:
            findings.extend(check(situation))
        except Exception as error:  # one broken check never hides the others
            name = check.__name__.removeprefix("check_").replace("_", " ")
            findings.append(Finding(name, PROBLEM, f"the check failed: {type(error).__name__}"))
    program = lookback_program(situation.environ)
    if program != "lookback":  # each fix as the user can run it: this Lookback, by its path
        for finding in findings:
            if finding.fix:
                finding.fix = re.sub(r"(^|&& )lookback ", lambda m: f"{m[1]}{program} ",
                                     finding.fix)
    return findings


def lookback_program(environ: dict[str, str]) -> str:
    """How the user reaches this Lookback: ``lookback`` when the PATH's is this one, else
    the script they ran by its path (``.venv/bin/lookback``), else this Python's module."""
    found = shutil.which("lookback", path=environ.get("PATH", ""))
    if found and command_problem([found]) is None:
        return "lookback"
    script = Path(sys.argv[0]).absolute() if sys.argv and sys.argv[0] else None
    if script and script.name == "lookback" and script.is_file() and \
            command_problem([str(script)]) is None:
        return shlex.quote(str(script))
    return shlex.join(pi_package.this_command())


def report(findings: list[Finding]) -> dict[str, Any]:
    return {"ok": not any(f.status == PROBLEM for f in findings),
            "problems": sum(1 for f in findings if f.status == PROBLEM),
            "checks": [asdict(f) for f in findings]}


def render(findings: list[Finding]) -> str:
    marks = {OK: "ok     ", NOTE: "note   ", PROBLEM: "PROBLEM"}
    lines = []
    for finding in findings:
        lines.append(f"{marks[finding.status]}  {finding.check}: {finding.summary}")
        if finding.fix and finding.status != OK:
            lines.append(f"         fix: {finding.fix}")
    problems = sum(1 for f in findings if f.status == PROBLEM)
    lines.append(f"\n{problems} problem{'s' if problems != 1 else ''} found" if problems
                 else "\neverything is wired")
    return "\n".join(lines)


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _settings_file(path: Path) -> dict[str, Any]:
    """A client's settings file, JSON or (``.toml``, Codex's) TOML; {} when unreadable."""
    if path.suffix != ".toml":
        return _json(path)
    try:
        return codex_config.read_toml(path)
    except UserError:
        return {}


def _dig(data: Any, keys: list[str]) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def situation_for(settings: Settings, environ: dict[str, str] | None = None,
                  cwd: Path | None = None) -> Situation:
    return Situation(settings, dict(os.environ) if environ is None else environ,
                     cwd or Path.cwd())


__all__ = ["CHECKS", "Check", "Finding", "Situation", "render", "report", "run_checks",
           "situation_for"]

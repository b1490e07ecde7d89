"""Codex's configuration, as `lookback install codex` writes it and `lookback doctor` reads it.

Also the JSON layout the installers keep when they edit an agent's settings (``json_like``).

Codex reads hooks from ``$CODEX_HOME/hooks.json`` (``CODEX_HOME`` defaults to ``~/.codex``) and
runs a hook only when ``config.toml`` trusts it: a table
``[hooks.state."<hooks.json path>:<snake event>:<group>:<handler>"]`` whose ``trusted_hash`` is
the hash of the hook's definition (docs/codex-session-format.md, "Hooks"); ``codex exec``
skips an untrusted hook without a word. This module computes keys and hashes as Codex does and
edits ``config.toml`` as text — only the one trust table, validated with ``tomllib`` before it
is written — so the rest of the user's file stays as they wrote it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tomllib
from pathlib import Path
from typing import Any

from lookback.errors import UserError

#: The events whose hash never includes a matcher (Codex ignores theirs).
_NO_MATCHER = frozenset({"UserPromptSubmit", "Stop"})
#: The events with an ``additionalContextLimit`` (part of the hash when set and not 2500).
_LIMIT_EVENTS = frozenset({"PreToolUse", "PostToolUse", "SessionStart", "UserPromptSubmit",
                           "SubagentStart"})
DEFAULT_TIMEOUT_SECONDS = 600
DEFAULT_CONTEXT_LIMIT = 2500


def codex_home(environ: dict[str, str] | None = None) -> Path:
    environ = dict(os.environ) if environ is None else environ
    return Path(environ.get("CODEX_HOME") or "~/.codex").expanduser()


def snake(event: str) -> str:
    """``UserPromptSubmit`` -> ``user_prompt_submit`` (the event's label in trust keys)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", event).lower()


def hook_key(hooks_file: Path, event: str, group: int, handler: int) -> str:
    return f"{Path(hooks_file).absolute()}:{snake(event)}:{group}:{handler}"


def hook_hash(event: str, handler: dict[str, Any], matcher: str | None = None) -> str:
    """``sha256:<hex>`` of a command handler as Codex 0.171 hashes it for trust: the
    key-sorted compact JSON of its normalized definition."""
    timeout = handler.get("timeout") or DEFAULT_TIMEOUT_SECONDS
    if event == "SessionEnd":
        timeout = min(max(handler.get("timeout") or 1, 1), 3)
    normalized: dict[str, Any] = {"type": "command", "command": handler["command"],
                                  "timeout": max(int(timeout), 1),
                                  "async": bool(handler.get("async", False))}
    if handler.get("statusMessage") is not None:
        normalized["statusMessage"] = handler["statusMessage"]
    limit = handler.get("additionalContextLimit")
    if limit is not None and limit != DEFAULT_CONTEXT_LIMIT and event in _LIMIT_EVENTS:
        normalized["additionalContextLimit"] = limit
    identity: dict[str, Any] = {"event_name": snake(event), "hooks": [normalized]}
    if event not in _NO_MATCHER and matcher is not None:
        identity["matcher"] = matcher
    blob = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(blob.encode("utf-8")).hexdigest()


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object file ({} when absent); UserError when it is not one."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: not readable JSON ({error}); fix or move it first") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a JSON object; fix or move it first")
    return data


def read_toml(path: Path) -> dict[str, Any]:
    """``config.toml`` parsed ({} when absent); UserError when it is not TOML."""
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise UserError(f"{path}: not readable TOML ({error}); fix or move it first") from None


def trusted_hashes(config: dict[str, Any]) -> dict[str, str]:
    """Trust key -> ``trusted_hash`` of a parsed ``config.toml``."""
    hooks = config.get("hooks")
    state = hooks.get("state") if isinstance(hooks, dict) else None
    if not isinstance(state, dict):
        return {}
    return {key: value["trusted_hash"] for key, value in state.items()
            if isinstance(value, dict) and isinstance(value.get("trusted_hash"), str)}


def with_trust(text: str, key: str, trusted_hash: str) -> str:
    """``config.toml``'s text with ``[hooks.state."<key>"] trusted_hash = …`` set: the table's
    line replaced when it is there, else the table appended. UserError when the result would
    not be valid TOML (say, ``hooks`` written as an inline table)."""
    header = f"[hooks.state.{json.dumps(key, ensure_ascii=False)}]"
    line = f"trusted_hash = {json.dumps(trusted_hash)}"
    lines = text.splitlines()
    if header in (stripped := [raw.strip() for raw in lines]):
        start = stripped.index(header) + 1
        end = next((i for i in range(start, len(lines)) if stripped[i].startswith("[")),
                   len(lines))
        body = [raw for raw in lines[start:end] if not raw.strip().startswith("trusted_hash")]
        lines[start:end] = [line, *body]
        updated = "\n".join(lines) + "\n"
    else:
        updated = text + ("" if not text or text.endswith("\n") else "\n") + \
            f"\n{header}\n{line}\n"
    try:
        parsed = tomllib.loads(updated)
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"config.toml: cannot add the hook's trust entry ({error}); add "
                        f"{header} {line} by hand") from None
    if trusted_hashes(parsed).get(key) != trusted_hash:
        raise UserError(f"config.toml: the hook's trust entry did not take; add {header} "
                        f"{line} by hand")
    return updated


def json_like(document: dict[str, Any], like: str | None) -> str:
    """``document`` as JSON in the layout of ``like`` (the file's text now, None when it is
    new): its indent and whether it ends with a newline, non-ASCII kept as written. The
    agents write their settings as ``JSON.stringify(value, null, 2)`` does, which this
    reproduces, so removing what was added gives back the very bytes."""
    indent: str | int = 2
    if like:
        found = re.search(r"\n([ \t]+)\S", like)
        if found:
            indent = found.group(1)
    text = json.dumps(document, indent=indent, ensure_ascii=False)
    return text + "\n" if like is None or like.endswith("\n") else text


def _table(lines: list[str], key: str) -> tuple[int, int] | None:
    """(first, end) lines of ``[hooks.state."<key>"]`` — its header and body, not the blank
    lines before the next table — or None."""
    header = f"[hooks.state.{json.dumps(key, ensure_ascii=False)}]"
    stripped = [raw.strip() for raw in lines]
    if header not in stripped:
        return None
    start = stripped.index(header)
    end = next((i for i in range(start + 1, len(lines)) if stripped[i].startswith("[")),
               len(lines))
    while end > start + 1 and not stripped[end - 1]:
        end -= 1
    return start, end


def without_trust(text: str, key: str) -> str:
    """``config.toml``'s text without the trust table of ``key`` and the blank line
    ``with_trust`` put before it; every other line as it was."""
    lines = text.splitlines(keepends=True)
    found = _table(lines, key)
    if found is None:
        return text
    start, end = found
    if start > 0 and not lines[start - 1].strip():
        start -= 1
    return "".join(lines[:start] + lines[end:])


def renamed_trust(text: str, key: str, new_key: str) -> str:
    """``config.toml``'s text with the trust table of ``key`` now under ``new_key``."""
    lines = text.splitlines(keepends=True)
    found = _table(lines, key)
    if found is None:
        return text
    start = found[0]
    ending = lines[start][len(lines[start].rstrip("\r\n")):]
    lines[start] = f"[hooks.state.{json.dumps(new_key, ensure_ascii=False)}]{ending}"
    return "".join(lines)


def write_atomically(target: Path, text: str) -> None:
    """Replace ``target``'s text at once (a reader never sees half a file). A symlink (a
    dotfiles checkout) is written where it points, so it stays a link; a file that exists
    keeps its permission bits (a 0600 settings file may hold API keys)."""
    real = Path(os.path.realpath(target))
    real.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode: int | None = stat.S_IMODE(real.stat().st_mode)
    except FileNotFoundError:
        mode = None
    temporary = real.with_name(f".{real.name}.lookback-{os.getpid()}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW,
                         0o600 if mode is not None else 0o666)
    try:
        with open(descriptor, "w", encoding="utf-8") as handle:
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            handle.write(text)
        os.replace(temporary, real)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise

"""What a tool call is about: the query of point-of-action evidence (docs/specification.md,
"Point-of-action evidence").

When an agent is about to read, edit or run something (Claude Code's and Codex's
``PreToolUse`` hooks, Pi's ``tool_call`` event), ``tool_query(name, tool_input, cwd)`` names
the call's *subjects* — the file it touches (as the user's project names it: relative to
``cwd``, and by its base name), the symbols and paths of a command or a search pattern, the
command's leading words as a phrase — and writes them as a retrieval message, so the one
retrieval pipeline answers it. Every subject is a literal term (a path, an identifier, an
error, a phrase): flags, program names and plain words are left out, so a match on the
message is a match on what the call touches (the informativeness rule,
``query.search.action``, builds on that).

The tools are recognized by their arguments, not their names, so one function serves the
three agents: ``file_path``/``path``/``notebook_path`` (a file), ``command``/``cmd`` (a shell
command, or Codex's ``apply_patch`` text with its ``*** Update File:`` lines), ``pattern``
(a search). Nothing here reads a file or the clock.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Any

from lookback.query.text.terms import ERROR, IDENTIFIER, PATH, extract_terms

#: Arguments that name the file a tool reads or writes (Claude Code, Codex, Pi).
FILE_KEYS = ("file_path", "notebook_path", "path", "filePath")
#: Arguments that hold a shell command (or a patch).
COMMAND_KEYS = ("command", "cmd")
PATTERN_KEYS = ("pattern", "query")
#: At most this many subjects per call (the most specific first).
MAX_SUBJECTS = 6
#: A command is read this far; a longer one is a script, named by its first lines.
MAX_COMMAND_CHARS = 2_000
#: Base names too common to say which file is meant (a package's ``__init__.py``).
GENERIC_NAMES = frozenset({"__init__.py", "index.ts", "index.js", "mod.rs", "lib.rs",
                           "main.rs", "main.go", "main.py"})
#: Command words that say nothing of their own: the phrase starts after them.
NEUTRAL_WORDS = frozenset({"cd", "sudo", "env", "time", "nice", "exec", "then", "do"})
#: Programs whose leading words are no topic (``cat x``: the file is the subject).
PLAIN_PROGRAMS = frozenset({"cat", "ls", "head", "tail", "echo", "pwd", "less", "more",
                            "wc", "sed", "awk", "grep", "rg", "find", "tree", "true",
                            "printf", "stat", "file", "which", "mkdir", "touch", "cp",
                            "mv", "rm", "chmod", "diff", "sort", "uniq", "cut", "tr",
                            "xargs", "tee", "nl", "git"})
SUBJECT_KINDS = frozenset({IDENTIFIER, PATH, ERROR})
#: The files an ``apply_patch`` text touches.
PATCH_FILE = re.compile(r"^\*\*\* (?:Update|Add|Delete) File: (.+)$", re.MULTILINE)
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_.:+-]*\Z")


@dataclass(frozen=True)
class ToolQuery:
    """A tool call's subjects (literal terms, most specific first) and the retrieval
    message that searches for them."""

    subjects: tuple[str, ...]

    @property
    def message(self) -> str:
        return " ".join(f'"{subject}"' if " " in subject else f"`{subject}`"
                        for subject in self.subjects)


def tool_query(name: str, tool_input: Any, cwd: str | None = None) -> ToolQuery | None:
    """The subjects of a call of tool ``name`` with ``tool_input`` (its arguments) in the
    folder ``cwd``; None when the call touches nothing a history could be about."""
    if not isinstance(tool_input, dict):
        return None
    subjects: list[str] = []
    # A search's ``path`` is where it looks, not what it is about.
    searching = any(isinstance(tool_input.get(key), str) for key in PATTERN_KEYS)
    for key in FILE_KEYS:
        value = tool_input.get(key)
        if isinstance(value, str) and value.strip() and not searching:
            subjects += file_subjects(value.strip(), cwd)
            break
    for key in COMMAND_KEYS:
        value = tool_input.get(key)
        if isinstance(value, list):  # an argv
            value = " ".join(part for part in value if isinstance(part, str))
        if isinstance(value, str) and value.strip():
            subjects += command_subjects(value, cwd)
            break
    for key in PATTERN_KEYS:
        value = tool_input.get(key)
        if isinstance(value, str) and value.strip():
            subjects += _literal_terms(value)
            break
    unique = list(dict.fromkeys(s for s in subjects if s))[:MAX_SUBJECTS]
    return ToolQuery(tuple(unique)) if unique else None


def file_subjects(path: str, cwd: str | None) -> list[str]:
    """A file as the history names it: relative to the project (when it lies inside it),
    and its base name unless that is too common to tell files apart."""
    path = path.replace("\\", "/")
    relative = path
    if cwd and posixpath.isabs(path):
        root = posixpath.normpath(cwd.replace("\\", "/"))
        normal = posixpath.normpath(path)
        if normal.startswith(root.rstrip("/") + "/"):
            relative = normal[len(root.rstrip("/")) + 1:]
    subjects = [relative.removeprefix("./")]
    base = posixpath.basename(relative.rstrip("/"))
    if base and base != subjects[0] and base not in GENERIC_NAMES and "." in base.strip("."):
        subjects.append(base)
    return [s for s in subjects if s and s not in (".", "/")]


def command_subjects(command: str, cwd: str | None) -> list[str]:
    """A command's subjects: the files a patch touches, else its leading words as a
    phrase (``npm run build``) and the paths, symbols and errors it names."""
    text = command[:MAX_COMMAND_CHARS]
    patched = PATCH_FILE.findall(text)
    if patched:
        return [s for path in patched for s in file_subjects(path.strip(), cwd)]
    subjects = [phrase] if (phrase := _leading_phrase(text)) else []
    for term in _literal_terms(text):
        if term.startswith("/") and cwd:
            subjects += file_subjects(term, cwd)
        else:
            subjects.append(term)
    return subjects


def _leading_phrase(command: str) -> str | None:
    """The command's first words up to a flag, a path or a quote (at most three), when
    they are two or more and not a plain program's (``cat``, ``ls``, ``git``)."""
    words: list[str] = []
    for word in command.split("\n", 1)[0].split():
        if not words and word in NEUTRAL_WORDS:
            continue
        if word in ("&&", "||", ";", "|") or not _WORD.match(word) or "/" in word:
            break
        words.append(word)
        if len(words) == 3:
            break
    if len(words) < 2 or words[0] in PLAIN_PROGRAMS:
        return None
    return " ".join(words)


def _literal_terms(text: str) -> list[str]:
    """The paths, identifiers and errors of ``text`` (flags, programs and words left out)."""
    return [term.text for term in extract_terms(text).terms if term.kind in SUBJECT_KINDS]

"""What point-of-action evidence costs per tool call.

    python bench/bench_action_hook.py [--runs 30]

Claude Code and Codex wait for a PreToolUse hook before the call runs, so the hook's whole
wall time — starting the process, reading stdin, the transcript scan for entries already
quoted, one request to the reader, printing — is what a tool call waits. Against a live
``lookback serve`` (a subprocess, warm) over a real compacted Pi session with hundreds of file
operations (tests/fixtures/pi-sessions/before-compaction.jsonl), one fresh process per call,
each call a distinct request (the reader's answer cache never helps):

- ``python -S -I -c pass``: the floor;
- ``hook, file with history``: the command ``lookback install claude-code`` writes for
  PreToolUse, an Edit of a file the compacted history talks about (evidence comes back);
- ``hook, file without history``: an Edit of a file the history never names (nothing);
- ``hook, reader down``: the fail-open path.

And the reader's side alone, in process (what Pi's extension waits for, over its open
connection): ``retrieve`` with ``tool`` for the same calls. p50/p95/max in ms.
"""

from __future__ import annotations

import itertools
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_claude_hook import (  # noqa: E402 (the repository on the path first)
    live_reader,
    report,
    runs_argument,
    time_runs,
)

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "pi-sessions" / "before-compaction.jsonl"
HOOK = str(ROOT / "lookback" / "action_hook.py")
CWD = "/Users/badlogic/workspaces/pi-mono"


def files_with_history() -> list[str]:
    """The files the session's tool calls touched, most touched first."""
    counts: dict[str, int] = {}
    for line in FIXTURE.read_text(encoding="utf-8").splitlines():
        message = json.loads(line).get("message") or {}
        for block in message.get("content") or []:
            if isinstance(block, dict) and block.get("type") == "toolCall":
                path = (block.get("arguments") or {}).get("path")
                if isinstance(path, str) and path.startswith(CWD + "/") and "." in path:
                    counts[path] = counts.get(path, 0) + 1
    return sorted(counts, key=lambda p: -counts[p])


def hook_input(session: Path, path: str) -> bytes:
    return json.dumps({"session_id": "bench", "transcript_path": str(session), "cwd": CWD,
                       "hook_event_name": "PreToolUse", "tool_name": "Edit",
                       "tool_input": {"file_path": path, "old_string": "a", "new_string": "b"},
                       "tool_use_id": "toolu_bench"}).encode()


def main() -> None:
    runs = runs_argument()
    with tempfile.TemporaryDirectory() as folder:
        sessions = Path(folder) / "sessions"
        sessions.mkdir()
        session = sessions / FIXTURE.name
        shutil.copy(FIXTURE, session)
        with live_reader(sessions) as (home, _, env), tempfile.TemporaryDirectory() as nobody:
            known = [path for path in files_with_history()
                     if ask(home, session, path)["evidence"]]
            hook = [sys.executable, "-S", "-I", HOOK, "--agent", "claude-code", "--home", home]
            cycle = itertools.cycle(known)
            with_history = lambda _n: hook_input(session, next(cycle))  # noqa: E731
            without = lambda n: hook_input(session, f"{CWD}/src/never-{n}.ts")  # noqa: E731
            time_runs(hook, 3, env, True, with_history)  # warm the reader and the OS caches
            report("python -S -I -c pass", time_runs(
                [sys.executable, "-S", "-I", "-c", "pass"], runs, env, False))
            answered = time_runs(hook, min(runs, len(known)), env, True, with_history)
            report("hook, file with history", answered)
            report("hook, file without history", time_runs(hook, runs, env, False, without))
            down = [*hook[:-1], nobody]
            report("hook, reader down", time_runs(
                down, runs, {**env, "LOOKBACK_AUTOSTART": "0"}, False, without))
            in_process(home, session, known, runs)


def ask(home: str, session: Path, path: str, reader: object = None,
        settings: object = None) -> dict:
    """The reader's engine's answer to an Edit of ``path``, in process."""
    from lookback.api import retrieve
    from lookback.settings import load_settings

    return retrieve({"session_file": str(session), "tool": {
        "name": "edit", "input": {"path": path}, "cwd": CWD}},
        settings=settings or load_settings({"home": home}, environ={}),  # type: ignore[arg-type]
        reader=reader)  # type: ignore[arg-type]


def in_process(home: str, session: Path, known: list[str], runs: int) -> None:
    """The reader's engine alone, as a warm reader runs it (its memo caches warm too)."""
    from lookback.api import new_reader
    from lookback.settings import load_settings

    settings = load_settings({"home": home}, environ={})
    reader = new_reader(settings)
    for label, paths in (("retrieve tool, with history", known),
                         ("retrieve tool, without history",
                          [f"{CWD}/src/never-{n}.ts" for n in range(runs)])):
        samples = []
        for path in itertools.islice(itertools.cycle(paths), runs):
            started = time.perf_counter()
            ask(home, session, path, reader, settings)
            samples.append((time.perf_counter() - started) * 1000)
        report(label, samples)


if __name__ == "__main__":
    main()

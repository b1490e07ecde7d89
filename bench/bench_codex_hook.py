"""What the Codex hook adds to each prompt, process start included.

    python bench/bench_codex_hook.py [--runs 30]

Codex waits for a UserPromptSubmit hook before it samples, so the hook's whole wall time —
starting the process, reading stdin, reading the rollout for the evidence it already quoted
since the last compaction, one request to the reader, printing — is the latency it adds.
Against a live ``lookback serve`` (a subprocess, warm) over the recorded Codex rollouts
(tests/fixtures/codex), with a prompt whose evidence comes back (a distinct prompt each run,
so the reader's answer cache never helps), this times, one fresh process per run:

- ``python -S -I -c pass``: the floor, an interpreter that does nothing;
- ``installed hook``: the command ``lookback install codex`` writes
  (``python -S -I lookback/codex_hook.py --home …``), on the compacted main rollout;
- ``installed hook, 3 earlier contexts``: the same rollout with three of Lookback's contexts
  persisted after its compaction (what a thread looks like a few turns on);
- ``lookback hook codex``: the same through the CLI entry point;
- ``installed hook, reader down``: the fail-open path (nothing listens).

Reports p50/p95/max in ms per variant; the target is p50 ≤ 150 ms for the installed hook.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_claude_hook import (  # noqa: E402
    LOOKBACK,
    ROOT,
    live_reader,
    report,
    runs_argument,
    time_runs,
)
from tests.support import persist_hook_context  # noqa: E402

SESSIONS = ROOT / "tests" / "fixtures" / "codex" / "sessions"
MAIN = next(SESSIONS.glob("*/*/*/rollout-*-01a232ea-c266-*.jsonl"))
PROMPT = "What did we decide about the config format, DEC-TOML-7?"
HOOK = str(ROOT / "lookback" / "codex_hook.py")


def hook_input_for(rollout: Path):
    def make(number: int) -> bytes:
        return json.dumps({"session_id": "bench", "turn_id": f"t{number}",
                           "transcript_path": str(rollout), "cwd": "/tmp/codex-lab/proj",
                           "hook_event_name": "UserPromptSubmit",
                           "prompt": f"{PROMPT} (question {number})"}).encode()
    return make


def with_earlier_contexts(rollout: Path, folder: Path, home: str, env: dict[str, str]) -> Path:
    """A copy of ``rollout`` as another thread (in its own sessions folder) with three
    Lookback contexts persisted after its compaction, as Codex writes them."""
    thread = "01a232ea-c266-7500-8687-000000000bench"
    copy = folder / "sessions" / rollout.relative_to(SESSIONS).with_name(
        f"rollout-2026-12-01T18-42-55-{thread}.jsonl")
    copy.parent.mkdir(parents=True)
    first, rest = rollout.read_bytes().split(b"\n", 1)
    meta = json.loads(first)
    meta["payload"]["id"] = meta["payload"]["session_id"] = thread
    copy.write_bytes(json.dumps(meta, separators=(",", ":")).encode() + b"\n" + rest)
    for number in range(3):
        done = subprocess.run([sys.executable, "-S", "-I", HOOK, "--home", home, "--max-tokens",
                               "400"], input=hook_input_for(copy)(10_000 + number),
                              capture_output=True, env=env, check=True)
        context = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"] \
            if done.stdout else "[no evidence]"
        persist_hook_context(copy, context, f"msg_hook_{number}")
    return copy


def main() -> None:
    runs = runs_argument()
    with live_reader(SESSIONS) as (home, _, env):
        lean = [sys.executable, "-S", "-I", HOOK, "--home", home]
        fresh = hook_input_for(MAIN)
        time_runs(lean, 3, env, True, fresh)  # warm the reader and the OS caches
        later = with_earlier_contexts(MAIN, Path(home), home, env)
        report("python -S -I -c pass", time_runs(
            [sys.executable, "-S", "-I", "-c", "pass"], runs, env, False, fresh))
        report("installed hook", time_runs(lean, runs, env, True, fresh))
        answers = _answers(lean, later, env)  # empty once everything is quoted
        report("installed hook, 3 earlier ctx", time_runs(
            lean, runs, env, answers, hook_input_for(later)))
        report("lookback hook codex", time_runs(
            [LOOKBACK, "hook", "codex"], runs, env, True, fresh))
        with tempfile.TemporaryDirectory() as nobody:  # a data home whose reader does not run
            down = [*lean[:-1], nobody]
            report("installed hook, reader down", time_runs(
                down, runs, {**env, "LOOKBACK_AUTOSTART": "0"}, False, fresh))


def _answers(command: list[str], rollout: Path, env: dict[str, str]) -> bool:
    done = subprocess.run(command, input=hook_input_for(rollout)(0), capture_output=True,
                          env=env, check=False)
    return bool(done.stdout)


if __name__ == "__main__":
    main()

"""What the Claude Code hook adds to each prompt, process start included.

    python bench/bench_claude_hook.py [--runs 30]

Claude Code waits for a UserPromptSubmit hook before it sends the prompt, so the hook's
whole wall time — starting the process, reading stdin, one request to the reader,
printing — is the latency it adds. Against a live ``lookback serve`` (a subprocess, warm)
over the recorded Claude Code fixture (tests/fixtures/claude-code), with a prompt whose
evidence comes back (a distinct prompt each run, so the reader's answer cache never
helps), this times, one fresh process per run:

- ``python -S -I -c pass``: the floor, an interpreter that does nothing;
- ``installed hook``: the command ``lookback install claude-code`` writes
  (``python -S -I lookback/claude_hook.py --home …``, the reader on the user's socket);
- ``lookback hook claude-code``: the same through the CLI entry point;
- ``installed hook, reader down``: the fail-open path (nothing listens).

Reports p50/p95/max in ms per variant; the target is p50 ≤ 150 ms for the installed hook.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECTS = ROOT / "tests" / "fixtures" / "claude-code" / "projects"
SESSION = next(PROJECTS.glob("*/d743d490-*.jsonl"))
PROMPT = "Which deploy key did we pick, ORCHID_LATCH_9031?"
LOOKBACK = str(Path(sys.executable).with_name("lookback"))
HOOK = str(ROOT / "lookback" / "claude_hook.py")
COUNTER = itertools.count()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def hook_input(number: int) -> bytes:
    """A distinct prompt per run, so the reader's answer cache never serves it."""
    return json.dumps({"session_id": "bench", "transcript_path": str(SESSION),
                       "cwd": "/tmp/lookback-claude-fixture/project",
                       "prompt": f"{PROMPT} (question {number})",
                       "hook_event_name": "UserPromptSubmit"}).encode()


def time_runs(command: list[str], runs: int, env: dict[str, str], expect_output: bool,
              make_input: Callable[[int], bytes] = hook_input) -> list[float]:
    samples = []
    for _ in range(runs):
        stdin = make_input(next(COUNTER))
        started = time.perf_counter()
        done = subprocess.run(command, input=stdin, capture_output=True, env=env, check=False)
        samples.append((time.perf_counter() - started) * 1000)
        if done.returncode != 0 or bool(done.stdout) != expect_output:
            raise SystemExit(f"unexpected hook result: {done.returncode} {done.stdout[:200]!r}")
    return samples


def report(name: str, samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    figures = {"p50": statistics.median(ordered),
               "p95": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
               "max": ordered[-1]}
    print(f"{name:32s} p50 {figures['p50']:7.1f} ms   p95 {figures['p95']:7.1f} ms   "
          f"max {figures['max']:7.1f} ms")
    return figures


def wait_for(home: str, timeout: float = 30) -> None:
    """Until the reader of ``home`` answers on its socket, checked as the hooks check it."""
    from lookback import hook_client

    limit = time.monotonic() + timeout
    while time.monotonic() < limit:
        try:
            hook_client.get_json("", "/v1/health?projects=0", home=home,
                                 deadline=time.monotonic() + 1)
            return
        except (OSError, hook_client.HookSkipped, hook_client.NoReader,
                hook_client.NotOurReader):
            time.sleep(0.1)
    raise SystemExit("the reader did not start")


@contextmanager
def live_reader(sessions: Path) -> Iterator[tuple[str, str, dict[str, str]]]:
    """A ``lookback serve`` subprocess over ``sessions`` indexed into a throwaway home, no
    agent's own folders read: (the home, the reader's address — its Unix socket —, the
    environment to run hooks in)."""
    from lookback import local_reader

    with tempfile.TemporaryDirectory() as home:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("LOOKBACK_")},
               "LOOKBACK_HOME": home,
               "CLAUDE_CONFIG_DIR": str(Path(home) / "no-claude"),
               "CODEX_HOME": str(Path(home) / "no-codex")}
        subprocess.run([LOOKBACK, "index", str(sessions)], env=env, check=True,
                       capture_output=True)
        server = subprocess.Popen([LOOKBACK, "serve"], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            url = local_reader.address(home)
            wait_for(home)
            yield home, url, env
        finally:
            server.terminate()
            server.wait(timeout=10)
    print(f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


def runs_argument() -> int:
    parser = argparse.ArgumentParser(description=sys.modules["__main__"].__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    return parser.parse_args().runs


def main() -> None:
    runs = runs_argument()
    with live_reader(PROJECTS) as (home, _, env), tempfile.TemporaryDirectory() as nobody:
        lean = [sys.executable, "-S", "-I", HOOK, "--home", home]
        time_runs(lean, 3, env, True)  # warm the reader and the OS caches
        report("python -S -I -c pass", time_runs(
            [sys.executable, "-S", "-I", "-c", "pass"], runs, env, False))
        report("installed hook", time_runs(lean, runs, env, True))
        report("lookback hook claude-code", time_runs(
            [LOOKBACK, "hook", "claude-code"], runs, env, True))
        down = [*lean[:-1], nobody]  # a data home whose reader does not run
        report("installed hook, reader down", time_runs(
            down, runs, {**env, "LOOKBACK_AUTOSTART": "0"}, False))


if __name__ == "__main__":
    main()

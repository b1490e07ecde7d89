"""Cost per model call inside the real Pi: the time the Lookback extension's `context`
handler takes on the 1,000-entry fixture session. Targets: p50 ≤ 20 ms when evidence is
inserted, ≤ 10 ms when none is found.

    python bench/bench_pi_context.py [--runs 3] [--calls 20] [--pi 1.6.0]

Runs a pinned Pi CLI (0.73.1 by default, or ``--pi 1.6.0``; installed like the e2e tests
do) with the extension and a real `lookback serve` (embedded, keeping the session fresh itself) on
tests/fixtures/pi-sessions/before-compaction.jsonl — 1,002 entries, about 444 messages
(850 KB) in Pi's context after its compactions. A fake model answers each prompt with
``--calls`` `read` tool calls, so one Pi process makes ``calls + 1`` model calls, each
preceded by the handler: branch and context ids from Pi, `/v1/retrieve` (the reader
indexes the entries Pi appended since the last call first), with evidence `/v1/plan`
(kinds and token counts only) and the checked insertion. The handler's own time is
read from its debug line (``ms=``, measured with ``performance.now()`` from the
handler's start to its return). Two prompts: one about a compacted-away detail
(evidence inserted) and one whose identifier the session never mentions (none found).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lookback import local_reader  # noqa: E402
from tests.e2e.harness import (  # noqa: E402
    EXTENSION,
    PI_CLIENTS,
    PI_VERSION,
    REPO_ROOT,
    FakeModelServer,
    PiRunner,
    install_client,
    local_pi_env,
    reader_process,
    tool_call_reply,
    write_agent_dir,
)

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "pi-sessions" / "before-compaction.jsonl"
WITH_EVIDENCE = "why did `unsubscribe` clear the event listeners?"
WITHOUT_EVIDENCE = "is `qqzxFluxCapacitor77` configured?"
LINE = re.compile(r"\[lookback\] retrieve status=(\S+) evidence=(\d+) inserted=(\d+) "
                  r"ms=([\d.]+)(.*)")


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    if not ordered:
        return {"n": 0}
    return {"p50": round(statistics.median(ordered), 2),
            "p95": round(ordered[int(0.95 * (len(ordered) - 1))], 2),
            "max": round(ordered[-1], 2), "n": len(ordered)}


def handler_times(stderr: str) -> list[tuple[str, int, int, float, dict[str, float]]]:
    """(status, evidence, inserted, ms, {phase: ms}) per handler debug line."""
    found = []
    for m in LINE.finditer(stderr):
        phases = {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", m[5])}
        found.append((m[1], int(m[2]), int(m[3]), float(m[4]), phases))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=20, help="tool calls per Pi run")
    parser.add_argument("--pi", choices=PI_CLIENTS, default=PI_VERSION,
                        help="which pinned Pi (0.73.1, or 1.x on Node 22)")
    args = parser.parse_args()
    client = install_client(args.pi)
    with tempfile.TemporaryDirectory() as tmp, FakeModelServer() as model:
        root = Path(tmp)
        home, cwd = root / "home", root / "project"
        agent = write_agent_dir(root / "agent", model.port, context_window=2_000_000)
        sessions = agent / "sessions" / "--project--"
        for folder in (home, sessions, cwd):
            folder.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text("")
        (cwd / "notes.txt").write_text("a small file the fake model keeps reading\n")
        lines = FIXTURE.read_text(encoding="utf-8").splitlines()
        session = sessions / FIXTURE.name
        session.write_text("\n".join([json.dumps({**json.loads(lines[0]), "cwd": str(cwd)}),
                                      *lines[1:]]) + "\n", encoding="utf-8")
        url = local_reader.address(home)  # the user's Unix socket, as Pi finds it
        env = {"LOOKBACK_HOME": str(home), "LOOKBACK_CONFIG": str(home / "config.toml"),
               "PI_CODING_AGENT_DIR": str(agent)}
        runner = PiRunner(client.binary, model, agent, extension=EXTENSION, timeout=300,
                          client_env=client.env)
        pi_env = {**local_pi_env(home), "LOOKBACK_DEBUG": "1"}
        results: dict[str, list[float]] = {"evidence inserted": [], "none found": []}
        steps: dict[str, dict[str, list[float]]] = {"evidence inserted": {}, "none found": {}}
        statuses: dict[str, set] = {"evidence inserted": set(), "none found": set()}
        serve = [str(REPO_ROOT / ".venv" / "bin" / "lookback"), "serve"]
        log = root / "reader.log"
        with reader_process(["sh", "-c", f'exec "$@" 2>>{log}', "serve", *serve], url, env):
            warm = runner.run(session, "warm up: open the session", pi_env)  # Pi rewrites v1
            assert warm.returncode == 0, warm.stderr[-2000:]
            for _ in range(args.runs):
                for name, prompt in (("evidence inserted", WITH_EVIDENCE),
                                     ("none found", WITHOUT_EVIDENCE)):
                    model.script = [tool_call_reply("read", {"path": "notes.txt"})
                                    for _ in range(args.calls)]
                    run = runner.run(session, prompt, pi_env)
                    assert run.returncode == 0, run.stderr[-2000:]
                    for status, _, inserted, ms, phases in handler_times(run.stderr):
                        statuses[name].add(f"{status}/{'inserted' if inserted else 'none'}")
                        if (inserted > 0) == (name == "evidence inserted"):
                            results[name].append(ms)
                            for phase, value in phases.items():
                                steps[name].setdefault(phase, []).append(value)
        lines = [json.loads(line) for line in log.read_text().splitlines()
                 if '"endpoint": "/v1/retrieve"' in line]
        inside = {"evidence inserted": [r["ms"] for r in lines if r.get("evidence")],
                  "none found": [r["ms"] for r in lines if not r.get("evidence")]}
    print(json.dumps({"pi context handler (ms)": {k: percentiles(v) for k, v in results.items()},
                      "reader's own time per /v1/retrieve (ms)": {
                          k: percentiles(v) for k, v in inside.items()},
                      "p50 per step (ms)": {k: {p: round(statistics.median(v), 2)
                                                for p, v in phases.items()}
                                            for k, phases in steps.items()},
                      "outcomes seen": {k: sorted(v) for k, v in statuses.items()},
                      "targets p50 (ms)": {"evidence inserted": 20, "none found": 10}},
                     indent=2))


if __name__ == "__main__":
    main()

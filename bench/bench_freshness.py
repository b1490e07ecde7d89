"""Freshness in embedded mode: from a line appended to a session file until the reader
returns it. The contract: p95 ≤ 250 ms.

    python bench/bench_freshness.py [--appends 100] [--interval-ms 60]

Starts a real `lookback serve` (embedded: no Redis) whose sessions folder holds the
1,000-entry fixture session (tests/fixtures/pi-sessions/before-compaction.jsonl as a
v3 file, as Pi rewrites it); waits until the reader's own tailer has indexed it. Then,
two ways a Pi session meets the reader:

- ``next request``: append one user entry with a unique identifier (as Pi does, one
  JSON line) and immediately ask `/v1/retrieve` about it, as the extension does at the
  next model call; the time runs from the append until an answer names the new entry
  (re-asking at once if one does not — never needed when the inline path works).
- ``tailer only``: append, ask nothing; time until the entry is committed to the index
  (this process polls the index read-only every 2 ms) — what a lost nudge costs.

Appends are paced ``--interval-ms`` apart. Reports p50/p95/max in ms.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lookback import local_reader  # noqa: E402
from lookback.index.layout import project_dir  # noqa: E402
from lookback.index.store import open_reader  # noqa: E402
from tests.server.client import UnixHTTPConnection, connect  # noqa: E402

FIXTURE = (Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "pi-sessions"
           / "before-compaction.jsonl")


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50": round(statistics.median(ordered), 1),
            "p95": round(ordered[int(0.95 * (len(ordered) - 1))], 1),
            "max": round(ordered[-1], 1), "n": len(ordered)}


def v3_session(cwd: Path) -> tuple[list[str], str]:
    """The fixture as Pi writes it after opening it: version 3, random ids, chained."""
    lines = FIXTURE.read_text(encoding="utf-8").splitlines()
    header = {**json.loads(lines[0]), "version": 3, "cwd": str(cwd)}
    out, parent, ids = [json.dumps(header)], None, []
    for line in lines[1:]:
        entry = json.loads(line)
        entry_id = uuid.uuid4().hex[:8]
        entry = {**entry, "id": entry_id, "parentId": parent}
        if entry.get("type") == "compaction":
            index = entry.pop("firstKeptEntryIndex", None)
            if isinstance(index, int) and 0 < index <= len(ids):
                entry["firstKeptEntryId"] = ids[index - 1]
        ids.append(entry_id)
        out.append(json.dumps(entry))
        parent = entry_id
    return out, parent


def user_line(entry_id: str, parent: str, marker: str) -> str:
    return json.dumps({"type": "message", "id": entry_id, "parentId": parent,
                       "timestamp": "2026-11-30T12:00:00.000Z",
                       "message": {"role": "user", "content": [
                           {"type": "text", "text": f"remember the setting `{marker}` for later"}],
                           "timestamp": 1}}) + "\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Reader:
    """A real `lookback serve` and a keep-alive client."""

    def __init__(self, environ: dict[str, str]) -> None:
        # On the user's Unix socket, as clients use it (in a runtime folder of its own).
        self.runtime = tempfile.mkdtemp(prefix="lb-run-")
        env = {**os.environ, **environ, "XDG_RUNTIME_DIR": self.runtime}
        self.socket = local_reader.socket_path(environ["LOOKBACK_HOME"], env)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "lookback.cli", "serve", "--quiet"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        limit = time.monotonic() + 30
        while True:
            try:
                connect(self.socket, timeout=1).close()
                break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > limit:
                    raise SystemExit("lookback serve did not start") from None
                time.sleep(0.05)
        self.connection = UnixHTTPConnection(self.socket)

    def post(self, path: str, body: dict) -> dict:
        self.connection.request("POST", path, body=json.dumps(body),
                                headers={"content-type": "application/json"})
        response = self.connection.getresponse()
        return json.loads(response.read())

    def close(self) -> None:
        self.connection.close()
        self.process.terminate()
        self.process.wait(timeout=10)
        shutil.rmtree(self.runtime, ignore_errors=True)


class IndexProbe:
    """Polls the project index read-only: is this entry committed yet?"""

    def __init__(self, home: Path, cwd: Path) -> None:
        self.project = project_dir(home, str(cwd))

    def wait(self, entry_id: str, timeout: float = 10.0) -> bool:
        limit = time.monotonic() + timeout
        connection = None
        while time.monotonic() < limit:
            path = self.project.index_path()
            if path is not None:
                connection = connection or open_reader(path)
                row = connection.execute("SELECT 1 FROM entries WHERE entry_id = ?",
                                         (entry_id,)).fetchone()
                if row is not None:
                    connection.close()
                    return True
            time.sleep(0.002)
        return False


def next_request(reader: Reader, session: Path, parent: str, appends: int,
                 interval: float) -> tuple[list[float], str]:
    samples = []
    for n in range(appends):
        entry_id, marker = uuid.uuid4().hex[:8], f"fresh_marker_{n}_{uuid.uuid4().hex[:6]}"
        body = {"session_file": str(session), "leaf_id": entry_id, "context_ids": [],
                "message": f"what was `{marker}`?", "max_results": 3}
        started = time.perf_counter()
        with open(session, "a", encoding="utf-8") as handle:
            handle.write(user_line(entry_id, parent, marker))
        while True:
            answer = reader.post("/v1/retrieve", body)
            if any(e.get("entry_id") == entry_id for e in answer.get("evidence", [])):
                break
            if time.perf_counter() - started > 10:
                raise SystemExit(f"entry {n} not retrievable after 10 s: {answer.get('status')}")
        samples.append((time.perf_counter() - started) * 1000)
        parent = entry_id
        time.sleep(interval)
    return samples, parent


def tailer_only(probe: IndexProbe, session: Path, parent: str, appends: int,
                interval: float) -> list[float]:
    samples = []
    for n in range(appends):
        entry_id = uuid.uuid4().hex[:8]
        started = time.perf_counter()
        with open(session, "a", encoding="utf-8") as handle:
            handle.write(user_line(entry_id, parent, f"tail_marker_{n}"))
        if not probe.wait(entry_id):
            raise SystemExit(f"the tailer did not index entry {n} within 10 s")
        samples.append((time.perf_counter() - started) * 1000)
        parent = entry_id
        time.sleep(interval)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--appends", type=int, default=100)
    parser.add_argument("--interval-ms", type=float, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        home, agent, cwd = root / "home", root / "agent", root / "project"
        sessions = agent / "sessions" / "--project--"
        for folder in (home, sessions, cwd):
            folder.mkdir(parents=True)
        (home / "config.toml").write_text("")
        lines, leaf = v3_session(cwd)
        session = sessions / "session.jsonl"
        session.write_text("\n".join(lines) + "\n", encoding="utf-8")
        environ = {"LOOKBACK_HOME": str(home), "LOOKBACK_CONFIG": str(home / "config.toml"),
                   "PI_CODING_AGENT_DIR": str(agent)}
        reader = Reader(environ)
        try:
            probe = IndexProbe(home, cwd)
            started = time.perf_counter()
            if not probe.wait(leaf, timeout=60):
                raise SystemExit("the reader did not index the fixture session")
            print(f"start: the tailer indexed {len(lines) - 1:,} entries in "
                  f"{time.perf_counter() - started:.2f} s (no request, no `lookback index`)")
            interval = args.interval_ms / 1000
            requested, leaf = next_request(reader, session, leaf, args.appends, interval)
            tailed = tailer_only(probe, session, leaf, args.appends, interval)
        finally:
            reader.close()
    print(json.dumps({"append -> retrievable at the next request (ms)": percentiles(requested),
                      "append -> indexed by the tailer alone (ms)": percentiles(tailed),
                      "target p95 (ms)": 250}, indent=2))


if __name__ == "__main__":
    main()

"""What an MCP tool call costs: ``history_search`` over the real fixture sessions.

    python bench/bench_mcp.py [--runs 100]

Indexes tests/fixtures/pi-sessions into a temporary home and asks ``history_search``
(scope project) with the fixtures' real user messages, a distinct one per call, through:

- ``ReaderApp``: ``POST /v1/search`` in process, the engine call the tools make;
- ``stdio``: the SDK's client talking to a ``lookback mcp`` process (started once);
- ``http``: the SDK's client to ``lookback serve --mcp`` on loopback (in this process,
  started once), one MCP session for all calls.

Reports p50/p95 in ms per path (wall time, client side; the SDK's JSON-RPC framing and
the tool's text formatting are the difference).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lookback.mcp_server import mount_in  # noqa: E402
from lookback.server import ReaderApp, make_server  # noqa: E402
from lookback.settings import load_settings  # noqa: E402
from tests.support import FIXTURES, index_paths  # noqa: E402


def questions(limit: int) -> list[str]:
    found = []
    for path in sorted(FIXTURES.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            message = row.get("message") if isinstance(row, dict) else None
            if isinstance(message, dict) and message.get("role") == "user":
                content = message.get("content")
                text = content if isinstance(content, str) else " ".join(
                    b.get("text", "") for b in content or [] if isinstance(b, dict))
                if 20 <= len(text) <= 2000 and text not in found:
                    found.append(text)
    return found[:limit]


def summary(name: str, times: list[float]) -> None:
    times = sorted(times)
    p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
    print(f"{name:<10} p50 {statistics.median(times):7.2f} ms  p95 {p95:7.2f} ms  "
          f"({len(times)} calls)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        index_paths(home, FIXTURES)
        environ = {"LOOKBACK_HOME": str(home), "LOOKBACK_CONFIG": str(home / "none.toml"),
                   "LOOKBACK_FRESHNESS__TAIL": "false"}
        (home / "none.toml").write_text("")
        settings = load_settings({}, environ)
        project = json.loads(FIXTURES.joinpath("large-session.jsonl").read_text()
                             .splitlines()[0])["cwd"]
        asked = questions(args.runs)
        print(f"{len(asked)} questions, project {project}")

        app = ReaderApp(settings)
        times = []
        for text in asked:
            body = json.dumps({"text": text, "scope": "project", "project": project,
                               "max_results": 8}).encode()
            started = time.perf_counter()
            app.handle("POST", "/v1/search", None, body)
            times.append((time.perf_counter() - started) * 1000)
        app.close()
        summary("ReaderApp", times)

        from mcp import Client, StdioServerParameters

        async def through(client_target: object) -> list[float]:
            async with Client(client_target) as client:
                await client.call_tool("lookback_status", {})  # the session is warm
                found = []
                for text in asked:
                    started = time.perf_counter()
                    await client.call_tool("history_search", {
                        "query": text, "scope": "project", "project": project})
                    found.append((time.perf_counter() - started) * 1000)
                return found

        params = StdioServerParameters(command=sys.executable,
                                       args=["-m", "lookback.cli", "mcp", "--quiet"],
                                       env={**os.environ, **environ})
        summary("stdio", asyncio.run(through(params)))

        # MCP over HTTP is TCP, which needs a token (docs/reader-service.md).
        token = "bench-token-0000"
        with_token = load_settings({"server": {"tokens": {token: "*"}}}, environ)
        server = make_server(with_token, "127.0.0.1", 0)
        mounted = mount_in(server)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            url = f"http://127.0.0.1:{server.server_address[1]}/mcp"

            async def over_http() -> list[float]:
                async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) \
                        as http:
                    return await through(streamable_http_client(url, http_client=http))

            summary("http", asyncio.run(over_http()))
        finally:
            server.shutdown()
            server.server_close()
            mounted.close()
            server.app.close()


if __name__ == "__main__":
    main()

"""``lookback mcp`` on stdio, started the way a client starts it: the default project is
the folder it runs in, and ``$LOOKBACK_TOKEN`` limits it to that token's grants when the
settings require tokens."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

from mcp import Client, StdioServerParameters

from .conftest import EARLY_USER_TEXT, SESSION_ID, TOKEN_A, call_each, environment, write_config

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "test", "version": "1"}}}


def stdio_calls(cwd, env, *requests):
    async def run():
        params = StdioServerParameters(command=sys.executable,
                                       args=["-m", "lookback.cli", "mcp", "--quiet"],
                                       env=env, cwd=str(cwd))
        async with Client(params) as client:
            return await call_each(client, requests)
    return asyncio.run(run())


def test_stdio_searches_the_folder_it_was_started_in(projects):
    write_config(projects.home, "")
    env = environment(projects.home)
    (failed, text), = stdio_calls(projects.cwd_a, env,
                                  ("history_search", {"query": "AppMessage[]"}))
    assert not failed and "(branch scope)" in text and f"(session {SESSION_ID})" in text
    assert EARLY_USER_TEXT.split(";")[0] in text


def test_stdio_with_tokens_reads_only_its_tokens_projects(projects):
    write_config(projects.home, f'[server.tokens]\n"{TOKEN_A}" = ["{projects.cwd_a}"]\n')
    env = environment(projects.home, LOOKBACK_TOKEN=TOKEN_A)
    own, other = stdio_calls(projects.cwd_b, env,
                             ("history_search", {"query": "AppMessage[]",
                                                 "project": str(projects.cwd_a)}),
                             ("history_search", {"query": "AppMessage[]"}))
    assert not own[0] and f"(session {SESSION_ID})" in own[1]
    assert other[0] and "refused" in other[1] and "AppMessage" not in other[1]


def test_stdio_answers_every_malformed_frame_with_an_error(projects):
    """Issue 29 (6): a frame the SDK cannot read was dropped and the client waited for its
    own timeout. Each gets a JSON-RPC error, with its id when that can be read; the
    session goes on."""
    write_config(projects.home, "")
    frames = [
        json.dumps(INITIALIZE).encode(),
        b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
        # a lone surrogate escape, as JavaScript's JSON.stringify writes it
        b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"history_search",'
        b'"arguments":{"query":"AppMessage \\ud800"}}}',
        b'{"jsonrpc":"2.0","id":"three","method":"tools/call","params":',  # cut off
        b'\xff\xfe not json at all',
        b'{"jsonrpc":"2.0","id":5}',  # JSON, not a JSON-RPC message
        b'{"jsonrpc":"2.0","method":"notifications/\\udc00"}',  # a notification: no answer
        b'{"jsonrpc":"2.0","id":6,"method":"tools/list"}',
    ]
    process = subprocess.Popen([sys.executable, "-m", "lookback.cli", "mcp", "--quiet"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, env=environment(projects.home),
                               cwd=str(projects.cwd_a))
    output, _ = process.communicate(b"\n".join(frames) + b"\n", timeout=120)
    answers = {answer["id"]: answer for answer in map(json.loads, output.splitlines())}
    assert answers[1]["result"]["serverInfo"]["name"] == "lookback"
    assert answers[2]["error"]["code"] == -32602  # invalid params
    assert answers["three"]["error"]["code"] == -32700  # parse error, its id read
    assert answers[None]["error"]["code"] == -32700  # no id to read
    assert answers[5]["error"]["code"] == -32600  # invalid request
    assert "tools" in answers[6]["result"]
    assert len(output.splitlines()) == 6

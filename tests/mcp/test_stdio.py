"""``lookback mcp`` on stdio, started the way a client starts it: the default project is
the folder it runs in, and ``$LOOKBACK_TOKEN`` limits it to that token's grants when the
settings require tokens."""

from __future__ import annotations

import asyncio
import sys

from mcp import Client, StdioServerParameters

from .conftest import EARLY_USER_TEXT, SESSION_ID, TOKEN_A, call_each, environment, write_config


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

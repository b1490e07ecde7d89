"""Start and supervise the dramatiq worker processes behind ``lookback worker``.

Two process groups, one per queue, so a long rebuild never takes a thread that a
fresh append needs:

* index: ``processes`` x ``threads`` on ``lookback-index`` and this host's own
  ``lookback-index.<id>`` (nudges of the projects it owns, see workers.owner). Nudges are tiny and
  de-duplicated, so each thread prefetches one message, and an idle consumer polls
  Redis every 100 ms (dramatiq's default of up to 1 s would cost freshness).
* background: one process with one thread on ``lookback-background`` and this
  host's ``lookback-background.<id>`` (rebuilds are
  disk-bound; two at once would only fight over the disk).

Settings reach the workers through the environment (``LOOKBACK_*``). The groups end
with the supervisor however it ends (``workers.lifeline``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lookback.workers.config import BACKGROUND_QUEUE, INDEX_QUEUE
from lookback.workers.lifeline import Registry, die_with_parent


@dataclass(frozen=True)
class Group:
    name: str
    queues: tuple[str, ...]
    processes: int
    threads: int
    poll_ms: int

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "dramatiq", "lookback.workers.actors",
                "--queues", *self.queues,
                "--processes", str(self.processes), "--threads", str(self.threads)]

    def environ(self, base: dict[str, str]) -> dict[str, str]:
        return {**base, "dramatiq_worker_timeout": str(self.poll_ms),
                "dramatiq_queue_prefetch": str(self.threads)}


def groups(processes: int, threads: int, background: bool = True,
           own: tuple[str, str] | None = None) -> list[Group]:
    """The process groups; ``own`` are this host's own index and background queues
    (``workers.owner.my_queues``), consumed beside the shared ones."""
    own_index, own_background = own or ("", "")
    found = [Group("index", (INDEX_QUEUE, *filter(None, [own_index])), processes, threads,
                   poll_ms=100)]
    if background:
        found.append(Group("background", (BACKGROUND_QUEUE, *filter(None, [own_background])),
                           1, 1, poll_ms=1000))
    return found


def start(group: Group, environ: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start the group's dramatiq master in its own session; it gets SIGTERM when we die."""
    return subprocess.Popen(group.argv(), env=group.environ(environ), start_new_session=True,
                            preexec_fn=die_with_parent())


def supervise(groups_: Sequence[Group], environ: dict[str, str]) -> int:
    """Run the groups until one exits or we are told to stop; stop the others too.

    First stops the groups a killed supervisor of the same data directory left.
    """
    registry = Registry(Path(environ.get("LOOKBACK_HOME") or "."))
    reaped = registry.reap()
    if reaped:
        print(f"stopped {reaped} worker group(s) a killed supervisor left running",
              file=sys.stderr, flush=True)
    children = [start(group, environ) for group in groups_]
    registry.record(child.pid for child in children)
    try:
        return _run(children)
    finally:
        registry.forget()


def _run(children: list[subprocess.Popen[bytes]]) -> int:
    stopping = {"signal": 0}

    def forward(signum: int, _frame: object) -> None:
        stopping["signal"] = signum

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while not stopping["signal"] and all(child.poll() is None for child in children):
            time.sleep(0.2)
        return _stop(children, stopping["signal"] or signal.SIGTERM)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stop(children: list[subprocess.Popen[bytes]], signum: int, grace: float = 30.0) -> int:
    for child in children:
        if child.poll() is None:
            os.kill(child.pid, signum)  # dramatiq's master stops its workers cleanly
    deadline = time.monotonic() + grace
    for child in children:
        try:
            child.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    codes = [child.returncode for child in children]
    return next((code for code in codes if code not in (0, -signum)), 0)

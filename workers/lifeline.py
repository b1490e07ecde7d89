"""Worker process groups end with their supervisor, however it ends.

``lookback worker`` starts each dramatiq master in its own session (so a Ctrl-C in
the terminal reaches only the supervisor, which stops them in order). Killed with
SIGKILL (the OOM killer, a kill of the main process only), the supervisor cannot
stop them, and they used to run on as orphans. Two guards:

* ``die_with_parent``: each master asks Linux for SIGTERM when its parent dies
  (``PR_SET_PDEATHSIG``), and dramatiq's master then stops its workers cleanly.
* ``Registry``: the supervisor records its groups in ``$LOOKBACK_HOME/workers/<pid>.json``;
  a supervisor that starts later stops the groups of records whose supervisor is
  gone (a group that missed the signal, or a supervisor of an older version),
  checking in ``/proc`` that each is a Lookback dramatiq worker before it signals
  it (where there is no ``/proc``, nothing is signalled).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

#: prctl(2) option: the signal this process gets when its parent thread dies.
PR_SET_PDEATHSIG = 1

#: What identifies a worker process in its command line.
WORKER_MARK = b"lookback.workers.actors"

_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def die_with_parent(signum: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get ``signum`` when this process dies
    (None where the platform has no such call; the registry covers that)."""
    if _LIBC is None:
        return None
    parent = os.getpid()
    prctl = _LIBC.prctl

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the call: go now
            os.kill(os.getpid(), signum)

    return preexec


class Registry:
    """The process groups of the supervisors of one data directory."""

    def __init__(self, home: Path) -> None:
        self.folder = Path(home) / "workers"

    def record(self, groups: Iterable[int]) -> Path:
        """Note this supervisor's process groups (the masters' pids)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{os.getpid()}.json"
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps({"supervisor": os.getpid(), "groups": list(groups)}))
        os.replace(temporary, path)
        return path

    def forget(self) -> None:
        (self.folder / f"{os.getpid()}.json").unlink(missing_ok=True)

    def reap(self, grace: float = 20.0) -> int:
        """Stop the groups of supervisors that are gone; returns how many were running."""
        if not self.folder.is_dir():
            return 0
        orphans: list[int] = []
        for path in self.folder.glob("*.json"):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if alive(int(record.get("supervisor", 0))):
                continue  # another supervisor runs on this data directory
            orphans.extend(g for g in record.get("groups", []) if _is_worker_group(int(g)))
            path.unlink(missing_ok=True)
        _stop_groups(orphans, grace)
        return len(orphans)


def alive(pid: int) -> bool:
    """True while ``pid`` runs and is not a zombie (a reaped child is gone)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def _is_worker_group(pgid: int) -> bool:
    """True when a process of group ``pgid`` runs a Lookback dramatiq worker."""
    return any(WORKER_MARK in _cmdline(pid) for pid in group_members(pgid))


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``, read from /proc."""
    members = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _stop_groups(groups: list[int], grace: float) -> None:
    for pgid in groups:
        _signal_group(pgid, signal.SIGTERM)  # dramatiq's master stops its workers
    deadline = time.monotonic() + grace
    while groups and time.monotonic() < deadline:
        groups = [pgid for pgid in groups if group_members(pgid)]
        time.sleep(0.1)
    for pgid in groups:
        _signal_group(pgid, signal.SIGKILL)


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass

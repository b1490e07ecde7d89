"""Generate Pi session files from the fixtures' real text, for benchmarks.

Each generated session is a v3 file whose entries cycle through the real message
entries of the fixtures (user, assistant, tool results), re-chained into a linear
tree with fresh ids, so token statistics are those of real sessions.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "pi-sessions"


def real_messages() -> list[dict]:
    """The message entries of the two large real fixtures."""
    found = []
    for name in ("large-session.jsonl", "before-compaction.jsonl"):
        for line in (FIXTURES / name).read_text().splitlines():
            obj = json.loads(line)
            if obj.get("type") == "message":
                found.append(obj)
    return found


def write_corpus(folder: Path, sessions: int, entries_per_session: int,
                 cwd: str = "/bench/project", projects: int = 1,
                 compact_keep: float | None = None, pi_folders: bool = False) -> int:
    """Write ``sessions`` files of ``entries_per_session`` entries; return entries written.

    With ``compact_keep`` (say 0.1) each session ends with a compaction that keeps
    only that last fraction of its entries in context, as a long Pi session does.
    With ``pi_folders`` each project's sessions go in their own folder, named as Pi
    names it (``--work-app--``), so files of one project are read together.
    """
    folder.mkdir(parents=True, exist_ok=True)
    messages = real_messages()
    cursor = 0
    for number in range(sessions):
        session_id = str(uuid.UUID(int=number + 1))
        project = cwd if projects == 1 else f"{cwd}-{number % projects}"
        header = {"type": "session", "version": 3, "id": session_id,
                  "timestamp": "2026-01-01T00:00:00.000Z", "cwd": project}
        lines = [json.dumps(header)]
        parent = None
        for position in range(entries_per_session):
            entry = dict(messages[cursor % len(messages)])
            cursor += 1
            entry_id = f"{position:08x}"
            entry.update(id=entry_id, parentId=parent)
            parent = entry_id
            lines.append(json.dumps(entry))
        if compact_keep is not None:
            kept = f"{int(entries_per_session * (1 - compact_keep)):08x}"
            lines.append(json.dumps({
                "type": "compaction", "id": "c0000000", "parentId": parent,
                "timestamp": "2026-01-02T00:00:00.000Z", "summary": "Earlier work, summarized.",
                "firstKeptEntryId": kept, "tokensBefore": 100000}))
        target = folder / _pi_folder(project) if pi_folders else folder
        target.mkdir(exist_ok=True)
        (target / f"session-{number:05d}.jsonl").write_text("\n".join(lines) + "\n")
    return sessions * entries_per_session


def _pi_folder(cwd: str) -> str:
    return "--" + cwd.strip("/").replace("/", "-") + "--"

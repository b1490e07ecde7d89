"""A real ``lookback serve --page`` over the compacted e2e fixture session, and a real
headless Chromium (Debian's ``chromium`` and ``chromium-driver``, driven by selenium) to
look at it: for ``tests/page/test_page.py`` and ``python -m tests.page.screenshots``.

The session is ``tests/fixtures/pi-e2e/compacted-session.jsonl`` with two entries added
(``write_session``): an abandoned branch (``b2000001``) and, on the current branch before
the compaction, an assistant message holding a password (``c3000001``), so the tree has
a fork, the compaction removes three entries, and the privacy gate has one to withhold.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.server.client import Client
from tests.server.conftest import FIXTURE, PROMPT
from tests.server.processes import wait_until
from tests.support import index_paths

#: The added entries (the fixture's own keep their ids and text).
BRANCH_ID, SECRET_ID = "b2000001", "c3000001"
SECRET = "Horse.Battery.Staple"
SECRET_TEXT = (f"The AgentSession messages test loads AppMessage rows with "
               f"DB_PASSWORD={SECRET} from .env.")
BRANCH_TEXT = "Alternative: keep Message[] and convert at the edge?"
COMPACTION_ID = "a1000005"
REMOVED = ["a1000001", "a1000002", SECRET_ID]  # what the compaction took out of context
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def write_session(folder: Path, cwd: Path) -> Path:
    """The fixture session for ``cwd``, with the branch and the secret added."""
    out: list[dict[str, Any]] = []
    for line in FIXTURE.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if entry.get("type") == "session":
            entry["cwd"] = str(cwd)
        if entry.get("id") == "a1000003":
            out.append(_message(SECRET_ID, "a1000002", "assistant", SECRET_TEXT,
                                "2025-12-08T22:56:40.000Z"))
            entry["parentId"] = SECRET_ID
        out.append(entry)
        if entry.get("id") == "a1000002":
            out.append(_message(BRANCH_ID, "a1000002", "user", BRANCH_TEXT,
                                "2025-12-08T22:56:30.000Z"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "session.jsonl"
    path.write_text("".join(json.dumps(entry) + "\n" for entry in out), encoding="utf-8")
    return path


def _message(entry_id: str, parent: str, role: str, text: str, at: str) -> dict[str, Any]:
    return {"type": "message", "id": entry_id, "parentId": parent, "timestamp": at,
            "message": {"role": role, "content": [{"type": "text", "text": text}]}}


@dataclass
class Site:
    """A running ``lookback serve --page`` and what it serves."""

    home: Path
    session_file: Path
    project: str
    process: subprocess.Popen
    socket: str
    log: Path

    @property
    def reader(self) -> Client:
        """A new connection to the reader's socket (it closes idle ones after 5 s)."""
        return Client(self.socket)

    @property
    def login_url(self) -> str:
        """The current one-time login URL, as ``lookback serve --page-url`` prints it."""
        return json.loads((self.home / "page.json").read_text())["url"]

    @property
    def base(self) -> str:
        return self.login_url.split("/login", 1)[0]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


def start_site(root: Path) -> Site:
    """Index the session into a new home under ``root``, start the reader with its page,
    and answer one retrieval through the reader's socket (the manifest's record)."""
    home, cwd = root / "home", root / "project"
    home.mkdir(mode=0o700)
    cwd.mkdir()
    session_file = write_session(root / "sessions", cwd)
    report = index_paths(home, session_file)
    assert report.read.entries == 9
    (home / "none.toml").write_text("")
    environ = {**os.environ, "LOOKBACK_HOME": str(home),
               "LOOKBACK_CONFIG": str(home / "none.toml")}
    log = root / "serve.log"
    process = subprocess.Popen([sys.executable, "-m", "lookback.cli", "serve", "--page"],
                               env=environ, stdout=subprocess.PIPE, stderr=log.open("w"),
                               text=True)
    assert process.stdout is not None
    printed = process.stdout.readline()  # "Lookback page: URL", before it serves
    assert printed.startswith("Lookback page: http://127.0.0.1:"), log.read_text()

    def socket_path() -> str | None:
        for line in log.read_text().splitlines():
            if '"listening"' in line:
                return str(json.loads(line)["address"]).removeprefix("unix:")
        assert process.poll() is None, log.read_text()
        return None

    path = wait_until(socket_path, "the reader listening")
    reader = Client(path)
    status, answer, _ = reader.post("/v1/retrieve", {"session_file": str(session_file),
                                                     "message": PROMPT})
    assert status == 200 and [e["entry_id"] for e in answer["evidence"]] == \
        ["a1000002", "a1000001"], answer
    assert [e["entry_id"] for e in answer["excluded"]] == [SECRET_ID]
    return Site(home, session_file, _project(reader), process, path, log)


def _project(reader: Client) -> str:
    status, health, _ = reader.get("/v1/health")
    assert status == 200
    [project] = health["projects"]
    return str(project["project"])


def browser(width: int = 1100, height: int = 800) -> Any:
    """Headless Chromium from the distribution, driven by its own chromedriver (nothing is
    downloaded: both paths are given, so selenium's manager never runs)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", f"--window-size={width},{height}",
                     "--no-first-run", "--disable-extensions", "--disable-sync",
                     "--disable-background-networking", "--hide-scrollbars"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def have_browser() -> bool:
    return all(shutil.which(path) for path in (CHROMIUM, CHROMEDRIVER))


def wait_for(driver: Any, condition: Callable[[], Any], what: str,
             seconds: float = 30.0) -> Any:
    """``condition()``'s first truthy value, polled while the page renders."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            found = condition()
        except Exception:  # the element is not there yet
            found = None
        if found:
            return found
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)


def shown(driver: Any, view: str) -> bool:
    """The page finished rendering ``view`` (``document.body.dataset.view``)."""
    return driver.execute_script("return document.body.dataset.view") == view


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])

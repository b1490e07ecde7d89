"""The read-only web page in a real browser: ``lookback serve --page`` over the fixture
session (``tests.page.site``: a fork, a compaction that removed three entries, one of them
holding a password), signed in with its one-time URL in Debian's headless Chromium.

Each view renders the index's data; the password never reaches the page (the gate withholds
it in the tree, the search, the entry and the requests alike); a request without the
session cookie, a reused or guessed login link, another Unix user (uid 65534, ``setpriv``),
a foreign ``Host`` (DNS rebinding) or another page's ``Origin`` get nothing; the reader's
own API is not on the page's port; the log holds no token and no search term.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.server.conftest import SESSION_ID
from tests.support import as_another_user

from .site import (
    BRANCH_ID,
    BRANCH_TEXT,
    COMPACTION_ID,
    REMOVED,
    SECRET,
    SECRET_ID,
    Site,
    browser,
    shown,
    start_site,
    wait_for,
)

SEARCHED = "AgentSession messages AppMessage"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    started = start_site(tmp_path_factory.mktemp("page"))
    yield started
    started.stop()


@pytest.fixture(scope="module")
def driver(site: Site) -> Iterator[Any]:
    chromium = browser()
    chromium.get(site.login_url)  # signs in: the cookie, then the projects view
    yield chromium
    chromium.quit()


def open_view(driver: Any, site: Site, fragment: str, view: str) -> None:
    driver.get(f"{site.base}/{fragment}")
    wait_for(driver, lambda: shown(driver, view), f"the {view} view")


def texts(driver: Any, selector: str) -> list[str]:
    from selenium.webdriver.common.by import By

    return [node.text for node in driver.find_elements(By.CSS_SELECTOR, selector)]


def page_text(driver: Any) -> str:
    return str(driver.execute_script("return document.body.innerText"))


def test_projects_view_lists_the_project_and_its_session(driver, site):
    open_view(driver, site, "#/", "projects")
    text = page_text(driver)
    assert str(site.session_file.parent.parent / "project") in text
    assert site.project in text and SESSION_ID in text
    assert "9 entries" in text and "1 compaction" in text


def test_the_tree_marks_the_compaction_what_it_removed_and_the_fork(driver, site):
    from selenium.webdriver.common.by import By

    open_view(driver, site, f"#/session/{site.project}/{SESSION_ID}", "session")
    nodes = {node.get_attribute("data-entry"): node
             for node in driver.find_elements(By.CSS_SELECTOR, "li.node")}
    assert set(nodes) == {"a1000001", "a1000002", BRANCH_ID, SECRET_ID, "a1000003",
                          "a1000004", COMPACTION_ID, "a1000006", "a1000007"}
    removed = {entry for entry, node in nodes.items()
               if "removed" in node.get_attribute("class").split()}
    assert removed == set(REMOVED)
    for entry in REMOVED:
        assert f"removed by {COMPACTION_ID}" in nodes[entry].text
    compaction = nodes[COMPACTION_ID]
    assert "compaction" in compaction.get_attribute("class").split()
    assert "removed 3 entries" in compaction.text and "kept 2" in compaction.text
    assert [a.text for a in compaction.find_elements(By.CSS_SELECTOR, ".removedlist a")] \
        == REMOVED
    # The abandoned branch is drawn beneath its fork, off the current branch.
    assert nodes[BRANCH_ID].find_elements(By.XPATH, "ancestor::ul[contains(@class,'fork')]")
    assert "branch" not in nodes[BRANCH_ID].get_attribute("class").split()
    assert BRANCH_TEXT in nodes[BRANCH_ID].text
    assert "in context" in nodes["a1000007"].text and "in context" not in nodes["a1000001"].text
    # The password's entry: its place in the tree, never its text.
    assert "withheld (sensitive)" in nodes[SECRET_ID].text
    assert SECRET not in driver.page_source


def test_search_runs_the_history_search_and_withholds_the_secret(driver, site):
    from selenium.webdriver.common.by import By

    open_view(driver, site, f"#/search/{site.project}/{SESSION_ID}", "search")
    driver.find_element(By.NAME, "text").send_keys(SEARCHED)
    driver.find_element(By.NAME, "scope").send_keys("session")
    driver.find_element(By.CSS_SELECTOR, "form.search button").click()
    status = wait_for(driver, lambda: driver.find_element(By.ID, "search-status").text,
                      "the search results")
    # What `lookback search` answers for the same request, through the reader's socket.
    _, expected, _ = site.reader.post("/v1/search", {
        "text": SEARCHED, "project": site.project, "session_id": SESSION_ID,
        "scope": "session"})
    ids = [r["entry_id"] for r in expected["results"]]
    assert ids and "a1000002" in ids
    assert status == f"ok: {len(ids)} result(s), 1 withheld"
    shown_ids = [text.split(" ")[0] for text in texts(driver, ".card .meta:first-child")]
    assert shown_ids == ids
    assert [e["entry_id"] for e in expected["excluded"]] == [SECRET_ID]
    assert SECRET_ID in page_text(driver) and "sensitive" in page_text(driver)
    assert SECRET not in driver.page_source


def test_one_entry_in_full_and_a_withheld_one(driver, site):
    open_view(driver, site, f"#/entry/{site.project}/{SESSION_ID}/a1000002", "entry")
    text = page_text(driver)
    assert "The declaration merging in `messages.ts` extends `CustomMessages`" in text
    assert "Ready to start implementing WP1?" in text  # the whole entry, not an excerpt
    open_view(driver, site, f"#/entry/{site.project}/{SESSION_ID}/{SECRET_ID}", "entry")
    assert "withheld (sensitive)" in page_text(driver)
    assert SECRET not in driver.page_source


def test_requests_show_what_came_back_why_its_tokens_and_what_was_withheld(driver, site):
    from selenium.webdriver.common.by import By

    open_view(driver, site, f"#/requests/{site.project}/{SESSION_ID}", "requests")
    [record] = driver.find_elements(By.CSS_SELECTOR, ".card.request")
    assert "retrieval · ok" in record.text
    rows = record.find_elements(By.CSS_SELECTOR, "table.items tr")[1:]
    cells = [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")] for row in rows]
    status, manifest, _ = site.reader.get(f"/v1/manifest?session_id={SESSION_ID}")
    [recorded] = manifest["entries"]
    assert [c[0].split("\n")[0] for c in cells] == ["a1000002", "a1000001"]
    assert [int(c[2]) for c in cells] == [item["tokens"] for item in recorded["items"]]
    assert [c[3] for c in cells] == [item["reason"] for item in recorded["items"]]
    assert cells[0][3].startswith("exact identifier +100")
    assert cells[1][4] == "get messages(): Message[]; not AppMessage with our extension?"
    assert f"{recorded['tokens']} tokens" in record.text
    withheld = record.find_element(By.CSS_SELECTOR, "table.excluded").text
    assert SECRET_ID in withheld and "sensitive" in withheld and "privacy" in withheld
    assert SECRET not in driver.page_source


# -- who gets in ----------------------------------------------------------------------


def ask(site: Site, method: str, path: str, body: Any = None,
        headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    port = urlsplit(site.base).port
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    data = None if body is None else json.dumps(body).encode()
    sent = {"Content-Type": "application/json"} if data is not None else {}
    connection.request(method, path, body=data, headers={**sent, **(headers or {})})
    answer = connection.getresponse()
    found = (answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read())
    connection.close()
    return found


def sign_in(site: Site) -> str:
    """A new session cookie, with the current one-time link."""
    status, headers, _ = ask(site, "GET", urlsplit(site.login_url).path + "?"
                             + urlsplit(site.login_url).query)
    assert status == 303 and headers["location"] == "/"
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    return cookie.split(";")[0]


def test_without_the_cookie_nothing(site):
    tree = {"project": site.project, "session_id": SESSION_ID}
    for method, path, body in (("GET", "/", None), ("GET", "/page.js", None),
                               ("POST", "/api/projects", {}), ("POST", "/api/tree", tree),
                               ("POST", "/api/search", {**tree, "text": SEARCHED}),
                               ("POST", "/api/requests", {"session_id": SESSION_ID})):
        status, _, data = ask(site, method, path, body)
        assert status == 401, path
        assert site.project.encode() not in data and b"a1000002" not in data
        status, _, data = ask(site, method, path, body,
                              headers={"Cookie": "lookback_page=guessed-cookie"})
        assert status == 401, path


def test_a_login_link_works_once(site):
    link = urlsplit(site.login_url)
    cookie = sign_in(site)
    assert ask(site, "GET", f"{link.path}?{link.query}")[0] == 401  # used: nothing again
    assert ask(site, "GET", "/login?token=guessed")[0] == 401
    status, headers, data = ask(site, "POST", "/api/projects", {}, headers={"Cookie": cookie})
    assert status == 200 and site.project in json.loads(data)["projects"][0]["project"]
    assert "access-control-allow-origin" not in headers  # no CORS, ever
    status, headers, _ = ask(site, "GET", "/", headers={"Cookie": cookie})
    assert status == 200 and headers["content-security-policy"].startswith("default-src 'self'")
    assert headers["x-frame-options"] == "DENY"


def test_other_pages_and_other_hosts_are_refused(site):
    cookie = sign_in(site)
    port = urlsplit(site.base).port
    for extra, code in (({"Host": f"rebound.example:{port}"}, "forbidden-host"),
                        ({"Host": "localhost:1"}, "forbidden-host"),
                        ({"Origin": "http://evil.example"}, "forbidden-origin"),
                        ({"Origin": "null"}, "forbidden-origin"),
                        ({"Sec-Fetch-Site": "cross-site"}, "forbidden-origin"),
                        ({"Sec-Fetch-Site": "same-site"}, "forbidden-origin")):
        status, _, data = ask(site, "POST", "/api/projects", {},
                              headers={"Cookie": cookie, **extra})
        assert status == 403 and json.loads(data)["error"]["code"] == code, extra
    status, _, _ = ask(site, "POST", "/api/projects", None,
                       headers={"Cookie": cookie, "Content-Type": "text/plain"})
    assert status == 415  # what a cross-site form could send
    status, _, _ = ask(site, "POST", "/api/projects", {},
                       headers={"Cookie": cookie, "Origin": site.base})
    assert status == 200  # the page's own origin
    # The reader's API is not on the page's port, cookie or not.
    for path in ("/v1/health", "/v1/manifest?session_id=" + SESSION_ID, "/mcp"):
        assert ask(site, "GET", path, headers={"Cookie": cookie})[0] == 404


ANOTHER_USER = r"""
import http.client, json, sys
port, home, project, session = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
found = {}
try:
    open(home + "/page.json").read()
    found["token_file"] = "read"
except OSError as error:
    found["token_file"] = type(error).__name__
for method, path, body in (("GET", "/", None), ("GET", "/login?token=guess", None),
                           ("POST", "/api/projects", {}),
                           ("POST", "/api/tree", {"project": project, "session_id": session}),
                           ("POST", "/api/search", {"project": project, "text": "AgentSession"})):
    connection = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
    data = None if body is None else json.dumps(body).encode()
    connection.request(method, path, body=data,
                       headers={"Content-Type": "application/json"} if data else {})
    answer = connection.getresponse()
    found[path] = [answer.status, answer.read().decode("latin-1")]
print(json.dumps(found))
"""


def test_another_unix_user_gets_nothing(site):
    port = urlsplit(site.base).port
    done = subprocess.run(as_another_user(["/usr/bin/python3", "-c", ANOTHER_USER, str(port),
                                           str(site.home), site.project, SESSION_ID]),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found.pop("token_file") == "PermissionError"  # the 0700 data home
    for path, (status, body) in found.items():
        assert status == 401, path
        assert SESSION_ID not in body and "a1000002" not in body and "AgentSession" not in body


def test_page_url_prints_the_current_link_and_the_log_keeps_no_secret(site):
    printed = subprocess.run(
        [sys.executable, "-m", "lookback.cli", "--home", str(site.home), "serve", "--page-url"],
        capture_output=True, text=True, timeout=60, check=True,
        env={"PATH": "/usr/bin:/bin", "LOOKBACK_CONFIG": str(site.home / "none.toml")})
    assert printed.stdout.strip() == site.login_url
    assert (site.home / "page.json").stat().st_mode & 0o777 == 0o600
    log = site.log.read_text()
    token = urlsplit(site.login_url).query.removeprefix("token=")
    assert '"/api/search"' in log and '"/login"' in log  # requests are logged...
    assert token not in log and "AgentSession" not in log and SECRET not in log  # ...bare
    assert "token=" not in log


def test_page_assets_ship_in_the_package():
    from lookback.server.page import ASSETS, FILES

    assert all((ASSETS / name).is_file() for name, _ in FILES.values())
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert '"lookback.server" = ["static/*.html", "static/*.css", "static/*.js"]' in pyproject
    # Nothing fetched from elsewhere: no URL with a scheme in the page's files.
    for name, _ in FILES.values():
        text = (ASSETS / name).read_text()
        assert "http://" not in text and "https://" not in text and "//cdn" not in text


def test_page_only_serves_the_page_beside_a_reader_and_writes_nothing(tmp_path):
    """``serve --page-only``: the page for a data home whose reader already runs (started by
    the Pi extension or a hook), from a process that only reads."""
    home, cwd = tmp_path / "home", tmp_path / "project"
    home.mkdir(mode=0o700)
    cwd.mkdir()
    from tests.support import index_paths

    from .site import write_session

    session_file = write_session(tmp_path / "sessions", cwd)
    index_paths(home, session_file)
    (tmp_path / "none.toml").write_text("")
    before = {p: p.stat().st_mtime_ns for p in home.rglob("*.sqlite")}
    process = subprocess.Popen(
        [sys.executable, "-m", "lookback.cli", "--home", str(home), "serve", "--page-only",
         "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={"PATH": "/usr/bin:/bin", "LOOKBACK_CONFIG": str(tmp_path / "none.toml")})
    try:
        assert process.stdout is not None
        url = process.stdout.readline().removeprefix("Lookback page: ").strip()
        assert url == json.loads((home / "page.json").read_text())["url"]
        link = urlsplit(url)
        connection = http.client.HTTPConnection("127.0.0.1", link.port, timeout=30)
        connection.request("GET", f"{link.path}?{link.query}")
        answer = connection.getresponse()
        answer.read()
        cookie = answer.getheader("set-cookie", "").split(";")[0]
        assert answer.status == 303 and cookie
        connection.request("POST", "/api/tree", body=json.dumps(
            {"project": str(cwd), "session_id": SESSION_ID}),
            headers={"Content-Type": "application/json", "Cookie": cookie})
        answer = connection.getresponse()
        tree = json.loads(answer.read())
        assert answer.status == 200, tree
        assert [c["removed"] for c in tree["compactions"]] == [REMOVED]
        assert SECRET not in json.dumps(tree)
        connection.close()
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0
    assert not (home / "page.json").exists()  # its link goes with it
    assert before and {p: p.stat().st_mtime_ns for p in before} == before  # read only

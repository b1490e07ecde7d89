"""Screenshots of each view of the page for docs/page/ (``python -m tests.page.screenshots``).

Starts a real ``lookback serve --page`` over the fixture session (``tests.page.site``),
signs in with the one-time URL in headless Chromium and saves one PNG per view: the
projects, the session's tree, a search, one entry and the answered requests.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from selenium.webdriver.common.by import By

from tests.page.site import browser, shown, start_site, wait_for
from tests.server.conftest import SESSION_ID

DOCS = Path(__file__).resolve().parents[2] / "docs" / "page"


def main(out: Path = DOCS) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(prefix="lb-page-") as folder:
        site = start_site(Path(folder))
        driver = browser(960, 640)
        try:
            driver.get(site.login_url)
            wait_for(driver, lambda: shown(driver, "projects"), "the projects view")
            session = f"{site.project}/{SESSION_ID}"
            views = [("projects", None), ("session", f"#/session/{session}"),
                     ("search", f"#/search/{session}"),
                     ("entry", f"#/entry/{session}/a1000002"),
                     ("requests", f"#/requests/{session}")]
            for name, fragment in views:
                if fragment:
                    driver.get(f"{site.base}/{fragment}")
                    wait_for(driver, lambda name=name: shown(driver, name), f"the {name} view")
                if name == "search":
                    box = driver.find_element(By.NAME, "text")
                    box.send_keys("AgentSession messages AppMessage")
                    driver.find_element(By.NAME, "scope").send_keys("session")
                    driver.find_element(By.CSS_SELECTOR, "form.search button").click()
                    wait_for(driver, lambda: driver.find_element(By.ID, "search-status"),
                             "the search results")
                path = out / f"{name}.png"
                driver.save_screenshot(str(path))
                written.append(path)
        finally:
            driver.quit()
            site.stop()
    return written


if __name__ == "__main__":
    for path in main(Path(sys.argv[1]) if len(sys.argv) > 1 else DOCS):
        print(path)

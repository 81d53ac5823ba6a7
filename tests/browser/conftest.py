"""Browser tests: Debian's headless Chromium driven by Selenium through Debian's chromedriver.

Nothing is downloaded: the browser and driver come from the system packages `chromium` and
`chromium-driver` (`.ci/run` installs them). Without them these tests skip, or fail when
REQUIRE_BROWSER=1 (CI). Screenshots go to test-artifacts/ (git-ignored), one per `shot()`.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM = os.environ.get("CHROMIUM_BIN", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER_BIN", "/usr/bin/chromedriver")


def _missing(reason: str) -> None:
    if os.environ.get("REQUIRE_BROWSER") == "1":
        pytest.fail(f"browser tests required (REQUIRE_BROWSER=1) but {reason}")
    pytest.skip(reason)


def _gone(element: object) -> bool:
    """The element's page has been replaced. Chromium reports a node of an unloaded document
    either as stale or as "does not belong to the document" (a plain WebDriverException)."""
    from selenium.common.exceptions import WebDriverException

    try:
        element.tag_name  # type: ignore[attr-defined]
    except WebDriverException:
        return True
    return False


@pytest.fixture
def browser() -> Iterator[object]:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium is not installed")
    if not (Path(CHROMIUM).exists() or shutil.which("chromium")):
        _missing(f"{CHROMIUM} not found (apt-get install chromium chromium-driver)")
    if not Path(CHROMEDRIVER).exists():
        _missing(f"{CHROMEDRIVER} not found (apt-get install chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1000",
        "--lang=en-US",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.implicitly_wait(5)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def shot(request: pytest.FixtureRequest, browser: object):  # type: ignore[no-untyped-def]
    """shot("step") saves test-artifacts/<test>-<step>.png and returns its path."""
    ARTIFACTS.mkdir(exist_ok=True)
    test = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)

    def take(step: str) -> Path:
        path = ARTIFACTS / f"{test}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', step)}.png"
        browser.save_screenshot(str(path))  # type: ignore[attr-defined]
        return path

    return take


@pytest.fixture
def login(browser: object, live_server):  # type: ignore[no-untyped-def]
    """login(username, password) through the real admin login form, then lands on /review/."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def do(username: str, password: str = "pw-123456") -> None:
        browser.get(f"{live_server.url}/admin/login/?next=/review/")  # type: ignore[attr-defined]
        browser.find_element(By.NAME, "username").send_keys(username)  # type: ignore[attr-defined]
        browser.find_element(By.NAME, "password").send_keys(password)  # type: ignore[attr-defined]
        old = browser.find_element(By.TAG_NAME, "html")  # type: ignore[attr-defined]
        browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()  # type: ignore[attr-defined]
        WebDriverWait(browser, 20).until(lambda _b: _gone(old))

    return do


@pytest.fixture
def click_through(browser: object):  # type: ignore[no-untyped-def]
    """click_through(element): click something that loads a new page and wait until it has.

    Reading the page right after a click can read the old one (or a node that is going away:
    StaleElementReferenceException); waiting for the old <html> to go stale avoids both.
    """
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def do(element: object) -> None:
        old = browser.find_element(By.TAG_NAME, "html")  # type: ignore[attr-defined]
        element.click()  # type: ignore[attr-defined]
        WebDriverWait(browser, 20).until(lambda _b: _gone(old))
        WebDriverWait(browser, 20).until(
            lambda b: b.execute_script("return document.readyState") == "complete"
        )

    return do

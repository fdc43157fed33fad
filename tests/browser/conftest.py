"""Real Chromium (Debian's, via Playwright) against a real `gpufleet server` process.

Chromium is never downloaded: `make test` installs Debian's package when it is missing, and
Playwright drives `/usr/bin/chromium`. Screenshots land in `test-output/screenshots/`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    Page,
    Playwright,
    expect,
    sync_playwright,
)

from tests.e2e.conftest import ServerProcess, serving

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-output" / "screenshots"
LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """An orchestrator on SQLite with its embedded local worker."""
    yield from serving(tmp_path_factory.mktemp("orchestrator"), None, **{"local-gpus": "auto"})


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing; install Debian's package: apt-get install -y chromium "
            "(`make test` does)",
            pytrace=False,
        )
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright: Playwright, server: ServerProcess) -> Iterator[Browser]:
    browser = playwright.chromium.launch(
        executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
    )
    yield browser
    browser.close()


@pytest.fixture
def context(browser: Browser, server: ServerProcess) -> Iterator[BrowserContext]:
    """A fresh browser profile that may use the clipboard on the orchestrator's origin."""
    context = browser.new_context(viewport=LAPTOP, base_url=server.url)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.url)
    context.set_default_timeout(15_000)
    yield context
    context.close()


@pytest.fixture
def page(context: BrowserContext) -> Iterator[Page]:
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    assert errors == [], f"JavaScript errors on the page: {errors}"


def sign_in(page: Page, key: str, then: str = "/") -> None:
    page.goto(then)
    page.wait_for_url("**/signin**")
    page.fill("#api_key", key)
    page.click("form#signin button[type=submit]")
    page.wait_for_url(lambda url: "/signin" not in url)


def train_ready(page: Page) -> None:
    """Wait for the Train page's script, as a person waits for the example config to show:
    typed or clicked before it runs, the page has no handlers yet."""
    expect(page.locator("#config-json")).to_have_value(re.compile("gpufleet.examples.train"))


def screenshot(page: Page, name: str) -> Path:
    """The page as it is, into test-output/screenshots/NAME.png, when the run was asked for
    screenshots (`make screenshots` sets GPUFLEET_SCREENSHOTS=1): a full page's PNG costs
    Chromium a second of CPU, sixty of them a third of a minute of `make test`, which never
    looks at them."""
    path = SCREENSHOTS / f"{name}.png"
    if os.environ.get("GPUFLEET_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(path), full_page=True)
    return path

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
    Route,
    ViewportSize,
    expect,
    sync_playwright,
)
from playwright.sync_api import Error as PlaywrightError

from tests.e2e.conftest import ServerProcess, serving
from tests.migrated import migrated_sqlite

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
LAPTOP: ViewportSize = {"width": 1280, "height": 800}
KEPT = 2  # profiles: the package's server's and a module's own
PHONE: ViewportSize = {"width": 390, "height": 844}


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """An orchestrator on SQLite with its embedded local worker, shared by the browser modules
    a test process runs in a row (each names what it makes with `unique`); a module that needs
    other flags defines its own `server`.

    Its webhooks may reach tests/webhook_receiver.py on 127.0.0.1 (test_keys_and_webhooks: a
    server of its own cost a start). The example hosts are allowed by name, so saving one never
    waits on DNS: a CI machine's resolver that does not answer held a save for the server's
    whole 5 s lookup."""
    allowed = "127.0.0.1,hooks.example.com,hooks2.example.com"
    yield from serving(
        tmp_path_factory.mktemp("orchestrator"),
        None,
        **{"local-gpus": "auto", "webhook-allow-hosts": allowed},
    )


@pytest.fixture(scope="package")
def playwright() -> Iterator[Playwright]:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing; install Debian's package: apt-get install -y chromium "
            "(`make test` does)",
            pytrace=False,
        )
    # Servers copy this template as they start: made here, before Playwright's event loop runs in
    # this thread (its asyncio.run would refuse), for a module of its own `server` run alone.
    migrated_sqlite()
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="package")
def browser(playwright: Playwright) -> Iterator[Browser]:
    """One Chromium for the browser tests a test process runs in a row (Playwright's driver and
    Chromium cost two seconds of CPU a start, once per module before); each test still gets a
    fresh profile of its own (`context`). Package-scoped, not session-scoped: it is gone before
    the process goes on to other folders' tests, whose event loops it must not meet."""
    browser = playwright.chromium.launch(
        executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
    )
    yield browser
    browser.close()


@pytest.fixture(scope="package")
def profiles(browser: Browser) -> Iterator[dict[str, BrowserContext]]:
    """The browser profiles (each with its tab) a test process keeps, by the orchestrator they
    are on, the last KEPT used: a fresh profile a test cost Chromium a renderer process of its
    own and every script compiled again, 0.8 s of CPU a test (more than the test's pages)."""
    kept: dict[str, BrowserContext] = {}
    yield kept
    for context in kept.values():
        context.close()


def _profile(
    browser: Browser, server: ServerProcess, kept: dict[str, BrowserContext]
) -> BrowserContext:
    context = kept.pop(server.url, None)
    if context is None:
        while len(kept) >= KEPT:  # the one used least lately: often a module server, gone
            kept.pop(next(iter(kept))).close()
        context = browser.new_context(viewport=LAPTOP, base_url=server.url)
        context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.url)
        context.set_default_timeout(15_000)
    kept[server.url] = context  # the newest
    return context


def _emptied(context: BrowserContext, origin: str) -> bool:
    """The profile as a new one is, but for its cache and its tab: no route, no other tab, the
    tab on about:blank (no page of the test left running, as a live page whose session ended
    sends itself to sign in) at a laptop's size, no cookie, nothing stored for the site."""
    try:
        context.unroute_all(behavior="ignoreErrors")
        tab, *others = context.pages or [context.new_page()]
        for other in others:
            other.close()
        tab.unroute_all(behavior="ignoreErrors")
        tab.goto("about:blank")
        tab.set_viewport_size(LAPTOP)
        context.clear_cookies()
        storage = "local_storage,indexeddb,cache_storage,service_workers"
        cdp = context.new_cdp_session(tab)
        cdp.send("Storage.clearDataForOrigin", {"origin": origin, "storageTypes": storage})
        cdp.detach()
        return True
    except PlaywrightError:  # a tab a test left unusable: a new profile, then
        return False


def profile_on(
    browser: Browser, server: ServerProcess, kept: dict[str, BrowserContext]
) -> Iterator[BrowserContext]:
    """A fixture's kept profile on SERVER, emptied once the test is done with it."""
    context = _profile(browser, server, kept)
    yield context
    if not _emptied(context, server.url):
        kept.pop(server.url).close()


def tab_on(
    browser: Browser, server: ServerProcess, kept: dict[str, BrowserContext]
) -> Iterator[Page]:
    """The tab of a fixture's kept profile on SERVER (`profile_on`)."""
    for context in profile_on(browser, server, kept):
        yield context.pages[0] if context.pages else context.new_page()


@pytest.fixture
def context(
    browser: Browser, server: ServerProcess, profiles: dict[str, BrowserContext]
) -> Iterator[BrowserContext]:
    """A browser profile, emptied as new, that may use the clipboard on the orchestrator's
    origin. A test that listens to its page (`page.on`) stops listening before it ends."""
    yield from profile_on(browser, server, profiles)


@pytest.fixture
def page(context: BrowserContext) -> Iterator[Page]:
    page = context.pages[0] if context.pages else context.new_page()
    errors: list[str] = []

    def failed(exc: Exception) -> None:
        errors.append(str(exc))

    page.on("pageerror", failed)
    yield page
    page.remove_listener("pageerror", failed)
    assert errors == [], f"JavaScript errors on the page: {errors}"


def sign_in(page: Page, key: str, then: str = "/") -> None:
    """Signed in with KEY, on page THEN. The session comes from the sign-in route itself (the
    one the form posts to), through the page's own cookie jar; the form and its redirects are
    clicked by the tests of the sign-in page (`sign_in_by_form`), not before every test: two
    page loads fewer, a fifth of what a test costs Chromium."""
    signed = page.request.post("/ui/session", data={"api_key": key, "next": then})
    assert signed.ok, f"sign-in refused: {signed.status} {signed.text()}"
    page.goto(then)


def sign_in_by_form(page: Page, key: str, then: str = "/") -> None:
    """As a person signs in: open THEN, be sent to the sign-in page, type the key, submit."""
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


class HeldRequest:
    """The page's first request to `pattern`, held until `release()` (later ones go through):
    to show what a page does while a read has not come back yet."""

    def __init__(self, page: Page, pattern: str) -> None:
        self._page = page
        self._held: list[Route] = []
        page.route(pattern, self._hold_the_first)

    def _hold_the_first(self, route: Route) -> None:
        if self._held:
            route.continue_()
        else:
            self._held.append(route)

    def arrived(self, what: str) -> None:
        """Wait for the request (Playwright's events pump while the page waits)."""
        for _ in range(500):
            if self._held:
                return
            self._page.wait_for_timeout(20)
        raise AssertionError(f"{what} never came")

    def release(self) -> None:
        self.arrived("the held request")
        self._held[0].continue_()


@pytest.fixture(autouse=True)
def leaves_no_job_for_any_worker(request: pytest.FixtureRequest) -> Iterator[None]:
    """The shared server's next module may start a worker: a test that leaves a job queued
    which any worker would take (no labels asked) hands that worker work it never expected
    (a worker page then read "busy", not "idle"). Jobs meant to wait ask for a label nobody
    has: `{"pool": unique("none")}`."""
    yield
    if "server" not in request.fixturenames:
        return
    server: ServerProcess = request.getfixturevalue("server")
    with server.admin() as admin:
        queued = admin.get("/api/queue", params={"status": "queued", "limit": 500}).json()
    strays = [
        job["id"] for job in queued["jobs"] if not job["worker_labels"] and job["target"] != "local"
    ]
    assert not strays, f"left queued for any worker: {strays}; ask for a label nobody has"

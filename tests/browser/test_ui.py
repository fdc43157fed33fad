"""The web UI in Chromium, against a real orchestrator and a real worker process."""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
from playwright.sync_api import Browser, BrowserContext, Locator, Page, expect

from tests.browser.conftest import PHONE, screenshot, sign_in, sign_in_by_form, train_ready
from tests.e2e.conftest import GPUFLEET, ServerProcess, unique

TRAINING = {
    "command": [
        "python",
        "-m",
        "gpufleet.examples.train",
        "--backend",
        "numpy",  # not torch, now installed: importing it is seconds of CPU a job
        "--steps",
        "100",
        "--step-delay",
        "0.02",
    ],
    "env": {"PYTHONUNBUFFERED": "1"},
    "timeout_s": 120,
}


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Worker processes a test starts; killed at its end if still running."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def start_copied_command(
    command: str, work_dir: Path, processes: list[subprocess.Popen[bytes]]
) -> Path:
    """Run the command exactly as copied, with a work folder and a fast heartbeat added."""
    argv = shlex.split(command)
    assert argv[:2] == ["gpufleet", "worker"], command
    log_path = work_dir.with_suffix(".log")
    extra = ["--work-dir", str(work_dir), "--heartbeat-interval", "0.5"]
    with log_path.open("ab") as log:
        processes.append(
            subprocess.Popen([GPUFLEET, *argv[1:], *extra], stdout=log, stderr=subprocess.STDOUT)
        )
    return log_path


def worker_row(page: Page, name: str) -> Locator:
    return page.locator(f'#workers tr[data-worker="{name}"]')


def test_an_admin_runs_a_worker_and_a_job_from_the_browser(
    server: ServerProcess,
    page: Page,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    name = unique("browser")
    page.goto("/signin")
    screenshot(page, "signin")
    sign_in_by_form(page, server.admin_key)
    expect(page).to_have_url(f"{server.url}/workers")

    # Create Worker: the token and the command are shown once, and copied.
    page.click("#create-open")
    page.fill("#w-name", name)
    page.check("input[name=worker_type][value=persistent]")
    page.fill("#w-labels", "pool=browser\nlocation=lab")
    page.click("#create-form button[type=submit]")
    secret = page.locator("#secret")
    expect(secret).to_be_visible()
    expect(secret).to_contain_text("will not be shown again")
    token = page.locator("#secret-token").inner_text()
    assert token.startswith("wt_")
    screenshot(page, "workers-created")
    page.click("#copy-command")
    expect(page.locator("#copied")).to_have_text("Copied to the clipboard.")
    command = page.evaluate("navigator.clipboard.readText()")
    assert f"--worker-token {token}" in command and "--persistent" in command
    assert f"--orchestrator-url {server.url}" in command
    page.click("#secret-done")
    expect(page.locator("#secret-token")).to_have_text("")  # gone from the page
    row = worker_row(page, name)
    expect(row).to_have_attribute("data-status", "connecting")

    # The pasted command starts a real worker; the table turns idle without a reload.
    start_copied_command(command, tmp_path / name, processes)
    expect(row).to_have_attribute("data-status", "idle", timeout=20_000)
    expect(row.locator(".badge")).to_have_text("idle")
    expect(row).to_contain_text("pool=browser")
    expect(page.locator('[data-count="idle"] b')).to_have_text("2")  # ours and the local one

    # Train: store a config, then train it in the cloud on our worker.
    page.click("nav >> text=Train")
    train_ready(page)
    page.fill("#config-json", json.dumps(TRAINING, indent=2))
    page.fill("#config-name", "browser-training")
    page.click("#config-save")
    expect(page.locator("#config-status")).to_have_text("Saved browser-training.")
    expect(page.locator("#config-pick")).to_have_value("browser-training")
    page.check("input[name=target][value=worker]")
    page.fill("#labels", "pool=browser")
    screenshot(page, "train")
    page.click("#submit >> text=Train on a worker")
    page.wait_for_url("**/queue/j_*")
    job_id = page.url.rsplit("/", 1)[1]

    # The job page follows its logs and progress as they arrive, then shows it completed.
    expect(page.locator("#logs")).to_contain_text("step", timeout=20_000)
    expect(page.locator("#status .badge")).to_have_text("completed", timeout=30_000)
    expect(page.locator("#log-state")).to_have_text("ended: completed")
    expect(page.locator("#logs")).to_contain_text("step 100/100")
    expect(page.locator("#progress")).to_contain_text("100 / 100 (100%)")
    expect(page.locator("#metrics")).to_contain_text("accuracy")
    expect(page.locator("#attempts tbody tr")).to_have_count(1)
    expect(page.locator("#cancel")).to_be_hidden()
    screenshot(page, "job")
    with server.admin() as admin:
        job = admin.get(f"/api/queue/{job_id}").json()
    assert job["config_name"] == "browser-training"
    assert job["worker_labels"] == {"pool": "browser"}
    # The version of the stored config it ran, and who wrote it (#31).
    assert job["config_version"] == 1 and job["config_written_by"] == "admin"
    expect(page.locator("#config-ran")).to_have_text(
        f"browser-training v1 (sha256 {job['config_digest'][:8]}…) written by admin"
    )

    page.click("nav >> text=Queue")
    queued = page.locator(f'#jobs tr[data-job="{job_id}"]')
    expect(queued).to_have_attribute("data-status", "completed")
    expect(queued).to_contain_text(name)
    screenshot(page, "queue")

    page.click("nav >> text=Audit")
    # Typed only once the page's script has read its filters from the URL (it sets every
    # field), as a person would: on a loaded machine the script may start after the fill.
    expect(page.locator("#total")).to_contain_text("events")
    page.fill("#f-target", job_id)
    page.click("#filters button[type=submit]")
    expect(page.locator("#events tbody tr").first).to_contain_text(job_id)
    expect(page.locator("#events")).to_contain_text("job.status_changed")
    assert f"target={job_id}" in page.url
    screenshot(page, "audit")


def test_the_session_cookie_is_httponly_and_samesite_strict(
    server: ServerProcess, context: BrowserContext, page: Page
) -> None:
    sign_in(page, server.admin_key)

    cookies = {c["name"]: c for c in context.cookies()}

    assert cookies["gpufleet_session"]["httpOnly"] is True
    assert cookies["gpufleet_session"]["sameSite"] == "Strict"
    assert cookies["gpufleet_csrf"]["sameSite"] == "Strict"
    assert page.evaluate("document.cookie").count("gpufleet_session") == 0  # out of reach


def test_a_post_with_the_session_cookie_but_no_csrf_header_is_refused(
    server: ServerProcess, context: BrowserContext, page: Page
) -> None:
    sign_in(page, server.admin_key)
    body = {"name": unique("csrf")}

    refused = context.request.post("/api/admin/workers", data=body)
    csrf = next(c["value"] for c in context.cookies() if c["name"] == "gpufleet_csrf")
    allowed = context.request.post("/api/admin/workers", data=body, headers={"X-CSRF-Token": csrf})

    assert refused.status == 403
    assert "CSRF" in refused.json()["detail"]
    assert allowed.status == 201


# `next` as it travels in the sign-in page's query: each would lead a browser off the site
# were it followed as given (a browser drops tabs and newlines, and reads "\\" as "/").
OFFSITE_NEXT = [
    "%2F%09%2F127.0.0.2:18399/phish",
    quote("/\\evil.example", safe=""),
    "%2F%5Cevil.example",
    "/%0A/evil.example",
    "https://evil.example",
    "//evil.example",
    quote(" /\t/evil.example", safe=""),
    quote("/.//evil.example", safe=""),  # resolves to the path //evil.example, on this site
]


@pytest.mark.parametrize("javascript", [True, False], ids=["script", "form"])
def test_signing_in_never_leads_the_browser_off_the_site(
    server: ServerProcess, browser: Browser, request: pytest.FixtureRequest, javascript: bool
) -> None:
    """Each `next` signed in afresh (its cookies cleared) in one profile, not one a `next`:
    the tests' own (`page`), or one with scripts off."""
    if javascript:
        sign_in_to_each_offsite_next(server, request.getfixturevalue("page"))
        return
    context = browser.new_context(base_url=server.url, java_script_enabled=False)
    try:
        sign_in_to_each_offsite_next(server, context.new_page())
    finally:
        context.close()


def sign_in_to_each_offsite_next(server: ServerProcess, page: Page) -> None:
    """The page signed in to is left first: a live page (/workers) whose cookies are cleared
    sends itself to sign in at its next nudge (`test_a_live_page_whose_session_ends_...`), a
    navigation that interrupted the next `goto`. Where the browser goes is known once that
    navigation commits: the page it lands on is not waited for (nor its scripts and reads)."""
    for query in OFFSITE_NEXT:
        page.goto("about:blank")
        page.context.clear_cookies()
        page.goto(f"/signin?next={query}")
        page.fill("#api_key", server.admin_key)
        page.click("form#signin button[type=submit]")
        page.wait_for_url(lambda url: "/signin" not in url, wait_until="commit")
        ended = urlsplit(page.url)
        assert f"{ended.scheme}://{ended.netloc}" == server.url, (query, page.url)


def test_a_live_page_whose_session_ends_sends_the_browser_to_sign_in_and_back(
    server: ServerProcess, context: BrowserContext, page: Page
) -> None:
    """The page's next read after the session is gone (a nudge: the local worker's heartbeats
    come twice a second) is refused, and the page sends the browser to sign in, then back."""
    sign_in(page, server.admin_key, then="/workers")
    expect(page.locator("#live")).to_have_text("live")
    context.clear_cookies()
    page.wait_for_url(f"{server.url}/signin?next=%2Fworkers")
    page.fill("#api_key", server.admin_key)
    page.click("form#signin button[type=submit]")
    page.wait_for_url(f"{server.url}/workers")


def test_a_key_without_admin_workers_is_offered_the_fleet_but_not_the_workers_page(
    server: ServerProcess, page: Page
) -> None:
    with server.admin() as admin:
        minted = admin.post(
            "/api/admin/api-keys",
            json={"name": "trainer", "permissions": ["queue.read", "queue.submit"]},
        )
    sign_in(page, minted.json()["key"])

    expect(page).to_have_url(f"{server.url}/train")
    expect(page.locator("nav a")).to_have_text(
        ["Train", "Queue", "Sweeps", "Teams", "Fleet", "Capacity", "Secrets"]
    )
    page.goto("/workers")
    expect(page.locator("main")).to_contain_text("lacks the admin.workers permission")


def test_every_page_fits_a_phone_screen(server: ServerProcess, page: Page) -> None:
    """One session visits each page (a profile and a sign-in a page cost more than the page)."""
    page.set_viewport_size(PHONE)
    sign_in(page, server.admin_key, then="/workers")
    for path in ("/workers", "/train", "/queue", "/sweeps", "/audit"):
        if path != "/workers":
            page.goto(path)
        expect(page.locator("main")).not_to_contain_text("Loading…")

        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")

        assert overflow <= 0, f"{path} is {overflow} px wider than a phone screen"
        screenshot(page, f"phone-{path.strip('/')}")


def test_the_workers_page_names_queued_jobs_no_worker_can_run(
    server: ServerProcess, page: Page
) -> None:
    with server.admin() as admin:
        # The list looks at the 20 queued jobs at the head of the queue, and the browser tier's
        # server keeps what its files left queued: this one goes first.
        resp = admin.post(
            "/api/queue/submit",
            json={
                "config": {"model_type": "lora"},
                "worker_labels": {"zone": "pluto"},
                "priority": 1000,
            },
        )
        assert resp.status_code == 201, resp.text
        job_id = resp.json()["id"]
        summary = admin.get(f"/api/queue/{job_id}").json()["waiting"]["summaries"]["ui"]
    page.goto("/signin")
    sign_in(page, server.admin_key)
    item = page.locator(f'#unmatched li[data-job="{job_id}"]')
    expect(item).to_have_text(f"{job_id} waits: {summary}")
    assert "zone=pluto" in summary
    with server.admin() as admin:  # cancelled: the page drops it without a reload
        assert admin.post(f"/api/queue/{job_id}/cancel").status_code == 200
    expect(item).to_have_count(0)


def test_cancel_on_the_job_page_cancels_the_job(server: ServerProcess, page: Page) -> None:
    """Clicked through to its effect, checked through the API (#15.1: the button read
    `event.currentTarget` after the confirmation, when it is null, and sent nothing)."""
    with server.admin() as admin:
        resp = admin.post(
            "/api/queue/submit",
            json={"config": {"model_type": "lora"}, "worker_labels": {"zone": "neptune"}},
        )
        assert resp.status_code == 201, resp.text
        job_id = resp.json()["id"]
    sign_in(page, server.admin_key, then=f"/queue/{job_id}")
    page.click("#cancel")
    expect(page.locator("#confirm")).to_contain_text(f"Cancel {job_id}?")
    page.click("#confirm-yes")
    expect(page.locator("#cancel")).to_be_hidden()
    expect(page.locator("#error")).to_be_hidden()
    with server.admin() as admin:
        job = admin.get(f"/api/queue/{job_id}").json()
    assert job["status"] == "cancelled", job

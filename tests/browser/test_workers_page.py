"""The Workers page in Chromium: what it says about each worker, and every action clicked
through its confirmation to its effect, checked through the API (#15.1, #15.3, #15.9, #15.12).
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Page, expect

from tests.browser.conftest import PHONE, screenshot, sign_in
from tests.browser.test_ui import processes, start_copied_command, worker_row
from tests.e2e.conftest import ServerProcess, unique

__all__ = ["processes"]  # the fixture, shared with test_ui


def worker(server: ServerProcess, name: str) -> dict[str, Any]:
    with server.admin() as admin:
        listed = admin.get("/api/admin/workers").json()["workers"]
    (found,) = [w for w in listed if w["name"] == name]
    return found


def copy(page: Page, button: str) -> None:
    page.click(button)
    expect(page.locator("#copied")).to_have_text("Copied to the clipboard.")


def create_in_the_dialog(page: Page, name: str, *, persistent: bool = True) -> str:
    """Create Worker filled in and submitted; the token it shows, once."""
    page.click("#create-open")
    page.fill("#w-name", name)
    page.check(f"input[name=worker_type][value={'persistent' if persistent else 'ephemeral'}]")
    page.click("#create-form button[type=submit]")
    expect(page.locator("#secret")).to_be_visible()
    token = page.locator("#secret-token").inner_text()
    assert token.startswith("wt_")
    return token


def test_a_worker_is_created_run_drained_rotated_and_deleted_through_each_confirmation(
    server: ServerProcess,
    page: Page,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    name = unique("retire")
    sign_in(page, server.admin_key, then="/workers")
    token = create_in_the_dialog(page, name)
    copy(page, "#copy-command")
    command = page.evaluate("navigator.clipboard.readText()")
    page.click("#secret-done")  # copied: it closes at once
    expect(page.locator("#secret")).to_be_hidden()

    # Never started: it says so, with no uptime (#15.3).
    row = worker_row(page, name)
    expect(row).to_have_attribute("data-presence", "never_connected")
    expect(row.locator(".badge")).to_have_text("never connected")
    expect(row.locator('[data-label="Uptime"]')).to_have_text("—")

    start_copied_command(command, tmp_path / name, processes)
    expect(row).to_have_attribute("data-status", "idle", timeout=20_000)
    expect(row.locator('[data-label="Uptime"] [data-since]')).to_have_count(1)
    screenshot(page, "workers")

    # Drain, through its confirmation.
    row.locator("[data-action=drain]").click()
    expect(page.locator("#confirm")).to_contain_text(f"Drain {name}?")
    page.click("#confirm-yes")
    expect(row).to_have_attribute("data-status", "draining")
    assert worker(server, name)["drained"] is True
    expect(row.locator("[data-action=delete]")).to_have_count(0)  # it is connected

    # Rotate token: the old token is refused, the new one accepted, and the page says the
    # worker is awaited instead of "connecting" with a running uptime (#15.3).
    row.locator("[data-action=rotate]").click()
    expect(page.locator("#confirm")).to_contain_text(f"Rotate the token of {name}?")
    page.click("#confirm-yes")
    expect(page.locator("#secret")).to_be_visible()
    rotated = page.locator("#secret-token").inner_text()
    assert rotated.startswith("wt_") and rotated != token
    expect(page.locator("#secret-command")).to_contain_text(f"--orchestrator-url {server.url}")
    copy(page, "#copy-token")
    assert page.evaluate("navigator.clipboard.readText()") == rotated
    page.click("#secret-done")
    expect(page.locator("#secret")).to_be_hidden()
    expect(row).to_have_attribute("data-presence", "token_rotated", timeout=20_000)
    expect(row.locator(".badge")).to_have_text("token rotated, waiting for the worker")
    expect(row.locator('[data-label="Uptime"]')).to_have_text("—")
    screenshot(page, "workers-token-rotated")
    old = httpx.post(
        f"{server.url}/api/workers/heartbeat", headers={"X-Worker-Token": token}, json={}
    )
    assert old.status_code == 401
    new = httpx.post(
        f"{server.url}/api/workers/register",
        headers={"X-Worker-Token": rotated},
        json={"name": name, "gpu_count": 0},
    )
    assert new.status_code == 200, new.text
    assert new.json()["worker_id"] == worker(server, name)["id"]
    processes[0].kill()  # the agent that held the old token, if it has not exited

    # Delete, once it is offline (silent past the heartbeat timeout).
    expect(row).to_have_attribute("data-status", "offline", timeout=20_000)
    row.locator("[data-action=delete]").click()
    expect(page.locator("#confirm")).to_contain_text(f"Delete {name}?")
    page.click("#confirm-yes")
    expect(row).to_have_count(0)
    with server.admin() as admin:
        names = [w["name"] for w in admin.get("/api/admin/workers").json()["workers"]]
    assert name not in names


def test_drain_asks_first_and_cancel_leaves_the_worker_taking_jobs(
    server: ServerProcess, page: Page
) -> None:
    """#15.9: one click drained a worker, though the README promised a confirmation."""
    sign_in(page, server.admin_key, then="/workers")
    row = worker_row(page, "local")
    expect(row).to_have_attribute("data-status", "idle", timeout=20_000)

    row.locator("[data-action=drain]").click()
    expect(page.locator("#confirm")).to_contain_text("Drain local?")
    expect(page.locator("#confirm")).to_contain_text("takes no new jobs until you undrain it")
    page.locator("#confirm [data-close]").click()
    expect(page.locator("#confirm")).to_be_hidden()
    assert worker(server, "local")["drained"] is False
    row.locator("[data-action=drain]").click()
    page.click("#confirm-yes")
    expect(row).to_have_attribute("data-status", "draining")
    assert worker(server, "local")["drained"] is True
    row.locator("[data-action=undrain]").click()  # undoing a drain needs no confirmation
    expect(row).to_have_attribute("data-status", "idle")
    assert worker(server, "local")["drained"] is False


def test_the_token_dialog_does_not_lose_an_uncopied_token_to_esc_or_done(
    server: ServerProcess, page: Page
) -> None:
    sign_in(page, server.admin_key, then="/workers")
    token = create_in_the_dialog(page, unique("esc"))
    secret = page.locator("#secret")
    unsaved = page.locator("#secret-unsaved")

    page.keyboard.press("Escape")
    expect(unsaved).to_be_visible()
    expect(unsaved).to_contain_text("You have not copied the token; close anyway?")
    expect(secret).to_be_visible()
    expect(page.locator("#secret-token")).to_have_text(token)
    screenshot(page, "workers-token-unsaved")
    page.click("#secret-keep")
    expect(unsaved).to_be_hidden()
    expect(secret).to_be_visible()

    page.click("#secret-done")
    expect(unsaved).to_be_visible()
    page.click("#secret-discard")
    expect(secret).to_be_hidden()
    expect(page.locator("#secret-token")).to_have_text("")  # gone from the page

    create_in_the_dialog(page, unique("esc"))
    copy(page, "#copy-command")
    page.keyboard.press("Escape")  # copied: Esc closes it
    expect(secret).to_be_hidden()

    create_in_the_dialog(page, unique("esc"))
    page.locator("#secret-token").select_text()
    page.keyboard.press("Control+C")  # copied by hand, as when the clipboard is refused
    page.keyboard.press("Escape")
    expect(secret).to_be_hidden()


def test_create_worker_pastes_the_address_the_operator_picks_and_a_command_that_runs_here(
    server: ServerProcess, page: Page
) -> None:
    sign_in(page, server.admin_key, then="/workers")
    with server.admin() as admin:
        where = admin.get("/api/admin/orchestrator").json()
    assert where["public_url"] == server.url  # --host 127.0.0.1: reached on this machine only
    page.click("#create-open")
    expect(page.locator("#w-url")).to_have_value(server.url)
    expect(page.locator("#w-urls option").first).to_have_attribute("value", server.url)
    expect(page.locator("#w-url-hint")).to_contain_text("--host 0.0.0.0")
    page.fill("#w-name", unique("addr"))

    page.fill("#w-url", "ftp://gpu-head:8001")
    page.click("#create-form button[type=submit]")
    expect(page.locator("#create-error")).to_contain_text("must be an http(s) URL")
    page.fill("#w-url", "http://10.20.30.40:9000/")
    page.click("#create-form button[type=submit]")
    expect(page.locator("#secret")).to_be_visible()

    command = page.locator("#secret-command")
    expect(command).to_contain_text("--orchestrator-url http://10.20.30.40:9000 ")
    assert shlex.split(command.inner_text())[:2] == ["gpufleet", "worker"]
    page.check("input[name=run_with][value=here]")
    here = shlex.split(command.inner_text())
    assert here[0] == where["gpufleet"] and here[1] == "worker"
    assert Path(here[0]).is_absolute() and Path(here[0]).is_file()
    expect(page.locator("#own-gpufleet")).to_have_text(where["gpufleet"])
    screenshot(page, "workers-create-command")
    copy(page, "#copy-command")
    page.click("#secret-done")

    # The address chosen is kept for the next worker (and for Rotate token).
    page.click("#create-open")
    expect(page.locator("#w-url")).to_have_value("http://10.20.30.40:9000")


def sideways(page: Page, dialog: str) -> tuple[int, int]:
    """How far the page, and the dialog, scroll sideways (0 or less: not at all)."""
    return (
        page.evaluate("document.documentElement.scrollWidth - window.innerWidth"),
        page.evaluate(f"(d => d.scrollWidth - d.clientWidth)(document.querySelector('{dialog}'))"),
    )


def test_the_create_and_token_dialogs_fit_a_phone_screen(server: ServerProcess, page: Page) -> None:
    page.set_viewport_size(PHONE)
    sign_in(page, server.admin_key, then="/workers")
    page.click("#create-open")
    expect(page.locator("#w-url-hint")).not_to_be_empty()
    created = sideways(page, "#create")
    screenshot(page, "phone-workers-create")
    page.click("#create [data-close]")
    create_in_the_dialog(page, unique("phone"))
    page.check("input[name=run_with][value=here]")
    page.click("#secret-done")
    expect(page.locator("#secret-unsaved")).to_be_visible()

    token = sideways(page, "#secret")
    screenshot(page, "phone-workers-token")

    assert max(created) <= 0, created
    assert max(token) <= 0, token


def test_at_390_px_a_workers_labels_sit_side_by_side_beside_their_caption(
    server: ServerProcess, page: Page
) -> None:
    """#33.9: a worker's second label chip sat under the "Labels" caption, in its column."""
    name = unique("chips")
    with server.admin() as admin:
        made = admin.post(
            "/api/admin/workers", json={"name": name, "labels": {"zone": "eu1", "rack": "r12"}}
        )
        assert made.status_code == 201, made.text
        listed = admin.get(f"/api/admin/workers/{made.json()['worker_id']}").json()
    assert listed["labels"] == {"zone": "eu1", "rack": "r12"}
    page.set_viewport_size(PHONE)
    sign_in(page, server.admin_key, then="/workers")
    chips = page.locator(f'tr:has(a:text-is("{name}")) td[data-label=Labels] .label')
    expect(chips).to_have_count(2)
    # Measured in one go: the live page may draw its rows again between two reads.
    first, second = chips.evaluate_all(
        "cs => cs.map(c => { const r = c.getBoundingClientRect(); return [r.x, r.y, r.width]; })"
    )
    assert abs(first[1] - second[1]) < 2, (first, second)  # on one line
    assert second[0] >= first[0] + first[2], (first, second)

"""Administration → API keys and → Webhooks in Chromium, each effect checked through the API.

On the shared server (tests/browser/conftest.py), which lets webhooks reach 127.0.0.1; a test
leaves no webhook behind (`no_webhook_left`): the next expects none, and one left would hear
the jobs of the modules after this one."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from gpufleet.domain.webhook_targets import redact_url
from tests.browser.conftest import LAPTOP, PHONE, HeldRequest, screenshot, sign_in
from tests.browser.test_sharing import admin_call, held_job, job, sign_out, user_with_key
from tests.e2e.conftest import ServerProcess, unique
from tests.webhook_receiver import Receiver, receiving


@pytest.fixture(autouse=True)
def no_webhook_left(server: ServerProcess) -> Iterator[None]:
    yield
    with server.admin() as admin:
        for hook in admin.get("/api/admin/webhooks").json()["webhooks"]:
            assert admin.delete(f"/api/admin/webhooks/{hook['id']}").status_code == 200


def as_key(server: ServerProcess, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"})


def test_an_admin_creates_a_key_copies_it_uses_it_and_revokes_it(
    server: ServerProcess, page: Page
) -> None:
    sign_in(page, server.admin_key, then="/keys")
    expect(page).to_have_url(f"{server.url}/keys")
    own = page.locator('#keys tr[data-key="admin"]')
    expect(own).to_contain_text("this session")
    expect(own.locator("[data-action=revoke]")).to_have_count(0)  # refused: see the API test

    # The dialog opens with its users' list in place: it once opened first, and the list,
    # coming a moment later, moved Create down under a click on its way (a click that fell on
    # nothing, failing this test on a busy machine). The users' read is held to show it.
    users_read = HeldRequest(page, "**/api/users")
    page.click("#key-create-open")
    users_read.arrived("Create API key's read of the users")
    expect(page.locator("#key-create")).to_be_hidden()
    users_read.release()
    expect(page.locator("#k-user-box")).to_be_visible()
    expect(page.locator("#key-create")).to_be_visible()
    page.click("#key-form button[type=submit]")
    expect(page.locator("#key-create-error")).to_have_text(
        "Give the key a name, such as nightly-ci."
    )
    page.fill("#k-name", "nightly-ci")
    expect(page.locator("#key-form")).to_contain_text("submit and cancel jobs")
    page.check("#key-form input[value='queue.read']")
    page.click("#key-form button[type=submit]")
    secret = page.locator("#key-secret")
    expect(secret).to_be_visible()
    expect(secret).to_contain_text("will not be shown again")
    key = page.locator("#key-value").inner_text()
    assert key.startswith("gfk_")
    screenshot(page, "api-key-created")

    # Esc before copying asks first; staying keeps the key on screen.
    page.keyboard.press("Escape")
    expect(page.locator("#confirm")).to_be_visible()
    expect(page.locator("#confirm-title")).to_have_text("Close without copying the key?")
    page.locator("#confirm [data-close]").click()
    expect(secret).to_be_visible()
    expect(page.locator("#key-value")).to_have_text(key)

    page.click("#key-copy")
    expect(page.locator("#key-copied")).to_have_text("Copied to the clipboard.")
    assert page.evaluate("navigator.clipboard.readText()") == key
    page.click("#key-done")
    expect(secret).to_be_hidden()
    expect(page.locator("#key-value")).to_have_text("")  # gone from the page

    row = page.locator('#keys tr[data-key="nightly-ci"]')
    expect(row).to_contain_text("queue.read")
    expect(row).not_to_contain_text(key)
    expect(row.locator('[data-label="Last used"]')).to_have_text("never")
    with as_key(server, key) as client:
        assert client.get("/api/queue").status_code == 200
        assert client.post("/api/queue/submit", json={"config": {}}).status_code == 403
    page.reload()
    expect(row.locator('[data-label="Last used"]')).to_contain_text("ago")
    screenshot(page, "api-keys")

    row.locator("[data-action=revoke]").click()
    expect(page.locator("#confirm-title")).to_have_text("Revoke nightly-ci?")
    page.click("#confirm-yes")
    expect(row).to_have_attribute("data-revoked", "true")
    expect(row.locator(".badge")).to_have_text("revoked")
    with as_key(server, key) as client:
        assert client.get("/api/queue").status_code == 401


def test_an_admin_adds_a_webhook_sends_a_test_and_deletes_it(
    server: ServerProcess, page: Page
) -> None:
    secret = "browser-hook-secret"
    with receiving() as receiver:
        sign_in(page, server.admin_key, then="/webhooks")
        page.fill("#h-url", "ftp://hooks.example.com/x")
        page.click("#hook-add")
        expect(page.locator("#h-url-error")).to_contain_text("http:// or https://")
        page.fill("#h-url", "https://hooks.example.com:99999/")  # the server's check
        page.click("#hook-add")
        expect(page.locator("#h-url-error")).to_contain_text("check its host and port")
        page.fill("#h-url", "http://169.254.169.254/latest/meta-data/")  # the cloud's keys
        page.click("#hook-add")
        expect(page.locator("#h-url-error")).to_contain_text("--webhook-allow-hosts")
        page.fill("#h-url", receiver.url)
        page.fill("#h-secret", "too-short")
        page.click("#hook-add")
        expect(page.locator("#hook-error")).to_contain_text("at least 16")
        with server.admin() as admin:
            assert admin.get("/api/admin/webhooks").json()["webhooks"] == []

        page.fill("#h-url", receiver.url)
        page.fill("#h-secret", secret)
        page.check("#hook-form input[value='worker.lost']")
        page.click("#hook-add")
        card = page.locator("section.hook")
        expect(card).to_have_count(1)
        shown = redact_url(receiver.url)  # its path (and query, userinfo) may be a secret
        expect(card.locator(".hook-url")).to_have_text(shown)
        expect(card).to_contain_text("signed with its secret")
        expect(page.locator("#h-secret")).to_have_value("")  # the form forgets it
        with server.admin() as admin:
            [hook] = admin.get("/api/admin/webhooks").json()["webhooks"]
        assert hook["url"] == shown and hook["signed"] is True
        assert hook["events"] == ["job.failed", "worker.lost"]

        card.locator("[data-action=test]").click()
        delivered = card.locator('tr[data-event="test"]')
        expect(delivered).to_have_attribute("data-status", "delivered", timeout=10_000)
        expect(delivered).to_contain_text("answered 200")
        [request] = receiver.wait_for(1)
        expected = "sha256=" + hmac.new(secret.encode(), request.body, hashlib.sha256).hexdigest()
        assert request.headers["x-gpufleet-signature"] == expected
        assert json.loads(request.body)["event"] == "test"
        with server.admin() as admin:
            [logged] = admin.get(f"/api/admin/webhooks/{hook['id']}/deliveries").json()[
                "deliveries"
            ]
        assert logged["status"] == "delivered" and logged["attempts"] == 1
        screenshot(page, "webhooks")

        card.locator("[data-action=delete]").click()
        page.click("#confirm-yes")
        expect(card).to_have_count(0)
        with server.admin() as admin:
            assert admin.get("/api/admin/webhooks").json()["webhooks"] == []


def test_an_admin_edits_a_webhooks_url_events_and_secret(server: ServerProcess, page: Page) -> None:
    """Webhooks could only be deleted and added again (a new id, the log lost)."""
    with server.admin() as admin:
        resp = admin.post(
            "/api/admin/webhooks",
            json={
                "url": "https://hooks.example.com/a",
                "events": ["job.failed"],
                "secret": "first-secret-of-16",
            },
        )
        assert resp.status_code == 201, resp.text
    hook = resp.json()

    def stored() -> dict[str, object]:
        with server.admin() as admin:
            [found] = [
                h
                for h in admin.get("/api/admin/webhooks").json()["webhooks"]
                if h["id"] == hook["id"]
            ]
        return dict(found)

    sign_in(page, server.admin_key, then="/webhooks")
    card = page.locator(f'section.hook[data-webhook="{hook["id"]}"]')
    card.locator("[data-action=edit]").click()
    dialog = page.locator("#hook-edit")
    expect(dialog).to_be_visible()
    expect(page.locator("#e-url")).to_have_value("")  # never sent back whole
    expect(page.locator("#e-url")).to_have_attribute(
        "placeholder", "Unchanged: https://hooks.example.com/…"
    )
    expect(dialog.locator("input[value='job.failed']")).to_be_checked()

    page.fill("#e-url", "https://hooks.example.com:99999/")  # the server's check
    dialog.locator("input[value='job.failed']").uncheck()
    page.click("#hook-save")
    expect(dialog.locator("[data-error-for=events]")).to_contain_text("Tick at least one event")
    dialog.locator("input[value='worker.lost']").check()
    dialog.locator("input[name=secret_mode][value=new]").check()
    page.click("#hook-save")
    expect(dialog.locator("[data-error-for=secret]")).to_contain_text("Type the new secret")
    dialog.locator("input[name=secret_mode][value=none]").check()
    page.click("#hook-save")
    expect(dialog.locator("[data-error-for=url]")).to_contain_text("check its host and port")
    assert stored() == hook  # nothing was changed by the refused saves

    page.fill("#e-url", "https://hooks2.example.com/b")
    screenshot(page, "webhook-edit")
    page.click("#hook-save")
    expect(dialog).to_be_hidden()
    expect(card.locator(".hook-url")).to_have_text("https://hooks2.example.com/…")
    expect(card).to_contain_text("not signed")
    after = stored()
    assert (after["url"], after["events"], after["signed"]) == (
        "https://hooks2.example.com/…",
        ["worker.lost"],
        False,
    )
    assert after["id"] == hook["id"] and after["created_at"] == hook["created_at"]

    card.locator("[data-action=edit]").click()  # a new secret, typed: chosen by typing it
    page.fill("#e-secret", "second-secret-of-16")
    page.click("#hook-save")
    expect(card).to_contain_text("signed with its secret")
    assert stored()["signed"] is True
    with server.admin() as admin:
        audit = admin.get("/api/audit", params={"type": "webhook.updated", "target": hook["id"]})
    assert [e["detail"] for e in audit.json()["events"]] == [
        {"signed": True},
        {"url": "https://hooks2.example.com/…", "events": ["worker.lost"], "signed": False},
    ]


def test_the_keys_and_webhooks_pages_fit_a_phone_and_a_laptop(
    server: ServerProcess, page: Page
) -> None:
    sign_in(page, server.admin_key, then="/keys")
    for path in ("/keys", "/webhooks"):
        if path != "/keys":
            page.goto(path)
        expect(page.locator("main")).not_to_contain_text("Loading…")
        expect(page.locator("nav a")).to_contain_text(["API keys", "Webhooks"])
        for size in (PHONE, LAPTOP, {"width": 1440, "height": 900}):
            page.set_viewport_size(size)
            overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, f"{path} is {overflow} px too wide at {size['width']} px"
        page.set_viewport_size(PHONE)
        screenshot(page, f"phone-{path.strip('/')}")


def test_a_delivery_made_elsewhere_shows_on_the_webhooks_page_without_a_reload(
    server: ServerProcess, page: Page
) -> None:
    """#33.10: the deliveries were not live; a delivery the page had not asked for never showed."""
    with receiving() as receiver, server.admin() as admin:
        made = admin.post(
            "/api/admin/webhooks", json={"url": receiver.url, "events": ["job.failed"]}
        )
        assert made.status_code == 201, made.text
        hook = made.json()["id"]
        sign_in(page, server.admin_key, then="/webhooks")
        expect(page.locator("#live")).to_have_text("live")
        card = page.locator(f'section.hook[data-webhook="{hook}"]')
        expect(card).to_contain_text("No deliveries yet")

        sent = admin.post(f"/api/admin/webhooks/{hook}/test")  # not through this page
        assert sent.status_code < 300, sent.text
        receiver.wait_for(1)
        row = card.locator('tr[data-event="test"]')
        expect(row).to_have_attribute("data-status", "delivered")
        [logged] = admin.get(f"/api/admin/webhooks/{hook}/deliveries").json()["deliveries"]
        assert logged["status"] == "delivered"
        expect(row).to_have_attribute("data-delivery", logged["id"])
        assert admin.delete(f"/api/admin/webhooks/{hook}").status_code == 200


WIDE = {"width": 1440, "height": 900}
SIZES = [WIDE, PHONE]


def webhooks_now(server: ServerProcess) -> list[dict[str, Any]]:
    with server.admin() as admin:
        found: list[dict[str, Any]] = admin.get("/api/admin/webhooks").json()["webhooks"]
    return found


def delete_webhook(server: ServerProcess, webhook_id: str) -> None:
    """Other tests of this module's server expect no webhook of theirs to find."""
    with server.admin() as admin:
        assert admin.delete(f"/api/admin/webhooks/{webhook_id}").status_code == 200


def test_an_admin_chooses_slack_then_discord_and_the_receiver_gets_each_shape(
    server: ServerProcess, page: Page
) -> None:
    """At 1440 px; the page, with its card, is then measured at a phone's width too (the flow
    once, not once a width: the widths differ in layout only)."""
    with receiving() as receiver:
        page.set_viewport_size(WIDE)
        sign_in(page, server.admin_key, then="/webhooks")
        page.fill("#h-url", receiver.url)
        page.select_option("#h-format", "slack")
        page.check("#hook-form input[value='job.rejected']")
        page.click("#hook-add")
        shown = redact_url(receiver.url)  # this receiver's port: none of another test's
        expect(page.locator("section.hook .hook-url", has_text=shown)).to_have_count(1)
        [hook] = [h for h in webhooks_now(server) if h["url"] == shown]
        card = page.locator(f'section.hook[data-webhook="{hook["id"]}"]')
        expect(card.locator(".hook-format")).to_have_text("slack")
        try:
            assert hook["format"] == "slack" and "job.rejected" in hook["events"]
            card.locator("[data-action=test]").click()
            [to_slack] = receiver.wait_for(1)
            said = json.loads(to_slack.body)
            assert set(said) == {"text", "blocks"} and said["text"].startswith("gpufleet: ")

            card.locator("[data-action=edit]").click()
            expect(page.locator("#e-format")).to_have_value("slack")
            page.select_option("#e-format", "discord")
            page.click("#hook-save")
            expect(card.locator(".hook-format")).to_have_text("discord")
            assert [h["format"] for h in webhooks_now(server) if h["id"] == hook["id"]] == [
                "discord"
            ]
            card.locator("[data-action=test]").click()
            _, to_discord = receiver.wait_for(2)
            posted = json.loads(to_discord.body)
            assert posted["content"].startswith("gpufleet: A test event")
            assert posted["allowed_mentions"] == {"parse": []}
            for size in SIZES:
                page.set_viewport_size(size)
                overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
                assert overflow <= 0, f"/webhooks is {overflow} px too wide at {size['width']} px"
        finally:
            delete_webhook(server, hook["id"])


def test_a_submitter_hears_and_sees_that_a_lead_rejected_or_approved_their_job(
    server: ServerProcess, page: Page
) -> None:
    """Reject is clicked, and its outcome read, at a phone's width (test_sharing rejects at a
    laptop's); approve at 1440 px: the flow once, not once a width."""
    team = unique("nlp")
    admin_call(server, "POST", "/api/teams", json={"name": team})
    viewer, viewer_key = user_with_key(server, "viewer", "queue.read", "queue.submit", team=team)
    _, lead_key = user_with_key(server, "lead", "queue.read", "queue.approve", team=team)
    rejected, approved = held_job(server, viewer_key), held_job(server, viewer_key)
    page.set_viewport_size(PHONE)
    sign_in(page, lead_key, then=f"/queue/{rejected}")
    with receiving() as receiver:
        with server.admin() as admin:
            body = {"url": receiver.url, "events": ["job.approved", "job.rejected"]}
            hook = admin.post("/api/admin/webhooks", json=body | {"format": "slack"}).json()
        try:
            judge_and_hear(page, receiver, (rejected, approved, viewer))
        finally:
            delete_webhook(server, hook["id"])

    sign_in(page, viewer_key, then=f"/queue/{rejected}")  # the submitter's own view
    note = page.locator("#judged")
    expect(note).to_contain_text("Rejected by")
    expect(note).to_contain_text(REASON)
    expect(page.locator("#facts")).to_contain_text("Rejected by")
    page.set_viewport_size(WIDE)
    page.goto(f"/queue/{approved}")
    expect(page.locator("#judged")).to_contain_text("it joined the queue")
    assert job(server, rejected)["rejected_by"] and job(server, approved)["approved_by"]


REASON = "ask for 1 GPU <!channel>"


def judge_and_hear(page: Page, receiver: Receiver, jobs: tuple[str, str, str]) -> None:
    """A lead of the team rejects one job and approves the other on their pages; the
    webhook (Slack's shape) carries each outcome, naming the submitter."""
    rejected, approved, viewer = jobs
    page.click("#reject")
    page.fill("#confirm-input", REASON)
    page.click("#confirm-yes")
    expect(page.locator("#status")).to_have_text("cancelled")
    page.set_viewport_size(WIDE)
    page.goto(f"/queue/{approved}")
    page.click("#approve")
    expect(page.locator("#judged")).to_contain_text("Approved by")
    sign_out(page)

    sent = receiver.wait_for(2)
    texts = {r.headers["x-gpufleet-event"]: json.loads(r.body)["text"] for r in sent}
    assert texts["job.rejected"].startswith(f"gpufleet: {viewer}'s job {rejected}")
    assert "&lt;!channel&gt;" in texts["job.rejected"]
    assert f"job {approved} was approved by" in texts["job.approved"]

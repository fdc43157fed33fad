"""Administration → API keys and → Webhooks in Chromium, each effect checked through the API."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Page, expect

from gpufleet.domain.webhook_targets import redact_url
from tests.browser.conftest import LAPTOP, PHONE, screenshot, sign_in
from tests.e2e.conftest import ServerProcess, serving
from tests.webhook_receiver import receiving


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """An orchestrator whose webhooks may reach tests/webhook_receiver.py on 127.0.0.1."""
    yield from serving(
        tmp_path_factory.mktemp("orchestrator"),
        None,
        **{"local-gpus": "auto", "webhook-allow-hosts": "127.0.0.1"},
    )


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

    page.click("#key-create-open")
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


@pytest.mark.parametrize("path", ["/keys", "/webhooks"])
def test_the_keys_and_webhooks_pages_fit_a_phone_and_a_laptop(
    server: ServerProcess, page: Page, path: str
) -> None:
    sign_in(page, server.admin_key, then=path)
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

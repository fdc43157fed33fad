"""The Capacity page in Chromium (#36): every reader sees the pools, what each does now and
why, and what they cost; a full administrator creates, disables, enables and deletes a pool
with its buttons, each click checked through the API; a viewer is offered no button, and the
API refuses them the action.

The pools made here launch nothing whatever their provider: no job asks their labels and
their `min_workers` is 0, so the server's reconcile loop leaves them alone."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page, expect

from tests.browser.conftest import screenshot, sign_in
from tests.browser.test_sharing import admin_call, as_key, user_with_key
from tests.e2e.conftest import ServerProcess, unique
from tests.waiting import wait_until


def make_pool(server: ServerProcess, **fields: Any) -> str:
    name = unique("burst")
    body = {"name": name, "provider": {"type": "local"}, "labels": {"pool": name}, **fields}
    admin_call(server, "POST", "/api/admin/pools", json={"max_workers": 2, **body})
    return name


def pool(server: ServerProcess, name: str) -> dict[str, Any] | None:
    with server.admin() as admin:
        answer = admin.get(f"/api/admin/pools/{name}")
    if answer.status_code == 404:
        return None
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def test_an_admin_disables_enables_and_deletes_a_pool_from_its_card(
    page: Page, server: ServerProcess
) -> None:
    name = make_pool(server, price_per_hour=1.5, max_cost_per_hour=3.0)
    sign_in(page, server.admin_key, then="/capacity")
    card = page.locator(f'section.pool[data-pool="{name}"]')
    expect(card.locator(".reason")).to_have_text(
        f"pool {name} needs no new worker (0 up or launching, min 0, max 2)"
    )
    expect(card.locator('[data-fact="price"]')).to_have_text("$1.50/h a worker; max cost $3.00/h")
    expect(card.locator('[data-fact="cost-now"]')).to_have_text("$0.00/h")
    expect(card.locator("tr.empty")).to_have_text("No machine up or on its way.")
    screenshot(page, "capacity-admin")

    card.locator('[data-action="disable"]').click()
    wait_until(
        lambda: (pool(server, name) or {}).get("enabled") is False,
        timeout=10,
        message="the pool disabled",
    )
    expect(card.locator(".reason")).to_have_text(f"pool {name} is disabled")
    expect(card).to_have_attribute("data-enabled", "false")

    card.locator('[data-action="enable"]').click()
    wait_until(
        lambda: (pool(server, name) or {}).get("enabled") is True,
        timeout=10,
        message="the pool enabled",
    )

    card.locator('[data-action="delete"]').click()
    page.click("#confirm-yes")
    wait_until(lambda: pool(server, name) is None, timeout=10, message="the pool deleted")
    expect(card).to_have_count(0)


def test_an_admin_creates_a_pool_with_the_form(page: Page, server: ServerProcess) -> None:
    name = unique("made")
    sign_in(page, server.admin_key, then="/capacity")
    form = page.locator("#pool-form")
    form.locator('[name="name"]').fill(name)
    form.locator('[name="labels"]').fill(f"pool={name}, gpu=h100")
    form.locator('[name="max_workers"]').fill("3")
    form.locator('[name="price_per_hour"]').fill("2.25")
    form.locator('[name="provider"]').fill("not json")
    form.locator("#pool-create").click()
    expect(form.locator('[data-error-for="provider"]')).to_contain_text("The provider is JSON")
    assert pool(server, name) is None  # refused before anything was sent
    form.locator('[name="provider"]').fill('{"type": "local"}')
    form.locator("#pool-create").click()
    expect(page.locator(f'section.pool[data-pool="{name}"]')).to_be_visible()
    made = pool(server, name)
    assert made is not None
    assert (made["labels"], made["max_workers"], made["price_per_hour"]) == (
        {"pool": name, "gpu": "h100"},
        3,
        2.25,
    )
    admin_call(server, "DELETE", f"/api/admin/pools/{name}")


def test_a_viewer_sees_the_pools_and_no_button_and_the_api_refuses_them(
    page: Page, server: ServerProcess
) -> None:
    name = make_pool(
        server,
        provider={"type": "command", "launch": ["/opt/up", "s3cret"], "terminate": ["/opt/down"]},
    )
    _viewer, key = user_with_key(server, "viewer", "queue.read", "queue.submit")
    sign_in(page, key, then="/capacity")
    card = page.locator(f'section.pool[data-pool="{name}"]')
    expect(card.locator('[data-fact="provider"]')).to_have_text(
        "command: launch /opt/up, terminate /opt/down"  # the programs, not their arguments
    )
    expect(card.locator(".reason")).to_contain_text(f"pool {name} needs no new worker")
    expect(page.locator("[data-action]")).to_have_count(0)
    expect(page.locator("#pool-form")).to_have_count(0)
    assert "s3cret" not in page.content()
    with as_key(server, key) as viewer:
        assert viewer.patch(f"/api/admin/pools/{name}", json={"enabled": False}).status_code == 403
        assert viewer.delete(f"/api/admin/pools/{name}").status_code == 403
    assert (pool(server, name) or {}).get("enabled") is True
    admin_call(server, "DELETE", f"/api/admin/pools/{name}")

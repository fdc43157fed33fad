"""The Secrets page in Chromium (#31): a lead sets their own secret and their team's, deletes
one, and is told what is wrong with a bad name; each click is checked through the API, and
the value is never on the page once sent."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.browser.conftest import LAPTOP, PHONE, sign_in
from tests.browser.test_sharing import admin_call, as_key, user_with_key
from tests.e2e.conftest import ServerProcess, unique

VALUE = "hf_browser_" + unique("v") + "_abcdef0123456789"


def listed(server: ServerProcess, key: str) -> set[tuple[str, str, str]]:
    with as_key(server, key) as client:
        body = client.get("/api/secrets").json()
    return {(s["scope"], s["owner"], s["name"]) for s in body["secrets"]}


def test_a_lead_sets_and_deletes_secrets_and_never_sees_a_value(
    page: Page, server: ServerProcess
) -> None:
    team = unique("nlp")
    admin_call(server, "POST", "/api/teams", json={"name": team})
    lead, key = user_with_key(server, "lead", "queue.read", "queue.submit")
    admin_call(server, "PUT", f"/api/teams/{team}/members/{lead}")
    sign_in(page, key, then="/secrets")
    expect(page.locator("#secrets tbody")).to_contain_text("No secrets yet.")
    expect(page.locator("#s-owner option")).to_have_count(2)  # me, and the team it leads

    page.fill("#s-name", "HF")
    page.fill("#s-value", VALUE)
    page.click("#secret-set")
    expect(page.locator("[data-error-for=name]")).to_contain_text("lowercase")
    assert listed(server, key) == set()

    page.fill("#s-name", "hf")
    page.click("#secret-set")
    expect(page.locator("#secrets tr[data-secret=hf]")).to_be_visible()
    expect(page.locator("#s-value")).to_have_value("")
    assert listed(server, key) == {("user", lead, "hf")}

    page.fill("#s-name", "wandb")
    page.select_option("#s-owner", team)
    page.fill("#s-value", VALUE + "-team")
    page.click("#secret-set")
    expect(page.locator(f"#secrets tr[data-secret=wandb][data-owner='{team}']")).to_be_visible()
    assert listed(server, key) == {("user", lead, "hf"), ("team", team, "wandb")}
    assert VALUE not in page.content()

    page.click("#secrets tr[data-secret=hf] button[data-action=delete]")
    page.click("#confirm-yes")
    expect(page.locator("#secrets tr[data-secret=hf]")).to_have_count(0)
    assert listed(server, key) == {("team", team, "wandb")}


def test_the_secrets_page_fits_a_phone(page: Page, server: ServerProcess) -> None:
    sign_in(page, server.admin_key, then="/secrets")
    expect(page.locator("main")).not_to_contain_text("Loading…")
    for size in (PHONE, LAPTOP):
        page.set_viewport_size(size)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"/secrets is {overflow} px too wide at {size['width']} px"

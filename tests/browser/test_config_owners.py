"""A stored config on the Train page (#31): a viewer who loads admin's config, edits it and
presses Save config is told whose it is and to save theirs under another name; the stored
config is unchanged (checked through the API)."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.browser.conftest import sign_in, train_ready
from tests.browser.test_sharing import user_with_key
from tests.e2e.conftest import ServerProcess, unique

ADMINS = {"command": ["python", "-c", "print('admin trains prod')"]}


def test_a_viewer_saving_over_admins_config_is_told_to_use_another_name(
    server: ServerProcess, page: Page
) -> None:
    name = unique("prod-train")
    with server.admin() as admin:
        assert admin.put(f"/api/configs/{name}", json=ADMINS).status_code == 200
    viewer, key = user_with_key(server, "viewer", "queue.read", "queue.submit")

    sign_in(page, key, "/train")
    train_ready(page)
    page.select_option("#config-pick", name)
    expect(page.locator("#config-status")).to_have_text(
        f"Loaded {name} v1 (owner admin); edit it and Save config to change it."
    )
    page.fill("#config-json", '{"command": ["sh", "-c", "echo PWNED; id"]}')
    page.click("#config-save")

    refusal = page.locator("#config-error")
    expect(refusal).to_contain_text(f"config '{name}' belongs to admin")
    expect(refusal).to_contain_text(f"type another name (e.g. {name}-{viewer}) in Save as")
    expect(refusal).not_to_contain_text("PUT /api")
    with server.admin() as admin:
        stored = admin.get(f"/api/configs/{name}").json()
    assert stored["config"] == ADMINS and stored["version"] == 1

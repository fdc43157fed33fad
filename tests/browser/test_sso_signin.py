"""Single sign-on in Chromium: "Sign in with…", the provider's own form (oidc-provider-mock,
a real provider process), and back signed in at the level the groups map to."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import screenshot
from tests.e2e.conftest import ServerProcess, serving
from tests.oidc_provider import IdentityProvider


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, identity_provider: IdentityProvider
) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("sso-orchestrator")
    more = {"oidc-provider-name": "Mock IdP", "oidc-group-map": "gpu-admins=admin,ml=lead:ml"}
    yield from serving(data, **identity_provider.server_flags(data, **more))


def authorize_at_provider(page: Page, sub: str) -> None:
    """The provider's page: type the subject, press Authorize."""
    page.get_by_placeholder("sub").fill(sub)
    page.get_by_role("button", name="Authorize").click()


def test_a_person_signs_in_with_the_provider_at_their_groups_level(
    page: Page, server: ServerProcess, identity_provider: IdentityProvider
) -> None:
    identity_provider.set_user("sub-browser", preferred_username="brie", groups=["ml"])
    page.goto("/queue")
    page.wait_for_url("**/signin**")
    screenshot(page, "signin-sso")
    page.get_by_role("link", name="Sign in with Mock IdP").click()
    page.wait_for_url(f"{identity_provider.issuer}/**")
    authorize_at_provider(page, "sub-browser")
    page.wait_for_url(f"{server.url}/queue")
    expect(page.locator("h1")).to_have_text("Queue")
    me = page.request.get("/api/users/me").json()
    assert (me["name"], me["level"], me["teams"]) == ("brie", "lead", ["ml"])


def test_next_pointing_elsewhere_lands_on_the_orchestrator(
    page: Page, server: ServerProcess, identity_provider: IdentityProvider
) -> None:
    identity_provider.set_user("sub-wanderer", groups=[])
    page.goto("/signin?next=//evil.example/steal")
    page.get_by_role("link", name="Sign in with Mock IdP").click()
    authorize_at_provider(page, "sub-wanderer")
    page.wait_for_url(lambda url: url.startswith(server.url) and "/ui/sso/" not in url)
    assert page.url.startswith(server.url + "/")
    assert page.request.get("/api/users/me").json()["level"] == "viewer"

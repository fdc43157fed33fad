"""Single sign-on against a real OpenID Connect provider process (oidc-provider-mock): the
browser's code flow driven over HTTP, people provisioned and kept in step with their groups,
and the hostile cases (a replayed or foreign state, a foreign `next`, a refused CLI redirect).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from gpufleet.store.queries import Queries
from tests.api.conftest import Fleet, both_databases, fleet_with
from tests.oidc_provider import IdentityProvider

GROUP_MAP = ("gpu-admins=admin", "ml=researcher:ml")


@pytest.fixture
async def sso_fleet(
    tmp_path: Path, database_url: str, identity_provider: IdentityProvider
) -> AsyncIterator[Fleet]:
    settings = identity_provider.settings(tmp_path, oidc_group_map=GROUP_MAP)
    async with fleet_with(tmp_path, database_url, **settings) as fleet:
        yield fleet


async def begin(browser: httpx.AsyncClient, target: str = "/queue") -> str:
    answer = await browser.get("/ui/sso/begin", params={"next": target})
    assert answer.status_code == 303, answer.text
    return answer.headers["location"]


async def sign_in(
    browser: httpx.AsyncClient, idp: IdentityProvider, sub: str, target: str = "/queue"
) -> httpx.Response:
    """Sign the browser (an httpx client keeping cookies) in as `sub`: the callback's
    answer."""
    back = idp.authorize(await begin(browser, target), sub)
    assert back.startswith("http://test/ui/sso/callback?"), back
    return await browser.get(back)


async def me(browser: httpx.AsyncClient) -> dict[str, Any]:
    answer = await browser.get("/api/users/me")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def test_the_sign_in_page_offers_the_provider_beside_the_api_key(sso_fleet: Fleet) -> None:
    page = await sso_fleet.http.get("/signin?next=/queue")
    assert "Sign in with Mock IdP" in page.text
    assert 'href="/ui/sso/begin?next=/queue"' in page.text
    assert 'name="api_key"' in page.text


async def test_the_provider_is_asked_for_a_code_with_pkce_state_and_nonce(
    sso_fleet: Fleet, identity_provider: IdentityProvider
) -> None:
    async with sso_fleet.client() as browser:
        url = await begin(browser)
    asked = parse_qs(urlsplit(url).query)
    assert url.startswith(identity_provider.issuer + "/oauth2/authorize?")
    assert asked["response_type"] == ["code"]
    assert asked["code_challenge_method"] == ["S256"]
    assert asked["redirect_uri"] == ["http://test/ui/sso/callback"]
    assert all(asked[p][0] for p in ("state", "nonce", "code_challenge"))


async def test_a_first_sign_in_provisions_the_person_at_their_groups_level(
    sso_fleet: Fleet, identity_provider: IdentityProvider
) -> None:
    identity_provider.set_user("sub-ada", preferred_username="ada", groups=["gpu-admins", "ml"])
    async with sso_fleet.client() as browser:
        answer = await sign_in(browser, identity_provider, "sub-ada")
        assert answer.status_code == 200, answer.text
        assert 'content="0;url=/queue"' in answer.text
        assert "gpufleet_session" in browser.cookies
        user = await me(browser)
        assert (user["name"], user["level"], user["teams"]) == ("ada", "admin", ["ml"])
        assert user["service"] is False
    audit = (await sso_fleet.admin.get("/api/audit?type=user.")).json()
    types = [e["event_type"] for e in audit["events"] if e["target"] == user["id"]]
    assert "user.created" in types and "user.signed_in" in types


@both_databases
async def test_two_first_sign_ins_at_once_make_one_user_and_no_error(
    sso_fleet: Fleet, identity_provider: IdentityProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race injected: the second sign-in read no identity before the first committed its
    user. It finds that user once its own insert loses (before: the unique index's error, a
    500)."""
    identity_provider.set_user("sub-twin", preferred_username="twin", groups=["ml"])
    async with sso_fleet.client() as first:
        assert (await sign_in(first, identity_provider, "sub-twin")).status_code == 200
        made = await me(first)
    read = Queries.user_of_identity
    calls: list[str] = []

    async def racing(self: Queries, issuer: str, subject: str) -> Any:
        calls.append(subject)
        return None if len(calls) == 1 else await read(self, issuer, subject)

    monkeypatch.setattr(Queries, "user_of_identity", racing)
    async with sso_fleet.client() as second:
        answer = await sign_in(second, identity_provider, "sub-twin")
        assert answer.status_code == 200, answer.text
        assert (await me(second))["id"] == made["id"]
    assert len(calls) == 2  # read stale, then again after the lost insert
    users = (await sso_fleet.admin.get("/api/users")).json()
    assert [u["name"] for u in users["users"]].count("twin") == 1


async def test_a_person_out_of_the_admins_group_is_no_admin_at_the_next_sign_in(
    sso_fleet: Fleet, identity_provider: IdentityProvider
) -> None:
    identity_provider.set_user("sub-bo", preferred_username="bo", groups=["gpu-admins", "ml"])
    async with sso_fleet.client() as browser:
        await sign_in(browser, identity_provider, "sub-bo")
        assert (await me(browser))["level"] == "admin"
    identity_provider.set_user("sub-bo", preferred_username="bo", groups=["other"])
    async with sso_fleet.client() as browser:
        await sign_in(browser, identity_provider, "sub-bo")
        user = await me(browser)
        assert (user["level"], user["teams"]) == ("viewer", [])  # --oidc-default-level
        refused = await browser.get("/api/admin/api-keys")
        assert refused.status_code == 403


async def test_a_name_someone_has_is_no_way_into_their_account(
    sso_fleet: Fleet, identity_provider: IdentityProvider
) -> None:
    identity_provider.set_user("sub-cy", preferred_username="cy", groups=["gpu-admins"])
    async with sso_fleet.client() as first, sso_fleet.client() as second:
        await sign_in(first, identity_provider, "sub-cy")
        identity_provider.set_user("sub-mallory", preferred_username="cy")
        await sign_in(second, identity_provider, "sub-mallory")
        cy, mallory = await me(first), await me(second)
    assert mallory["id"] != cy["id"]
    assert mallory["name"].startswith("cy-") and mallory["level"] == "viewer"
    # nor the built-in admin's name
    identity_provider.set_user("sub-root", preferred_username="admin")
    async with sso_fleet.client() as third:
        await sign_in(third, identity_provider, "sub-root")
        assert (await me(third))["id"] != "u_admin"


async def test_a_replayed_callback_is_refused(
    sso_fleet: Fleet, identity_provider: IdentityProvider
) -> None:
    identity_provider.set_user("sub-dee", groups=["ml"])
    async with sso_fleet.client() as browser:
        back = identity_provider.authorize(await begin(browser), "sub-dee")
        state_cookie = browser.cookies["gpufleet_sso"]
        assert (await browser.get(back)).status_code == 200
        browser.cookies.clear()
        browser.cookies.set("gpufleet_sso", state_cookie, path="/ui/sso")
        again = await browser.get(back)
        assert again.status_code == 401
        assert "already used" in again.text
        assert "gpufleet_session" not in again.headers.get("set-cookie", "")


async def test_a_callback_for_another_sign_in_is_refused(
    sso_fleet: Fleet, identity_provider: IdentityProvider
) -> None:
    identity_provider.set_user("sub-eve")
    async with sso_fleet.client() as attacker, sso_fleet.client() as victim:
        back = identity_provider.authorize(await begin(attacker), "sub-eve")
        await begin(victim)  # the victim's own sign-in, with its own state
        forced = await victim.get(back)  # login CSRF: the attacker's code in the victim's browser
        assert forced.status_code == 401
        assert "another sign-in" in forced.text
        no_cookie = await sso_fleet.http.get(back)
        assert no_cookie.status_code == 401
        assert "gpufleet_session" not in victim.cookies


async def test_next_pointing_elsewhere_lands_on_this_site(
    sso_fleet: Fleet, identity_provider: IdentityProvider
) -> None:
    identity_provider.set_user("sub-fay")
    for target in ("//evil.example/x", "https://evil.example/", "/\t/evil.example"):
        async with sso_fleet.client() as browser:
            answer = await sign_in(browser, identity_provider, "sub-fay", target)
            assert answer.status_code == 200
            assert 'content="0;url=/"' in answer.text, target
            assert "evil" not in answer.text


async def test_the_provider_denying_the_sign_in_says_so(
    sso_fleet: Fleet, identity_provider: IdentityProvider
) -> None:
    async with sso_fleet.client() as browser:
        url = await begin(browser)
        answer = await browser.get(identity_provider.deny(url))
    assert answer.status_code == 401
    assert "access_denied" in answer.text


async def test_a_session_made_by_single_sign_on_ends_when_its_key_is_revoked(
    sso_fleet: Fleet, identity_provider: IdentityProvider
) -> None:
    identity_provider.set_user("sub-gil", groups=["ml"])
    async with sso_fleet.client() as browser:
        await sign_in(browser, identity_provider, "sub-gil")
        keys = (await sso_fleet.admin.get("/api/admin/api-keys")).json()
        (key,) = [k for k in keys if k["user"] == (await me(browser))["name"]]
        assert key["name"] == "single sign-on"
        revoked = await sso_fleet.admin.delete(f"/api/admin/api-keys/{key['id']}")
        assert revoked.status_code in (200, 204), revoked.text
        assert (await browser.get("/api/users/me")).status_code == 401

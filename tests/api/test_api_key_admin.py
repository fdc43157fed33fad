"""What the API keys page relies on: keys are listed without their secret, and nobody revokes
the key they are signed in with."""

from __future__ import annotations

from tests.api.conftest import Fleet


async def test_revoking_the_key_the_request_is_signed_in_with_is_refused(fleet: Fleet) -> None:
    (admin,) = (await fleet.admin.get("/api/admin/api-keys")).json()

    answer = await fleet.admin.delete(f"/api/admin/api-keys/{admin['id']}")

    assert answer.status_code == 409
    assert "the key you are using now" in answer.json()["detail"]
    assert "another key" in answer.json()["detail"]
    assert (await fleet.admin.get("/api/queue")).status_code == 200  # it still works
    assert await fleet.audit(type="apikey.revoked") == []


async def test_the_ui_session_cannot_revoke_its_own_key_either(fleet: Fleet) -> None:
    other = await fleet.mint_key("*", name="second admin")
    signed_in = await fleet.http.post("/ui/session", json={"api_key": other["key"]})
    cookies = {"gpufleet_session": signed_in.cookies["gpufleet_session"]}
    csrf = {"X-CSRF-Token": signed_in.cookies["gpufleet_csrf"]}
    async with fleet.client() as browser:
        browser.cookies.update({**cookies, "gpufleet_csrf": csrf["X-CSRF-Token"]})
        own = await browser.delete(f"/api/admin/api-keys/{other['id']}", headers=csrf)
        assert own.status_code == 409
        (admin,) = [
            k for k in (await browser.get("/api/admin/api-keys")).json() if k["name"] == "admin"
        ]
        assert (
            await browser.delete(f"/api/admin/api-keys/{admin['id']}", headers=csrf)
        ).status_code == 200


async def test_listed_keys_never_carry_their_secret(fleet: Fleet) -> None:
    minted = await fleet.mint_key("queue.read", name="reader")

    listed = (await fleet.admin.get("/api/admin/api-keys")).json()

    assert minted["key"] not in str(listed)
    assert {k["name"]: k["permissions"] for k in listed} == {
        "admin": ["*"],
        "reader": ["queue.read"],
    }
    assert all("key" not in k for k in listed)


async def test_a_key_shows_when_it_was_last_used_to_the_minute(fleet: Fleet) -> None:
    minted = await fleet.mint_key("queue.read", name="reader")
    reader = {"X-API-Key": minted["key"]}

    async def last_used() -> str | None:
        listed = (await fleet.admin.get("/api/admin/api-keys")).json()
        used: str | None = next(k for k in listed if k["id"] == minted["id"])["last_used_at"]
        return used

    assert minted["last_used_at"] is None and await last_used() is None
    first = fleet.clock.now
    assert (await fleet.http.get("/api/queue", headers=reader)).status_code == 200
    assert await last_used() == first.isoformat().replace("+00:00", "Z")

    fleet.clock.advance(30)  # within the minute: not written again
    assert (await fleet.http.get("/api/queue", headers=reader)).status_code == 200
    assert await last_used() == first.isoformat().replace("+00:00", "Z")

    later = fleet.clock.advance(31)
    assert (await fleet.http.get("/api/queue", headers=reader)).status_code == 200
    assert await last_used() == later.isoformat().replace("+00:00", "Z")

    fleet.clock.advance(120)  # a refused call is not a use
    assert (await fleet.http.get("/api/admin/workers", headers=reader)).status_code == 403
    assert await last_used() == later.isoformat().replace("+00:00", "Z")

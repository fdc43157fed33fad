"""The device flow of single sign-on (RFC 8628) through the orchestrator, against the
provider process with the device grant (tests/oidc_device_provider.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.api.conftest import Fleet, fleet_with
from tests.oidc_provider import IdentityProvider


@pytest.fixture
async def device_fleet(
    tmp_path: Path, database_url: str, device_identity_provider: IdentityProvider
) -> AsyncIterator[Fleet]:
    settings = device_identity_provider.settings(tmp_path, oidc_group_map=("ops=lead:ops",))
    async with fleet_with(tmp_path, database_url, **settings) as fleet:
        yield fleet


async def test_a_device_code_gives_a_session_once_the_person_typed_it(
    device_fleet: Fleet, device_identity_provider: IdentityProvider
) -> None:
    info = (await device_fleet.http.get("/api/sso")).json()
    assert info["device_flow"] is True
    device_identity_provider.set_user("sub-dev", preferred_username="dev", groups=["ops"])
    start = await device_fleet.http.post("/api/sso/device")
    assert start.status_code == 200, start.text
    code = start.json()
    poll = {"device_code": code["device_code"]}
    waiting = await device_fleet.http.post("/api/sso/device/token", data=poll)
    assert (waiting.status_code, waiting.json()) == (202, {"pending": True})
    device_identity_provider.approve_device(code["verification_uri"], code["user_code"], "sub-dev")
    done = await device_fleet.http.post("/api/sso/device/token", data=poll)
    assert done.status_code == 200, done.text
    session = done.json()
    assert (session["user"], session["level"]) == ("dev", "lead")
    bearer = {"Authorization": f"Bearer {session['token']}"}
    assert (await device_fleet.http.get("/api/users/me", headers=bearer)).json()["teams"] == ["ops"]
    again = await device_fleet.http.post("/api/sso/device/token", data=poll)
    assert again.status_code == 401  # a device code is spent once


async def test_a_made_up_device_code_is_refused_and_counted(device_fleet: Fleet) -> None:
    answer = await device_fleet.http.post("/api/sso/device/token", data={"device_code": "forged"})
    assert answer.status_code == 401
    failed = await device_fleet.audit(type="auth.failed")
    assert any(e["detail"].get("credential") == "sso" for e in failed)


async def test_a_provider_without_the_device_grant_says_so(
    tmp_path: Path, database_url: str, identity_provider: IdentityProvider
) -> None:
    async with fleet_with(tmp_path, database_url, **identity_provider.settings(tmp_path)) as fleet:
        assert (await fleet.http.get("/api/sso")).json()["device_flow"] is False
        answer = await fleet.http.post("/api/sso/device")
        assert answer.status_code == 422
        assert "no device flow" in answer.json()["detail"]

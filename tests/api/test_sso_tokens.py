"""Single sign-on's tokens: the ID token's checks (issuer, audience, signature, expiry, nonce)
on real tokens of a real provider, the CLI's session token (redeemed, refreshed, signed out),
and --oidc-only."""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import sqlalchemy as sa
from joserfc import jwt
from joserfc.jwk import RSAKey
from sqlalchemy.engine import Connection

from gpufleet.errors import Unauthenticated
from gpufleet.server.oidc_client import Provider
from gpufleet.store import open_store
from tests.api.conftest import Fleet, both_databases, fleet_with
from tests.api.test_artifact_records import _migrate
from tests.oidc_provider import IdentityProvider

LOOPBACK = "http://127.0.0.1:8765/callback"
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture
async def sso_fleet(
    tmp_path: Path, database_url: str, identity_provider: IdentityProvider
) -> AsyncIterator[Fleet]:
    settings = identity_provider.settings(tmp_path, oidc_group_map=("gpu-admins=admin",))
    async with fleet_with(tmp_path, database_url, **settings) as fleet:
        yield fleet


def _unpadded(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def provider(fleet: Fleet) -> Provider:
    assert fleet.ctx.sso is not None
    return fleet.ctx.sso


async def refused(fleet: Fleet, token: str, nonce: str | None, why: str) -> None:
    with pytest.raises(Unauthenticated, match=why):
        await provider(fleet).verify(token, fleet.ctx.clock().timestamp(), nonce)


async def test_a_genuine_id_token_is_taken(
    sso_fleet: Fleet, identity_provider: IdentityProvider
) -> None:
    token = identity_provider.id_token("sub-ok", "n-1")
    claims = await provider(sso_fleet).verify(token, sso_fleet.ctx.clock().timestamp(), "n-1")
    assert claims["sub"] == "sub-ok"


async def test_an_id_token_of_another_issuer_is_refused(
    sso_fleet: Fleet, identity_provider: IdentityProvider
) -> None:
    # signed by the same key, but naming another issuer (the provider as "localhost")
    token = identity_provider.id_token("sub-iss", "n-2", host="localhost")
    await refused(sso_fleet, token, "n-2", "iss")


async def test_an_id_token_signed_by_another_key_is_refused(
    sso_fleet: Fleet, identity_provider: IdentityProvider
) -> None:
    genuine = identity_provider.id_token("sub-sig", "n-3")
    header, claims = (orjson.loads(_unpadded(part)) for part in genuine.split(".")[:2])
    kid = header.get("kid")  # the provider's own key id (if it names one), to pass for it
    forger = RSAKey.generate_key(2048, parameters={"kid": kid} if kid else None)
    claims["sub"] = "u-admin-at-provider"
    forged = jwt.encode({"alg": "RS256", **({"kid": kid} if kid else {})}, claims, forger)
    await refused(sso_fleet, forged, "n-3", "refused")
    unsigned = (
        ".".join(
            base64.urlsafe_b64encode(orjson.dumps(part)).rstrip(b"=").decode()
            for part in ({"alg": "none"}, claims)
        )
        + "."
    )
    await refused(sso_fleet, unsigned, "n-3", "refused")


async def test_an_expired_id_token_is_refused(
    sso_fleet: Fleet, identity_provider: IdentityProvider
) -> None:
    token = identity_provider.id_token("sub-exp", "n-4")
    sso_fleet.clock.advance(2 * 3600)  # the provider's tokens live an hour
    await refused(sso_fleet, token, "n-4", "exp")


async def test_an_id_token_for_another_nonce_or_client_is_refused(
    sso_fleet: Fleet, identity_provider: IdentityProvider
) -> None:
    token = identity_provider.id_token("sub-nonce", "n-5")
    await refused(sso_fleet, token, "another", "nonce")
    other = Provider.named(identity_provider.issuer, "another-client", "secret", ("openid",), None)
    with pytest.raises(Unauthenticated, match="aud"):
        await other.verify(token, sso_fleet.ctx.clock().timestamp(), "n-5")


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


async def cli_sign_in(fleet: Fleet, idp: IdentityProvider, sub: str, **more: Any) -> httpx.Response:
    verifier, challenge = pkce()
    code = idp.code(sub, LOOPBACK, "n-cli", challenge)
    body = {"code": code, "code_verifier": verifier, "redirect_uri": LOOPBACK, "nonce": "n-cli"}
    return await fleet.http.post("/api/sso/token", data={**body, **more})


async def test_the_cli_trades_its_code_for_a_session_token_refreshed_and_signed_out(
    sso_fleet: Fleet, identity_provider: IdentityProvider
) -> None:
    identity_provider.set_user("sub-cli", preferred_username="cli-user", groups=["gpu-admins"])
    answer = await cli_sign_in(sso_fleet, identity_provider, "sub-cli")
    assert answer.status_code == 200, answer.text
    got = answer.json()
    assert got["token"].startswith("gfs_") and got["refresh_token"]
    assert (got["user"], got["level"]) == ("cli-user", "admin")
    bearer = {"Authorization": f"Bearer {got['token']}"}
    mine = await sso_fleet.http.get("/api/users/me", headers=bearer)
    assert mine.json()["level"] == "admin"
    # out of the admins' group at the provider: the refresh reads it again
    identity_provider.set_user("sub-cli", preferred_username="cli-user", groups=[])
    again = await sso_fleet.http.post(
        "/api/sso/refresh", data={"refresh_token": got["refresh_token"]}
    )
    assert again.status_code == 200, again.text
    renewed = again.json()
    assert renewed["level"] == "viewer" and renewed["token"] != got["token"]
    new_bearer = {"Authorization": f"Bearer {renewed['token']}"}
    assert (await sso_fleet.http.get("/api/admin/api-keys", headers=new_bearer)).status_code == 403
    # signed out: the token is refused from then on
    out = await sso_fleet.http.delete("/api/sso/session", headers=new_bearer)
    assert out.status_code == 200
    assert (await sso_fleet.http.get("/api/users/me", headers=new_bearer)).status_code == 401


async def test_a_cli_session_token_expires_within_the_hour(
    sso_fleet: Fleet, identity_provider: IdentityProvider
) -> None:
    got = (await cli_sign_in(sso_fleet, identity_provider, "sub-short")).json()
    sso_fleet.clock.advance(3601)
    bearer = {"Authorization": f"Bearer {got['token']}"}
    answer = await sso_fleet.http.get("/api/users/me", headers=bearer)
    assert answer.status_code == 401
    assert "login" in answer.json()["detail"] or "sign in" in answer.json()["detail"]


async def test_the_cli_code_is_refused_twice_with_a_wrong_nonce_or_verifier(
    sso_fleet: Fleet, identity_provider: IdentityProvider
) -> None:
    verifier, challenge = pkce()
    code = identity_provider.code("sub-twice", LOOPBACK, "n-ok", challenge)
    body = {"code": code, "code_verifier": verifier, "redirect_uri": LOOPBACK}
    wrong_nonce = await sso_fleet.http.post("/api/sso/token", data={**body, "nonce": "n-bad"})
    assert wrong_nonce.status_code == 401
    assert "nonce" in wrong_nonce.json()["detail"]
    replayed = await sso_fleet.http.post("/api/sso/token", data={**body, "nonce": "n-ok"})
    assert replayed.status_code == 401  # the provider spent the code on the first try


async def test_the_cli_redirect_must_be_a_loopback_address(
    sso_fleet: Fleet, identity_provider: IdentityProvider
) -> None:
    for elsewhere in (
        "https://evil.example/cb",
        "http://evil.example:8765/cb",
        "http://10.0.0.1:1/",
    ):
        answer = await cli_sign_in(sso_fleet, identity_provider, "sub-far", redirect_uri=elsewhere)
        assert answer.status_code == 422, elsewhere
    bad = await sso_fleet.http.post(
        "/api/sso/refresh", data={"refresh_token": "not-a-refresh-token"}
    )
    assert bad.status_code == 401


async def test_the_cli_is_told_where_to_sign_in(
    sso_fleet: Fleet, identity_provider: IdentityProvider
) -> None:
    info = (await sso_fleet.http.get("/api/sso")).json()
    assert info["enabled"] and info["client_id"] == "gpufleet-test"
    assert info["authorization_endpoint"] == f"{identity_provider.issuer}/oauth2/authorize"


async def test_without_single_sign_on_its_routes_say_it_is_off(fleet: Fleet) -> None:
    assert (await fleet.http.get("/api/sso")).json()["enabled"] is False
    answer = await fleet.http.post("/api/sso/refresh", data={"refresh_token": "x"})
    assert answer.status_code == 401
    assert "off" in answer.json()["detail"]


async def test_oidc_only_takes_keys_of_service_users_alone(
    tmp_path: Path, database_url: str, identity_provider: IdentityProvider
) -> None:
    settings = identity_provider.settings(tmp_path, oidc_only=True)
    async with fleet_with(tmp_path, database_url, **settings) as fleet:
        keys = {}
        for name, service in (("person", False), ("robot", True)):
            made = await fleet.admin.post(
                "/api/users", json={"name": name, "level": "researcher", "service": service}
            )
            assert made.status_code == 201, made.text
            assert made.json()["service"] is service
            key = await fleet.admin.post(
                "/api/admin/api-keys",
                json={"name": f"{name}-key", "permissions": ["queue.read"], "user": name},
            )
            keys[name] = key.json()["key"]
        person = {"Authorization": f"Bearer {keys['person']}"}
        robot = {"Authorization": f"Bearer {keys['robot']}"}
        refused_api = await fleet.http.get("/api/queue", headers=person)
        assert refused_api.status_code == 401
        assert "single sign-on" in refused_api.json()["detail"]
        assert (await fleet.http.get("/api/queue", headers=robot)).status_code == 200
        refused_ui = await fleet.http.post("/ui/session", json={"api_key": keys["person"]})
        assert refused_ui.status_code == 401
        taken = await fleet.http.post("/ui/session", json={"api_key": keys["robot"]})
        assert taken.status_code == 200
        page = await fleet.http.get("/signin")
        assert "service users only" in page.text
        # a person signs in through the provider all the same
        got = (await cli_sign_in(fleet, identity_provider, "sub-only")).json()
        bearer = {"Authorization": f"Bearer {got['token']}"}
        assert (await fleet.http.get("/api/users/me", headers=bearer)).status_code == 200


async def test_the_token_endpoints_take_a_small_form_and_count_refusals(
    sso_fleet: Fleet, identity_provider: IdentityProvider
) -> None:
    as_json = await sso_fleet.http.post("/api/sso/refresh", json={"refresh_token": "x"})
    assert as_json.status_code == 422
    assert "x-www-form-urlencoded" in as_json.json()["detail"]
    huge = await sso_fleet.http.post("/api/sso/refresh", data={"refresh_token": "x" * 20_000})
    assert huge.status_code == 413
    twice = await sso_fleet.http.post(
        "/api/sso/refresh", content=b"refresh_token=a&refresh_token=b", headers=FORM
    )
    assert twice.status_code == 422
    short = await cli_sign_in(sso_fleet, identity_provider, "sub-x", code_verifier="short")
    assert short.status_code == 422
    wrong = await sso_fleet.http.post("/api/sso/refresh", data={"refresh_token": "forged"})
    assert wrong.status_code == 401
    failed = await sso_fleet.audit(type="auth.failed")
    assert any(e["detail"].get("credential") == "sso" for e in failed), failed


async def test_signing_out_takes_a_session_token_not_a_key(sso_fleet: Fleet) -> None:
    answer = await sso_fleet.admin.delete("/api/sso/session")
    assert answer.status_code == 422
    assert (await sso_fleet.admin.get("/api/users/me")).status_code == 200


def _user_columns(sync_conn: Connection) -> tuple[set[str], set[str]]:
    inspector = sa.inspect(sync_conn)
    return {c["name"] for c in inspector.get_columns("users")}, set(inspector.get_table_names())


@both_databases
async def test_migration_0027_makes_the_built_in_admin_a_service_user_and_downgrades(
    database_url: str,
) -> None:
    store = await open_store(database_url)
    try:
        async with store.engine.begin() as conn:
            await conn.run_sync(_migrate, "0026", down=True)
            columns, tables = await conn.run_sync(_user_columns)
            assert "service" not in columns and "identities" not in tables
            await conn.execute(
                sa.text(
                    "INSERT INTO users (id, name, level, usage, created_at) VALUES "
                    "('u_ada', 'ada', 'lead', 0, CURRENT_TIMESTAMP)"  # u_admin: made by 0014
                )
            )
            await conn.run_sync(_migrate, "head", down=False)
            columns, tables = await conn.run_sync(_user_columns)
            assert "service" in columns and "identities" in tables
        async with store.read() as q:
            admin, ada = await q.get_user("u_admin"), await q.get_user("u_ada")
        assert admin is not None and admin.service
        assert ada is not None and not ada.service
    finally:
        await store.close()

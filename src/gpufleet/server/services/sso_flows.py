"""Single sign-on's two ways in: the browser's authorization code flow, and the CLI's.

Browser: `begin` sends the browser to the provider with a fresh state, nonce and PKCE
verifier, kept in a short-lived cookie signed under the UI secret (nothing in process memory:
any replica finishes what another began); `finish` checks the state against that cookie,
spends it once on every replica (a replayed callback is refused), redeems the code with the
verifier, verifies the ID token (issuer, audience, signature, expiry, the nonce), and opens
the session as an API key's sign-in does.

CLI (`gpufleet login`): the CLI makes the PKCE verifier, state and nonce itself and listens on
a loopback address; it hands the code, its verifier and nonce to `redeem`, which does what
`finish` does and answers a short-lived session token and the provider's refresh token.
`refresh` trades that refresh token at the provider for a new session token, reading the
person's groups again (from a new ID token, or the userinfo endpoint when the provider sends
none), so a level taken away at the provider is gone within the hour.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import orjson

from gpufleet.errors import InvalidInput, Unauthenticated
from gpufleet.server.context import Context, transaction
from gpufleet.server.services import auth, sessions, sso

STATE_COOKIE = "gpufleet_sso"
STATE_SECONDS = 600  # the time a person has at the provider's page
CALLBACK_PATH = "/ui/sso/callback"


class Refused(Unauthenticated):
    """The provider refused, or the person denied, the sign-in."""


@dataclass(frozen=True, slots=True)
class Begun:
    url: str  # the provider's authorization page, to send the browser to
    cookie: str  # the flow's signed state, for the callback


@dataclass(frozen=True, slots=True)
class CliSession:
    token: str
    expires_at: datetime
    refresh_token: str | None
    user: str
    level: str


def _sign(ctx: Context, payload: bytes) -> str:
    mac = hmac.new(ctx.ui_secret, b"sso\x00" + payload, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def _pack(ctx: Context, values: dict[str, Any]) -> str:
    payload = base64.urlsafe_b64encode(orjson.dumps(values)).rstrip(b"=")
    return f"{payload.decode()}.{_sign(ctx, payload)}"


def _unpack(ctx: Context, cookie: str | None) -> dict[str, Any] | None:
    payload, _, mac = (cookie or "").partition(".")
    if not payload or not hmac.compare_digest(mac.encode(), _sign(ctx, payload.encode()).encode()):
        return None
    try:
        values = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (ValueError, orjson.JSONDecodeError):
        return None
    if not isinstance(values, dict) or values.get("exp", 0) <= ctx.clock().timestamp():
        return None
    return values


@contextlib.asynccontextmanager
async def counted(ctx: Context, client: str | None) -> AsyncIterator[None]:
    """A refused sign-in counts as a failed authentication of its address (audited, and
    limited: 429 once the address is locked out)."""
    try:
        yield
    except Unauthenticated as exc:
        await auth.credential_refused(ctx, "sso", client, exc.message[:200])
        raise


async def begin(ctx: Context, base_url: str, next_page: str) -> Begun:
    provider = sso.provider(ctx)
    state, nonce = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    verifier = secrets.token_urlsafe(48)
    url = await provider.authorization_url(
        base_url.rstrip("/") + CALLBACK_PATH, state, nonce, verifier
    )
    exp = int(ctx.clock().timestamp()) + STATE_SECONDS
    cookie = _pack(
        ctx, {"state": state, "nonce": nonce, "verifier": verifier, "next": next_page, "exp": exp}
    )
    return Begun(url, cookie)


async def finish(
    ctx: Context,
    base_url: str,
    cookie: str | None,
    code: str | None,
    state: str | None,
    client: str | None,
) -> tuple[sessions.Session, str]:
    """The web session of a provider's callback, and the page to go to."""
    async with counted(ctx, client):
        return await _finish(ctx, base_url, cookie, code, state, client)


async def _finish(
    ctx: Context,
    base_url: str,
    cookie: str | None,
    code: str | None,
    state: str | None,
    client: str | None,
) -> tuple[sessions.Session, str]:
    begun = _unpack(ctx, cookie)
    if begun is None:
        raise Unauthenticated(
            "this sign-in was not begun in this browser, or took over 10 minutes; sign in again"
        )
    if not state or not hmac.compare_digest(state.encode(), str(begun["state"]).encode()):
        raise Unauthenticated("the provider's answer is for another sign-in (state); sign in again")
    if not code:
        raise Unauthenticated("the provider sent no authorization code; sign in again")
    await _spend(ctx, str(begun["state"]), int(begun["exp"]))
    provider = sso.provider(ctx)
    tokens = await provider.redeem(code, base_url.rstrip("/") + CALLBACK_PATH, begun["verifier"])
    claims = await _claims(ctx, tokens, nonce=str(begun["nonce"]))
    _user, key = await sso.sign_in(ctx, claims, client)
    return sessions.open_session(ctx, key.id), str(begun["next"])


async def _spend(ctx: Context, value: str, exp: int) -> None:
    async with transaction(ctx) as tx:
        fresh = await tx.q.spend_once(value, datetime.fromtimestamp(exp, UTC), tx.now)
    if not fresh:
        raise Unauthenticated("this sign-in was already used (a replay); sign in again")


async def _claims(ctx: Context, tokens: dict[str, Any], nonce: str | None) -> dict[str, Any]:
    provider = sso.provider(ctx)
    id_token = tokens.get("id_token")
    now = ctx.clock().timestamp()
    if isinstance(id_token, str):
        return await provider.verify(id_token, now, nonce)
    if nonce is not None:  # a code's answer always carries one
        raise Unauthenticated("the identity provider sent no ID token; sign in again")
    access = tokens.get("access_token")
    if not isinstance(access, str):
        raise Unauthenticated("the identity provider sent no token; sign in again")
    info = await provider.userinfo(access)  # asked with a token it just gave this client
    return info


def check_loopback(redirect_uri: str) -> str:
    """The CLI's redirect is to this machine's loopback over http, as RFC 8252 says."""
    split = urlsplit(redirect_uri)
    try:
        loopback = split.hostname is not None and ipaddress.ip_address(split.hostname).is_loopback
    except ValueError:
        loopback = False
    if split.scheme != "http" or not loopback or not split.port:
        raise InvalidInput(
            f"redirect_uri {redirect_uri[:120]!r} is not http://127.0.0.1:PORT/...; the CLI's "
            "sign-in returns to a loopback address only"
        )
    return redirect_uri


async def redeem(
    ctx: Context,
    code: str,
    verifier: str,
    redirect_uri: str,
    nonce: str,
    client: str | None,
) -> CliSession:
    """The CLI's authorization code, redeemed: a session token and the refresh token."""
    check_loopback(redirect_uri)
    async with counted(ctx, client):
        tokens = await sso.provider(ctx).redeem(code, redirect_uri, verifier)
        claims = await _claims(ctx, tokens, nonce=nonce)
        return await _cli_session(ctx, claims, tokens, None, client)


async def refresh(ctx: Context, refresh_token: str, client: str | None) -> CliSession:
    async with counted(ctx, client):
        tokens = await sso.provider(ctx).refresh(refresh_token)
        claims = await _claims(ctx, tokens, nonce=None)
        return await _cli_session(ctx, claims, tokens, refresh_token, client)


async def _cli_session(
    ctx: Context,
    claims: dict[str, Any],
    tokens: dict[str, Any],
    old_refresh: str | None,
    client: str | None,
) -> CliSession:
    user, key = await sso.sign_in(ctx, claims, client)
    session = sessions.open_session(ctx, key.id, sessions.CLI_SESSION_SECONDS)
    new_refresh = tokens.get("refresh_token")
    return CliSession(
        token=sessions.session_token(session),
        expires_at=ctx.clock() + timedelta(seconds=session.max_age),
        refresh_token=new_refresh if isinstance(new_refresh, str) else old_refresh,
        user=user.name,
        level=user.level.value,
    )


async def device_start(ctx: Context) -> dict[str, Any]:
    """The device flow's first step, for a CLI without a browser at hand (RFC 8628)."""
    found = await sso.provider(ctx).device_authorization()
    keep = ("device_code", "user_code", "verification_uri", "verification_uri_complete")
    return {
        **{k: str(found[k]) for k in keep if isinstance(found.get(k), str)},
        "expires_in": int(found.get("expires_in") or 600),
        "interval": int(found.get("interval") or 5),
    }


async def device_poll(ctx: Context, device_code: str, client: str | None) -> CliSession | None:
    """The session once the person approved the device code; None while they have not."""
    async with counted(ctx, client):
        tokens = await sso.provider(ctx).device_token(device_code)
        if tokens is None:
            return None
        claims = await _claims(ctx, tokens, nonce=None)
        return await _cli_session(ctx, claims, tokens, None, client)

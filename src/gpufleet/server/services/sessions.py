"""Web UI sessions: a signed cookie naming an API key, and the CSRF token bound to it.

The session cookie reads `<key id>.<expiry>.<nonce>.<signature>` (HMAC-SHA256 under the data
folder's `ui-secret`). Nothing lives in process memory, so a restarted orchestrator, or
another one on the same data folder, accepts it; every request re-reads the key, so revoking
it signs the browser out. Signing out stores the cookie's nonce until the session would have
expired, read in the same query as the key: every replica refuses the cookie from the
commit on, at no extra round trip and with no cache to disagree. The CSRF token is an
HMAC of the session cookie: a page script reads it from a cookie and echoes it in a header,
which another site can neither read nor forge (double submit, bound to the session so a
planted cookie is useless).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gpufleet.errors import Forbidden, Unauthenticated
from gpufleet.server.context import Context, transaction
from gpufleet.server.hub import session_topic
from gpufleet.server.services import auth
from gpufleet.server.services.auth import Principal

SESSION_COOKIE = "gpufleet_session"
CSRF_COOKIE = "gpufleet_csrf"
CSRF_HEADER = "X-CSRF-Token"
SESSION_SECONDS = 12 * 3600
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SECRET_FILE = "ui-secret"


@dataclass(frozen=True, slots=True)
class Session:
    cookie: str
    csrf: str
    max_age: int


def load_secret(data_dir: Path) -> bytes:
    """The signing secret in <data-dir>/ui-secret, created (0600) on first start."""
    path = data_dir / SECRET_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return bytes.fromhex(path.read_text().strip())
    raw = secrets.token_bytes(32)
    with os.fdopen(fd, "w") as fh:
        fh.write(raw.hex() + "\n")
    return raw


def _sign(secret: bytes, purpose: bytes, message: str) -> str:
    digest = hmac.new(secret, purpose + b"\x00" + message.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def csrf_token(secret: bytes, cookie: str) -> str:
    return _sign(secret, b"csrf", cookie)


@dataclass(frozen=True, slots=True)
class Signed:
    """What a well-signed cookie says."""

    key_id: str
    expiry: int  # a Unix time
    nonce: str


def _signed(secret: bytes, cookie: str, now: datetime) -> Signed | None:
    """What a well-signed, unexpired cookie says; None otherwise."""
    parts = cookie.rsplit(".", 3)
    if len(parts) != 4 or not parts[1].isdigit():
        return None
    key_id, expiry, nonce, signature = parts
    expected = _sign(secret, b"session", f"{key_id}.{expiry}.{nonce}")
    if not hmac.compare_digest(signature.encode(), expected.encode()):
        return None
    return Signed(key_id, int(expiry), nonce) if int(expiry) > now.timestamp() else None


async def sign_in(ctx: Context, presented: str | None, client: str | None) -> Session:
    """A new session for a valid API key (any permission: the pages follow the key's)."""
    principal = await auth.authenticate_key(ctx, presented, None, client)
    return open_session(ctx, principal.key.id)


def open_session(ctx: Context, key_id: str, seconds: int = SESSION_SECONDS) -> Session:
    """A signed session naming the key (single sign-on's sign-in key, or a pasted one)."""
    expiry = int(ctx.clock().timestamp()) + seconds
    payload = f"{key_id}.{expiry}.{secrets.token_hex(8)}"
    cookie = f"{payload}.{_sign(ctx.ui_secret, b'session', payload)}"
    return Session(cookie=cookie, csrf=csrf_token(ctx.ui_secret, cookie), max_age=seconds)


# The CLI's session (`gpufleet login`): the same signed value, sent as a bearer token with
# this prefix. A header is never sent by a browser on its own, so it needs no CSRF token.
TOKEN_PREFIX = "gfs_"
CLI_SESSION_SECONDS = 3600


def session_token(session: Session) -> str:
    return TOKEN_PREFIX + session.cookie


async def authenticate_token(ctx: Context, token: str, needed: str | None) -> Principal:
    """The principal behind a CLI session token (`gfs_…`)."""
    principal = await current(ctx, token.removeprefix(TOKEN_PREFIX))
    if principal is None:
        raise Unauthenticated(
            "your session expired or was revoked; sign in again",
            cli="your session expired or was revoked; run `gpufleet login` again",
        )
    permitted = auth.permit(principal, needed)
    await auth.note_use(ctx, permitted.key)
    return permitted


async def end_token(ctx: Context, token: str) -> None:
    """Sign a CLI session token out, on every replica; an ended or forged one has nothing
    to end."""
    await _end(ctx, token.removeprefix(TOKEN_PREFIX))


async def current(ctx: Context, cookie: str | None) -> Principal | None:
    """Who a session cookie signs in, or None (missing, forged, expired, signed out, or its
    key revoked)."""
    signed = _signed(ctx.ui_secret, cookie, ctx.clock()) if cookie else None
    if signed is None:
        return None
    return await auth.session_principal(ctx, signed.key_id, signed.nonce)


async def authenticate(
    ctx: Context, cookie: str, csrf: str | None, method: str, needed: str | None
) -> Principal:
    """The principal behind a session cookie on an API call; CSRF-checked when it writes."""
    principal = await current(ctx, cookie)
    if principal is None:
        raise Unauthenticated("your web session expired or was revoked; sign in again at /signin")
    if method.upper() not in SAFE_METHODS and not (
        csrf and hmac.compare_digest(csrf.encode(), csrf_token(ctx.ui_secret, cookie).encode())
    ):
        raise Forbidden(
            f"missing or wrong CSRF token: send the '{CSRF_HEADER}' header with the value of "
            f"the '{CSRF_COOKIE}' cookie (reload the page to get a fresh one)"
        )
    permitted = auth.permit(principal, needed)
    await auth.note_use(ctx, permitted.key)
    return permitted


async def sign_out(ctx: Context, cookie: str | None, csrf: str | None) -> None:
    """End the session on the server, on every replica (CSRF-checked: another site cannot
    sign a browser out). A cookie already ended, expired or forged has nothing to end."""
    if not cookie or await current(ctx, cookie) is None:
        return
    await authenticate(ctx, cookie, csrf, "DELETE", None)
    await _end(ctx, cookie)


async def _end(ctx: Context, cookie: str) -> None:
    signed = _signed(ctx.ui_secret, cookie, ctx.clock())
    if signed is None:  # it expired in between
        return
    expires_at = datetime.fromtimestamp(signed.expiry, UTC)
    async with transaction(ctx) as tx:
        await tx.q.revoke_session(signed.nonce, signed.key_id, expires_at, tx.now)
        tx.end_streams(session_topic(signed.nonce))  # on every replica

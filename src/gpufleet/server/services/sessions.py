"""Web UI sessions: a signed cookie naming an API key, and the CSRF token bound to it.

The session cookie reads `<key id>.<expiry>.<nonce>.<signature>` (HMAC-SHA256 under the data
folder's `ui-secret`). Nothing lives in process memory, so a restarted orchestrator, or
another one on the same data folder, accepts it; every request re-reads the key, so revoking
it signs the browser out. The CSRF token is an HMAC of the session cookie: a page script
reads it from a cookie and echoes it in a header, which another site can neither read nor
forge (double submit, bound to the session so a planted cookie is useless).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from gpufleet.errors import Forbidden, Unauthenticated
from gpufleet.server.context import Context
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


def _key_id(secret: bytes, cookie: str, now: datetime) -> str | None:
    """The key id a well-signed, unexpired cookie names; None otherwise."""
    parts = cookie.rsplit(".", 3)
    if len(parts) != 4 or not parts[1].isdigit():
        return None
    key_id, expiry, nonce, signature = parts
    expected = _sign(secret, b"session", f"{key_id}.{expiry}.{nonce}")
    if not hmac.compare_digest(signature.encode(), expected.encode()):
        return None
    return key_id if int(expiry) > now.timestamp() else None


async def sign_in(ctx: Context, presented: str | None, client: str | None) -> Session:
    """A new session for a valid API key (any permission: the pages follow the key's)."""
    principal = await auth.authenticate_key(ctx, presented, None, client)
    expiry = int(ctx.clock().timestamp()) + SESSION_SECONDS
    payload = f"{principal.key.id}.{expiry}.{secrets.token_hex(8)}"
    cookie = f"{payload}.{_sign(ctx.ui_secret, b'session', payload)}"
    return Session(cookie=cookie, csrf=csrf_token(ctx.ui_secret, cookie), max_age=SESSION_SECONDS)


async def current(ctx: Context, cookie: str | None) -> Principal | None:
    """Who a session cookie signs in, or None (missing, forged, expired or revoked)."""
    key_id = _key_id(ctx.ui_secret, cookie, ctx.clock()) if cookie else None
    if key_id is None:
        return None
    return await auth.active_principal(ctx, key_id)


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
